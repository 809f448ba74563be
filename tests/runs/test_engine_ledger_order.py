"""A cell's end in the ledger's group commit (runs/engine/group_commit.py `LedgerBatcher`, store.py
`ledger_apply`, issue 25): the driver no longer waits for a call's close to commit before it
grades and finishes the cell, and it claims the next cells in the finish's transaction.
What must still hold:

- a finish never stands over a call whose record failed: the cell is failed, not graded, whether
  the close failed in an earlier batch or in the same one (then retried one write at a time);
- a claim applied in the batch of a finish counts the finished cell's slot as free, and never
  claims past the run's concurrency;
- the driver's slots count a cell whose finish is queued as free, and only cells they hold.
"""

from __future__ import annotations

import asyncio
import itertools

import pytest
from django.utils import timezone

from runs.engine import store
from runs.engine.driver import Slots
from runs.engine.group_commit import DbThread, LedgerBatcher
from runs.models import Call, Cell
from tests import factories as f
from tests.conftest import wait_until
from tests.runs import engine_support as es
from tests.runs.async_support import run_on_own_loop
from tests.runs.test_engine_ledger import close_op

pytestmark = pytest.mark.django_db(transaction=True)

LEASE_S = 60.0


def _running_cell(run, token: int = 1) -> Cell:
    return f.cell_create(run=run, status="running", claim_token=token, started_at=timezone.now())


def _finish(cell: Cell, token: int = 1) -> store.FinishCell:
    return store.FinishCell(cell.pk, token, "completed", True, {"grader": "t"}, "A", "")


async def _batched(run_id: int, steps) -> list:
    """`steps(ledger)` on a real batcher and database thread; its futures' outcomes."""
    db = DbThread()
    ledger = LedgerBatcher(db, run_id, None)
    try:
        futures = await steps(ledger)
        await ledger.close()
        return [f.exception() or f.result() for f in futures]
    finally:
        db.close()


def test_a_finish_queued_behind_a_close_that_fails_in_its_batch_fails_the_cell():
    run = f.run_create(status="running")
    bad_cell, good_cell = _running_cell(run), _running_cell(run)
    bad_call = f.call_create(cell=bad_cell, status="sent")
    good_call = f.call_create(cell=good_cell, status="sent")

    async def steps(ledger: LedgerBatcher) -> list:
        # All four land in one batch: it fails (a value too long), then each write is retried.
        bad_close = ledger.enqueue(close_op(bad_call, error_code="x" * 65))
        good_close = ledger.enqueue(close_op(good_call))
        return [
            bad_close,
            good_close,
            ledger.enqueue(_finish(bad_cell), after=(bad_close,)),
            ledger.enqueue(_finish(good_cell), after=(good_close,)),
        ]

    outcomes = run_on_own_loop(_batched(run.pk, steps), timeout=60)
    assert isinstance(outcomes[0], Exception) and "too long" in str(outcomes[0])
    assert outcomes[1:] == [True, True, True]  # a close answers whether it was recorded
    bad_cell.refresh_from_db()
    good_cell.refresh_from_db()
    assert (bad_cell.status, bad_cell.correct, bad_cell.grade) == ("failed", None, None)
    assert bad_cell.error.startswith("ledger: a call of this cell was not recorded")
    assert "too long" in bad_cell.error
    assert (good_cell.status, good_cell.correct) == ("completed", True)
    assert Call.objects.get(pk=bad_call.pk).status == "sent"
    assert Call.objects.get(pk=good_call.pk).status == "completed"


def test_a_finish_queued_after_a_close_failed_in_an_earlier_batch_fails_the_cell():
    run = f.run_create(status="running")
    cell = _running_cell(run)
    call = f.call_create(cell=cell, status="sent")

    async def steps(ledger: LedgerBatcher) -> list:
        close = ledger.enqueue(close_op(call, error_code="x" * 65))
        with pytest.raises(Exception, match="too long"):
            await asyncio.shield(close)
        return [close, ledger.enqueue(_finish(cell), after=(close,))]

    outcomes = run_on_own_loop(_batched(run.pk, steps), timeout=60)
    assert outcomes[1] is True
    cell.refresh_from_db()
    assert (cell.status, cell.correct) == ("failed", None)
    assert "too long" in cell.error


