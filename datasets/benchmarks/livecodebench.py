"""LiveCodeBench code generation (livecodebench/code_generation_lite): `test*.jsonl` rows.

Private tests arrive either as a JSON string or, for most rows, as
base64(zlib(pickle(<JSON string>))). Upstream decodes that with a bare `pickle.loads`, which
executes whatever the pickle asks for: a tampered or merely untrusted file could run code at
*prepare* time, on the web or worker host, before any sandbox exists. We only ever need the one
`str` inside, so we unpickle with `find_class` refusing every global: primitive opcodes (str,
bytes, int, float, list, tuple, dict, None, bool) still load, while any attempt to import or call
something (os.system, builtins.eval, a class to instantiate) raises instead of running.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import pickle
import zlib
from fractions import Fraction
from pathlib import Path
from typing import Any, NoReturn

from datasets.benchmarks.base import (
    BenchmarkAdapter,
    LoadedQuestion,
    LoaderError,
    LoadResult,
    check_unique,
    is_synthetic,
    optional_str,
    read_jsonl,
    require_path,
    require_str,
)

TEST_TYPES = ("stdin", "functional")
DIFFICULTIES = ("easy", "medium", "hard")

SYSTEM_PROMPT = (
    "You are an expert Python programmer. Write a correct, efficient Python program for the "
    "problem you are given; it will be run against hidden tests."
)


class PrivateTestsError(ValueError):
    """The private-test cell cannot be decoded safely."""


class PrimitivesOnlyUnpickler(pickle.Unpickler):
    """Loads only primitive containers; refusing `find_class` removes every path by which a
    pickle can reach a callable (GLOBAL, STACK_GLOBAL, EXT*), and REDUCE/BUILD/NEWOBJ need one."""

    def find_class(self, module: str, name: str) -> NoReturn:
        raise pickle.UnpicklingError(f"refusing to load global {module}.{name}")


def decode_private_tests(raw: str) -> Any:
    """Decode the `private_test_cases` cell to its JSON value (a list of test dicts)."""
    stripped = raw.strip()
    if stripped.startswith("["):
        return json.loads(stripped)
    try:
        packed = zlib.decompress(base64.b64decode(stripped, validate=True))
    except (binascii.Error, zlib.error) as exc:
        raise PrivateTestsError(f"neither JSON nor base64+zlib: {exc}") from exc
    try:
        inner = PrimitivesOnlyUnpickler(io.BytesIO(packed)).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError) as exc:
        raise PrivateTestsError(f"pickle rejected: {exc}") from exc
    if isinstance(inner, bytes):
        inner = inner.decode("utf-8")
    if not isinstance(inner, str):
        raise PrivateTestsError(f"pickle holds {type(inner).__name__}, expected a JSON string")
    return json.loads(inner)


def _tests(value: Any, *, file: Path, rownum: int, field: str) -> list[dict[str, str]]:
    if not isinstance(value, list):
        raise LoaderError("must be a list of tests", file=file, row=rownum, field=field)
    tests = []
    for i, test in enumerate(value):
        where = f"{field}[{i}]"
        if not isinstance(test, dict):
            raise LoaderError("test must be an object", file=file, row=rownum, field=where)
        for name in ("input", "output"):
            if not isinstance(test.get(name), str):
                raise LoaderError(
                    "must be a string", file=file, row=rownum, field=f"{where}.{name}"
                )
        if test.get("testtype") not in TEST_TYPES:
            raise LoaderError(
                f"must be one of {TEST_TYPES}", file=file, row=rownum, field=f"{where}.testtype"
            )
        tests.append(
            {"input": test["input"], "output": test["output"], "testtype": test["testtype"]}
        )
    return tests


class LiveCodeBenchAdapter(BenchmarkAdapter):
    key = "livecodebench"
    title = "LiveCodeBench"
    weight = Fraction(1, 10)
    kind = "code"
    grader_version = "lcb-sandbox/1"
    loader_version = "livecodebench/1"
    licence_note = (
        "LiveCodeBench (Jain et al. 2024), code MIT; problem statements are third-party contest "
        "content (LeetCode, AtCoder, Codeforces). Read from a user-supplied local copy only."
    )
    fixture_relpath = "test.jsonl"

    def load_with_report(self, path: Path) -> LoadResult:
        require_path(path, what="LiveCodeBench data")
        files = [path] if path.is_file() else sorted(path.glob("test*.jsonl"))
        if not files:
            raise LoaderError("no test*.jsonl in directory", file=path)
        questions: list[LoadedQuestion] = []
        for file in files:
            for rownum, row in read_jsonl(file):
                questions.append(self._question(row, file=file, rownum=rownum))
            check_unique(questions, file=file)
        return LoadResult(questions=questions, files=files, synthetic=is_synthetic(path))

    def _question(self, row: dict[str, Any], *, file: Path, rownum: int) -> LoadedQuestion:
        qid = require_str(row, "question_id", file=file, rownum=rownum).strip()
        difficulty = require_str(row, "difficulty", file=file, rownum=rownum).strip().lower()
        if difficulty not in DIFFICULTIES:
            raise LoaderError(
                f"must be one of {DIFFICULTIES}", file=file, row=rownum, field="difficulty"
            )
        public_raw = require_str(row, "public_test_cases", file=file, rownum=rownum)
        try:
            public_value = json.loads(public_raw)
        except json.JSONDecodeError as exc:
            raise LoaderError(
                f"invalid JSON: {exc.msg}", file=file, row=rownum, field="public_test_cases"
            ) from exc
        public = _tests(public_value, file=file, rownum=rownum, field="public_test_cases")
        private_raw = require_str(row, "private_test_cases", file=file, rownum=rownum)
        try:
            private_value = decode_private_tests(private_raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise LoaderError(str(exc), file=file, row=rownum, field="private_test_cases") from exc
        private = _tests(private_value, file=file, rownum=rownum, field="private_test_cases")
        meta_raw = optional_str(row, "metadata", file=file, rownum=rownum) or "{}"
        try:
            metadata = json.loads(meta_raw)
        except json.JSONDecodeError as exc:
            raise LoaderError(
                f"invalid JSON: {exc.msg}", file=file, row=rownum, field="metadata"
            ) from exc
        if not isinstance(metadata, dict):
            raise LoaderError("must be a JSON object", file=file, row=rownum, field="metadata")
        func_name = metadata.get("func_name")
        if any(t["testtype"] == "functional" for t in public + private) and not isinstance(
            func_name, str
        ):
            raise LoaderError(
                "functional tests need metadata.func_name",
                file=file,
                row=rownum,
                field="metadata.func_name",
            )
        return LoadedQuestion(
            benchmark=self.key,
            native_id=qid,
            subject=difficulty,
            payload={
                "question_title": optional_str(row, "question_title", file=file, rownum=rownum),
                "question_content": require_str(row, "question_content", file=file, rownum=rownum),
                "platform": optional_str(row, "platform", file=file, rownum=rownum),
                "contest_id": optional_str(row, "contest_id", file=file, rownum=rownum),
                "contest_date": optional_str(row, "contest_date", file=file, rownum=rownum),
                "starter_code": optional_str(row, "starter_code", file=file, rownum=rownum),
                "difficulty": difficulty,
                "func_name": func_name if isinstance(func_name, str) else None,
                "public_tests": public,
            },
            # The grader runs every test, as upstream does, so the secret holds the full list
            # (public first) and needs nothing from the payload.
            secret={"tests": public + private},
        )

    def messages(self, payload: dict[str, Any]) -> list[dict[str, Any]]:
        if payload["starter_code"]:
            fmt = (
                "### Format: Complete the starter code below and put your whole solution in one "
                f"fenced block.\n```python\n{payload['starter_code']}\n```\n\n"
            )
        else:
            fmt = (
                "### Format: Read the input from stdin and write the answer to stdout. Put your "
                "whole program in one fenced block.\n```python\n# YOUR CODE HERE\n```\n\n"
            )
        user = (
            f"### Question:\n{payload['question_content']}\n\n{fmt}"
            "### Answer: (use the format above, with the backticks)\n\n"
        )
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


ADAPTER = LiveCodeBenchAdapter()
