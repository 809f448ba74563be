"""The dashboard, second pass, in a real browser (issue 23; SPEC R7 dashboard, R8 Create
evaluation, R10.2 live progress, R15.5 recovery):

- a running run's partial results move with the header's poll, with no score until it ends;
- "Select all benchmarks" ticks the nine boxes on the page, and unticking one after it gives
  a frozen plan of eight (τ³'s user simulator defaulted from the registry);
- Cancel asks before it cancels;
- after a recovery is submitted, the page's own list of recovery runs names the new run.
"""

from __future__ import annotations

import re

import pytest
from django.utils import timezone
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import expect

from datasets.benchmarks import ADAPTERS
from datasets.services import source_prepare
from runs.models import Cell, Run, RunEvent
from runs.planning.services import run_create
from tests import factories as f
from tests.conftest import purge_broker
from tests.e2e.conftest import screenshot
from tests.runs import engine_support as es

pytestmark = pytest.mark.e2e

# ~1.5 s an answer at concurrency 1: the run takes long enough to be watched.
SLOW = {"sim-strong": {"ttft_s": 0.8, "tokens_per_second": 40.0}}


def frozen_selection(run: Run) -> set[str]:
    """The benchmarks of a frozen plan, with those it names as not runnable here."""
    return {*run.manifest["benchmarks"], *(e["benchmark"] for e in run.manifest.get("not_run", []))}


def partial_state(page) -> dict | None:
    """One read of the run page, in one script, so a reload between two reads cannot mix two
    pages: the partial counts, whether the partial section, a bold score or the per-benchmark
    table shows. None when the page navigated during the read (the run ended and the page
    reloaded onto its report: "Execution context was destroyed")."""
    try:
        return page.evaluate(
            """() => ({
                partial: document.querySelector('#partial-results') !== null,
                counts: Object.fromEntries([...document.querySelectorAll('tr.partial-row')].map(
                    (r) => [r.dataset.benchmark,
                            Number(r.querySelector('.partial-completed').textContent)])),
                score: document.querySelectorAll('p.score strong').length,
                table: document.querySelectorAll('table.per-benchmark').length,
            })"""
        )
    except PlaywrightError as exc:
        if "context was destroyed" in str(exc) or "navigat" in str(exc):
            return None
        raise


@pytest.mark.worker
def test_partial_results_rise_while_the_run_runs_and_the_score_waits_for_the_end(
    logged_in_page, live_server, member, celery_worker
):
    page = logged_in_page
    benchmarks = ["mmlu-pro", "gpqa"]
    with es.simulator(benchmarks, models=SLOW) as url:
        es.sim_targets(url)
        dataset = es.fixture_dataset(benchmarks, per_benchmark=3)
        run, _ = run_create(
            owner=member,
            plan={
                "name": "watched",
                "dataset": dataset.pk,
                "targets": ["sim-strong"],
                "limits": {"concurrency": 1},
            },
        )
        page.goto(f"{live_server.url}/runs/{run.pk}/")
        expect(page.locator("#partial-results")).to_be_visible(timeout=30_000)
        expect(page.locator("#partial-results")).to_contain_text("Partial results")
        expect(page.locator("#partial-results")).to_contain_text("no score until the run completes")
        seen: list[dict[str, int]] = []
        deadline = timezone.now() + timezone.timedelta(seconds=90)
        while timezone.now() < deadline:
            state = partial_state(page)
            if state is None:  # reloading onto the final report: read the new page
                page.wait_for_load_state()
                continue
            if not state["partial"]:
                break  # the run ended and the page reloaded onto the final report
            counts = state["counts"]
            if counts and (not seen or counts != seen[-1]):
                seen.append(counts)
                # While it runs: no bold score, no accuracy over planned cases (same read).
                assert state["score"] == 0 and state["table"] == 0, state
                if len(seen) == 2:
                    screenshot(page, "live-partial-results")
            page.wait_for_timeout(300)
        expect(page.locator("#run-status")).to_have_text("completed", timeout=120_000)
    totals = [sum(c.values()) for c in seen]
    # The counts rose, in steps, before the run ended; never back down.
    assert len(seen) >= 2 and totals == sorted(totals) and totals[0] < totals[-1], seen
    # Seen part-way; the last case may complete a moment before the run ends (its end-of-run
    # work runs after it), and then the page still shows counts and no score — asserted above.
    assert totals[0] < 6, "the partial counts were seen before the last case completed"
    assert list(seen[0]) == ["mmlu-pro", "gpqa"]  # the spec's order
    expect(page.locator("p.score strong").first).to_be_visible()
    expect(page.locator("#partial-results")).to_have_count(0)


