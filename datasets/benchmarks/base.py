"""The adapter contract every benchmark implements, and the file-reading helpers they share.

An adapter turns one benchmark's *official* file format, read unchanged from a local path, into
`LoadedQuestion`s. The split between `payload` (public: shown in the UI and API, sent to the
subject) and `secret` (reference answers, hidden tests, credentials) happens here, once, so no
later layer has to know which upstream field is sensitive (SPEC R9.3).
"""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, ClassVar, Literal

Kind = Literal["mcq", "judge", "grid", "code", "agent"]

FIXTURES_ROOT = Path(__file__).resolve().parent.parent / "fixtures"

# A marker file written by `datasets.synthetic` at the root of a generated dataset. Loaders report
# it in `LoadResult.synthetic` so provenance can label the source as synthetic.
SYNTHETIC_MARKER = "SYNTHETIC"


@dataclass(frozen=True)
class LoadedQuestion:
    benchmark: str
    native_id: str
    subject: str
    payload: dict[str, Any]
    secret: dict[str, Any]


class LoaderError(ValueError):
    """Malformed benchmark input. The message always names the file, the row and the field so
    that an operator can fix the file without reading loader code."""

    def __init__(
        self,
        detail: str,
        *,
        file: Path | str,
        row: int | str | None = None,
        field: str | None = None,
    ) -> None:
        self.file = str(file)
        self.row = row
        self.field = field
        self.detail = detail
        where = [self.file]
        if row is not None:
            where.append(f"row {row}")
        if field is not None:
            where.append(f"field {field!r}")
        super().__init__(f"{': '.join(where)}: {detail}")


@dataclass(frozen=True)
class LoadResult:
    """Everything a loader learnt: the questions plus what provenance needs to say about them."""

    questions: list[LoadedQuestion]
    files: list[Path]
    skipped: dict[str, int] = field(default_factory=dict)
    synthetic: bool = False


class BenchmarkAdapter:
    """Base class; each benchmark module defines one subclass and one instance of it."""

    key: ClassVar[str]
    title: ClassVar[str]
    weight: ClassVar[Fraction]
    kind: ClassVar[Kind]
    # The driver's episode (runs/engine/episodes.py) when the kind alone does not choose it.
    episode: ClassVar[str] = ""
    grader_version: ClassVar[str]
    loader_version: ClassVar[str]
    licence_note: ClassVar[str]
    fixture_relpath: ClassVar[str]

    def load(self, path: Path) -> list[LoadedQuestion]:
        return self.load_with_report(Path(path)).questions

    def load_with_report(self, path: Path) -> LoadResult:
        raise NotImplementedError

    def load_with_options(self, path: Path, options: Mapping[str, str]) -> LoadResult:
        """Load with a packaged source's loader hint (datasets.packages). An adapter that takes
        no options refuses any, so a hint is never silently ignored."""
        if options:
            raise LoaderError(
                f"{self.key} takes no loader options, got {', '.join(sorted(options))}", file=path
            )
        return self.load_with_report(path)

    def messages(self, payload: dict[str, Any]) -> list[dict[str, Any]]:
        raise NotImplementedError

    def fixture_path(self) -> Path:
        return FIXTURES_ROOT / self.key / self.fixture_relpath

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.key}>"


# ---------------------------------------------------------------------------------------------
# Shared reading helpers. Each raises LoaderError with file/row/field, never a bare KeyError.


def require_path(path: Path, *, what: str) -> Path:
    if not path.exists():
        raise LoaderError(f"{what} not found", file=path)
    return path


def is_synthetic(root: Path) -> bool:
    base = root if root.is_dir() else root.parent
    return (base / SYNTHETIC_MARKER).is_file()


def read_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (1-based line number, object); blank lines are skipped but still counted so the
    number in an error message is the line an editor shows."""
    try:
        handle = path.open("r", encoding="utf-8")
    except OSError as exc:
        raise LoaderError(f"cannot open: {exc}", file=path) from exc
    with handle:
        for lineno, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise LoaderError(f"invalid JSON: {exc.msg}", file=path, row=lineno) from exc
            if not isinstance(obj, dict):
                raise LoaderError("a row must be a JSON object", file=path, row=lineno)
            yield lineno, obj


def read_csv(path: Path, *, required: Sequence[str]) -> Iterator[tuple[int, dict[str, str]]]:
    """Yield (1-based record number, row); the header is not counted. Records may span lines
    (quoted newlines), so the record number, not the line, is what is reported."""
    # Official CSV cells hold whole explanations; the default 128 KiB field limit is too small.
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))
    try:
        handle = path.open("r", encoding="utf-8-sig", newline="")
    except OSError as exc:
        raise LoaderError(f"cannot open: {exc}", file=path) from exc
    with handle:
        reader = csv.DictReader(handle)
        header = reader.fieldnames or []
        for column in required:
            if column not in header:
                raise LoaderError("missing column in header", file=path, row="header", field=column)
        try:
            for number, row in enumerate(reader, start=1):
                if None in row:  # more cells than header columns
                    raise LoaderError("row has more cells than the header", file=path, row=number)
                yield number, row
        except csv.Error as exc:
            raise LoaderError(f"CSV syntax error: {exc}", file=path, row=reader.line_num) from exc


def read_parquet_rows(
    path: Path, *, required: Sequence[str], optional: Sequence[str] = ()
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (1-based row, dict) reading only the named columns: HLE parquet carries image
    columns that are large and unused by a text-only loader."""
    import pyarrow.parquet as pq  # local import: only parquet loaders pay for pyarrow

    try:
        schema_names = set(pq.read_schema(path).names)
    except Exception as exc:  # pyarrow raises several unrelated types for a corrupt file
        raise LoaderError(f"not a readable parquet file: {exc}", file=path) from exc
    for column in required:
        if column not in schema_names:
            raise LoaderError("missing column", file=path, row="schema", field=column)
    columns = [*required, *(c for c in optional if c in schema_names)]
    parquet = pq.ParquetFile(path)
    number = 0
    for batch in parquet.iter_batches(columns=columns, batch_size=1024):
        for row in batch.to_pylist():
            number += 1
            yield number, row


def require_str(
    row: dict[str, Any], name: str, *, file: Path, rownum: int | str, allow_empty: bool = False
) -> str:
    value = row.get(name)
    if not isinstance(value, str):
        what = "missing" if value is None else f"must be a string, got {type(value).__name__}"
        raise LoaderError(what, file=file, row=rownum, field=name)
    if not allow_empty and not value.strip():
        raise LoaderError("must not be empty", file=file, row=rownum, field=name)
    return value


def require_int(row: dict[str, Any], name: str, *, file: Path, rownum: int | str) -> int:
    value = row.get(name)
    # bool is an int subclass; a JSON true is never a valid id or index.
    if isinstance(value, bool) or not isinstance(value, int):
        what = "missing" if value is None else f"must be an integer, got {type(value).__name__}"
        raise LoaderError(what, file=file, row=rownum, field=name)
    return value


def optional_str(row: dict[str, Any], name: str, *, file: Path, rownum: int | str) -> str:
    value = row.get(name)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise LoaderError(
            f"must be a string, got {type(value).__name__}", file=file, row=rownum, field=name
        )
    return value


def check_unique(questions: Sequence[LoadedQuestion], *, file: Path) -> None:
    seen: set[str] = set()
    for q in questions:
        if q.native_id in seen:
            raise LoaderError("duplicate id", file=file, row=q.native_id, field="id")
        seen.add(q.native_id)


def option_letters(n: int) -> list[str]:
    return [chr(ord("A") + i) for i in range(n)]
