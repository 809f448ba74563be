"""The run driver: one asyncio loop per task holding many concurrent streams (DESIGN §4).

This module is the claim loop and the choice of a cell's episode; one call's machinery (the
database thread, the ledger's group commit, stream and close) is runs/engine/calls.py, and
each kind of benchmark's episode is runs/engine/episodes.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from types import SimpleNamespace
from typing import Any

import httpx
from django.conf import settings
from django.utils import timezone

from datasets.benchmarks import get_adapter
from runs.engine import store
from runs.engine.calls import Caller
from runs.engine.client import engine_client
from runs.engine.episodes import episode_for
from runs.engine.finish import run_finish_if_done
from runs.engine.group_commit import UNREACHABLE, DbThread, LedgerBatcher
from runs.engine.leases import ClaimLost
from runs.engine.router_client import PreviewError, PreviewNotPossible, route_preview
from runs.engine.runnable_here import CHECKED, not_runnable_reason
from runs.ledger.hooks import run_start
from runs.models import Run
from runs.vocabulary.limits import MAX_RUN_SECONDS

log = logging.getLogger(__name__)

__all__ = [
    "Driver",
    "drive",
]


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass
class Driver(Caller):
    """One run's cells on this worker: each one runs its benchmark's episode under the case
    timeout, and a crash fails the cell instead of leaving it running."""

    concurrency: int = 1
    slots: Slots = field(default_factory=lambda: Slots())
    claiming: asyncio.Future[Any] | None = None  # the claim queued in the ledger, if any

    async def run_cell(self, cell: store.ClaimedCell) -> None:
        self.held[cell.cell_id] = (cell.token, asyncio.current_task())
        try:
            async with asyncio.timeout(self.limits["case_timeout_s"]):
                await self._run_cell(cell)
        except ClaimLost:
            return  # logged once; the cell belongs to whoever settled it
        except TimeoutError:
            await self.fail(cell, f"case timeout after {self.limits['case_timeout_s']}s")
        except Exception as exc:  # a bug must fail the cell, not leave it running forever
            log.exception("cell %s crashed", cell.cell_id)
            await self.fail(cell, f"internal error: {type(exc).__name__}: {exc}")
        finally:
            self.closing.pop(cell.cell_id, None)
            self.held.pop(cell.cell_id, None)

    def cell_ending(self) -> None:
        self.slots.ending(asyncio.current_task())
        self.claim_if_due()

    @property
    def refill(self) -> int:
        """Claim in batches: a claim takes the run row lock, so refilling one slot at a
        time would cost a claim per call."""
        return max(1, self.concurrency // 8)

    def claim_if_due(self) -> None:
        """Queue a claim of the free slots when enough are free and none is queued. Called
        as a cell's finish is queued too, in the same step: the claim then shares the finish's
        transaction (ledger_apply applies it after the finishes) instead of following it."""
        if self.claiming is not None or self.stopping:
            return
        free = self.concurrency - self.slots.busy()
        if free >= self.refill or (free > 0 and not self.slots):
            op = store.ClaimCells(self.worker, free, self.concurrency, self.lease_seconds)
            self.claiming = self.ledger.enqueue(op)
            self.slots.freed.set()  # the claim loop takes the result

    async def claimed(self) -> tuple[list[store.ClaimedCell], int | None] | None:
        """The queued claim's result: (cells, pending left if none was claimed), or None when
        the run no longer dispatches. No claim queued: nothing claimed, nothing known."""
        if self.claiming is None:
            return [], None
        try:
            return await asyncio.shield(self.claiming)
        finally:
            self.claiming = None

    async def _run_cell(self, cell: store.ClaimedCell) -> None:
        target = self.ctx.targets[cell.target_id]
        adapter = get_adapter(cell.benchmark)
        if self.ctx.manifest["mode"] == Run.Mode.PREVIEW:
            await self._run_preview(cell, target)
            return
        rejudge = "rejudge" in self.ctx.manifest
        if cell.benchmark in CHECKED and not rejudge:
            # The plan's own rule again, on this worker (off the loop: it may read files or ask
            # a container engine): what cannot run here is never sent, never a failed cell.
            reason = await asyncio.to_thread(
                not_runnable_reason, cell.benchmark, cell.payload, cell.secret
            )
            if reason is not None:
                await self.not_runnable_here(cell, reason)
                return
        # A re-judge child (runs/settlement/rejudge.py) is known by its manifest, never by a benchmark.
        await episode_for(adapter, rejudge=rejudge)(self, cell, target)

    async def not_runnable_here(self, cell: store.ClaimedCell, reason: str) -> None:
        """This worker cannot run the cell although the plan could (a worker set up unlike the
        web: no test data, no container engine). Nothing is sent for it: the run stops
        dispatching with the reason (first, so no claim takes the cell again), and the cell
        goes back to pending, to be recovered once the worker is set up."""
        await self.stop(
            f"{cell.benchmark} cannot run on worker {self.worker}: {reason}; nothing was sent "
            "for it — set the workers up as the web that planned it, then recover the run's "
            "undispatched cells"
        )
        await self.release(cell)

    async def _run_preview(self, cell: store.ClaimedCell, target: store.TargetInfo) -> None:
        """A preview run asks the router where it would send the case; nothing is answered,
        nothing is billed. The config hash must be the target's pin (R12.3)."""
        context = self.ctx.manifest.get("preview_context") or {}
        as_target = SimpleNamespace(
            slug=target.slug,
            kind=target.kind,
            model=target.model,
            preview_url=target.preview_url,
            config_hash=target.config_hash or "",
        )
        messages = get_adapter(cell.benchmark).messages(cell.payload)
        try:
            result = await asyncio.to_thread(
                lambda: route_preview(target=as_target, messages=messages, **context)
            )
        except (PreviewError, PreviewNotPossible) as exc:
            await self.fail(cell, f"route preview: {exc}")
            return
        routing = {
            k: result.get(k)
            for k in (
                "selected_model",
                "decision",
                "selection_status",
                "config_hash",
                "config_hash_matches",
            )
        }
        if result.get("config_hash_matches") is not True:
            pinned = target.config_hash
            error = f"router config {result.get('config_hash')} is not the pinned {pinned}"
            await self.fail(cell, error, grade={"preview": routing})
            return
        await self.complete(cell, None, {"preview": routing})


