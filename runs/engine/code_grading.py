"""Graders that execute model-written code in the sandbox: LiveCodeBench and SciCode
(benchmarks.md §6–7). Each returns a JSON-ready grade dict with a `correct` flag and per-test
statuses by index; expected outputs and hidden test inputs never appear in it.

Expected outputs never enter the sandbox either: a LiveCodeBench program prints its answer and
the comparison happens here. SciCode's targets must be inside (its official test snippets assert
against `target` in-process), so the HDF5 file is mounted read-only; the tests see the targets
for the step being tested, exactly as upstream.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from collections.abc import Sequence
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from datasets.benchmarks import get_adapter
from datasets.benchmarks.scicode import ADAPTER as SCICODE
from datasets.grading import strip_reasoning
from datasets.official_prompts import SCICODE_GOLD_FILES
from runs.engine.sandbox import DISK_QUOTA_EXCEEDED, SandboxResult, sandbox_run
from runs.engine.sandbox_command import SandboxLimits, sandbox_python

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


def _scicode_test_file(
    dependencies: str, prior_code: list[str], code: str, step: dict[str, Any]
) -> str:
    tests = step["test_cases"]
    parts = [dependencies, *prior_code, code]
    parts.append(
        "from scicode.parse.parse import process_hdf5_to_tuple\n"
        f"targets = process_hdf5_to_tuple({step['step_number']!r}, {len(tests)}, "
        f"{SCICODE_TARGETS_INSIDE!r})"
    )
    for k, test in enumerate(tests):
        parts.append(f"target = targets[{k}]\n{test}")
    parts.append(SCICODE_END_OF_TESTS)
    return "\n\n".join(parts) + "\n"


# The last lines of a step's program: the word the grader handed it on stdin, echoed on its own
# line once every test ran. A program that exits 0 before (the model's `sys.exit(0)`, a
# `__main__` block ending in `raise SystemExit`, `os._exit`) never prints it: `exited_early`,
# never passed. The word is not in the file, so code that does not go looking cannot print it.
SCICODE_END_OF_TESTS = """\
import sys as _srbench_sys
_srbench_sys.__stdout__.write("\\n" + _srbench_sys.stdin.read().strip() + "\\n")
_srbench_sys.__stdout__.flush()"""


def _scicode_step_status(result: SandboxResult, end_word: str) -> str:
    """A step's outcome (upstream tells only pass, fail and time out apart, plus our limits)."""
    failed = _failure_status(result)
    if failed in ("runtime_error", "compile_error"):
        return "failed"
    if failed is not None:
        return failed
    if end_word.encode("ascii") not in result.stdout.splitlines():
        return "exited_early"
    return "passed"


def grade_scicode(
    *,
    step_replies: Sequence[str | None],
    payload: dict[str, Any],
    secret: dict[str, Any],
    h5_path: Path | None,
    limits: SandboxLimits = SCICODE_LIMITS,
) -> dict[str, Any]:
    """Run each step's cumulative code (dependencies, earlier steps' code, this step's code, its
    tests) in the sandbox; the main problem is correct only if every scored step passes.

    `step_replies[i]` is the model's reply to sub-step i (code is extracted from it); a missing
    reply fails that step. Steps upstream fills with gold code use it and are not scored.
    Raises TargetsUnavailable when the HDF5 file is not there.
    """
    if h5_path is None or not Path(h5_path).is_file():
        raise TargetsUnavailable(f"SciCode test_data.h5 not found at {h5_path}")
    steps: list[dict[str, Any]] = secret["steps"]
    dependencies = payload.get("required_dependencies") or ""
    files = {
        "scicode/__init__.py": b"",
        "scicode/parse/__init__.py": b"",
        "scicode/parse/parse.py": SCICODE_PARSE_MODULE.encode("utf-8"),
        "scicode/compare/__init__.py": b"",
        "scicode/compare/cmp.py": SCICODE_CMP_MODULE.encode("utf-8"),
    }
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
        if code is None:
            results.append({"index": index, "step_number": number, "status": "unparsed"})
            prior.append("")
            continue
        source = _scicode_test_file(dependencies, prior, code, step)
        started = time.monotonic()
        end_word = secrets.token_hex(16)
        result = sandbox_run(
            argv=[sandbox_python(), "step_test.py"],
            files=files | {"step_test.py": _source_bytes(source)},
            stdin=end_word.encode("ascii"),
            limits=limits,
            ro_binds={SCICODE_TARGETS_INSIDE: Path(h5_path)},
        )
        results.append(
            {
                "index": index,
                "step_number": number,
                "status": _scicode_step_status(result, end_word),
                "wall_s": round(time.monotonic() - started, 3),
            }
        )
        prior.append(code)
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
