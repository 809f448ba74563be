"""The one rule for a target's fixed request parameters (R8.6; issue 35 item 7).

A target's fixed parameters are merged into every request it is sent (`runs.engine.calls`), so
`{"temperature": "hot"}` would reach the provider on every call of a run. The keys a target may
fix are the plan's generation fields (`runs.planning.plans.SAMPLING_FIELDS`: anything else — tools,
response_format, logit_bias, model, stream … — would change what is measured or break the
transport contract) plus `max_tokens`, which the engine, the cost reservation and re-judging
read. Each value must have its OpenAI chat JSON type and a sane range; booleans are not numbers.

The admin form (`runs.admin.TargetAdminForm`) and plan freezing (`runs.planning.plans.plan_freeze`, for
targets stored before this rule) both call `fixed_params_errors`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

__all__ = ["FIXED_PARAM_RULES", "fixed_params_errors"]

MAX_STOP_SEQUENCES = 4
MAX_TOKENS_LIMIT = 1_000_000  # the plan's own bound on max_output_tokens
REASONING_EFFORTS = ("minimal", "low", "medium", "high")


def _number(low: float, high: float) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if ok and math.isfinite(value) and low <= value <= high:
            return None
        return f"must be a number from {low:g} to {high:g}"

    return check


def _integer(low: int | None, high: int | None = None) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        ok = isinstance(value, int) and not isinstance(value, bool)
        if ok and (low is None or value >= low) and (high is None or value <= high):
            return None
        if low is None:
            return "must be an integer"
        if high is None:
            return f"must be an integer ≥ {low}"
        return f"must be an integer from {low} to {high:,}"

    return check


def _stop_text(value: Any) -> bool:
    # PostgreSQL's jsonb keeps no U+0000: a NUL here was a 500 at the target's save.
    return isinstance(value, str) and bool(value) and "\x00" not in value


def _stop(value: Any) -> str | None:
    if _stop_text(value):
        return None
    if (
        isinstance(value, list)
        and 0 < len(value) <= MAX_STOP_SEQUENCES
        and all(_stop_text(s) for s in value)
    ):
        return None
    return (
        f"must be a non-empty string or a list of 1 to {MAX_STOP_SEQUENCES} non-empty strings, "
        "none holding NUL (\\u0000)"
    )


def _reasoning_effort(value: Any) -> str | None:
    if isinstance(value, str) and value in REASONING_EFFORTS:
        return None
    return f"must be one of {', '.join(REASONING_EFFORTS)}"


# Key → check (None when the value is valid, else what it must be).
FIXED_PARAM_RULES: dict[str, Callable[[Any], str | None]] = {
    "temperature": _number(0, 2),
    "top_p": _number(0, 1),
    "top_k": _integer(1),
    "seed": _integer(None),
    "presence_penalty": _number(-2, 2),
    "frequency_penalty": _number(-2, 2),
    "reasoning_effort": _reasoning_effort,
    "stop": _stop,
    "max_tokens": _integer(1, MAX_TOKENS_LIMIT),
}


def fixed_params_errors(params: object) -> list[str]:
    """Every problem of a target's fixed parameters, one sentence each naming the key and the
    value given; an empty list when they are valid."""
    if not isinstance(params, dict):
        return ['fixed parameters must be a JSON object, e.g. {"temperature": 0}.']
    errors = []
    for key in sorted(params, key=str):
        check = FIXED_PARAM_RULES.get(key)
        if check is None:
            errors.append(
                f"{key!r} is not a parameter a target may fix (allowed: "
                f"{', '.join(FIXED_PARAM_RULES)})."
            )
            continue
        problem = check(params[key])
        if problem is not None:
            errors.append(f"{key}: {params[key]!r} is not valid; it {problem}.")
    return errors
