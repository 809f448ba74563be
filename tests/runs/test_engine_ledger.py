"""The engine's group-commit writes (runs/engine/store.py) keep their per-row guards when many
rows go in one statement: a close writes only a call still open, a finish needs the holder's
fencing token, the same cell twice in one batch finishes once, a late activity checkpoint
never reopens a closed call, and usage that is unknown stays null."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.utils import timezone

from runs.engine import store
from runs.models import Call, CallEvidence, Cell, RunEvent
from tests import factories as f

pytestmark = pytest.mark.django_db(transaction=True)


def close_op(call: Call, **extra) -> store.CloseCall:
    fields = {
        "http_status": 200,
        "response_headers": {"x-request-id": "r1"},
        "served_model": "m",
        "finish_reason": "stop",
        "content": "answer",
        "reasoning": "",
        "tool_calls": None,
        "usage_raw": {"prompt_tokens": 10, "completion_tokens": 5},
        "stage": "done",
        "bytes_received": 123,
        "finished_at": timezone.now(),
        "duration_ms": 12.5,
        "ttft_ms": None,
        "first_token_at": None,
        "last_activity_at": timezone.now(),
        "input_tokens": 10,
        "cached_input_tokens": 0,
        "cache_write_tokens": 0,
        "output_tokens": 5,
        "cached_reported": False,
        "cache_write_reported": False,
        "cost_usd": Decimal("0.0000123456789"),
        "cache_neutral_cost_usd": Decimal("0.0000123456789"),
        "cost_note": "priced as m",
        "status": "completed",
        "error_code": "",
        "error": "",
    }
    fields.update(extra)
    return store.CloseCall(call.pk, fields, b"data: [DONE]\n\n", None, None)


def _running_cell(run, token: int = 1) -> Cell:
    return f.cell_create(run=run, status="running", claim_token=token, started_at=timezone.now())


def test_closes_and_finishes_of_one_batch_keep_their_row_guards():
    run = f.run_create(status="running")
    cells = [_running_cell(run) for _ in range(4)]
    open_calls = [f.call_create(cell=c, status="sent") for c in cells[:2]]
    done_call = f.call_create(cell=cells[2], status="completed", content="first")
    unknown_usage = f.call_create(cell=cells[3], status="streaming")
    failed_fields = {
        k: None
        for k in (
            "input_tokens",
            "cached_input_tokens",
            "cache_write_tokens",
            "output_tokens",
            "cached_reported",
            "cache_write_reported",
            "cost_usd",
            "cache_neutral_cost_usd",
        )
    }
    ops = [
        close_op(open_calls[0]),
        close_op(open_calls[1], content="two", tool_calls=[{"name": "t", "arguments": "{}"}]),
        close_op(done_call, content="overwritten?"),
        store.CloseCall(
            unknown_usage.pk,
            {
                "status": "failed",
                "error_code": "idle_timeout",
                "error": "x",
                "stage": "done",
                "cost_note": "stream incomplete: usage unverified",
            },
            b"data: {}\n\n",
            None,
            {"error_code": "idle_timeout", "error": "x"},
        ),
        store.FinishCell(cells[0].pk, 1, "completed", True, {"g": 1}, "A", ""),
        store.FinishCell(cells[0].pk, 1, "failed", None, None, "", "again"),  # same cell twice
        store.FinishCell(cells[1].pk, 7, "completed", True, None, "A", ""),  # stale token
        store.FinishCell(cells[2].pk, 1, "failed", None, None, "", "boom"),
    ]
    results = store.ledger_apply(run_id=run.pk, max_cost=None, ops=ops)
    # A close of a call that is no longer open records nothing, not even evidence (issue 34).
    assert results == [True, True, False, True, True, False, False, True]

    first, second = (Call.objects.get(pk=c.pk) for c in open_calls)
    assert first.status == "completed" and first.content == "answer"
    assert first.cost_usd == Decimal("0.0000123456789")  # every digit (issue 35 item 5)
    assert first.response_headers == {"x-request-id": "r1"}
    assert second.content == "two" and second.tool_calls == [{"name": "t", "arguments": "{}"}]
    assert Call.objects.get(pk=done_call.pk).content == "first"
    unknown = Call.objects.get(pk=unknown_usage.pk)
    assert unknown.status == "failed" and unknown.error_code == "idle_timeout"
    assert all(getattr(unknown, k) is None for k in failed_fields)
    assert CallEvidence.objects.filter(call__cell__run=run).count() == 3
    assert not CallEvidence.objects.filter(call=done_call).exists()

    finished = {c.pk: c for c in Cell.objects.filter(run=run)}
    assert finished[cells[0].pk].status == "completed" and finished[cells[0].pk].grade == {"g": 1}
    assert finished[cells[0].pk].lease_expires_at is None and finished[cells[0].pk].scored
    assert finished[cells[1].pk].status == "running"
    assert finished[cells[2].pk].status == "failed" and finished[cells[2].pk].error == "boom"
    kinds = list(RunEvent.objects.filter(run=run).order_by("seq").values_list("type", "seq"))
    assert [k for k, _ in kinds] == ["call.failed", "cell.completed", "cell.failed"]
    assert [s for _, s in kinds] == [1, 2, 3]


def test_a_checkpoint_after_the_close_leaves_the_closed_call_alone():
    run = f.run_create(status="running")
    cell = _running_cell(run)
    streaming = f.call_create(cell=cell, status="sent")
    closed = f.call_create(cell=cell, sequence=1, status="completed", stage="done")
    now = timezone.now()
    store.calls_checkpoint(
        run_id=run.pk,
        activity=[(streaming.pk, "streaming", now, 77), (closed.pk, "streaming", now, 99)],
    )
    streaming.refresh_from_db()
    closed.refresh_from_db()
    assert (streaming.status, streaming.stage, streaming.bytes_received) == (
        "streaming",
        "streaming",
        77,
    )
    assert (closed.status, closed.stage, closed.bytes_received) == ("completed", "done", 0)


def test_a_too_long_value_is_refused_not_truncated():
    run = f.run_create(status="running")
    call = f.call_create(cell=_running_cell(run), status="sent")
    with pytest.raises(Exception, match="too long"):
        store.ledger_apply(run_id=run.pk, max_cost=None, ops=[close_op(call, error_code="x" * 65)])
    call.refresh_from_db()
    assert call.status == "sent"
