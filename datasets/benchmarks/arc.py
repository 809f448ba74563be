"""ARC-AGI-2 (arcprize/ARC-AGI-2): a directory of `{task_id}.json` with train and test pairs.

Scoring rule (documented choice): one attempt, and a task is correct only when every test output
grid matches exactly; per-pair counts are kept by the grader for diagnostics.
"""

from __future__ import annotations

import json
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


def _task_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
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
    loader_version = "arc-agi/1"
    licence_note = "ARC-AGI-2, ARC Prize Foundation (github.com/arcprize/ARC-AGI-2), Apache-2.0."
    fixture_relpath = "data/evaluation"

    def load_with_report(self, path: Path) -> LoadResult:
        require_path(path, what="ARC task directory")
        files = _task_files(path)
        questions = [self._question(file) for file in files]
        return LoadResult(questions=questions, files=files, synthetic=is_synthetic(path))

    def _question(self, file: Path) -> LoadedQuestion:
        task_id = file.stem
        try:
            task = json.loads(file.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise LoaderError(f"invalid JSON: {exc.msg}", file=file, row=task_id) from exc
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
