"""Fencing (issue 34): a worker that lost its claim on a cell cannot send, reopen or record.

Two layers, tested apart: the database's triggers refuse every forbidden write whatever code
path makes it (raw SQL here, srbench/dbguards.py `fencing_sql`), and the engine's writes
(runs/engine/store.py) check the claim in the same transaction and change nothing when it is
gone. The stall trials (tests/chaos/test_stall_trials.py) prove the whole path with real
workers frozen past their leases.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.db import IntegrityError, connection, connections, transaction
from django.utils import timezone

from runs.engine import store
from runs.engine.reaper import ledger_reap
from runs.models import Call, CallEvidence, Cell, Run, RunEvent
from tests import factories as f

H = "e" * 64


def refused(sql: str, params: list[Any], *, first: tuple[str, list[Any]] | None = None) -> str:
    """The write is refused; `first` runs before it in the same (rolled back) transaction."""
    with pytest.raises(IntegrityError) as error, transaction.atomic(), connection.cursor() as c:
        if first is not None:
            c.execute(*first)
        c.execute(sql, params)
    return str(error.value)


def execute(sql: str, params: list[Any]) -> None:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def insert_call_sql(cell: Cell, *, status: str, token: int | None, sequence: int = 0):
    """A raw INSERT of a whole call row, every column written by hand."""
    call = Call(
        cell=cell,
        role="subject",
        sequence=sequence,
        target=cell.target,
        request={"messages": []},
        sent_at=timezone.now(),
        status=status,
        claim_token=token,
    )
    fields = [fld for fld in Call._meta.concrete_fields if not fld.primary_key]
    columns = ", ".join(fld.column for fld in fields)
    values = [fld.get_db_prep_save(getattr(call, fld.attname), connection) for fld in fields]
    marks = ", ".join(["%s"] * len(fields))
    return f"INSERT INTO runs_call ({columns}) VALUES ({marks})", values


def held_cell(run: Run | None = None, token: int = 3) -> Cell:
    run = run or f.run_create(status="running", started_at=timezone.now())
    return f.cell_create(
        run=run,
        status="running",
        claim_token=token,
        claimed_by="host:1:w",
        started_at=timezone.now(),
        lease_expires_at=timezone.now() + timedelta(seconds=30),
    )


# --- the database refuses, whoever writes -------------------------------------------------------


@pytest.mark.django_db
def test_raw_sql_opens_a_call_only_under_the_cells_current_claim_in_a_running_run():
    cell = held_cell(token=3)
    assert "not claim 2" in refused(*insert_call_sql(cell, status="sent", token=2))
    assert "not claim <NULL>" in refused(*insert_call_sql(cell, status="sent", token=None))
    assert "lost its claim" in refused(*insert_call_sql(cell, status="streaming", token=4))
    pending = f.cell_create(run=cell.run)
    assert "is pending" in refused(*insert_call_sql(pending, status="sent", token=0))
    settled = f.cell_create(run=cell.run, status="sent_unknown", claim_token=1)
    assert "is sent_unknown" in refused(*insert_call_sql(settled, status="sent", token=1))
    # The same row under the current claim is accepted (the control).
    execute(*insert_call_sql(cell, status="sent", token=3))
    assert Call.objects.filter(cell=cell, status="sent", claim_token=3).count() == 1


@pytest.mark.django_db
@pytest.mark.parametrize("terminal", ["completed", "failed", "cancelled", "interrupted"])
def test_raw_sql_opens_no_call_in_a_run_that_has_ended(terminal):
    cell = held_cell(token=1)
    # (The run's own guard checks at commit; this transaction is rolled back before it.)
    end = ("UPDATE runs_run SET status = %s WHERE id = %s", [terminal, cell.run_id])
    assert "run has ended" in refused(*insert_call_sql(cell, status="sent", token=1), first=end)


@pytest.mark.django_db
def test_raw_sql_never_reopens_a_settled_call_nor_changes_a_sent_unknown_one():
    cell = held_cell(token=1)
    unknown = f.call_create(cell=cell, status="sent")
    Call.objects.filter(pk=unknown.pk).update(status="sent_unknown")
    for status in ("sent", "streaming", "completed", "failed"):
        refused("UPDATE runs_call SET status = %s WHERE id = %s", [status, unknown.pk])
    streaming = f.call_create(cell=cell, sequence=1, status="streaming")
    assert "back to sent" in refused(
        "UPDATE runs_call SET status = 'sent' WHERE id = %s", [streaming.pk]
    )
    done = f.call_create(cell=cell, sequence=2, status="completed")
    refused("UPDATE runs_call SET status = 'sent' WHERE id = %s", [done.pk])
    # sent -> streaming while the claim holds is a stream checkpoint (the control) ...
    sent = f.call_create(cell=cell, role="judge", status="sent")
    execute("UPDATE runs_call SET status = 'streaming' WHERE id = %s", [sent.pk])
    # ... and is refused once the cell was settled elsewhere.
    other = held_cell(cell.run, token=5)
    late = f.call_create(cell=other, status="sent")
    Cell.objects.filter(pk=other.pk).update(status="sent_unknown")
    assert "lost its claim" in refused(
        "UPDATE runs_call SET status = 'streaming' WHERE id = %s", [late.pk]
    )


@pytest.mark.django_db
def test_raw_sql_sets_no_cell_of_an_ended_run_running_again():
    run = f.run_create(status="running", started_at=timezone.now())
    cell = f.cell_create(run=run, status="sent_unknown")
    execute("UPDATE runs_cell SET status = 'pending' WHERE id = %s", [cell.pk])
    execute("UPDATE runs_cell SET status = 'running' WHERE id = %s", [cell.pk])  # control
    execute("UPDATE runs_cell SET status = 'failed' WHERE id = %s", [cell.pk])
    for terminal in ("completed", "failed", "cancelled", "interrupted"):
        Run.objects.filter(pk=run.pk).update(status=terminal)
        assert "run has ended" in refused(
            "UPDATE runs_cell SET status = 'running', claim_token = claim_token + 1 WHERE id = %s",
            [cell.pk],
        )
        other = f.cell_create(run=run, status="failed")
        sql = (
            "INSERT INTO runs_cell (run_id, question_id, target_id, slot, benchmark, status, "
            "claim_token, claimed_by, scored, final_answer, error, updated_at) "
            "SELECT run_id, question_id, target_id, slot + 1, benchmark, 'running', 0, '', "
            "false, '', '', now() FROM runs_cell WHERE id = %s"
        )
        assert "run has ended" in refused(sql, [other.pk])


@pytest.mark.django_db
def test_raw_sql_writes_no_evidence_for_a_call_settled_as_sent_unknown():
    cell = held_cell(token=1)
    unknown = f.call_create(cell=cell, status="sent")
    Call.objects.filter(pk=unknown.pk).update(status="sent_unknown")
    sql = (
        "INSERT INTO runs_callevidence (call_id, body, codec, raw_size, sha256, created_at) "
        "VALUES (%s, %s, 'identity', 1, %s, now())"
    )
    assert "settled (sent_unknown)" in refused(sql, [unknown.pk, b"x", H])
    done = f.call_create(cell=cell, sequence=1, status="completed")
    execute(sql, [done.pk, b"x", H])  # the control: a closed call's evidence
    assert CallEvidence.objects.filter(call=done).exists()


# --- the engine's writes check the claim ----------------------------------------------------------


def open_op(cell: Cell, token: int, sequence: int = 0, reservation: Decimal | None = None):
    return store.OpenCall(cell.pk, token, "subject", sequence, cell.target_id, {}, reservation, "w")


def close_op(call_id: int) -> store.CloseCall:
    fields = {"status": "completed", "stage": "done", "content": "late answer"}
    return store.CloseCall(call_id, fields, b"data: [DONE]\n\n", Decimal("0.5"), None)


@pytest.mark.django_db
def test_an_open_under_a_lost_claim_writes_nothing_and_reserves_nothing():
    run = f.run_create(status="running", started_at=timezone.now())
    cell = held_cell(run, token=2)
    events = RunEvent.objects.filter(run=run).count()
    results = store.ledger_apply(
        run_id=run.pk,
        max_cost=Decimal("10"),
        ops=[open_op(cell, 1, reservation=Decimal("0.5"))],
    )
    assert results == [store.FENCED]
    assert not Call.objects.filter(cell=cell).exists()
    assert RunEvent.objects.filter(run=run).count() == events
    assert Run.objects.get(pk=run.pk).budget_committed_usd == 0
    # The holder's open in the same batch goes through, with its token on the row.
    results = store.ledger_apply(
        run_id=run.pk,
        max_cost=Decimal("10"),
        ops=[open_op(cell, 1), open_op(cell, 2, 1, Decimal("0.5"))],
    )
    assert results[0] == store.FENCED and isinstance(results[1], int)
    assert Call.objects.get(pk=results[1]).claim_token == 2
    assert Run.objects.get(pk=run.pk).budget_committed_usd == Decimal("0.5")


@pytest.mark.django_db
@pytest.mark.parametrize("why", ["settled", "cancelled_run", "stopped_elsewhere"])
def test_an_open_is_fenced_when_the_cell_or_the_run_is_no_longer_running(why):
    run = f.run_create(status="running", started_at=timezone.now())
    cell = held_cell(run, token=1)
    if why == "settled":
        Cell.objects.filter(pk=cell.pk).update(status="sent_unknown")
    elif why == "cancelled_run":
        Cell.objects.filter(pk=cell.pk).update(status="cancelled")
        Run.objects.filter(pk=run.pk).update(status="cancelled")
    else:
        Cell.objects.filter(pk=cell.pk).update(status="pending", claimed_by="")
    assert store.ledger_apply(run_id=run.pk, max_cost=None, ops=[open_op(cell, 1)]) == [
        store.FENCED
    ]
    assert not Call.objects.filter(cell=cell).exists()


@pytest.mark.django_db
def test_a_close_of_a_call_the_recovery_pass_settled_records_nothing():
    run = f.run_create(status="running", started_at=timezone.now())
    cell = held_cell(run, token=1)
    (call_id,) = store.ledger_apply(
        run_id=run.pk, max_cost=Decimal("5"), ops=[open_op(cell, 1, reservation=Decimal("0.5"))]
    )
    assert isinstance(call_id, int)
    Cell.objects.filter(pk=cell.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    ledger_reap(sandbox=False)
    assert Call.objects.get(pk=call_id).status == "sent_unknown"
    before = Run.objects.get(pk=run.pk).budget_committed_usd
    assert store.ledger_apply(run_id=run.pk, max_cost=Decimal("5"), ops=[close_op(call_id)]) == [
        False
    ]
    call = Call.objects.get(pk=call_id)
    assert (call.status, call.content) == ("sent_unknown", "")
    assert not CallEvidence.objects.filter(call_id=call_id).exists()
    assert Run.objects.get(pk=run.pk).budget_committed_usd == before
    assert not RunEvent.objects.filter(run=run, type="call.failed").exists()


@pytest.mark.django_db
def test_a_renewal_renews_only_the_cells_still_held_under_their_tokens():
    run = f.run_create(status="running", started_at=timezone.now())
    kept, taken, settled = held_cell(run, 1), held_cell(run, 4), held_cell(run, 1)
    Cell.objects.filter(pk=settled.pk).update(status="sent_unknown", lease_expires_at=None)
    old = Cell.objects.get(pk=taken.pk).lease_expires_at
    renewed = store.leases_renew(
        run_id=run.pk,
        held=[(kept.pk, 1), (taken.pk, 3), (settled.pk, 1)],
        lease_seconds=300,
    )
    assert renewed == {kept.pk}
    assert Cell.objects.get(pk=kept.pk).lease_expires_at > timezone.now() + timedelta(seconds=200)
    assert Cell.objects.get(pk=taken.pk).lease_expires_at == old


@pytest.mark.django_db
def test_a_stale_worker_cannot_stop_a_run_that_has_ended():
    run = f.run_create(status="completed", finished_at=timezone.now())
    assert store.run_stop(run_id=run.pk, reason="first transport failure") is False
    assert Run.objects.get(pk=run.pk).stop_reason == ""


# --- one lock order: the run row before its cells -----------------------------------------------


def waiting_on_a_lock(query_part: str) -> bool:
    with connections["default"].cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND query LIKE %s AND pid <> pg_backend_pid()",
            [f"%{query_part}%"],
        )
        return cursor.fetchone()[0] > 0


@pytest.mark.django_db(transaction=True)
def test_the_recovery_pass_takes_the_run_row_before_its_cells():
    """The deadlock of issue 34: a driver's batch held the run row (budget) and waited for a
    cell the recovery pass had locked, while the pass waited for the run row. Now the pass
    waits for the run row first and holds no cell meanwhile: the batch's cell lock is free."""
    run = f.run_create(status="running", started_at=timezone.now())
    cell = held_cell(run, token=1)
    Cell.objects.filter(pk=cell.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    batch = connections.create_connection("default")
    outcome: dict[str, Any] = {}

    def reap() -> None:
        try:
            outcome["stats"] = ledger_reap(sandbox=False)
        finally:
            connections.close_all()

    try:
        batch.set_autocommit(False)
        with batch.cursor() as cursor:
            cursor.execute("SELECT id FROM runs_run WHERE id = %s FOR UPDATE", [run.pk])
            thread = threading.Thread(target=reap)
            thread.start()
            deadline = time.monotonic() + 60
            while not waiting_on_a_lock("runs_run"):
                assert time.monotonic() < deadline, "the recovery pass never asked for the run"
                time.sleep(0.05)
            # The pass waits for the run row and holds none of its cells: the batch gets the
            # cell at once (NOWAIT), as its finish would.
            cursor.execute("SELECT id FROM runs_cell WHERE id = %s FOR UPDATE NOWAIT", [cell.pk])
            assert cursor.fetchone() == (cell.pk,)
        batch.commit()
        thread.join(timeout=60)
        assert not thread.is_alive()
    finally:
        batch.close()
    assert outcome["stats"]["returned_cells"] == 1
    assert Cell.objects.get(pk=cell.pk).status == "pending"
