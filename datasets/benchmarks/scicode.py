"""SciCode (scicode-bench/SciCode): problems JSONL, one row per main problem with sub_steps.

The numeric test targets live in upstream's `test_data.h5` (group `"{step}/test{k}"`); the
loader records those keys per step in the secret and the sandboxed grader (a later issue) reads
the file. Only the JSONL is parsed here, so preparing needs no h5py.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

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

STEP_PUBLIC_FIELDS = (
    "step_description_prompt",
    "step_background",
    "function_header",
    "return_line",
)
DIRECTORY_FILES = ("problems_all.jsonl", "problems_test.jsonl")

SYSTEM_PROMPT = (
    "You are a scientist who writes correct, self-contained Python. Each turn asks for one "
    "function; reply with the complete function in a single ```python fenced block. Do not "
    "repeat the import lines you are given; they are already in scope."
)


def step_stratum(n_steps: int) -> str:
    """SciCode rows carry no domain field, so the stratum is the problem's length, which is
    public and drives difficulty (a problem counts only if every step passes)."""
    if n_steps <= 3:
        return "short (1-3 steps)"
    if n_steps <= 5:
        return "medium (4-5 steps)"
    return "long (6+ steps)"


def _problem_file(path: Path) -> Path:
    if path.is_file():
        return path
    for name in DIRECTORY_FILES:
        if (path / name).is_file():
            return path / name
    raise LoaderError(f"none of {', '.join(DIRECTORY_FILES)} in directory", file=path)


class SciCodeAdapter(BenchmarkAdapter):
    key = "scicode"
    title = "SciCode"
    weight = Fraction(1, 10)
    kind = "code"
    episode = "scicode"  # one turn per sub-step
    grader_version = "scicode-sandbox/3"
    loader_version = "scicode/1"
    licence_note = (
        "SciCode (Tian et al. 2024, github.com/scicode-bench/SciCode), Apache-2.0; test targets "
        "from the upstream test_data.h5, read from a local path."
    )
    fixture_relpath = "problems_all.jsonl"

    def load_with_report(self, path: Path) -> LoadResult:
        require_path(path, what="SciCode problems")
        file = _problem_file(path)
        questions = [self._question(row, file=file, rownum=n) for n, row in read_jsonl(file)]
        check_unique(questions, file=file)
        return LoadResult(questions=questions, files=[file], synthetic=is_synthetic(path))

    def _question(self, row: dict[str, Any], *, file: Path, rownum: int) -> LoadedQuestion:
        problem_id = row.get("problem_id")
        if isinstance(problem_id, int) and not isinstance(problem_id, bool):
            problem_id = str(problem_id)
        if not isinstance(problem_id, str) or not problem_id.strip():
            raise LoaderError("missing or empty", file=file, row=rownum, field="problem_id")
        steps = row.get("sub_steps")
        if not isinstance(steps, list) or not steps:
            raise LoaderError("must be a non-empty list", file=file, row=rownum, field="sub_steps")
        public_steps: list[dict[str, str]] = []
        secret_steps: list[dict[str, Any]] = []
        for i, step in enumerate(steps):
            where = f"sub_steps[{i}]"
            if not isinstance(step, dict):
                raise LoaderError("step must be an object", file=file, row=rownum, field=where)
            number = require_str(step, "step_number", file=file, rownum=rownum).strip()
            for name in ("step_description_prompt", "function_header"):
                if not isinstance(step.get(name), str) or not step[name].strip():
                    raise LoaderError(
                        "missing or empty", file=file, row=rownum, field=f"{where}.{name}"
                    )
            tests = step.get("test_cases")
            if not isinstance(tests, list) or not all(isinstance(t, str) for t in tests):
                raise LoaderError(
                    "must be a list of strings", file=file, row=rownum, field=f"{where}.test_cases"
                )
            public_steps.append(
                {"step_number": number}
                | {name: str(step.get(name) or "") for name in STEP_PUBLIC_FIELDS}
            )
            secret_step: dict[str, Any] = {
                "step_number": number,
                "test_cases": tests,
                "target_keys": [f"{number}/test{k}" for k in range(1, len(tests) + 1)],
            }
            gold = step.get("ground_truth_code")
            if isinstance(gold, str) and gold:
                secret_step["ground_truth_code"] = gold
            secret_steps.append(secret_step)
        secret: dict[str, Any] = {"steps": secret_steps}
        for name in ("general_tests", "general_solution"):
            if row.get(name):
                secret[name] = row[name]
        return LoadedQuestion(
            benchmark=self.key,
            native_id=problem_id.strip(),
            subject=step_stratum(len(steps)),
            payload={
                "problem_id": problem_id.strip(),
                "problem_name": optional_str(row, "problem_name", file=file, rownum=rownum),
                "problem_description_main": require_str(
                    row, "problem_description_main", file=file, rownum=rownum
                ),
                "problem_background_main": optional_str(
                    row, "problem_background_main", file=file, rownum=rownum
                ),
                "problem_io": optional_str(row, "problem_io", file=file, rownum=rownum),
                "required_dependencies": optional_str(
                    row, "required_dependencies", file=file, rownum=rownum
                ),
                "sub_steps": public_steps,
            },
            secret=secret,
        )

    def step_prompt(self, payload: dict[str, Any], index: int) -> str:
        """The user turn asking for step `index`; earlier steps' code is already in the
        conversation as the model's own replies (multi-turn, one step per turn)."""
        step = payload["sub_steps"][index]
        parts = []
        if index == 0:
            parts.append(f"Main problem:\n{payload['problem_description_main']}\n")
            if payload["problem_io"]:
                parts.append(f"Main function I/O:\n{payload['problem_io']}\n")
        parts.append(f"Step {step['step_number']}:\n{step['step_description_prompt']}\n")
        parts.append(
            "Write this function:\n```python\n"
            f"{step['function_header']}\n    ...\n{step['return_line']}\n```\n"
        )
        if payload["required_dependencies"]:
            parts.append(
                "These imports are already available (do not repeat them):\n"
                f"```python\n{payload['required_dependencies']}\n```"
            )
        return "\n".join(parts)

    def messages(self, payload: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": self.step_prompt(payload, 0)},
        ]


ADAPTER = SciCodeAdapter()
