"""A call for which no connection could be made cost nothing, known (an outside probe against
a real llama.cpp server killed mid-run, 2026-12-06): nine such calls were 'waste unknown', and
their cells could be recovered in no mode (`ambiguous_saved_result_requires_reconciliation`),
though not a byte of them left. Now such a call is closed with zero usage and cost 0
(`runs.ledger.accounting.NOT_SENT_USAGE`), reconcile-usage verifies it so, and its cell is a
failed cell like any other: recoverable as a new attempt."""

from __future__ import annotations

import socket
from decimal import Decimal

import pytest

from runs.ledger.accounting import NOT_SENT_NOTE
from runs.models import Call
from runs.planning.services import run_create
from runs.reporting.reconcile import usage_reconcile
from runs.reporting.report import run_report
from runs.settlement.recovery import recovery_plan
from tests import factories as f
from tests.conftest import wait_until
from tests.runs import engine_support as es

pytestmark = pytest.mark.worker


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_refused_connection_is_a_known_zero_and_its_cell_recoverable(celery_worker):
    target = f.target_create(slug="nowhere", base_url=f"http://127.0.0.1:{closed_port()}/v1")
    run, _ = run_create(
        owner=f.user_create(),
        plan={
            "name": "refused",
            "dataset": es.fixture_dataset(["mmlu-pro"]).pk,
            "targets": [target.slug],
            "failure_policy": "continue",
            "limits": {"concurrency": 2},
        },
    )
    wait_until(lambda: es.terminal(run), timeout=120)
    calls = list(Call.objects.filter(cell__run=run))
    assert calls and all(c.error_code == "connect_error" for c in calls)
    for call in calls:
        assert (call.input_tokens, call.output_tokens, call.cost_usd) == (0, 0, Decimal(0))
        assert call.cost_note == NOT_SENT_NOTE
    report = run_report(run=run)
    assert Decimal(report["targets"][0]["known_cost_usd"]) == 0
    # The run ended and every call's cost is known: its spend and its waste are known zeros.
    assert Decimal(report["spend"]["total_spend_usd"]) == 0, report["spend"]
    assert Decimal(report["spend"]["waste_usd"]) == 0
    assert report["spend"]["waste_calls_cost_unknown"] == 0

    plan = recovery_plan(run=run, mode="failed")
    assert plan["excluded"] == [], plan["excluded"]
    assert len(plan["eligible_cells"]) == len(calls)

    correction = usage_reconcile(run_id=run.pk).correction
    assert (correction.verified_count, correction.changed_count) == (len(calls), 0)
    assert correction.unverifiable_count == 0
    assert correction.new_known_cost_usd == 0
