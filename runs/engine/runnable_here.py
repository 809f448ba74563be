"""Which questions can run here — the one rule, asked twice (issue 22: "not run is not wrong";
issue 36 item 3: one home for "not run").

A task that cannot run here — an official Terminal-Bench task that needs a container engine, a
SciCode problem whose test targets this server does not hold, a τ³ domain without local tools —
is left out of the plan before any model call (runs/planning/runnable.py lists it under the
manifest's `not_run` with its reason; the run reports a subset score). A worker asks the same
rule again before a cell's first call (runs/engine/driver.py): a worker set up differently from
the web (no test data, no container engine) sends nothing for that cell and stops the run's
dispatch with the reason, so one cause never becomes a failed cell, counted wrong, after a paid
call. Its pending cells stay pending, for recovery once the worker is set up.

The SciCode check reads `SRBENCH_SCICODE_H5` where it runs: set it on the web processes (the
plan) and on the workers alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from django.conf import settings

from runs.engine.code_grading import SCICODE_GOLD_STEPS
from runs.engine.container import container_engine
from runs.engine.tau_session import unavailable_reason as tau_unavailable_reason

__all__ = ["CHECKED", "not_runnable_reason", "scicode_reason", "terminal_bench_reason"]

# Benchmarks with questions that may not run on every server.
CHECKED = ("terminal-bench", "scicode", "tau3")


def terminal_bench_reason(payload: Mapping[str, Any]) -> str | None:
    """A self-written task (``local_compatible``) runs in the bubblewrap sandbox; an official
    one in its own image where a container engine answers here (runs/engine/container.py,
    issue 37 item 5), else it is not run, with the engines' own answers as the reason."""
    environment = payload.get("environment") or {}
    if environment.get("local_compatible", False):
        return None
    if not environment.get("docker_image"):
        return (
            "needs its image built from its Dockerfile: the task names no prebuilt image, and "
            "this server runs only prebuilt task images"
        )
    choice = container_engine()
    if choice.engine is None:
        return (
            "needs a container engine (Docker or Podman): the task is not marked "
            f"local_compatible, and no engine answers on this server ({choice.reason})"
        )
    return None


@lru_cache(maxsize=4)
def _h5_keys(path: str, mtime: float) -> frozenset[str]:
    """Every group and dataset name in the HDF5 file (cached per file version)."""
    import h5py

    names: set[str] = set()
    with h5py.File(path, "r") as f:
        f.visit(names.add)
    return frozenset(names)


def scicode_reason(secret: Mapping[str, Any]) -> str | None:
    configured = settings.SRBENCH_SCICODE_H5
    if not configured:
        return "SciCode's test data (test_data.h5) is not configured on this server"
    path = Path(configured)
    if not path.is_file():
        return f"SciCode's test data is configured but missing ({path.name} not found)"
    try:
        keys = _h5_keys(str(path), path.stat().st_mtime)
    except OSError as exc:
        return f"SciCode's test data cannot be read ({type(exc).__name__})"
    missing = 0
    for step in secret.get("steps") or []:
        number = str(step.get("step_number", ""))
        if number in SCICODE_GOLD_STEPS and isinstance(step.get("ground_truth_code"), str):
            continue  # the grader runs upstream's gold code there: no targets needed
        tests = step.get("test_cases") or []
        missing += sum(1 for k in range(1, len(tests) + 1) if f"{number}/test{k}" not in keys)
    if missing:
        return "SciCode's test data on this server holds no targets for this problem's tests"
    return None


def not_runnable_reason(
    benchmark: str, payload: Mapping[str, Any], secret: Mapping[str, Any]
) -> str | None:
    """Why this question cannot run on this server, or None. No model call, no sandbox."""
    if benchmark == "terminal-bench":
        return terminal_bench_reason(payload)
    if benchmark == "scicode":
        return scicode_reason(secret)
    if benchmark == "tau3":
        return tau_unavailable_reason(payload)
    return None
