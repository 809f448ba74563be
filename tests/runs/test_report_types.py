"""The typed run report (issue 24 point 3): money is Decimal and scores exact fractions inside
the code, text only at the edges, and a stored report reads back as exactly the report that
was computed (SPEC R1.1, R1.2: unknown stays null, never 0)."""

from __future__ import annotations

import json
from dataclasses import fields
from decimal import Decimal
from fractions import Fraction

import pytest
from django.utils import timezone

from compare.results import Entry
from runs.models import Run, RunReport, UsageCorrection
from runs.planning.services import run_create
from runs.reporting.reconcile import correction_summary
from runs.reporting.report import (
    run_report,
    run_report_compute,
    run_report_settled,
    run_report_settled_compute,
)
from runs.reporting.report_types import (
    TARGET_MONEY,
    BenchmarkRow,
    Correction,
    Report,
    Score,
    report_doc,
)
from tests import factories as f
from tests.conftest import wait_until
from tests.runs import engine_support as es
from tests.runs.test_pages import run_with_calls


def _settled(run: Run) -> Run:
    Run.objects.filter(pk=run.pk).update(status="completed", finished_at=timezone.now())
    return Run.objects.get(pk=run.pk)


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_real_runs_report_reads_back_from_its_stored_document_exactly(celery_worker):
    """R1.1 + issue 24: a run driven by the worker against the simulator (a single model and a
    MoM router, both priced) is stored at its finish as JSON; reading the stored row back
    gives the typed report that was computed, field for field, with Decimal money and the
    exact Fraction score, and its JSON is the API's."""
    benchmarks = ["mmlu-pro"]
    with es.simulator(benchmarks) as url:
        es.sim_targets(url)
        run, _ = run_create(
            owner=f.user_create(),
            plan={
                "name": "typed",
                "dataset": es.fixture_dataset(benchmarks).pk,
                "targets": ["sim-strong", "sim-router"],
                "limits": {"concurrency": 4},
            },
        )
        wait_until(lambda: es.terminal(run), timeout=120)
    assert run.status == "completed", run.stop_reason

    computed = run_report_compute(run=run)
    wait_until(lambda: RunReport.objects.filter(run=run).exists(), timeout=30)
    stored_json = RunReport.objects.get(run=run).report_json
    stored = Report.from_doc(json.loads(stored_json))
    settled = run_report_settled_compute(run=run)  # read from the stored row

    assert stored == computed == settled
    assert stored_json == json.dumps(report_doc(computed))
    assert report_doc(settled) == run_report(run=run) == run_report_settled(run=run)
    strong, router = computed.targets
    assert router.kind == "mom" and sum((router.selected_models or {}).values()) > 0
    for t in (strong, router):
        for name in TARGET_MONEY:
            value = getattr(t, name)
            assert value is not None and isinstance(value, Decimal), (t.slug, name)
            # The stored text is the exact Decimal, not a float's rendering of it.
            assert Decimal(json.loads(stored_json)["targets"][0 if t is strong else 1][name]) == (
                value
            )
        row = t.benchmarks["mmlu-pro"]
        assert row.accuracy == Fraction(row.correct, row.planned)
        assert isinstance(t.score.exact, Fraction)
        assert t.score.value == float(t.score.exact)
    assert isinstance(computed.spend.known_total_spend_usd, Decimal)
    assert computed.spend.known_total_spend_usd == strong.known_total_spend_usd + (
        router.known_total_spend_usd
    )


@pytest.mark.django_db
def test_report_money_is_the_exact_decimal_sum_a_float_would_get_wrong():
    """R1.1, issue 18: ten calls of 0.1 USD cost exactly 1 USD; a float sum says
    0.9999999999999999. The typed report holds the Decimal, the JSON its exact text, and the
    comparison reads the same Decimal without a trip through text."""
    running = 0.0
    for _ in range(10):
        running += 0.1  # (Python 3.12's sum() compensates; a running total does not)
    assert running == 0.9999999999999999  # why money is never a float
    run = _settled(run_with_calls(10, status="completed", cost_usd=Decimal("0.1")))
    report = run_report_compute(run=run)
    (target,) = report.targets
    expected = sum([Decimal("0.1")] * 10, Decimal(0))
    assert expected == Decimal("1")
    for value in (target.subject_cost_usd, target.known_cost_usd, target.total_spend_usd):
        assert isinstance(value, Decimal) and value == expected
    assert report.spend.total_spend_usd == expected
    doc = report_doc(report)
    assert doc["targets"][0]["subject_cost_usd"] == "1"
    assert doc["spend"]["total_spend_usd"] == "1"
    back = Report.from_doc(json.loads(json.dumps(doc)))
    assert back.targets[0].subject_cost_usd == expected
    assert isinstance(back.targets[0].subject_cost_usd, Decimal)
    entry = Entry(run, back, back.targets[0], None)
    assert entry.subject_cost == expected and isinstance(entry.subject_cost, Decimal)
    # The score is the exact fraction of correct cases (5 of 10), not its float.
    assert target.score.exact == Fraction(1, 2)
    assert back.targets[0].score.exact == Fraction(1, 2)


