"""A driver's claims on its cells (issue 34, docs/reliability.md "Fencing"): their leases renewed
by fencing token, the check before a request leaves, and what happens to a cell whose claim is
gone — one log line, its work abandoned, nothing more sent or written for it.

`LeaseHolder` is mixed into the driver's `Caller` (runs/engine/calls.py), which holds the state
it reads: `ctx`, `db`, `held`, `lost`, `lease_seconds`, `lease_valid_until`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from django.conf import settings

from runs.engine import store
from runs.engine.group_commit import UNREACHABLE
from runs.engine.transport import SEND_GATE

log = logging.getLogger(__name__)


class ClaimLost(Exception):  # noqa: N818 - a state, not a failure of this code
    """This worker's claim on a cell is gone: it stalled past its lease and the cell was
    settled or taken over elsewhere. Its work on the cell stops and writes nothing more."""


class LeaseHolder:
    """The lease side of a Caller (see the module's docstring)."""

    ctx: Any
    db: Any
    held: dict[int, tuple[int, asyncio.Task[Any] | None]]
    lost: set[int]
    lease_seconds: float
    lease_valid_until: float

    def claim_lost(self, cell_id: int, doing: str) -> None:
        """One log line per cell whose claim this worker found gone."""
        if cell_id not in self.lost:
            self.lost.add(cell_id)
            log.warning(
                "run %s cell %s: claim lost while %s (this worker stalled past its lease and "
                "the cell was settled elsewhere); its work is abandoned, nothing more is sent",
                self.ctx.run_id,
                cell_id,
                doing,
            )

    def send_gate(self, cell_id: int) -> dict[str, Any]:
        """The engine transport asks this just before a request's bytes are written: within
        the known life of the leases and for a cell whose claim was not found gone, else the
        request is held (RequestHeld) unsent. The leases' life is one for all held cells: a
        renewal that found one cell's claim gone still extends it for the others, so the cell
        itself is asked too."""
        return {
            SEND_GATE: lambda: (
                time.monotonic() < self.lease_valid_until and cell_id not in self.lost
            )
        }

    async def lease_check(self, cell: store.ClaimedCell) -> None:
        """Before a request leaves: past the known life of the leases (this worker stalled, or
        the database was away), renew first; a lost claim abandons the cell before anything
        is sent (its committed call is then the recovery pass's sent_unknown, never sent)."""
        if cell.cell_id in self.lost:
            raise ClaimLost(cell.cell_id)
        waited_since = time.monotonic()
        while time.monotonic() >= self.lease_valid_until:
            await self.leases_renew(self.lease_seconds)
            if cell.cell_id in self.lost:
                raise ClaimLost(cell.cell_id)
            if time.monotonic() - waited_since > float(settings.SRBENCH_DB_OUTAGE_SECONDS):
                self.claim_lost(cell.cell_id, "renewing its lease (the database stayed away)")
                raise ClaimLost(cell.cell_id)
            if time.monotonic() >= self.lease_valid_until:
                await asyncio.sleep(0.5)  # the renewal did not get through: try again

    async def leases_renew(self, lease_seconds: float) -> None:
        """Renew the held cells' leases by token; abandon every cell whose claim is gone: its
        task is cancelled (an in-flight request is dropped, its close is refused). While the
        database cannot be reached nothing is renewed or abandoned."""
        started = time.monotonic()
        held = dict(self.held)
        try:
            renewed = await self.db(
                store.leases_renew,
                run_id=self.ctx.run_id,
                held=[(cell_id, token) for cell_id, (token, _) in held.items()],
                lease_seconds=lease_seconds,
            )
        except UNREACHABLE:
            log.warning(
                "run %s: lease renewal failed: the database is unreachable", self.ctx.run_id
            )
            return
        self.lease_valid_until = started + lease_seconds
        for cell_id, (_, task) in held.items():
            if cell_id not in renewed and self.held.get(cell_id, (None, None))[1] is task:
                self.claim_lost(cell_id, "renewing its lease")
                self.held.pop(cell_id, None)
                if task is not None and task is not asyncio.current_task():
                    task.cancel()
