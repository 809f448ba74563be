"""The report users fetch is the report kept at run end (issue 38 item 1).

`GET /api/v1/runs/ID/report/` (so `benchmark report` and the report `benchmark run` prints) and
the exports serve the report stored under the ledger's fingerprint and the report code's
version, name it (`report_version`), and compute it again only when it is stale: a usage
correction or a regrade stores the new one in its own commit; a run that ended without its
end-of-run work gets it on its first read, once. Every served report is checked against a
fresh computation from the ledger (`run_report_compute`), as JSON.
"""

from __future__ import annotations

import json
import threading
from decimal import Decimal as D
from typing import Any

import pytest
from django.db import connection

import runs.reporting.report
from compare.models import CaseFigures
from runs.engine.finish import run_report_keep, runs_report_backfill
from runs.interfaces.cli import report_text
from runs.ledger.selectors import run_settled_fingerprint
from runs.models import Cell, RunReport, UsageCorrection
from runs.reporting.export import export_matrix
from runs.reporting.official_metrics import official_metrics
from runs.reporting.reconcile import usage_reconcile
from runs.reporting.report import REPORT_CACHE_VERSION, report_key, run_report_compute
from runs.reporting.report_types import report_doc
from runs.reporting.stored_report import run_report_served
from runs.settlement.regrade import run_regrade
from tests import factories as f
from tests.compare import builders as b
from tests.runs.test_reconcile import EXPECTED_COST, damaged_run


@pytest.fixture
def member(client):  # type: ignore[no-untyped-def]
    user = f.user_create()
    client.force_login(user)
    return user


@pytest.fixture
def computations(monkeypatch: pytest.MonkeyPatch) -> list[list[int]]:
    """Every full report computation (`run_reports_compute`), by the runs it computed."""
    seen: list[list[int]] = []
    real = runs.reporting.report.run_reports_compute
    lock = threading.Lock()

    def counted(*, runs: list[Any]) -> Any:
        with lock:
            seen.append([r.pk for r in runs])
        return real(runs=runs)

    monkeypatch.setattr(runs.reporting.report, "run_reports_compute", counted)
    return seen


def fresh(run: Any) -> dict[str, Any]:
    """The report computed from the ledger now, as the JSON a client reads."""
    return json.loads(json.dumps(report_doc(run_report_compute(run=run))))


def served_over_api(client: Any, run: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the report the API serves without its version, its `report_version`)."""
    response = client.get(f"/api/v1/runs/{run.pk}/report/")
    assert response.status_code == 200, response.content
    body = response.json()
    return body, body.pop("report_version")


def current_key(run: Any) -> str:
    fingerprint = run_settled_fingerprint(run)
    assert fingerprint is not None
    return report_key(fingerprint)


def mcq_run(tag: str = "") -> Any:
    """A completed live run of 6 MMLU-Pro questions and 2 targets (no end-of-run work)."""
    qs = b.questions({"mmlu-pro": 6})
    return b.run(
        qs,
        {
            b.target(f"stored-a{tag}"): [True, True, False, True, False, True],
            b.target(f"stored-b{tag}"): [False, True, None, True, True, False],
        },
    )


@pytest.mark.django_db
def test_the_report_served_for_a_normal_run_is_the_kept_one_and_equals_a_fresh_computation(
    client, member, computations
):
    """issue 38 item 1: a run ended by the engine's finish (`run_report_keep`) is served from
    its stored row — no computation on read — and that report is the fresh one, exactly."""
    run = mcq_run()
    run_report_keep(run_id=run.pk)  # what the engine's finish does after the terminal commit
    assert len(computations) == 1
    served, version = served_over_api(client, run)
    assert len(computations) == 1  # the read computed nothing
    assert served == fresh(run)
    row = RunReport.objects.get(run=run)
    assert version == {
        "key": current_key(run),
        "code": REPORT_CACHE_VERSION,
        "usage_correction": None,
        "regrade": None,
        "computed_at": row.computed_at.isoformat(),
        "stored": True,
    }
    assert row.fingerprint == version["key"]
    # Independently: 6 + 6 planned cells, 4 + 3 correct, one failed.
    assert (served["counts"]["planned"], served["counts"]["correct"]) == (12, 7)
    assert served["counts"]["failed"] == 1


@pytest.mark.django_db
def test_after_a_usage_correction_the_served_report_is_the_fresh_one_and_names_its_version(
    client, member, computations
):
    """issue 38 item 1 (acceptance): the correction stores the corrected report in its own
    commit, so the first read after it computes nothing, equals a fresh computation and names
    the correction's version."""
    run, *_ = damaged_run()
    run_report_keep(run_id=run.pk)
    old_key = RunReport.objects.get(run=run).fingerprint

    correction = usage_reconcile(run_id=run.pk).correction
    # Stored by the correction itself, under the state it committed (before any read).
    row = RunReport.objects.get(run=run)
    assert row.fingerprint == current_key(run) != old_key
    assert json.loads(row.report_json)["usage_correction"]["version"] == correction.version == 1
    before_read = len(computations)

    served, version = served_over_api(client, run)
    assert len(computations) == before_read  # served from the stored row
    assert served == fresh(run)
    assert version["usage_correction"] == 1 and version["stored"] is True
    assert version["key"] == row.fingerprint and version["regrade"] is None
    # Independently: only the call with valid evidence has a known cost after the correction.
    target = served["targets"][0]
    assert D(target["known_cost_usd"]) == EXPECTED_COST and target["subject_cost_usd"] is None