def test_select_all_ticks_the_boxes_and_unticking_one_after_it_freezes_eight(
    logged_in_page, live_server
):
    page = logged_in_page
    for benchmark in ADAPTERS:
        source_prepare(benchmark=benchmark, profile="smoke")
    for slug, name in (("sim-strong", "strong"), ("sim-judge", "judge"), ("sim-user", "user")):
        f.target_create(slug=slug, name=name, model=slug)

    page.goto(f"{live_server.url}/runs/new/")
    page.locator("input[type=radio][name=profile][value=smoke]").check()
    select_all = page.get_by_label("Select all benchmarks")
    expect(select_all).to_be_visible()
    select_all.check()
    for benchmark in ADAPTERS:
        expect(page.locator(f"#bench-{benchmark}")).to_be_checked()
    page.locator("#bench-gpqa").uncheck()
    expect(select_all).not_to_be_checked()  # it follows the boxes
    expect(page.get_by_label("User simulator for tau3")).to_have_value("sim-user")
    expect(page.get_by_label("Judge for simpleqa")).to_have_value("sim-judge")
    page.locator("#target-sim-strong").check()
    page.get_by_role("button", name="Review plan").click()

    expect(page.get_by_role("heading", name="Review plan")).to_be_visible()
    expect(page.locator("#plan-benchmarks")).not_to_contain_text("gpqa")
    expect(page.locator("#plan-benchmarks")).to_contain_text("sim-user")
    expect(page.locator("#plan-limits")).to_contain_text("Request timeout")
    screenshot(page, "review-eight")
    page.get_by_role("button", name="Start evaluation").click()
    expect(page).to_have_url(re.compile(r"/runs/\d+/$"))
    run = Run.objects.get()
    assert frozen_selection(run) == {b for b in ADAPTERS if b != "gpqa"}
    # The review page showed each of the eight: planned, or named as not runnable here.
    assert len(run.manifest["benchmarks"]) + len(run.manifest.get("not_run", [])) >= 8
    assert run.manifest["simulators"]["tau3"]["slug"] == "sim-user"
    purge_broker()  # no worker listens in this test


def test_cancel_asks_first(logged_in_page, live_server, member):
    page = logged_in_page
    f.target_create(slug="sim-strong", prices={"sim-strong": es.PRICES["sim-strong"]})
    dataset = es.fixture_dataset(["mmlu-pro"], per_benchmark=2)
    run, _ = run_create(
        owner=member, plan={"name": "to cancel", "dataset": dataset.pk, "targets": ["sim-strong"]}
    )
    purge_broker()  # no worker: the run stays as it is
    Run.objects.filter(pk=run.pk).update(status="running", started_at=timezone.now())
    page.goto(f"{live_server.url}/runs/{run.pk}/")
    dialogs: list[str] = []

    def dismiss(dialog) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.once("dialog", dismiss)
    page.get_by_role("button", name="Cancel run").click()
    page.wait_for_timeout(500)
    assert dialogs and "cannot be undone" in dialogs[0]
    run.refresh_from_db()
    assert run.cancel_requested_at is None  # said no: nothing sent

    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Cancel run").click()
    expect(page.locator("ul.messages")).to_contain_text("Cancellation requested")
    run.refresh_from_db()
    assert run.cancel_requested_at is not None
    assert RunEvent.objects.filter(run=run, type="run.cancel_requested").count() == 1