def test_a_claim_in_the_batch_of_finishes_takes_the_slots_they_free_and_no_more():
    run = f.run_create(status="running")
    held = [_running_cell(run) for _ in range(2)]
    for cell in held:
        f.call_create(cell=cell, status="completed")
    pending = [f.cell_create(run=run, status="pending") for _ in range(5)]

    async def steps(ledger: LedgerBatcher) -> list:
        # Concurrency 2, both slots held: the claim asks for 3, the batch's finishes free 2.
        finishes = [ledger.enqueue(_finish(cell)) for cell in held]
        claim = ledger.enqueue(store.ClaimCells("w1", 3, 2, LEASE_S))
        return [*finishes, claim]

    *finished, claimed = run_on_own_loop(_batched(run.pk, steps), timeout=60)
    assert finished == [True, True]
    cells, pending_left = claimed
    assert [c.cell_id for c in cells] == [pending[0].pk, pending[1].pk]
    assert pending_left is None  # counted only when nothing was claimed
    assert all(c.token == 1 and c.payload is not None for c in cells)
    assert Cell.objects.filter(run=run).running().count() == 2
    assert set(Cell.objects.filter(run=run, claimed_by="w1").values_list("pk", flat=True)) == {
        pending[0].pk,
        pending[1].pk,
    }


def test_a_claim_alone_while_every_slot_is_held_claims_nothing_and_says_what_is_left():
    run = f.run_create(status="running")
    _running_cell(run)
    f.cell_create(run=run, status="pending")

    async def steps(ledger: LedgerBatcher) -> list:
        return [ledger.enqueue(store.ClaimCells("w1", 1, 1, LEASE_S))]

    [(cells, pending_left)] = run_on_own_loop(_batched(run.pk, steps), timeout=60)
    assert (cells, pending_left) == ([], 1)


def test_slots_count_a_cell_whose_finish_is_queued_as_free():
    async def main() -> list[int]:
        slots = Slots()
        finishing = asyncio.Event()
        release = asyncio.Event()

        async def cell() -> None:
            slots.ending(asyncio.current_task())
            finishing.set()
            await release.wait()

        async def stranger() -> None:
            slots.ending(asyncio.current_task())  # not a task of these slots: ignored

        slots.start(cell())
        slots.start(asyncio.sleep(30))
        seen = [slots.busy()]
        await finishing.wait()
        seen.append(slots.busy())
        await asyncio.create_task(stranger())
        seen.append(slots.busy())
        release.set()
        while len(slots) == 2:
            await asyncio.sleep(0)
        seen += [len(slots), slots.busy(), len(slots.ended)]
        for task in list(slots.tasks):
            task.cancel()
        return seen

    assert run_on_own_loop(main(), timeout=30) == [2, 1, 1, 1, 1, 0]


@pytest.mark.worker
def test_at_concurrency_one_each_cell_is_claimed_in_the_transaction_that_finished_the_last(
    celery_worker,
):
    """The user's path: a real worker drives a run one cell at a time. Each next cell starts
    at the very time the one before finished — the claim shared the finish's transaction (its
    time) instead of following it — and every call is closed before its cell finished."""
    benchmarks = ["mmlu-pro", "arc"]
    with es.worker_run("one at a time", ["sim-strong"], benchmarks, slots=1, concurrency=1) as run:
        wait_until(lambda: es.terminal(run), timeout=120)
    assert run.status == "completed", (run.stop_reason, celery_worker.log()[-3000:])
    cells = list(Cell.objects.filter(run=run).order_by("started_at", "id"))
    assert len(cells) >= 4
    assert [c.status for c in cells] == ["completed"] * len(cells)
    for before, after in itertools.pairwise(cells):
        assert after.started_at == before.finished_at, (before.pk, after.pk)
    assert not Call.objects.filter(cell__run=run).exclude(status="completed").exists()