@pytest.mark.django_db
def test_a_correction_written_without_the_hook_is_seen_on_the_next_read(client, member):
    """issue 38 item 1: whatever appends a correction, a stored report of the older state is
    never served (the key names the correction in effect); the read keeps the new one."""
    run, valid, *_ = damaged_run()
    run_report_keep(run_id=run.pk)
    UsageCorrection.objects.create(
        run=run,
        version=1,
        evidence_sha256="f" * 64,
        verified_count=1,
        changed_count=1,
        unverifiable_count=3,
        old_known_cost_usd=D(2),
        new_known_cost_usd=D("0.25"),
        corrections={
            "rules_version": "test",
            "calls": [
                {
                    "call_id": valid.pk,
                    "outcome": "changed",
                    "input_tokens": 10,
                    "cached_input_tokens": 0,
                    "cache_write_tokens": 0,
                    "output_tokens": 1,
                    "cost_usd": "0.25",
                    "cache_neutral_cost_usd": "0.25",
                }
            ],
        },
    )
    served, version = served_over_api(client, run)
    assert served == fresh(run)
    assert version["usage_correction"] == 1 and version["key"] == current_key(run)
    # Independently: the corrected call 0.25, the three others as recorded (0.5 each).
    assert D(served["targets"][0]["known_cost_usd"]) == D("1.75")


@pytest.mark.django_db
def test_after_a_regrade_the_served_report_is_the_fresh_one_and_names_the_regrade(
    client, member, computations
):
    """issue 38 item 1: a regrade appends a new version and stores the report under it in the
    same commit; the report served next equals a fresh computation and names the regrade."""
    run = mcq_run()
    run_report_keep(run_id=run.pk)
    old_key = RunReport.objects.get(run=run).fingerprint

    first = run_regrade(run_id=run.pk)
    assert first.created and first.regrade.version == 1
    row = RunReport.objects.get(run=run)
    assert row.fingerprint == current_key(run) != old_key
    before_read = len(computations)

    served, version = served_over_api(client, run)
    assert len(computations) == before_read
    assert served == fresh(run)
    assert (version["regrade"], version["usage_correction"], version["stored"]) == (1, None, True)
    assert version["key"] == row.fingerprint
    # The same answers under the same graders: the same regrade, no new version, same key.
    assert run_regrade(run_id=run.pk).created is False
    assert served_over_api(client, run)[1]["key"] == version["key"]


