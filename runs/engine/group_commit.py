"""The driver's database thread and the ledger's group commit (DESIGN §4): every write of a
driver runs on one thread that keeps one connection, and writes queued while a transaction is in
flight are applied together in the next one (runs/engine/store.py `ledger_apply`)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from typing import Any, TypeVar

from django.conf import settings
from django.db import InterfaceError, OperationalError, connection

from runs.engine import store

log = logging.getLogger(__name__)
T = TypeVar("T")
# A lost connection, a server restarting, a transaction PostgreSQL ended (idle timeout, a
# deadlock it resolved): the whole batch was rolled back and may be applied again as it is.
UNREACHABLE = (OperationalError, InterfaceError)


class DbThread:
    """All ORM work of one driver on one thread, so it keeps one connection and never blocks
    the event loop. A `writer` thread's connection is a ledger writer's (store.writer_session:
    a frozen worker's open transaction does not hold the run's rows for long)."""

    def __init__(self, *, writer: bool = False) -> None:
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="srbench-db")
        self.writer = writer

    async def __call__(self, fn: Callable[..., T], /, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.pool, lambda: self._run(fn, kwargs))

    def _run(self, fn: Callable[..., T], kwargs: dict[str, Any]) -> T:
        try:
            if self.writer:
                store.writer_session()
            return fn(**kwargs)
        except UNREACHABLE:
            # A broken connection is dropped, so the next write opens a new one (a restarted
            # server answers it) instead of failing on the old socket.
            connection.close_if_unusable_or_obsolete()
            raise

    def close(self) -> None:
        # `connection` is looked up in the pool's thread: `connection.close` written here would
        # bind the caller's connection and fail Django's thread check, leaving this one open.
        self.pool.submit(lambda: connection.close()).result()
        self.pool.shutdown(wait=True)


class LedgerBatcher:
    """Group commit: ledger writes submitted while a transaction is in flight are applied
    together in the next one. Nobody is told "your call is open" before its row committed.

    A write may name writes queued before it (`after`) that must have succeeded for it to
    stand: a cell's finish names its calls' closes, so the driver need not wait for a close
    to commit before it grades and finishes the cell (both usually share one transaction).
    If one of them failed, the finish is written as a failure instead (`FinishCell.failed`).

    A database that cannot be reached (a restart, an outage) holds the batch instead of
    failing it: it is applied again, with everything queued meanwhile, until the database
    answers or SRBENCH_DB_OUTAGE_SECONDS pass. No request leaves meanwhile (its open waits);
    streams in flight go on and their closes wait; the run's events then say what happened.
    """

    def __init__(self, db: DbThread, run_id: int, max_cost: Decimal | None) -> None:
        self.db = db
        self.run_id = run_id
        self.max_cost = max_cost
        self.pending: list[tuple[store.LedgerOp, asyncio.Future[Any], tuple[Any, ...]]] = []
        self.wakeup = asyncio.Event()
        self.busy = False
        self.task = asyncio.create_task(self._loop())

    def enqueue(self, op: store.LedgerOp, after: tuple[asyncio.Future[Any], ...] = ()) -> Any:
        """Queue a write; its future holds the result once its transaction committed."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.pending.append((op, future, after))
        self.wakeup.set()
        return future

    async def submit(self, op: store.LedgerOp, after: tuple[asyncio.Future[Any], ...] = ()) -> Any:
        # Shielded: a cancelled caller (case timeout) must not lose a write already queued.
        return await asyncio.shield(self.enqueue(op, after))

    async def _apply(self, ops: list[store.LedgerOp]) -> list[Any]:
        return await self.db(
            store.ledger_apply, run_id=self.run_id, max_cost=self.max_cost, ops=ops
        )

    @staticmethod
    def _standing(op: store.LedgerOp, after: tuple[asyncio.Future[Any], ...]) -> store.LedgerOp:
        """The op as it may be written, given the writes it names. Those are queued before
        it, so each one has failed, succeeded, or shares its batch (then written first)."""
        for future in after:
            if future.done() and (future.cancelled() or future.exception() is not None):
                assert isinstance(op, store.FinishCell)
                reason = "cancelled" if future.cancelled() else repr(future.exception())
                return op.failed(f"ledger: a call of this cell was not recorded: {reason}"[:500])
        return op

    async def _loop(self) -> None:
        while True:
            await self.wakeup.wait()
            self.wakeup.clear()
            batch, self.pending = self.pending, []
            if not batch:
                continue
            self.busy = True
            try:
                batch, results = await self._apply_riding_out(batch)
            except Exception:
                # One bad write must not fail its neighbours: apply them one by one, in order,
                # so a write that names an earlier one of the batch sees how it went.
                log.exception("ledger batch failed; retrying its writes one by one")
                for op, future, after in batch:
                    try:
                        future.set_result((await self._apply([self._standing(op, after)]))[0])
                    except Exception as exc:
                        future.set_exception(exc)
                self.busy = False
                continue
            for (_, future, _), result in zip(batch, results, strict=True):
                future.set_result(result)
            self.busy = False

    async def _apply_riding_out(self, batch: list[Any]) -> tuple[list[Any], list[Any]]:
        """Apply the batch; while the database is unreachable, wait and apply it again with
        the writes queued meanwhile. Returns the batch applied and its results."""
        outage_since: float | None = None
        delay = 0.25
        while True:
            try:
                results = await self._apply([self._standing(op, after) for op, _, after in batch])
            except UNREACHABLE as exc:
                now = time.monotonic()
                if outage_since is None:
                    outage_since = now
                    log.warning(
                        "run %s: the database is unreachable (%s); holding the ledger's writes",
                        self.run_id,
                        f"{type(exc).__name__}: {exc}"[:300],
                    )
                if now - outage_since > float(settings.SRBENCH_DB_OUTAGE_SECONDS):
                    raise
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
                batch, self.pending = batch + self.pending, []
                continue
            if outage_since is not None:
                await self._outage_noted(time.monotonic() - outage_since, len(batch))
            return batch, results

    async def _outage_noted(self, seconds: float, writes: int) -> None:
        log.warning("run %s: the database answers again after %.1fs", self.run_id, seconds)
        event = ("run.database_outage", {"seconds": round(seconds, 1), "writes_held": writes})
        try:
            await self.db(store.run_note, run_id=self.run_id, event=event)
        except Exception:  # a note about the outage must never fail the writes it held
            log.exception("run %s: noting the database outage failed", self.run_id)

    async def close(self) -> None:
        while self.pending or self.wakeup.is_set() or self.busy:
            await asyncio.sleep(0.01)
        self.task.cancel()
