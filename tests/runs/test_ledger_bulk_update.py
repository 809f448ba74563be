"""The ledger's many-row updates (runs/ledger/bulk_sql.py `bulk_update_sql`, issue 25) send one
array per column through `unnest`: whatever a model or a provider puts in a value (quotes,
backslashes, braces, the word NULL, line separators, nested JSON, many-digit money) reads back
exactly as written, a value too long for its column is refused rather than cut, and the
statement's text does not grow with the number of rows (psycopg parses it once)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.db import DataError, connection
from django.utils import timezone

from runs.engine import store
from runs.models import Call, Cell
from tests import factories as f
from tests.runs.test_engine_ledger import close_op

pytestmark = pytest.mark.django_db(transaction=True)

HOSTILE_TEXTS = [
    'it\'s a "quoted" answer with a \\ backslash and \\\\ two, {braces}, commas, and $1 %s',
    "NULL",
    "",
    " leading and trailing spaces ",
    "line\u2028separator\u2029paragraph\r\n\ttab",
    "ünïcødé 中文 🦀 \U0001f600 E'x' $$dollar$$ ) ; DROP TABLE runs_call; --",
]

HOSTILE_JSON = [
    {"a": "q\"'\\", "nested": {"list": [1, 'x"y', None, {"deep": '\\"}'}]}},
    [{"function": {"arguments": '{"q": "a\'b\\\\", "n": null}'}}, "NULL", "", "\u2028"],
    'just a "string" with {} and \\',
    {"NULL": None, "": "", "emoji 🦀": ["{", "}", ","]},
]


def _sent_calls(n: int) -> list[Call]:
    cell = f.cell_create(run=f.run_create(status="running"), status="running")
    now = timezone.now()
    return f.calls_insert(
        list(
            Call(cell=cell, role="subject", sequence=i, target=cell.target, request={}, sent_at=now)
            for i in range(n)
        )
    )


def _running_cells(n: int) -> list[Cell]:
    first = f.cell_create(run=f.run_create(status="running"), status="running", claim_token=1)
    return [first] + Cell.objects.bulk_create(
        Cell(
            run=first.run,
            question=first.question,
            target=first.target,
            benchmark=first.benchmark,
            slot=i,
            status="running",
            claim_token=1,
        )
        for i in range(1, n)
    )


def test_closed_calls_read_back_every_hostile_value_exactly_as_written():
    calls = _sent_calls(len(HOSTILE_TEXTS))
    written = {}
    for i, call in enumerate(calls):
        written[call.pk] = {
            "content": HOSTILE_TEXTS[i],
            "reasoning": HOSTILE_TEXTS[-1 - i],
            "served_model": HOSTILE_TEXTS[i][:200],
            "finish_reason": "",
            "tool_calls": HOSTILE_JSON[i % len(HOSTILE_JSON)] if i % 3 else None,
            "response_headers": HOSTILE_JSON[-1 - i % len(HOSTILE_JSON)],
            "usage_raw": None if i == 1 else {"prompt_tokens": 2**40, "note": HOSTILE_TEXTS[i]},
            "input_tokens": None if i == 1 else 2**53 + i,  # past a float's exact integers
            "output_tokens": None if i == 1 else i,
            "cost_usd": None if i == 1 else Decimal("1234567890.0123456789") - i,
            "cache_neutral_cost_usd": Decimal("0.0000000001") * i if i != 2 else None,
            "duration_ms": 0.1 + 0.2 + i,
            "ttft_ms": None,
            "first_token_at": datetime(2026, 12, 4, 23, 59, 59, 999999, tzinfo=UTC),
            "finished_at": None if i == 3 else timezone.now(),
            "cached_reported": [None, True, False][i % 3],
            "stage": "done",
            "status": "completed",
        }

    store.ledger_apply(
        run_id=calls[0].cell.run_id,
        max_cost=None,
        ops=[store.CloseCall(pk, fields, b"", None, None) for pk, fields in written.items()],
    )

    names = list(written[calls[0].pk])
    read = {row["id"]: row for row in Call.objects.values("id", *names)}
    for pk, fields in written.items():
        assert {n: read[pk][n] for n in names} == fields


def test_finished_cells_read_back_hostile_values_and_keep_their_guards():
    cells = _running_cells(len(HOSTILE_JSON) + 2)
    stale, done_before = cells[-2], cells[-1]
    Cell.objects.filter(pk=done_before.pk).update(status="completed")
    ops = [
        store.FinishCell(
            cell.pk, 1, "completed", [True, False, None][i % 3], grade, HOSTILE_TEXTS[i], ""
        )
        for i, (cell, grade) in enumerate(zip(cells, HOSTILE_JSON, strict=False))
    ]
    ops[1] = ops[1].failed(HOSTILE_TEXTS[0])  # its status the enum member CellStatus.FAILED
    ops += [
        store.FinishCell(stale.pk, 2, "completed", True, {"x": 1}, "stale", ""),  # wrong token
        store.FinishCell(done_before.pk, 1, "failed", None, None, "", "late"),  # not running
    ]

    results = store.ledger_apply(run_id=cells[0].run_id, max_cost=None, ops=ops)

    assert results == [True] * len(HOSTILE_JSON) + [False, False]
    for op in ops[: len(HOSTILE_JSON)]:
        cell = Cell.objects.get(pk=op.cell_id)
        assert (cell.status, cell.correct, cell.scored, cell.grade, cell.final_answer) == (
            str(op.status),
            op.correct,
            op.correct is not None,
            op.grade,
            op.final_answer,
        )
        assert cell.error == op.error
        assert cell.finished_at is not None and cell.lease_expires_at is None
    assert Cell.objects.get(pk=ops[1].cell_id).status == "failed"
    assert Cell.objects.get(pk=stale.pk).status == "running"
    assert Cell.objects.get(pk=done_before.pk).error == ""


def test_a_value_too_long_for_its_column_is_refused_not_truncated():
    fits, too_long = _sent_calls(2)

    store.ledger_apply(
        run_id=fits.cell.run_id, max_cost=None, ops=[close_op(fits, error_code="é" * 64)]
    )
    with pytest.raises(DataError, match="too long"):
        store.ledger_apply(
            run_id=fits.cell.run_id,
            max_cost=None,
            ops=[close_op(too_long, error_code="é" * 65)],
        )

    assert Call.objects.get(pk=fits.pk).error_code == "é" * 64
    assert Call.objects.get(pk=too_long.pk).status == "sent"  # nothing of its close stands


def test_a_name_from_outside_longer_than_its_column_is_kept_cut():
    """runs/models/fields.py StoredCharField: a served model, finish reason or router name
    a server sends is cut to its column, never a failed close (the evidence keeps it whole)."""
    (call,) = _sent_calls(1)
    store.ledger_apply(
        run_id=call.cell.run_id,
        max_cost=None,
        ops=[close_op(call, served_model="é" * 201 + "x", finish_reason="stop" * 20)],
    )
    kept = Call.objects.get(pk=call.pk)
    assert (kept.served_model, kept.finish_reason) == ("é" * 200, ("stop" * 20)[:32])
    assert kept.status != "sent"


@contextmanager
def _bulk_updates() -> Iterator[list[str]]:
    """The SQL text of each many-row UPDATE of calls or cells executed inside the block."""
    seen: list[str] = []

    def record(execute, sql, params, many, context):
        if sql.startswith(('UPDATE "runs_call" AS t', 'UPDATE "runs_cell" AS t')):
            seen.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        yield seen


def _write_rows(what: str, n: int) -> list[str]:
    """Close, finish or checkpoint n rows in one batch; the bulk UPDATEs it executed."""
    if what == "finish":
        cells = _running_cells(n)
        run_id = cells[0].run_id
        ops: list[store.LedgerOp] = [
            store.FinishCell(c.pk, 1, "completed", True, {"n": c.pk}, "A", "") for c in cells
        ]
        with _bulk_updates() as seen:
            store.ledger_apply(run_id=run_id, max_cost=None, ops=ops)
        assert Cell.objects.filter(run_id=run_id, status="completed").count() == n
        return seen
    calls = _sent_calls(n)
    run_id = calls[0].cell.run_id
    if what == "close":
        ops = [close_op(c, content=f"answer {c.pk}") for c in calls]
        with _bulk_updates() as seen:
            store.ledger_apply(run_id=run_id, max_cost=None, ops=ops)
        assert Call.objects.filter(cell__run=run_id, status="completed").count() == n
        return seen
    now = timezone.now()
    with _bulk_updates() as seen:
        store.calls_checkpoint(
            run_id=run_id, activity=[(c.pk, "streaming", now, i) for i, c in enumerate(calls)]
        )
    assert Call.objects.filter(cell__run=run_id, status="streaming").count() == n
    assert Call.objects.get(pk=calls[-1].pk).bytes_received == n - 1
    return seen


@pytest.mark.parametrize("what", ["close", "finish", "checkpoint"])
def test_the_statement_text_is_the_same_for_3_rows_and_700(what):
    few, many = _write_rows(what, 3), _write_rows(what, 700)

    assert len(few) == len(many) == 1
    assert few == many


# --- many-row inserts (bulk_insert_sql, issue 38 item 2) --------------------------------------

# Columns a row's identity or time makes differ between two inserts of the same values.
_OWN = {"id", "sequence", "call", "seq", "created_at"}


def _row(obj: object, model: type) -> dict[str, object]:
    return {
        fl.attname: getattr(obj, fl.attname)
        for fl in model._meta.concrete_fields
        if fl.name not in _OWN and fl.attname not in _OWN
    }


def test_inserted_calls_are_the_rows_bulk_create_writes_with_hostile_values_read_back_exactly():
    """An opened call written by `bulk_insert_sql` is the row the ORM's `bulk_create` wrote
    (every column not named gets the model's default: blank strings, {}, 0, null), and hostile
    request JSON and worker text read back as written."""
    from runs.ledger.bulk_sql import bulk_insert_sql

    cell = f.cell_create(run=f.run_create(status="running"), status="running", claim_token=7)
    now = timezone.now()
    orm = Call.objects.bulk_create(
        [
            Call(
                cell=cell,
                role="subject",
                sequence=0,
                target=cell.target,
                request={},
                worker="w",
                claim_token=7,
                status="sent",
                stage="waiting",
                sent_at=now,
                reserved_cost_usd=Decimal("0.5"),
            )
        ]
    )[0]
    fields = ("cell", "role", "sequence", "target", "request", "worker", "claim_token")
    fields += ("status", "stage", "sent_at", "reserved_cost_usd")
    rows = [
        (
            cell.pk,
            "subject",
            i,
            cell.target_id,
            HOSTILE_JSON[i % len(HOSTILE_JSON)],
            HOSTILE_TEXTS[i][:255],
            7,
            "sent",
            "waiting",
            now,
            Decimal("1234567890.0123456789") - i,
        )
        for i in range(1, len(HOSTILE_TEXTS))
    ]
    back = bulk_insert_sql(Call, fields=fields, rows=rows, returning=("id", "sequence"))
    assert sorted(s for _, s in back) == [r[2] for r in rows]
    by_sequence = {s: pk for pk, s in back}
    expected = _row(Call.objects.get(pk=orm.pk), Call)
    for r in rows:
        got = Call.objects.get(pk=by_sequence[r[2]])
        assert (got.request, got.worker, got.reserved_cost_usd) == (r[4], r[5], r[10])
        assert (
            _row(got, Call) | {"request": {}, "worker": "w", "reserved_cost_usd": Decimal("0.5")}
            == expected
        )


def test_inserted_events_and_evidence_are_the_rows_bulk_create_writes():
    from runs.ledger.bulk_sql import bulk_insert_sql
    from runs.models import CallEvidence, RunEvent

    calls = _sent_calls(2)
    run_id = calls[0].cell.run_id
    before = timezone.now()
    RunEvent.objects.bulk_create([RunEvent(run_id=run_id, seq=1, type="t", payload={"a": 1})])
    bulk_insert_sql(
        RunEvent,
        fields=("run", "seq", "type", "payload"),
        rows=[(run_id, 2, "t", {"a": 1}), (run_id, 3, HOSTILE_TEXTS[0][:64], HOSTILE_JSON[0])],
    )
    events = list(RunEvent.objects.filter(run_id=run_id).order_by("seq"))
    assert _row(events[0], RunEvent) == _row(events[1], RunEvent)
    assert (events[2].type, events[2].payload) == (HOSTILE_TEXTS[0][:64], HOSTILE_JSON[0])
    assert all(e.created_at >= before for e in events)  # auto_now_add: the time of the write

    CallEvidence.objects.bulk_create(
        [CallEvidence(call=calls[0], body=b"\x00x", raw_size=2, sha256="a" * 64)]
    )
    bulk_insert_sql(
        CallEvidence,
        fields=("call", "body", "raw_size", "sha256"),
        rows=[(calls[1].pk, b"\x00x", 2, "a" * 64)],
    )
    kept = list(CallEvidence.objects.filter(call__in=calls).order_by("call_id"))
    assert _row(kept[0], CallEvidence) == _row(kept[1], CallEvidence)
    assert bytes(kept[1].body) == b"\x00x" and kept[1].codec == kept[0].codec  # the db default
