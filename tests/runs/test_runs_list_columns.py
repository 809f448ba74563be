"""The runs list is worth scanning (issue 23 point 3, R7.1): score (labelled sr-bench or
subset, with its target), known spend and completeness per run, sortable, the same figures in
the API — read from the report stored once when a run ends (issue 25), never recomputed per
row; unknown stays unknown."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from runs.engine.finish import run_report_keep
from runs.models import Run, RunReport
from runs.reporting.report import run_report
from tests import factories as f
from tests.compare import builders as b

pytestmark = pytest.mark.django_db


def ended(outcomes: list[bool], cost: str | None, name: str) -> Run:
    qs = b.questions({"mmlu-pro": len(outcomes)})
    target = b.target(f"t-{name}")
    run = b.run(
        qs,
        {target: outcomes},
        costs={target: None if cost is None else Decimal(cost)},
        name=name,
    )
    Run.objects.filter(pk=run.pk).update(name=name)
    run_report_keep(run_id=run.pk)
    return run


def test_an_ended_runs_report_is_stored_once_with_its_columns():
    run = ended([True, True, False, True], "0.001", "a")
    stored = RunReport.objects.get(run=run)
    fresh = run_report(run=run)
    assert json.loads(stored.report_json) == fresh  # exactly, after the JSON round trip
    best = fresh["targets"][0]
    assert stored.score == best["score"]["value"] == 0.75
    assert stored.score_kind == "subset" and stored.score_target == best["slug"]
    # Four cells at 0.001 each, summed exactly from the report's own text.
    assert stored.known_spend_usd == Decimal(fresh["spend"]["known_total_spend_usd"])
    assert stored.known_spend_usd == Decimal("0.004")


def test_the_page_and_api_show_score_spend_and_sort_by_them(client):
    low = ended([True, False, False, False], "0.010", "low")
    high = ended([True, True, True, False], "0.001", "high")
    unknown = ended([True, True, False, False], None, "unknown-cost")
    running = f.run_create(status="running", name="still running")
    client.force_login(f.user_create(staff=True))

    page = client.get("/?sort=score").content.decode()
    order = [page.index(f'data-run-id="{r.pk}"') for r in (high, unknown, low, running)]
    assert order == sorted(order), "score, best first; runs without a score last"
    assert "0.7500" in page and "subset" in page
    spend_page = client.get("/?sort=spend").content.decode()
    spend_order = [spend_page.index(f'data-run-id="{r.pk}"') for r in (low, high)]
    assert spend_order == sorted(spend_order)
    # Unknown cost is never shown as $0: the unknown-cost run's spend cell says unknown.
    row = spend_page[spend_page.index(f'data-run-id="{unknown.pk}"') :]
    row = row[: row.index("</tr>")]
    assert "unknown" in row and "0.0000" not in row

    body = client.get("/api/v1/runs/").json()["results"]
    by_id = {r["id"]: r["result"] for r in body}
    assert by_id[high.pk]["score"] == 0.75 and by_id[high.pk]["score_kind"] == "subset"
    assert by_id[low.pk]["known_spend_usd"] == "0.04"
    assert by_id[unknown.pk]["known_spend_usd"] is None
    assert by_id[running.pk] is None  # no report until the run has ended
    assert by_id[high.pk]["completeness"] == 1.0


def test_a_report_is_recomputed_when_the_code_that_computes_it_changes(monkeypatch):
    run = ended([True, False], "0.001", "v")
    first = RunReport.objects.get(run=run).fingerprint
    monkeypatch.setattr("runs.reporting.report.REPORT_CACHE_VERSION", "test-next")
    run_report_keep(run_id=run.pk)
    assert RunReport.objects.get(run=run).fingerprint != first


def test_a_score_from_a_run_that_did_not_finish_its_cells_is_marked_incomplete(client):
    """Outside probe, session 5: a run cancelled after measuring part of its cells showed its
    score in the list like any other. A score whose run left planned cells without a result
    (cancelled, failed or stopped) says "incomplete" in the list and beside the run page's
    score; a run that finished every cell has no such marker."""
    qs = b.questions({"mmlu-pro": 4})
    part = b.target("t-part")
    cancelled = b.run(qs, {part: [True, True, "cancelled", "cancelled"]}, status="cancelled")
    run_report_keep(run_id=cancelled.pk)
    whole = ended([True, True, False, True], "0.001", "whole")
    client.force_login(f.user_create(staff=True))

    page = client.get("/").content.decode()

    def score_cell(run: Run) -> str:
        row = page[page.index(f'data-run-id="{run.pk}"') :]
        row = row[: row.index("</tr>")]
        cell = row[row.index('class="num run-score"') :]
        return cell[: cell.index("</td>")]

    assert "0.5000" in score_cell(cancelled) and "incomplete" in score_cell(cancelled)
    assert "0.7500" in score_cell(whole) and "incomplete" not in score_cell(whole)

    results = client.get(f"/runs/{cancelled.pk}/").content.decode()
    score = results[results.index('<p class="score">') :]
    score = score[: score.index("</p>")]
    assert 'class="badge score-incomplete"' in score and "run is cancelled" in score
    finished = client.get(f"/runs/{whole.pk}/").content.decode()
    assert "score-incomplete" not in finished
