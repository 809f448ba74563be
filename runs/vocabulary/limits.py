"""Bounds of a plan's limits that more than one layer reads: the plan's validation refuses a
value past them (runs/planning/plans.py), and the engine never computes with more
(runs/engine/driver.py), so a run frozen before a bound existed still runs. Plain Python."""

from __future__ import annotations

# The longest run deadline (`limits.max_run_seconds`) a plan may set: a year. The engine adds it
# to the run's start; every other timeout lies within it (idle ≤ total ≤ case ≤ run).
MAX_RUN_SECONDS = 366 * 86400
