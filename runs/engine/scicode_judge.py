"""The judge of a SciCode step: the second of its two sandboxed processes, where no model code runs.

The first process ran the model's code and the tests' own statements, and carried out what the
tests' calls returned (`runs.engine.scicode_values`); this one loads the step's targets from
test_data.h5 (mounted here only) and runs the judge's half of each test
(`runs.engine.scicode_split`): its assignments from `target`, its reference values, its
comparisons, on those values. It prints one JSON line: each test's outcome.

This file is copied into the sandbox as `srbench_judge.py` beside `srbench_values.py` and the
`scicode` helper stand-ins, and run there; it is importable here for its tests.
"""

from __future__ import annotations

import builtins
import json
import sys
from typing import Any

import numpy as np

try:  # inside the judge's sandbox
    import srbench_values as values_format  # type: ignore[import-not-found]
except ImportError:  # in the repository
    from runs.engine import scicode_values as values_format

PLAN = "plan.json"
VALUES = "values.bin"
# A test's outcomes: passed; failed (an assertion); error (the comparison raised, e.g. on a
# value of the wrong shape); missing (the model's process never carried its values);
# unserializable (a value of a type the format does not carry).
OUTCOMES = ("passed", "failed", "error", "missing", "unserializable")


def allclose(a: Any, b: Any, *args: Any, **kwargs: Any) -> bool:
    """numpy.allclose, except that an empty value is never close to a non-empty one. Upstream's
    `np.allclose(np.array([]), 2.5)` is True (the two broadcast to nothing), so a function that
    returns an empty array passed every test whose target is a number."""
    try:
        empty = (np.size(a) == 0, np.size(b) == 0)
    except (ValueError, TypeError):  # np.allclose raises on these too, and says why
        empty = (False, False)
    if empty[0] != empty[1]:
        return False
    return bool(np.allclose(a, b, *args, **kwargs))


class _Numpy:
    """numpy as the judge's statements and the comparison helpers see it: `allclose` above."""

    allclose = staticmethod(allclose)

    def __getattr__(self, name: str) -> Any:
        return getattr(np, name)


NUMPY = _Numpy()


def _has_unserializable(value: Any, depth: int = 0) -> bool:
    if isinstance(value, values_format.Unserializable):
        return True
    if depth > values_format.MAX_DEPTH + 1:
        return False
    if isinstance(value, dict):
        items = [*value.keys(), *value.values()]
    elif isinstance(value, (list, tuple, set, frozenset)):
        items = list(value)
    elif isinstance(value, np.ndarray) and value.dtype.hasobject:
        items = list(value.reshape(-1))
    else:
        return False
    return any(_has_unserializable(v, depth + 1) for v in items)


def judge_test(
    index: int,
    statements: list[dict[str, Any]],
    target: Any,
    values: dict[tuple[int, int], list[Any]],
    helpers: dict[str, Any],
) -> str:
    """One test's outcome: its judge statements run in order on its target and values."""
    namespace: dict[str, Any] = {"__builtins__": builtins, "np": NUMPY, "numpy": NUMPY}
    namespace |= helpers | {"target": target}
    for position, statement in enumerate(statements):
        carried: list[Any] | None = None
        if statement["values"]:
            carried = values.get((index, position))
            if carried is None or len(carried) != statement["values"]:
                return "missing"
            if any(_has_unserializable(v) for v in carried):
                return "unserializable"
        namespace["_srbench_leaf"] = carried
        try:
            exec(compile(statement["source"], f"<test {index + 1}>", "exec"), namespace)  # noqa: S102
        except AssertionError:
            return "failed"
        except Exception:  # noqa: BLE001 - any error of a comparison fails the test, as upstream
            return "error"
    return "passed"


def judge(plan: dict[str, Any], data: bytes | None, targets: list[Any]) -> dict[str, Any]:
    """Every test's outcome, or why none could be judged (`values`: absent, too large, bad)."""
    from scicode.compare import cmp  # type: ignore[import-untyped]

    cmp.np = NUMPY  # the helpers compare with `allclose` above too
    are_dicts_close, cmp_tuple_or_list = cmp.are_dicts_close, cmp.cmp_tuple_or_list

    tests = plan["tests"]
    if data is None:
        return {"values": "absent", "results": ["missing"] * len(tests)}
    if data == values_format.TOO_LARGE:
        return {"values": "too_large", "results": ["missing"] * len(tests)}
    try:
        values = values_format.load(data)
    except values_format.BadValues:
        return {"values": "bad", "results": ["missing"] * len(tests)}
    helpers = {"cmp_tuple_or_list": cmp_tuple_or_list, "are_dicts_close": are_dicts_close}
    results = [
        judge_test(k, statements, targets[k], values, helpers) for k, statements in enumerate(tests)
    ]
    return {"values": "read", "results": results}


def main() -> None:
    from scicode.parse.parse import process_hdf5_to_tuple  # type: ignore[import-untyped]

    with open(PLAN, encoding="utf-8") as f:
        plan = json.load(f)
    targets = process_hdf5_to_tuple(plan["step"], len(plan["tests"]), plan["h5"])
    try:
        with open(VALUES, "rb") as f:
            data: bytes | None = f.read()
    except FileNotFoundError:
        data = None
    outcome = judge(plan, data, targets)
    sys.stdout.write("\n" + json.dumps(outcome) + "\n")


if __name__ == "__main__":
    main()
