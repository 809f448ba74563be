"""The report of a settled run is computed once per state and reused (issue 13): it must equal
the full report, and every change that can alter a report must be seen at once."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from runs.models import Call, Run, RunEvent, UsageCorrection
from runs.reporting.report import run_report, run_report_settled
from tests import factories as f
from tests.runs.test_pages import member, run_with_calls  # noqa: F401  (fixture)

pytestmark = pytest.mark.django_db


def settled_run(n: int = 20) -> Run:
    run = run_with_calls(n, status="completed")
    Run.objects.filter(pk=run.pk).update(finished_at=timezone.now())
    return Run.objects.get(pk=run.pk)


def correction_of(run: Run, *, cost: str, version: int = 1) -> UsageCorrection:
    call = Call.objects.filter(cell__run=run).order_by("pk").first()
    assert call is not None
    entry = {
        "call_id": call.pk,
        "input_tokens": 10,
        "cached_input_tokens": 0,
        "cache_write_tokens": 0,
        "output_tokens": 5,
        "cost_usd": cost,
        "cache_neutral_cost_usd": None,
    }
    return UsageCorrection.objects.create(
        run=run,
        version=version,
        evidence_sha256=f"{version:064x}",
        verified_count=0,
        changed_count=1,
        unverifiable_count=0,
        old_known_cost_usd=None,
        new_known_cost_usd=None,
        corrections={"calls": [entry]},
    )


def test_settled_report_equals_the_full_report_and_is_read_back_with_fewer_queries():
    run = settled_run()
    with CaptureQueriesContext(connection) as first:
        computed = run_report_settled(run=run)
    with CaptureQueriesContext(connection) as again:
        reused = run_report_settled(run=run)
    assert computed == reused == run_report(run=run)
    assert computed["targets"][0]["known_cost_usd"] == "0.002"
    assert len(again) < len(first)


def test_a_new_usage_correction_changes_the_settled_report_at_once():
    run = settled_run()
    before = run_report_settled(run=run)
    correction_of(run, cost="0.0011")
    after = run_report_settled(run=run)
    assert after == run_report(run=run)
    assert before["targets"][0]["known_cost_usd"] == "0.002"
    assert after["targets"][0]["known_cost_usd"] == "0.003"
    assert after["usage_correction"] != before["usage_correction"]
    correction_of(run, cost="0.0021", version=2)
    assert run_report_settled(run=run)["targets"][0]["known_cost_usd"] == "0.004"


def test_a_status_or_stop_reason_change_changes_the_settled_report_at_once():
    run = settled_run()
    assert run_report_settled(run=run)["complete"] is True
    Run.objects.filter(pk=run.pk).update(status="cancelled", stop_reason="cancelled by a member")
    report = run_report_settled(run=run)
    assert report["run"]["status"] == "cancelled"
    assert report["complete"] is False
    assert report == run_report(run=run)


def test_a_new_event_names_a_new_settled_report():
    run = settled_run()
    first = run_report_settled(run=run)
    # An event is appended with every state change; the report is then computed afresh.
    RunEvent.objects.create(run=run, seq=999, type="run.note", payload={})
    Run.objects.filter(pk=run.pk).update(last_event_seq=999)
    with CaptureQueriesContext(connection) as fresh:
        assert run_report_settled(run=run) == first
    with CaptureQueriesContext(connection) as reused:
        run_report_settled(run=run)
    assert len(reused) < len(fresh)


def test_a_terminal_run_with_a_call_in_flight_is_never_reused():
    run = settled_run(10)
    done = Call.objects.filter(cell__run=run).order_by("pk").first()
    assert done is not None
    # (Opened while its run and cell ran, as the fencing triggers require; then it ends.)
    Run.objects.filter(pk=run.pk).update(status="running", finished_at=None)
    straggler = f.call_create(
        cell=done.cell,
        role="subject",
        sequence=1,
        status="streaming",
        target=done.target,
        request=done.request,
        sent_at=timezone.now(),
    )
    Run.objects.filter(pk=run.pk).update(status="interrupted", finished_at=run.finished_at)
    assert run_report_settled(run=run)["targets"][0]["known_cost_usd"] == "0.001"
    # The straggler finishes after the run was marked interrupted: no event, same run row.
    Call.objects.filter(pk=straggler.pk).update(
        status="completed", output_tokens=5, input_tokens=10, cost_usd=Decimal("0.0007")
    )
    report = run_report_settled(run=run)
    assert report["targets"][0]["known_cost_usd"] == "0.0017"
    assert report == run_report(run=run)


def test_a_run_without_a_finish_time_is_computed_afresh():
    run = run_with_calls(5, status="completed")
    first = run_report_settled(run=run)
    second = run_report_settled(run=run)
    # Its wall time still runs from the current clock, so the report is never kept.
    assert second["run"]["wall_seconds"] > first["run"]["wall_seconds"]


def test_results_page_shows_a_usage_correction_made_after_it_was_viewed(client, member):  # noqa: F811
    run = settled_run()
    assert ">0.002<" in client.get(f"/runs/{run.pk}/").content.decode()
    correction_of(run, cost="0.0011")
    html = client.get(f"/runs/{run.pk}/").content.decode()
    assert ">0.003<" in html