@pytest.mark.django_db(transaction=True)
def test_a_run_that_ended_without_its_report_gets_it_on_first_read_exactly_once(computations):
    """issue 38 item 1: a run that ended without its end-of-run work (no report kept) gets
    it on its first read — its report and compare's per-cell figures, one row each — computed
    once even when two readers come at the same time; later reads compute nothing."""
    run = mcq_run()
    assert not RunReport.objects.filter(run=run).exists()
    assert not CaseFigures.objects.filter(run=run).exists()
    results: list[dict[str, Any]] = []
    barrier = threading.Barrier(2)

    def read() -> None:
        try:
            barrier.wait()
            results.append(run_report_served(run=run))
        finally:
            connection.close()

    threads = [threading.Thread(target=read) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert len(results) == 2
    assert [ids for ids in computations if run.pk in ids] == [[run.pk]]  # computed once
    assert RunReport.objects.filter(run=run).count() == 1
    assert CaseFigures.objects.filter(run=run).count() == 1
    row = RunReport.objects.get(run=run)
    expected = fresh(run)  # the second computation: the test's own
    for doc in results:
        version = doc.pop("report_version")
        assert version["stored"] is True and version["key"] == row.fingerprint
        assert doc == expected
    computed_at = row.computed_at
    again = run_report_served(run=run)
    assert again["report_version"]["stored"] is True
    assert [ids for ids in computations if run.pk in ids] == [[run.pk]] * 2  # `fresh` only
    assert RunReport.objects.get(run=run).computed_at == computed_at  # not written again


@pytest.mark.django_db
def test_the_recovery_pass_does_the_end_of_run_work_of_runs_that_ended_without_it_once(
    computations,
):
    """issue 38 item 1: the workers' pass keeps the report (and per-cell figures) of ended
    runs that have none, so no reader pays for it; each run once."""
    done = mcq_run()
    run_report_keep(run_id=done.pk)
    without = mcq_run("2")
    running = b.run(
        b.questions({"mmlu-pro": 2}), {b.target("live"): [True, None]}, status="running"
    )
    computations.clear()

    assert runs_report_backfill(limit=10) == 1
    assert computations == [[without.pk]]
    assert RunReport.objects.filter(run=without).count() == 1
    assert CaseFigures.objects.filter(run=without).count() == 1
    assert not RunReport.objects.filter(run=running).exists()
    assert runs_report_backfill(limit=10) == 0  # nothing left: each once
    assert computations == [[without.pk]]


@pytest.mark.django_db
def test_a_run_in_progress_is_computed_for_each_read_and_says_so(client, member, computations):
    """issue 38 item 1: a run in progress has no kept report; what is served is computed for
    the read, and `report_version` says so (no key, not stored)."""
    qs = b.questions({"mmlu-pro": 3})
    run = b.run(qs, {b.target("going"): [True, None, None]}, status="running")
    Cell.objects.filter(run=run, status="failed").update(status="pending", correct=None)
    served, version = served_over_api(client, run)
    assert len(computations) == 1
    assert (version["key"], version["stored"], version["regrade"]) == (None, False, None)
    assert not RunReport.objects.filter(run=run).exists()
    assert served["counts"]["completed"] == 1 and served["counts"]["pending"] == 2


@pytest.mark.django_db
def test_the_cli_and_the_export_name_the_report_they_read(computations):
    """issue 38 item 1: the CLI's report text names the kept report and the correction it
    reflects; the export reads the kept report's official sections and names its version."""
    run, *_ = damaged_run()
    usage_reconcile(run_id=run.pk)
    served = run_report_served(run=run)
    text = report_text(served)
    assert f"key {served['report_version']['key'][:12]}" in text
    assert "usage correction v1" in text.splitlines()[-1]

    qs = b.questions({"arc": 2})
    exported = b.run(qs, {b.target("arc-a"): [True, False]})
    run_report_keep(run_id=exported.pk)
    computations.clear()
    matrix = export_matrix(run_id=exported.pk)
    assert computations == []  # the kept report, not a computation
    assert matrix["report_version"]["key"] == current_key(exported)
    kept = json.loads(RunReport.objects.get(run=exported).report_json)
    section = kept["targets"][0]["official"]
    assert matrix["official"] == {"arc-a": official_metrics(section)}
