"""Graders that execute model-written code in the sandbox: LiveCodeBench and SciCode
(benchmarks.md §6–7). Each returns a JSON-ready grade dict with a `correct` flag and per-test
statuses by index; expected outputs and hidden test inputs never appear in it.

Expected outputs never enter the model's sandbox either: a LiveCodeBench program prints its
answer and the comparison happens here. SciCode's official test snippets assert against `target`
in the model's own module upstream; here each snippet is split (`runs.engine.scicode_split`):
the model's code and the tests' calls run in one sandbox with no target in it, the values the
calls returned come out as data (`runs.engine.scicode_values`), and a second sandbox, which runs
no model code, holds the HDF5 file and compares (`runs.engine.scicode_judge`).
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections.abc import Sequence
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from datasets.benchmarks import get_adapter
from datasets.benchmarks.scicode import ADAPTER as SCICODE
from datasets.grading import strip_reasoning
from datasets.official_prompts import SCICODE_GOLD_FILES
from runs.engine import scicode_judge, scicode_values
from runs.engine.sandbox import DISK_QUOTA_EXCEEDED, SandboxResult, sandbox_run
from runs.engine.sandbox_command import SANDBOX_WORKDIR, SandboxLimits, sandbox_python
from runs.engine.scicode_split import RECORD, SplitTest, UnsupportedTest, split_test

# The adapters carry the versions (they go into plan manifests); one place for each.
LCB_GRADER_VERSION = get_adapter("livecodebench").grader_version
SCICODE_GRADER_VERSION = get_adapter("scicode").grader_version

# Upstream's per-test limit (lcb_runner --timeout 6).
LCB_TEST_TIMEOUT_S = 6.0
LCB_LIMITS = SandboxLimits(
    wall_s=LCB_TEST_TIMEOUT_S,
    cpu_s=LCB_TEST_TIMEOUT_S,
    memory_bytes=1024 * 1024 * 1024,
    output_bytes=8 * 1024 * 1024,
)
# inspect_evals' default; upstream allows 1800 s per step.
SCICODE_STEP_TIMEOUT_S = 300.0
SCICODE_LIMITS = SandboxLimits(
    wall_s=SCICODE_STEP_TIMEOUT_S,
    cpu_s=SCICODE_STEP_TIMEOUT_S,
    memory_bytes=4 * 1024 * 1024 * 1024,
    output_bytes=1024 * 1024,
)
SCICODE_TARGETS_INSIDE = "/data/test_data.h5"
# Steps whose code upstream takes from its gold files instead of the model (not scored).
SCICODE_GOLD_STEPS = frozenset(SCICODE_GOLD_FILES)

_FENCE = re.compile(
    r"^```[ \t]*([A-Za-z0-9_+.-]*)[^\n]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE
)
_PYTHON_TAGS = {"python", "python3", "py"}


def extract_python_code(reply: str | None) -> str | None:
    """The last ```python fenced block of the visible reply, or its only fenced block of any
    language; None when there is none (graded unparsed, i.e. wrong)."""
    if not reply:
        return None
    blocks = [(m[1].lower(), m[2]) for m in _FENCE.finditer(strip_reasoning(reply))]
    python = [code for tag, code in blocks if tag in _PYTHON_TAGS]
    if python:
        return python[-1]
    if len(blocks) == 1:
        return blocks[0][1]
    return None


# ---------------------------------------------------------------------------------------------
# LiveCodeBench

# Upstream prepends a header of star imports to every solution, so programs that use `deque`,
# `gcd` or `List` without importing them run; written here from that description. `builtins`
# last, so `pow` and the like are the builtins again after `from math import *`.
LCB_IMPORT_HEADER = """\
import bisect, collections, copy, datetime, functools, heapq, itertools, json, math, operator
import random, re, statistics, string, sys
from bisect import *
from collections import *
from copy import *
from datetime import *
from functools import *
from heapq import *
from itertools import *
from math import *
from operator import *
from random import *
from re import *
from statistics import *
from string import *
from typing import *
from builtins import *
sys.setrecursionlimit(50000)
"""

COMPILE_ERROR_EXIT = 97

# Runs inside the sandbox. Compiles first so a syntax error is told apart from a runtime error;
# functional mode silences the solution's own prints and writes only the JSON result.
LCB_RUNNER = f"""\
import io, json, sys

try:
    with open("solution.py", encoding="utf-8") as f:
        source = f.read()  # not UTF-8 (a lone surrogate in the reply): not a program
    code = compile(source, "solution.py", "exec")
except (SyntaxError, ValueError):
    sys.exit({COMPILE_ERROR_EXIT})
if sys.argv[1] == "stdin":
    exec(code, {{"__name__": "__main__", "__builtins__": __builtins__}})
else:
    args = [json.loads(line) for line in sys.stdin.read().split("\\n")]
    real_stdout, sys.stdout = sys.stdout, io.StringIO()
    namespace = {{"__name__": "solution", "__builtins__": __builtins__}}
    exec(code, namespace)
    result = getattr(namespace["Solution"](), sys.argv[2])(*args)
    sys.stdout = real_stdout
    print(json.dumps(result, default=repr))
"""


def _stripped_lines(text: str) -> list[str]:
    return [line.strip() for line in text.strip().split("\n")]


def _as_decimals(line: str) -> list[Decimal] | None:
    try:
        return [Decimal(token) for token in line.split()]
    except InvalidOperation:
        return None


def lcb_stdout_matches(actual: str, expected: str) -> bool:
    """Upstream's stdio rule: strip, split into lines, strip each; equal line count; a line
    that differs as text still matches when its whitespace-split tokens are equal decimals."""
    got, want = _stripped_lines(actual), _stripped_lines(expected)
    if len(got) != len(want):
        return False
    for g, w in zip(got, want, strict=True):
        if g == w:
            continue
        g_num, w_num = _as_decimals(g), _as_decimals(w)
        if g_num is None or w_num is None or g_num != w_num:
            return False
    return True


def _failure_status(result: SandboxResult) -> str | None:
    """A test's (a step's) failure from its run, or None when the program exited 0. A run that
    went past the sandbox's disk budget is `disk_quota_exceeded` (runs/interfaces/public.py shows it as
    "disk quota exceeded"), whatever its exit."""
    if result.reason == "timeout":
        return "timeout"
    if result.reason in ("memory", "output_cap", "file_size", DISK_QUOTA_EXCEEDED):
        return result.reason
    if result.exit_code == COMPILE_ERROR_EXIT:
        return "compile_error"
    if result.reason != "ok" or result.exit_code != 0:
        return "runtime_error"
    return None


def _lcb_test_status(result: SandboxResult, test: dict[str, Any]) -> str:
    failed = _failure_status(result)
    if failed is not None:
        return failed
    stdout = result.stdout.decode("utf-8", "replace")
    if test["testtype"] == "stdin":
        return "passed" if lcb_stdout_matches(stdout, test["output"]) else "wrong_answer"
    lines = stdout.strip().splitlines()
    try:
        got = json.loads(lines[-1]) if lines else None
        want = json.loads(test["output"])
    except (json.JSONDecodeError, RecursionError):
        return "wrong_answer"
    return "passed" if lines and got == want else "wrong_answer"


def _source_bytes(source: str) -> bytes:
    """A program with a model's code in it, as it came: a lone surrogate (no UTF-8 of its own)
    as surrogatepass bytes, which the interpreter then refuses as source — a compile error, as
    the official harness's exec() would fail on it."""
    return source.encode("utf-8", "surrogatepass")


def grade_livecodebench(
    *,
    answer: str | None,
    payload: dict[str, Any],
    secret: dict[str, Any],
    limits: SandboxLimits = LCB_LIMITS,
) -> dict[str, Any]:
    """Run every test (public first, then private) as its own sandboxed process; correct only if
    all pass. Like upstream, stops at the first failure (later tests are `not_run`)."""
    tests: list[dict[str, Any]] = secret["tests"]
    grade: dict[str, Any] = {
        "grader": "livecodebench",
        "version": LCB_GRADER_VERSION,
        "correct": False,
        "tests_total": len(tests),
        "tests_passed": 0,
        "tests": [],
    }
    code = extract_python_code(answer)
    if code is None:
        return grade | {"status": "unparsed"}
    files = {
        "solution.py": _source_bytes(LCB_IMPORT_HEADER + "\n" + code),
        "runner.py": LCB_RUNNER.encode("utf-8"),
    }
    statuses: list[dict[str, Any]] = []
    failed: str | None = None
    for index, test in enumerate(tests):
        if failed is not None:
            statuses.append({"index": index, "status": "not_run"})
            continue
        argv = [sandbox_python(), "runner.py", test["testtype"]]
        if test["testtype"] == "functional":
            argv.append(str(payload["func_name"]))
        started = time.monotonic()
        result = sandbox_run(
            argv=argv, files=files, stdin=test["input"].encode("utf-8"), limits=limits
        )
        status = _lcb_test_status(result, test)
        statuses.append(
            {"index": index, "status": status, "wall_s": round(time.monotonic() - started, 3)}
        )
        if status != "passed":
            failed = status
    passed = sum(1 for s in statuses if s["status"] == "passed")
    correct = bool(tests) and passed == len(tests)
    if correct:
        overall = "passed"
    elif failed == "compile_error":
        overall = "compile_error"
    else:
        overall = "failed"
    return grade | {
        "status": overall,
        "correct": correct,
        "tests_passed": passed,
        "tests": statuses,
    }


# ---------------------------------------------------------------------------------------------
# SciCode


class TargetsUnavailable(RuntimeError):
    """SciCode's test_data.h5 is not configured or missing: the cell cannot be graded (this is
    not a wrong answer)."""


def scicode_step_prompts(payload: dict[str, Any]) -> list[str]:
    """One user turn per sub-step, in order; the model's own earlier replies sit between them."""
    return [SCICODE.step_prompt(payload, i) for i in range(len(payload["sub_steps"]))]


# Stand-ins for the upstream helper modules the official test snippets import
# (`scicode.parse.parse.process_hdf5_to_tuple`, `scicode.compare.cmp`), written for our
# reading of the test_data.h5 layout: "{step}/test{k}" is a group of var1..varN (one value, or
# a tuple of several); a value is a dataset, or a group holding a list ("list" key or numbered
# children), a sparse matrix (data/indices/indptr/shape) or a dict.
SCICODE_PARSE_MODULE = """\
import h5py
import numpy as np


def _value(node):
    if isinstance(node, h5py.Dataset):
        value = node[()]
        if isinstance(value, bytes):
            return value.decode("utf-8")
        if isinstance(value, np.generic):
            return value.item()
        return value
    keys = list(node.keys())
    if set(keys) >= {"data", "indices", "indptr", "shape"}:
        from scipy import sparse

        return sparse.csr_matrix(
            (node["data"][()], node["indices"][()], node["indptr"][()]),
            shape=tuple(node["shape"][()]),
        )
    if keys == ["list"]:
        return _value(node["list"])
    if keys and all(k.isdigit() for k in keys):
        return [_value(node[k]) for k in sorted(keys, key=int)]
    return {k: _value(node[k]) for k in keys}


def process_hdf5_to_tuple(step_id, test_num, h5_path="/data/test_data.h5"):
    targets = []
    with h5py.File(h5_path, "r") as f:
        for k in range(1, test_num + 1):
            group = f[f"{step_id}/test{k}"]
            if isinstance(group, h5py.Dataset):
                targets.append(_value(group))
                continue
            names = sorted((n for n in group.keys() if n.startswith("var")), key=lambda n: int(n[3:]))
            values = [_value(group[n]) for n in names] if names else [_value(group)]
            targets.append(values[0] if len(values) == 1 else tuple(values))
    return targets
"""

SCICODE_CMP_MODULE = """\
import numpy as np


def cmp_tuple_or_list(var1, var2):
    if len(var1) != len(var2):
        return False
    for a, b in zip(var1, var2):
        if isinstance(a, (tuple, list)):
            if not cmp_tuple_or_list(a, b):
                return False
        elif isinstance(a, dict):
            if not are_dicts_close(a, b):
                return False
        elif not np.allclose(a, b):
            return False
    return True


def are_dicts_close(dict1, dict2, atol=1e-8, rtol=1e-5):
    if set(dict1) != set(dict2):
        return False
    for key in dict1:
        a, b = dict1[key], dict2[key]
        if isinstance(a, dict):
            if not are_dicts_close(a, b, atol, rtol):
                return False
        elif not np.allclose(a, b, atol=atol, rtol=rtol):
            return False
    return True
"""


# What the tests' calls returned may be large (a trajectory, an image), but not without bound.
SCICODE_VALUES_MAX_BYTES = 96 * 1024 * 1024
SCICODE_VALUES_INSIDE = f"{SANDBOX_WORKDIR}/values.bin"

# Imported by the model's program after its code: carries each judge statement's values out.
SCICODE_RECORD_MODULE = f"""\
import srbench_values

_recorder = srbench_values.Recorder({SCICODE_VALUES_MAX_BYTES})


def record(test, statement, thunks):
    _recorder.add(test, statement, [thunk() for thunk in thunks])


def finish():
    with open({SCICODE_VALUES_INSIDE!r}, "wb") as f:
        f.write(_recorder.dump())
"""


def _module_source(module: Any) -> bytes:
    return Path(module.__file__).read_bytes()


def _scicode_model_program(
    dependencies: str, prior_code: list[str], code: str, splits: list[SplitTest]
) -> str:
    """The model's process: its code, then the tests' own statements, their calls' values
    recorded; the values file is written after the last test, so a program that ends before
    it has none (`exited_early`). No target, and none of the judge's statements, is in it."""
    parts = [dependencies, *prior_code, code]
    parts.append(f"from srbench_record import record as {RECORD}, finish as _srbench_finish")
    parts += [split.model_source for split in splits]
    parts.append("_srbench_finish()")
    return "\n\n".join(parts) + "\n"


def _scicode_plan(number: str, splits: list[SplitTest]) -> bytes:
    tests = [[{"source": j.source, "values": j.values} for j in split.judge] for split in splits]
    plan = {"step": number, "h5": SCICODE_TARGETS_INSIDE, "tests": tests}
    return json.dumps(plan).encode("utf-8")


def _judge_outcome(stdout: bytes, tests: int) -> dict[str, Any] | None:
    lines = stdout.decode("utf-8", "replace").strip().splitlines()
    try:
        outcome = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        return None
    if not isinstance(outcome, dict):
        return None
    results = outcome.get("results")
    if not isinstance(results, list) or len(results) != tests:
        return None
    if not all(r in scicode_judge.OUTCOMES for r in results):
        return None
    return outcome


def _scicode_step(
    *,
    files: dict[str, bytes],
    source: str,
    number: str,
    splits: list[SplitTest],
    h5_path: Path,
    limits: SandboxLimits,
) -> dict[str, Any]:
    """Run one step's two processes; its status (and the tests' outcomes once judged)."""
    room = SCICODE_VALUES_MAX_BYTES + 1024 * 1024  # the values file is written, then unpacked
    limits = dataclasses.replace(limits, file_size_bytes=max(limits.file_size_bytes, room))
    model = sandbox_run(
        argv=[sandbox_python(), "step_test.py"],
        files=files | {"step_test.py": _source_bytes(source)},
        limits=limits,
        collect=[SCICODE_VALUES_INSIDE],
        collect_max_bytes=room,
    )
    failed = _failure_status(model)
    if failed in ("runtime_error", "compile_error"):
        return {"status": "failed"}
    if failed is not None:
        return {"status": failed}
    values = model.collected.get(SCICODE_VALUES_INSIDE)
    if values is None:
        return {"status": "exited_early"}
    judged = sandbox_run(
        argv=[sandbox_python(), "srbench_judge.py"],
        files=SCICODE_JUDGE_FILES
        | {"plan.json": _scicode_plan(number, splits), "values.bin": values},
        limits=limits,
        ro_binds={SCICODE_TARGETS_INSIDE: Path(h5_path)},
    )
    outcome = _judge_outcome(judged.stdout, len(splits))
    if outcome is None:  # the values made the comparison run out of time or memory
        return {"status": "failed", "judge": _failure_status(judged) or "no outcome"}
    results = outcome["results"]
    status = "passed" if all(r == "passed" for r in results) else "failed"
    detail: dict[str, Any] = {"status": status, "tests": results}
    if outcome.get("values") != "read":
        detail["values"] = outcome.get("values")
    return detail


def _scicode_splits(step: dict[str, Any]) -> list[SplitTest] | None:
    """The step's tests split for the two processes; None when one cannot be (never passed)."""
    try:
        return [split_test(test, k) for k, test in enumerate(step["test_cases"])]
    except UnsupportedTest:
        return None


def grade_scicode(
    *,
    step_replies: Sequence[str | None],
    payload: dict[str, Any],
    secret: dict[str, Any],
    h5_path: Path | None,
    limits: SandboxLimits = SCICODE_LIMITS,
) -> dict[str, Any]:
    """Run each step's cumulative code (dependencies, earlier steps' code, this step's code, its
    tests' own statements) in the sandbox, and judge the values its tests' calls returned
    against the targets in a second one; the main problem is correct only if every scored step
    passes.

    `step_replies[i]` is the model's reply to sub-step i (code is extracted from it); a missing
    reply fails that step. Steps upstream fills with gold code use it and are not scored. A
    step whose tests cannot be split is `untestable`, never passed.
    Raises TargetsUnavailable when the HDF5 file is not there.
    """
    if h5_path is None or not Path(h5_path).is_file():
        raise TargetsUnavailable(f"SciCode test_data.h5 not found at {h5_path}")
    steps: list[dict[str, Any]] = secret["steps"]
    dependencies = payload.get("required_dependencies") or ""
    prior: list[str] = []
    results: list[dict[str, Any]] = []
    for index, step in enumerate(steps):
        number = step["step_number"]
        gold = step.get("ground_truth_code")
        if number in SCICODE_GOLD_STEPS and isinstance(gold, str):
            prior.append(gold)
            results.append({"index": index, "step_number": number, "status": "gold"})
            continue
        reply = step_replies[index] if index < len(step_replies) else None
        code = extract_python_code(reply)
        splits = _scicode_splits(step)
        head = {"index": index, "step_number": number}
        if code is None:
            results.append(head | {"status": "unparsed"})
            prior.append("")
            continue
        prior_code = list(prior)
        prior.append(code)
        if splits is None:
            results.append(head | {"status": "untestable"})
            continue
        started = time.monotonic()
        detail = _scicode_step(
            files=SCICODE_MODEL_FILES,
            source=_scicode_model_program(dependencies, prior_code, code, splits),
            number=number,
            splits=splits,
            h5_path=Path(h5_path),
            limits=limits,
        )
        results.append(head | detail | {"wall_s": round(time.monotonic() - started, 3)})
    scored = [r for r in results if r["status"] != "gold"]
    passed = sum(1 for r in scored if r["status"] == "passed")
    correct = bool(scored) and passed == len(scored)
    return {
        "grader": "scicode",
        "version": SCICODE_GRADER_VERSION,
        "status": "passed" if correct else "failed",
        "correct": correct,
        "steps_total": len(scored),
        "steps_passed": passed,
        "steps": results,
    }


# The model's sandbox holds the helpers a test may import (not the targets' reader: no test
# reads the file, and nothing there could); the judge's holds both and the HDF5 file.
SCICODE_MODEL_FILES = {
    "scicode/__init__.py": b"",
    "scicode/compare/__init__.py": b"",
    "scicode/compare/cmp.py": SCICODE_CMP_MODULE.encode("utf-8"),
    "srbench_values.py": _module_source(scicode_values),
    "srbench_record.py": SCICODE_RECORD_MODULE.encode("utf-8"),
}
SCICODE_JUDGE_FILES = {
    "scicode/__init__.py": b"",
    "scicode/parse/__init__.py": b"",
    "scicode/parse/parse.py": SCICODE_PARSE_MODULE.encode("utf-8"),
    "scicode/compare/__init__.py": b"",
    "scicode/compare/cmp.py": SCICODE_CMP_MODULE.encode("utf-8"),
    "srbench_values.py": _module_source(scicode_values),
    "srbench_judge.py": _module_source(scicode_judge),
}
