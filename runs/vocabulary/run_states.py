"""A run's states (DESIGN §3): the one vocabulary of the ledger's `Run.status` (its
`runs.models.RunStatus` choices are these words), the API, the pages and the CLI that follows a
run to its end (issue 36 item 3). Plain Python (no Django), so the remote CLI
(`runs/interfaces/follow.py`) may import it without booting Django.
"""

from __future__ import annotations

from enum import StrEnum


class RunState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"


# A run in one of these has ended: no cell of it is dispatched again.
TERMINAL_RUN_STATES = (
    RunState.COMPLETED,
    RunState.FAILED,
    RunState.CANCELLED,
    RunState.INTERRUPTED,
)