def test_a_submitted_recovery_is_listed_on_the_recovery_page(logged_in_page, live_server, member):
    page = logged_in_page
    f.target_create(slug="sim-strong", prices={"sim-strong": es.PRICES["sim-strong"]})
    dataset = es.fixture_dataset(["mmlu-pro"], per_benchmark=3)
    run, _ = run_create(
        owner=member, plan={"name": "parent", "dataset": dataset.pk, "targets": ["sim-strong"]}
    )
    Run.objects.filter(pk=run.pk).update(status="cancelled", finished_at=timezone.now())
    Cell.objects.filter(run=run).update(status="cancelled")
    purge_broker()
    page.goto(f"{live_server.url}/runs/{run.pk}/recovery/?mode=undispatched")
    expect(page.locator("#recovery-children")).to_contain_text("None yet")
    page.get_by_role("button", name="Submit recovery").click()
    expect(page.locator("#child-run-link")).to_be_visible()
    child = Run.objects.get(parent=run)
    expect(page.locator("#recovery-children")).to_contain_text(f"run #{child.pk}")
    expect(page.locator("#recovery-children")).not_to_contain_text("None yet")
    purge_broker()


@pytest.fixture
def scicode_test_data(settings, monkeypatch, tmp_path_factory):
    """SciCode's test data on this server, as the demo has it: the web process (this one,
    which freezes the plan) and the worker (a child started after this fixture) both see it."""
    from datasets.scicode_fixture_data import write_fixture_test_data

    path = str(write_fixture_test_data(tmp_path_factory.mktemp("scicode") / "test_data.h5"))
    monkeypatch.setenv("SRBENCH_SCICODE_H5", path)
    settings.SRBENCH_SCICODE_H5 = path
    return path


@pytest.mark.worker
def test_a_nine_benchmark_run_is_created_and_completed_from_the_form_alone(
    scicode_test_data, logged_in_page, live_server, celery_worker
):
    """The demo's own nine-benchmark evaluation, reproduced from Create evaluation alone:
    Select all, one subject target, the judges and τ³'s user simulator as the registry
    defaults them; the run completes with a result for every benchmark. The server holds
    SciCode's test data, as the demo's does, so all nine run (none is left out)."""
    page = logged_in_page
    nine = list(ADAPTERS)
    for benchmark in nine:
        source_prepare(benchmark=benchmark, profile="smoke")
    with es.simulator(nine) as url:
        es.sim_targets(url)
        page.goto(f"{live_server.url}/runs/new/?profile=smoke")
        page.get_by_label("Select all benchmarks").check()
        for benchmark in nine:
            expect(page.locator(f"#bench-{benchmark}")).to_be_checked()
        page.locator("#target-sim-strong").check()
        expect(page.get_by_label("User simulator for tau3")).to_have_value("sim-user")
        page.get_by_label("Concurrency").fill("16")
        page.get_by_role("button", name="Review plan").click()
        expect(page.locator("#plan-hash")).to_be_visible()
        page.get_by_role("button", name="Start evaluation").click()
        expect(page).to_have_url(re.compile(r"/runs/\d+/$"))
        expect(page.locator("#run-status")).to_have_text(
            re.compile("completed|failed|interrupted|cancelled"), timeout=400_000
        )
    run = Run.objects.get()
    failures = list(
        Cell.objects.filter(run=run).exclude(status="completed").values_list("benchmark", "error")
    )
    assert run.status == "completed", (run.stop_reason, failures[:5])
    assert set(run.manifest["benchmarks"]) == set(nine) and "not_run" not in run.manifest
    assert {c for c in Cell.objects.filter(run=run).values_list("benchmark", flat=True)} == set(
        nine
    )
    assert run.manifest["simulators"]["tau3"]["slug"] == "sim-user"
    expect(page.locator("p.score strong").first).to_be_visible()
    table = page.locator("table.per-benchmark").first
    for benchmark in run.manifest["benchmarks"]:
        expect(table).to_contain_text(benchmark)
    screenshot(page, "nine-from-the-form")
