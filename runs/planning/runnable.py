"""Which questions of a plan can run on this server, decided when the plan is frozen: those that
cannot are left out before any model call and listed under the manifest's `not_run` with
their reason. The rule itself is runs.engine.runnable_here's (a worker asks it again before a
cell's first call)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from runs.engine.runnable_here import not_runnable_reason


def not_runnable(
    rows: Iterable[tuple[int, str, Mapping[str, Any], Mapping[str, Any]]],
) -> dict[int, str]:
    """{question id: reason} for the (id, benchmark, payload, secret) rows that cannot run."""
    out: dict[int, str] = {}
    for qid, benchmark, payload, secret in rows:
        reason = not_runnable_reason(benchmark, payload or {}, secret or {})
        if reason:
            out[qid] = f"{benchmark}: {reason}"
    return out