class Slots:
    """The cells in flight on this driver. A finished cell frees its slot through a
    done-callback: O(1) per cell, where asyncio.wait over every in-flight task cost O(C) per
    turn of the claim loop (issue 25)."""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[None]] = set()
        # Cells whose finish is queued: their slots count as free, so the claim of their
        # replacements rides in the finish's transaction (ledger_apply) instead of after it.
        self.ended: set[asyncio.Task[Any]] = set()
        self.freed = asyncio.Event()

    def __len__(self) -> int:
        return len(self.tasks)

    def busy(self) -> int:
        return len(self.tasks) - len(self.ended)

    def ending(self, task: asyncio.Task[Any] | None) -> None:
        if task in self.tasks:
            self.ended.add(task)
            self.freed.set()

    def start(self, cell_run: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(cell_run)
        self.tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        self.ended.discard(task)
        self.freed.set()

    async def wait(self, busy_limit: int) -> None:
        """Until a cell ends or queues its finish (or a second passes, to look again); then,
        while more than `busy_limit` slots are busy, one turn of the loop, so that the cells
        whose calls ended in the same read end too and the next claim takes them all.

        Not longer: a slot waiting here is a slot without a call. A 20 ms pause here cost
        C = 32 about 2 % of its wall (the claim came 14–21 ms after the cells' end instead of
        7–10 ms; docs/performance.md, issue 25)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(1.0):
                await self.freed.wait()
        self.freed.clear()
        if self.busy() > busy_limit:
            await asyncio.sleep(0)


def run_deadline(started_at: datetime, limits: dict[str, Any]) -> datetime:
    """When the run stops by its plan's `max_run_seconds`, which the plan bounds
    (`MAX_RUN_SECONDS`); a run frozen before that bound runs to the bound, never crashes."""
    return started_at + timedelta(seconds=min(float(limits["max_run_seconds"]), MAX_RUN_SECONDS))


# A run whose driver raises on every start (a bug, or a plan frozen with what the engine cannot
# take) would be started again by every recovery pass for ever, `running` with nothing
# happening (an outside probe: ten crashes of one run). Each crash is an event; at the
# CRASH_LIMIT-th the run stops dispatching, naming the error, and ends once no cell of it runs.
# The database being unreachable is not a crash of the run (its writes wait for it).
CRASH_LIMIT = 3
CRASH_EVENT = "run.engine_crashed"


def run_crash_record(*, run_id: int, error: str) -> bool:
    """Record a crash of the run's driver; at the CRASH_LIMIT-th, stop the run's dispatch and
    end it if nothing of it runs. Returns whether this crash stopped it."""
    from django.db import transaction

    from runs.ledger.events import events_append
    from runs.models import RunEvent

    with transaction.atomic(durable=True):
        store.run_lock(run_id)
        events_append(run_id=run_id, events=[(CRASH_EVENT, {"error": error[:2000]})])
        crashes = RunEvent.objects.filter(run_id=run_id, type=CRASH_EVENT).count()
    if crashes < CRASH_LIMIT:
        return False
    reason = f"the engine crashed {crashes} times driving this run (last: {error[:500]})"
    stopped = store.run_stop(run_id=run_id, reason=reason)
    run_finish_if_done(run_id=run_id)
    return stopped


async def drive(run_id: int) -> str | None:
    """Drive one run on this worker until nothing more can be dispatched here; a crash is
    recorded (`run_crash_record`) and raised again."""
    try:
        return await _drive(run_id)
    except (ClaimLost, *UNREACHABLE):
        raise
    except Exception as exc:
        log.exception("run %s: the driver crashed", run_id)
        recorder = DbThread()
        try:
            error = f"{type(exc).__name__}: {exc}"
            await recorder(run_crash_record, run_id=run_id, error=error)
        except Exception:  # the crash is raised below either way
            log.exception("run %s: recording the crash failed", run_id)
        finally:
            recorder.close()
        raise


async def _drive(run_id: int) -> str | None:
    db, side_db = DbThread(writer=True), DbThread()
    try:
        ctx = await db(store.run_begin, run_id=run_id)
        if ctx is None:
            return None
        if ctx.started_now:
            # Before any call: the recipe must describe the router that answers this run
            # (R12.2). Only at the start, so a redelivered task never captures a later config.
            # recipes registers its capture as a run-start hook (runs.ledger.hooks, issue 24).
            await db(run_start, run_id=run_id)
        limits = ctx.manifest["limits"]
        max_cost = None if limits.get("max_cost_usd") is None else Decimal(limits["max_cost_usd"])
        concurrency = int(limits["concurrency"])
        lease_seconds = float(settings.SRBENCH_CELL_LEASE_SECONDS)
        timeout = httpx.Timeout(
            connect=10.0, read=float(limits["idle_timeout_s"]), write=30.0, pool=None
        )
        pool = httpx.Limits(max_connections=concurrency + 8, max_keepalive_connections=concurrency)
        async with engine_client(timeout=timeout, limits=pool) as client:
            driver = Driver(
                ctx=ctx,
                worker=worker_id(),
                db=db,
                client=client,
                limits=limits,
                max_cost=max_cost,
                ledger=LedgerBatcher(db, run_id, max_cost),
                concurrency=concurrency,
                lease_seconds=lease_seconds,
                side_db=side_db,
            )
            driver.lease_valid_until = time.monotonic() + lease_seconds
            ticker = asyncio.create_task(driver.checkpoints(lease_seconds))
            deadline = run_deadline(ctx.started_at, limits)
            inflight = driver.slots
            try:
                while not driver.stopping:
                    if timezone.now() >= deadline:
                        await driver.stop(f"max_run_seconds ({limits['max_run_seconds']}) reached")
                        break
                    driver.claim_if_due()
                    claimed = await driver.claimed()
                    if claimed is None:
                        break  # cancelled, stopped or ended elsewhere
                    cells, pending_left = claimed
                    if driver.stopping:
                        # The claim shared a cell's end, and that end stopped the run (fail
                        # closed): its cells were never started, nothing was sent for them.
                        for cell in cells:
                            await driver.release(cell)
                        break
                    for cell in cells:
                        inflight.start(driver.run_cell(cell))
                    if not inflight:
                        if pending_left == 0:
                            break
                        await asyncio.sleep(0.5)  # other workers hold the concurrency
                        continue
                    await inflight.wait(concurrency - driver.refill)
                # A claim queued by a cell's end just before the loop stopped: its cells were
                # never started here, nothing was sent for them; they go back to pending.
                leftover = await driver.claimed()
                for cell in leftover[0] if leftover else []:
                    await driver.release(cell)
                if inflight:
                    await asyncio.wait(set(inflight.tasks))
            finally:
                ticker.cancel()
                if driver.keeping is not None:
                    await asyncio.gather(driver.keeping, return_exceptions=True)
                await driver.ledger.close()
        return await db(run_finish_if_done, run_id=run_id)
    finally:
        db.close()
        side_db.close()  # after a snapshot being kept, if any: its thread finishes it first
