"""The dashboard in a real browser (issue 8): a person's path from login to a finished run's
evidence, a network drop on the Runs page, a run created outside the browser appearing on
an open page, and the evidence tab's reads. Every step is asserted on what the page shows."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from datasets.services import source_prepare
from runs.models import Call, Run, RunEvent
from runs.planning.services import run_create
from tests import factories as f
from tests.e2e.conftest import screenshot
from tests.runs import engine_support as es

pytestmark = pytest.mark.e2e

BENCHMARKS = ["mmlu-pro", "gpqa", "simpleqa"]
# Slow enough that calls are visibly in flight, fast enough for a test: ~1 s per answer.
SLOW = {"sim-strong": {"ttft_s": 0.6, "tokens_per_second": 40.0}}
SIMPLEQA_REFERENCE_URLS = ("srbench-fixture/boiling", "srbench-fixture/painting")


def assert_no_reference(page) -> None:
    html = page.content()
    for needle in SIMPLEQA_REFERENCE_URLS:
        assert needle not in html, (page.url, needle)


def elapsed_text(page) -> str:
    return page.locator("#elapsed").inner_text()


@pytest.mark.worker
def test_a_person_creates_a_smoke_evaluation_watches_it_and_reads_its_evidence(
    page, live_server, member, celery_worker
):
    for benchmark in BENCHMARKS:
        source_prepare(benchmark=benchmark, profile="smoke")
    with es.simulator(BENCHMARKS, models=SLOW) as url:
        es.sim_targets(url)

        # Log in through the form.
        page.goto(f"{live_server.url}/")
        expect(page).to_have_url(re.compile(r"/login/"))
        page.get_by_label("Username").fill("alice")
        page.get_by_label("Password").fill("correct horse battery")
        page.get_by_role("button", name=re.compile("log in", re.I)).click()
        expect(page.get_by_role("heading", name="Runs")).to_be_visible()
        screenshot(page, "01-runs-empty")

        # Profile first, then the prepared benchmarks of that profile.
        page.get_by_role("link", name="Create evaluation").first.click()
        page.locator("input[type=radio][name=profile][value=smoke]").check()
        expect(page.locator("#benchmarks")).to_contain_text("gpqa")
        page.get_by_label("Select all benchmarks").check()
        for benchmark in BENCHMARKS:
            expect(page.locator(f"#bench-{benchmark}")).to_be_checked()
        page.locator("#target-sim-strong").check()
        page.get_by_label("Judge for simpleqa").select_option("sim-judge")
        page.get_by_label("Concurrency").fill("2")
        page.get_by_label("Max output tokens").fill("512")
        screenshot(page, "02-create-evaluation")
        page.get_by_role("button", name="Review plan").click()

        # The frozen plan, reviewed before anything starts.
        expect(page.get_by_role("heading", name="Review plan")).to_be_visible()
        expect(page.locator("#plan-hash")).to_have_text(re.compile(r"^[0-9a-f]{64}$"))
        expect(page.locator("#plan-benchmarks")).to_contain_text("simpleqa")
        expect(page.locator("#plan-limits")).to_contain_text(
            re.compile(r"Concurrency\s*2 calls at a time")
        )
        expect(page.locator("#plan-limits")).to_contain_text(
            re.compile(r"Max output tokens\s*512 tokens")
        )
        expect(page.locator("#worst-case")).to_contain_text("$")
        assert Run.objects.count() == 0
        plan_hash = page.locator("#plan-hash").inner_text()
        screenshot(page, "03-review-plan")
        page.get_by_role("button", name="Start evaluation").click()

        # Watching it run: the elapsed time ticks and calls are in flight.
        expect(page).to_have_url(re.compile(r"/runs/\d+/$"))
        run = Run.objects.get()
        assert run.plan_sha256 == plan_hash
        assert run.manifest["limits"]["concurrency"] == 2
        expect(page.locator(".active-call").first).to_be_visible(timeout=60_000)
        expect(page.locator("#active-calls")).to_contain_text("proves neither answer quality")
        first = elapsed_text(page)
        # Polls: the elapsed time must tick while the run is active (however loaded the host).
        expect(page.locator("#elapsed")).not_to_have_text(first, timeout=60_000)
        screenshot(page, "04-run-in-progress")

        # When it ends the page reloads itself once, onto the final report.
        expect(page.locator("#run-status")).to_have_text("completed", timeout=180_000)
        stats = es.sim_stats(url)
    run.refresh_from_db()
    assert run.status == "completed", run.stop_reason
    expect(page.locator(".per-benchmark").first).to_contain_text("mmlu-pro")
    expect(page.locator(".per-benchmark").first).to_contain_text("[")  # Wilson interval
    expect(page.locator("#tab-body")).to_contain_text("Complete over the plan")
    assert_no_reference(page)
    screenshot(page, "05-run-results")

    # A question, then a call, then the evidence.
    page.get_by_role("tab", name="Questions").click()
    expect(page.locator("#loaded-note")).to_contain_text("results loaded")
    expect(page.locator("#loaded-note")).to_contain_text("Search covers only these loaded")
    screenshot(page, "06-run-questions")
    page.locator("#question-results tbody tr").first.locator("a").first.click()
    expect(page.locator("#final-answer")).to_be_visible()
    expect(page.locator("#cell-calls")).to_contain_text("subject")
    assert_no_reference(page)
    screenshot(page, "07-question")

    page.locator("#cell-calls a").first.click()
    expect(page.locator("#call-usage")).to_contain_text("output")
    expect(page.locator("#call-answer")).to_be_visible()
    assert_no_reference(page)
    screenshot(page, "08-call")

    judge = Call.objects.filter(cell__run=run, role="judge").first()
    page.goto(f"{live_server.url}/runs/{run.pk}/calls/{judge.pk}/")
    expect(page.locator("#request-withheld")).to_be_visible()
    assert_no_reference(page)

    page.goto(f"{live_server.url}/runs/{run.pk}/")
    page.get_by_role("tab", name="Evidence").click()
    expect(page.locator("#event-list")).to_contain_text("run.created")
    expect(page.locator("#events-loaded")).to_have_text(
        f"{RunEvent.objects.filter(run=run).count()} loaded"
    )
    screenshot(page, "09-run-evidence")
    page.get_by_role("tab", name="Calls").click()
    expect(page.locator("#call-list")).to_be_visible()
    screenshot(page, "10-run-calls")
    page.get_by_role("tab", name="Recipe").click()
    expect(page.locator("#recipe-unavailable")).to_contain_text("unavailable for this run")

    # Every call reached the model once: nothing was resubmitted by the pages.
    calls = Call.objects.filter(cell__run=run)
    assert stats["by_call_id"] == {str(c.pk): 1 for c in calls}


@pytest.mark.worker
def test_runs_page_goes_stale_during_a_network_drop_and_recovers_without_resubmitting(
    logged_in_page, live_server, member, celery_worker
):
    page = logged_in_page
    with es.simulator(["mmlu-pro"], models=SLOW) as url:
        es.sim_targets(url)
        dataset = es.fixture_dataset(["mmlu-pro"])
        run, _ = run_create(
            owner=member,
            plan={
                "name": "through the drop",
                "dataset": dataset.pk,
                "targets": ["sim-strong"],
                "limits": {"concurrency": 2},
            },
        )
        page.goto(f"{live_server.url}/")
        row = page.locator(f'tr[data-run-id="{run.pk}"]')
        expect(row).to_contain_text("through the drop")

        page.route(f"{live_server.url}/**", lambda route: route.abort())
        expect(page.locator("#stale-notice")).to_contain_text("stale since", timeout=60_000)
        expect(page.locator("body")).to_have_class(re.compile(r"\bis-stale\b"))
        expect(row).to_be_visible()  # the last good table stays
        screenshot(page, "11-runs-stale")
        page.wait_for_timeout(4_000)
        page.unroute(f"{live_server.url}/**")

        expect(page.locator("#stale-notice")).to_be_hidden(timeout=60_000)
        expect(page.locator("body")).not_to_have_class(re.compile(r"\bis-stale\b"))
        expect(row.locator(".badge").first).to_have_text("completed", timeout=180_000)
        stats = es.sim_stats(url)

    # One run, started once; every call reached the model exactly once.
    assert Run.objects.count() == 1
    assert RunEvent.objects.filter(run=run, type="run.created").count() == 1
    assert RunEvent.objects.filter(run=run, type="run.started").count() == 1
    calls = Call.objects.filter(cell__run=run)
    assert stats["by_call_id"] == {str(c.pk): 1 for c in calls}


def test_a_run_created_outside_the_browser_appears_on_an_open_runs_page(
    logged_in_page, live_server, member
):
    page = logged_in_page
    page.goto(f"{live_server.url}/")
    expect(page.locator("#runs-table")).to_contain_text("No runs yet")
    page.evaluate("window.__notReloaded = true")

    # What `manage.py benchmark run` does, through the same service.
    target = f.target_create(slug="cli-target")
    dataset = es.fixture_dataset(["mmlu-pro"], name="cli data")
    run, _ = run_create(
        owner=member, plan={"name": "from the cli", "dataset": dataset.pk, "targets": [target.slug]}
    )
    expect(page.locator(f'tr[data-run-id="{run.pk}"]')).to_contain_text(
        "from the cli", timeout=60_000
    )
    assert page.evaluate("window.__notReloaded") is True
    screenshot(page, "12-runs-discovered")


def test_evidence_loads_more_filters_loaded_events_and_keeps_them_when_a_refresh_fails(
    logged_in_page, live_server
):
    page = logged_in_page
    run = f.run_create(name="busy run", status="running")
    RunEvent.objects.bulk_create(
        RunEvent(run=run, seq=i, type="call.sent" if i % 3 else "cell.returned", payload={"i": i})
        for i in range(1, 1201)
    )
    page.goto(f"{live_server.url}/runs/{run.pk}/?tab=evidence")
    expect(page.locator("#events-loaded")).to_have_text("1000 loaded")
    # Swapped-in content gets its hx- triggers when it settles: at once, so the filter picked
    # right after Load more below is not lost (with htmx's default 20 ms settle delay it was,
    # now and then, on a loaded machine).
    assert page.evaluate("htmx.config.defaultSettleDelay") == 0
    expect(page.locator("#event-list tbody tr")).to_have_count(25)
    expect(page.locator("#event-list tbody tr").first).to_contain_text("1")

    page.get_by_role("link", name="Load more events").click()
    expect(page.locator("#events-loaded")).to_have_text("1200 loaded")
    expect(page).to_have_url(re.compile(r"upto=1200"))

    page.get_by_label("Event type (loaded events only)").select_option("cell.returned")
    expect(page.locator("#events-matching")).to_have_text("400 of them cell.returned")
    expect(page.locator("#event-list tbody tr").first).to_contain_text("cell.returned")
    page.locator("#events-next").click()
    expect(page.locator("#event-list tbody tr").first).to_contain_text("78")  # 26th: seq 78
    screenshot(page, "13-evidence-filtered")

    # New events arrive; the refresh fails: what was loaded stays, with its cursor.
    RunEvent.objects.bulk_create(
        RunEvent(run=run, seq=i, type="cell.returned", payload={}) for i in range(1201, 1211)
    )
    rows_before = page.locator("#event-list tbody").inner_text()
    page.route(f"{live_server.url}/**", lambda route: route.abort())
    page.get_by_role("link", name="Refresh evidence").click()
    expect(page.locator("#evidence-error")).to_contain_text("Refresh failed")
    expect(page.locator("#events-loaded")).to_have_text("1200 loaded")
    assert page.locator("#event-list tbody").inner_text() == rows_before
    assert page.locator("#evidence").get_attribute("data-upto") == "1200"
    screenshot(page, "14-evidence-refresh-failed")
    page.unroute(f"{live_server.url}/**")

    page.get_by_role("link", name="Refresh evidence").click()
    expect(page.locator("#events-loaded")).to_have_text("1210 loaded")
    expect(page.locator("#evidence-error")).to_be_hidden()


def test_every_page_renders_for_a_member_and_is_screenshotted(logged_in_page, live_server):
    page = logged_in_page
    es.fixture_dataset(["mmlu-pro", "simpleqa"], name="browsable")
    for name, path in (
        ("15-targets", "/targets/"),
        ("16-datasets", "/datasets/"),
        ("17-recipes", "/recipes/"),
    ):
        page.goto(f"{live_server.url}{path}")
        expect(page.locator("main h1")).to_be_visible()
        assert_no_reference(page)
        screenshot(page, name)
    page.goto(f"{live_server.url}/datasets/")
    page.locator("main table a").first.click()
    page.get_by_role("link", name="Evaluate dataset").click()
    expect(page.locator("#benchmarks")).to_contain_text("browsable")
    expect(page.locator("#bench-mmlu-pro")).to_be_checked()
    assert_no_reference(page)
    screenshot(page, "18-evaluate-dataset")
