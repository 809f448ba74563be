"""The run page's per-question views in a real browser (issue 35 item 7, build 6): the
side-by-side failures-only filter swaps the table in place and keeps its state in the URL, a τ³
episode's transcript shows its turns, and the run page's CLI command is copyable."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from runs.models import Cell
from runs.planning.services import run_create
from tests.conftest import wait_until
from tests.e2e.conftest import screenshot
from tests.runs import engine_support as es

pytestmark = pytest.mark.e2e

BENCHMARKS = ["mmlu-pro", "tau3"]
FAILING = {"wrong", "failed", "sent_unknown"}
# The strong model is always right; the weak one always wrong on MMLU-Pro, right on τ³: so
# "failures only" keeps the MMLU-Pro questions and drops the τ³ tasks both complete.
MODELS = {
    "sim-strong": {**es.FAST_MODELS["sim-strong"], "accuracy": 1.0},
    "sim-weak": {
        **es.FAST_MODELS["sim-weak"],
        "benchmark_accuracy": {"mmlu-pro": 0.0, "tau3": 1.0},
    },
}


def outcome_of(cell: Cell) -> str:
    if cell.status != "completed":
        return cell.status
    return {True: "correct", False: "wrong", None: "not_scored"}[cell.correct]


@pytest.mark.worker
def test_side_by_side_failures_only_and_a_tau3_transcript(
    logged_in_page, live_server, member, celery_worker
):
    """issue 35 item 7: ticking "Failures only" keeps exactly the questions where a target's
    result is wrong or failed (computed here from the cells), in place and in the URL; a τ³
    episode's transcript shows its system prompt, task, agent turns, tool results and the
    simulated user."""
    with es.simulator(BENCHMARKS, models=MODELS) as url:
        es.sim_targets(url)
        dataset = es.fixture_dataset(BENCHMARKS, per_benchmark=3)
        run, _ = run_create(
            owner=member,
            plan={
                "name": "side by side",
                "dataset": dataset.pk,
                "targets": ["sim-strong", "sim-weak"],
                "simulators": {"tau3": "sim-user"},
                "failure_policy": "continue",
            },
        )
        wait_until(lambda: es.terminal(run), timeout=240)
    # τ³ tasks whose assertions need a judge end failed (not scored): the run may say failed.
    assert run.is_terminal and not run.stop_reason, celery_worker.log()[-3000:]
    outcomes: dict[str, set[str]] = {}
    for cell in Cell.objects.filter(run=run).select_related("question"):
        outcomes.setdefault(cell.question.native_id, set()).add(outcome_of(cell))
    failing = {q for q, o in outcomes.items() if o & FAILING}
    assert 0 < len(failing) < len(outcomes), outcomes

    page = logged_in_page
    page.goto(f"{live_server.url}/runs/{run.pk}/")
    page.locator("#side-by-side-link").click()
    rows = page.locator("tr.side-row")
    expect(rows).to_have_count(len(outcomes))
    page.locator("#failures-only").check()  # htmx swaps the table and pushes the URL
    expect(page).to_have_url(re.compile(rf"/runs/{run.pk}/side-by-side/\?(.*&)?failures=1"))
    expect(rows).to_have_count(len(failing))
    shown = set(rows.evaluate_all("rows => rows.map((r) => r.dataset.question)"))
    assert shown == failing
    for row in rows.all():
        got = set(
            row.locator("td.side-result").evaluate_all("c => c.map((x) => x.dataset.outcome)")
        )
        assert got & FAILING and len(row.locator("td.side-result").all()) == 2
    screenshot(page, "side-by-side-failures-only")
    page.reload()  # the filter is the URL's
    expect(page.locator("#failures-only")).to_be_checked()
    expect(rows).to_have_count(len(failing))

    tau = (
        Cell.objects.filter(run=run, benchmark="tau3", calls__tool_calls__isnull=False)
        .distinct()
        .first()
    )
    assert tau is not None
    page.locator("#failures-only").uncheck()
    expect(rows).to_have_count(len(outcomes))
    page.locator(f'a[href="/runs/{run.pk}/questions/{tau.pk}/transcript/"]').click()
    expect(page.locator("#transcript")).to_be_visible()
    expect(page.locator(".turn-agent .tool-name").first).to_be_visible()
    expect(page.locator(".turn-tool_result").first).to_be_visible()
    expect(page.locator(".turn-user").nth(1)).to_contain_text("user (simulated)")
    kinds = page.locator(".turn").evaluate_all("t => t.map((x) => x.dataset.kind)")
    # system prompt, the task, then the agent acts before any tool result
    assert kinds[:3] == ["system", "user", "agent"] and "tool_result" in kinds
    assert kinds.index("tool_result") > kinds.index("agent")
    screenshot(page, "tau3-transcript")


def test_the_run_page_cli_command_can_be_copied(logged_in_page, live_server, member):
    """issue 35 item 7: the command shown is the one copied (its run is checked to run in
    tests/runs/test_question_views.py)."""
    from tests import factories as f

    run = f.run_create(owner=member, name="copy me", status="completed")
    page = logged_in_page
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    # The Questions tab: a hand-made run has no report for the Results tab to compute.
    page.goto(f"{live_server.url}/runs/{run.pk}/?tab=questions")
    page.locator("#run-cli summary").click()
    expect(page.locator("#cli-1")).to_have_text(
        f"python manage.py benchmark report {run.pk} --user alice"
    )
    page.locator('button[data-copy="cli-1"]').click()
    expect(page.locator('button[data-copy="cli-1"]')).to_have_text("Copied")
    copied = page.evaluate("navigator.clipboard.readText()")
    assert copied == f"python manage.py benchmark report {run.pk} --user alice"