@pytest.mark.django_db
def test_unknown_usage_and_cost_stay_none_through_the_stored_document():
    """R1.2: calls without a usage receipt or a price leave tokens and costs unknown — None
    in the typed report, null in the JSON, None again when read back; never 0."""
    run = _settled(
        run_with_calls(
            4,
            status="completed",
            cost_usd=None,
            input_tokens=None,
            cached_input_tokens=None,
            cache_write_tokens=None,
            output_tokens=None,
        )
    )
    report = run_report_settled_compute(run=run)  # computed and stored
    (target,) = report.targets
    assert set(target.tokens.values()) == {None}
    for name in ("subject_cost_usd", "known_cost_usd", "total_spend_usd"):
        assert getattr(target, name) is None, name
    assert report.spend.total_spend_usd is None
    assert report.spend.known_total_spend_usd is None
    doc = json.loads(RunReport.objects.get(run=run).report_json)
    assert doc["targets"][0]["subject_cost_usd"] is None
    assert doc["targets"][0]["tokens"] == dict.fromkeys(
        ["input", "cached_input", "cache_write", "output"]
    )
    back = run_report_settled_compute(run=run)  # read from the stored row
    assert back == report
    assert back.targets[0].known_cost_usd is None
    assert set(back.targets[0].tokens.values()) == {None}
    assert back.spend.known_total_spend_usd is None


@pytest.mark.django_db
def test_a_usage_correction_keeps_its_exact_costs_and_the_json_of_its_one_summary(client):
    """R2.3: the correction's old and new known cost read back as the same Decimals (digits a
    float would not keep), its JSON is `correction_summary`'s (the Evidence tab's), and the
    Results tab writes the typed receipt as that JSON does: ISO time, exact USD."""
    run = _settled(run_with_calls(2, status="completed"))
    correction = UsageCorrection.objects.create(
        run=run,
        version=1,
        evidence_sha256="ab" * 32,
        verified_count=2,
        changed_count=1,
        unverifiable_count=0,
        old_known_cost_usd=Decimal("0.0000011000"),
        new_known_cost_usd=Decimal("0.3000000001"),
        corrections={"calls": []},
    )
    correction.refresh_from_db()
    typed = Correction.of(correction)
    assert typed is not None
    assert correction_summary(correction) == {
        "version": 1,
        "evidence_sha256": "ab" * 32,
        "created_at": correction.created_at.isoformat(),
        "verified": 2,
        "changed": 1,
        "unverifiable": 0,
        "old_known_cost_usd": "0.0000011",
        "new_known_cost_usd": "0.3000000001",
    }
    report = run_report_compute(run=run)
    assert report.usage_correction == typed
    back = Report.from_doc(json.loads(json.dumps(report_doc(report))))
    assert back.usage_correction is not None
    assert back.usage_correction.old_known_cost_usd == Decimal("0.0000011")
    assert back.usage_correction.new_known_cost_usd == Decimal("0.3000000001")
    assert back.usage_correction.created_at == correction.created_at
    client.force_login(f.user_create(username="reader"))
    html = client.get(f"/runs/{run.pk}/").content.decode()
    assert f"<dt>Time</dt><dd>{correction.created_at.isoformat()}</dd>" in html
    assert '<dt>Known cost before</dt><dd class="num">$0.0000011</dd>' in html
    assert '<dt>Known cost after</dt><dd class="num">$0.3000000001</dd>' in html


def test_a_preview_row_and_a_none_score_keep_their_json_shape():
    """Issue 11, R1.2: a preview's benchmark row carries its routing even when it is empty
    (null), and a score that is none keeps its label; both read back unchanged."""
    row = BenchmarkRow(
        planned=3,
        questions=3,
        completed=3,
        correct=0,
        scored=0,
        failed=0,
        pending=0,
        sent_unknown=0,
        cancelled=0,
        accuracy=None,
        wilson_95=None,
        complete=True,
        routing=None,
        has_routing=True,
    )
    doc = row.to_doc()
    assert "routing" in doc and doc["routing"] is None and doc["accuracy"] is None
    assert BenchmarkRow.from_doc(doc) == row
    plain = BenchmarkRow(
        **{f.name: getattr(row, f.name) for f in fields(row)} | {"has_routing": False}
    )
    assert "routing" not in plain.to_doc()
    score = Score("none", label="preview run: routing only, no answers")
    assert score.to_doc() == {"kind": "none", "value": None, "label": score.label}
    assert Score.from_doc(score.to_doc()) == score
    assert Score("none").to_doc() == {"kind": "none", "value": None}
