"""A plan's "not run here" entries (the manifest's ``not_run``: benchmark, questions, reason) as
the plan review, the run page and the CLI word them. Plain Python (no Django), so the remote
CLI may import it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def not_run_reason(entry: Mapping[str, Any]) -> str:
    """The entry's reason without the benchmark name it starts with: the plan keys each left-out
    question's reason by its benchmark (runs/planning/runnable.py, also read where the refusal
    of a plan lists every reason), and every line that shows an entry names the benchmark
    already — "scicode: 1 question — scicode: SciCode's test data …" said it twice."""
    return str(entry["reason"]).removeprefix(f"{entry['benchmark']}: ")
