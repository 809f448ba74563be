"""The run pages through the Django test client (issue 8): what a member sees, filters in the
URL, constant query counts as runs and calls grow, and no reference answer on any page."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from datasets.services import source_prepare
from runs.models import Call, Cell, Run, RunEvent
from tests import factories as f
from tests.runs import engine_support as es

pytestmark = pytest.mark.django_db

SIMPLEQA_REFERENCES = (
    "The Black Sea",
    "Vincent van Gogh",
    "42.195",
    "srbench-fixture/boiling",
    "srbench-fixture/painting",
)


def manifest_for(targets, benchmarks=("mmlu-pro",)):
    return {
        "version": 1,
        "benchmarks": {b: {"weight": "0.1", "kind": "mcq", "cases": 0} for b in benchmarks},
        "targets": [
            {"slug": t.slug, "kind": t.kind, "model": t.model, "fixed_params": {}} for t in targets
        ],
        "judges": {},
        "prices": {t.slug: t.prices for t in targets},
        "cases": [],
        "limits": {},
        "sampling": {},
        "slots": 1,
    }


def run_with_calls(
    n_calls: int, *, name: str = "load", status: str = "running", **call_fields
) -> Run:
    """A run with one completed subject call per cell (finished calls are immutable, so
    their fields are given here)."""
    target = f.target_create()
    question = f.question_create()
    run = f.run_create(
        name=name,
        status=status,
        manifest=manifest_for([target]),
        started_at=timezone.now(),
    )
    cells = Cell.objects.bulk_create(
        Cell(
            run=run,
            question=question,
            target=target,
            slot=i,
            benchmark="mmlu-pro",
            status="completed",
            scored=True,
            correct=i % 2 == 0,
            final_answer=f"answer {i}",
        )
        for i in range(n_calls)
    )
    now = timezone.now()
    fields = {
        "role": "subject",
        "sequence": 0,
        "status": "completed",
        "target": target,
        "request": {"model": target.model, "messages": [{"role": "user", "content": "q"}]},
        "sent_at": now,
        "finished_at": now,
        "duration_ms": 100.0,
        "input_tokens": 10,
        "cached_input_tokens": 0,
        "cache_write_tokens": 0,
        "output_tokens": 5,
        "cost_usd": Decimal("0.0001"),
        "served_model": target.model,
        **call_fields,
    }
    f.calls_insert(list(Call(cell=cell, **fields) for cell in cells))
    RunEvent.objects.bulk_create(
        RunEvent(run=run, seq=i + 1, type="cell.returned", payload={"cell": c.pk})
        for i, c in enumerate(cells)
    )
    return run


@pytest.fixture
def member(client):
    user = f.user_create(username="member")
    client.force_login(user)
    return user


def test_anonymous_visitor_is_sent_to_login_from_every_run_page(client):
    run = f.run_create()
    for url in (
        "/",
        "/runs/new/",
        f"/runs/{run.pk}/",
        f"/runs/{run.pk}/?tab=evidence",
        "/targets/",
    ):
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith("/login/"), url


def test_runs_page_shows_progress_failures_target_type_and_last_update(client, member):
    run = run_with_calls(3, name="visible-run")
    first = Cell.objects.filter(run=run).order_by("pk").first()
    Cell.objects.filter(pk=first.pk).update(status="failed")
    html = client.get("/").content.decode()
    row = re.search(rf'<tr data-run-id="{run.pk}">(.*?)</tr>', html, re.S).group(1)
    assert "visible-run" in row
    assert "2 / 3" in row  # completed / planned
    assert re.search(r'<td class="num"[^>]*>1</td>', row)  # one failure
    assert "single model" in row
    assert "running" in row


def test_runs_filters_live_in_the_url_and_narrow_the_table(client, member):
    f.run_create(name="alpha-run", status="completed")
    f.run_create(name="beta-run", status="failed")
    html = client.get("/?name=alpha&status=completed").content.decode()
    assert "alpha-run" in html and "beta-run" not in html
    # The form shows the filter it applied, so a reload or a bookmark keeps it.
    assert re.search(r'name="name"[^>]*value="alpha"', html)
    assert re.search(r'<option value="completed" selected>', html)


def test_htmx_poll_of_runs_returns_only_the_table_and_keeps_filters(client, member):
    f.run_create(name="alpha-run")
    response = client.get("/?name=alpha", headers={"HX-Request": "true"})
    html = response.content.decode()
    assert html.lstrip().startswith('<section id="runs-table"')
    assert "<header" not in html
    assert 'hx-get="/?name=alpha"' in html
    assert "HX-Request" in response["Vary"]


def test_runs_page_paginates_by_25(client, member):
    for i in range(30):
        f.run_create(name=f"r{i:02d}")
    first = client.get("/").content.decode()
    assert first.count("data-run-id=") == 25
    assert "Page 1 of 2" in first
    second = client.get("/?page=2").content.decode()
    assert second.count("data-run-id=") == 5


def test_runs_page_query_count_does_not_grow_with_runs(client, member):
    for _ in range(5):
        run_with_calls(2)
    with CaptureQueriesContext(connection) as few:
        assert client.get("/").status_code == 200
    for _ in range(45):
        run_with_calls(2)
    with CaptureQueriesContext(connection) as many:
        assert client.get("/").status_code == 200
    assert len(many) == len(few), [q["sql"][:120] for q in many.captured_queries]


@pytest.mark.parametrize("tab", ["results", "questions", "calls", "evidence", "recipe"])
def test_run_detail_query_count_does_not_grow_with_calls(client, member, tab):
    small = run_with_calls(10)
    large = run_with_calls(200)
    with CaptureQueriesContext(connection) as few:
        assert client.get(f"/runs/{small.pk}/?tab={tab}").status_code == 200
    with CaptureQueriesContext(connection) as many:
        assert client.get(f"/runs/{large.pk}/?tab={tab}").status_code == 200
    assert len(many) == len(few), [q["sql"][:120] for q in many.captured_queries]


def test_run_detail_results_come_from_the_full_report(client, member):
    run = run_with_calls(120, status="completed")
    Run.objects.filter(pk=run.pk).update(finished_at=timezone.now())
    html = client.get(f"/runs/{run.pk}/").content.decode()
    # 120 planned, 60 correct: the whole run, although the Questions tab loads only 100.
    assert '<dd class="num">120</dd>' in html
    assert '<dd class="num">60</dd>' in html
    assert "0.500" in html and "Wilson" in html
    assert "Cache-neutral cost prices every input token" in html
    assert "<svg" in html


def test_unknown_tokens_and_costs_are_shown_as_unknown_not_zero(client, member):
    run = run_with_calls(
        2,
        status="completed",
        input_tokens=None,
        cached_input_tokens=None,
        output_tokens=None,
        cost_usd=None,
    )
    html = client.get(f"/runs/{run.pk}/").content.decode()
    tokens = re.search(r'<table class="compact tokens">(.*?)</table>', html, re.S).group(1)
    assert tokens.count(">unknown<") == 4
    costs = re.search(r'<table class="compact costs">(.*?)</table>', html, re.S).group(1)
    assert 'Subject cost</th><td class="num"><span class="unknown">unknown' in costs


def test_questions_and_calls_read_100_show_25_and_search_only_loaded(client, member):
    run = run_with_calls(130)
    html = client.get(f"/runs/{run.pk}/?tab=calls").content.decode()
    assert "100 calls loaded" in html
    assert html.count(f'<a href="/runs/{run.pk}/calls/') == 25  # shown 25 a page
    assert "Search covers only these loaded records" in html
    nxt = re.search(r'href="([^"]+)" id="next-chunk"', html).group(1).replace("&amp;", "&")
    html2 = client.get(f"/runs/{run.pk}/{nxt}").content.decode()
    assert "30 calls loaded" in html2
    q = client.get(f"/runs/{run.pk}/?tab=questions&q=answer%20129").content.decode()
    # answer 129 is record 130: not in the first 100 loaded, so the search does not find it.
    assert "No loaded result matches" in q


def test_call_content_on_demand_with_buckets_not_reported_distinct_from_zero(client, member):
    run = run_with_calls(
        1,
        content="visible answer B",
        reasoning="long thoughts",
        cached_input_tokens=None,
        cached_reported=False,
        cache_write_tokens=0,
        cost_usd=None,
    )
    call = Call.objects.get(cell__run=run)
    html = client.get(f"/runs/{run.pk}/calls/{call.pk}/").content.decode()
    assert "visible answer B" in html
    assert '<details id="call-reasoning">' in html
    usage = re.search(
        r'<table class="compact usage" id="call-usage">(.*?)</table>', html, re.S
    ).group(1)
    assert 'cache-read input</th><td class="num"><span class="unknown">not reported' in usage
    assert 'cache-write input</th><td class="num">0<' in usage
    panel = client.get(f"/runs/{run.pk}/calls/{call.pk}/", headers={"HX-Request": "true"})
    assert panel.content.decode().lstrip().startswith('<section id="call-panel"')


def test_evidence_reads_1000_then_loads_more_and_filters_loaded_only(client, member):
    run = f.run_create()
    RunEvent.objects.bulk_create(
        RunEvent(run=run, seq=i, type="call.sent" if i % 2 else "cell.returned", payload={})
        for i in range(1, 1301)
    )
    html = client.get(f"/runs/{run.pk}/?tab=evidence").content.decode()
    assert "1000 loaded" in html and "Load more events" in html
    assert html.count('<tr><td class="num">') == 25
    more = client.get(f"/runs/{run.pk}/?tab=evidence&upto=1000&read=more")
    assert more.status_code == 302 and "upto=1300" in more["Location"]
    html = client.get(more["Location"]).content.decode()
    assert "1300 loaded" in html
    filtered = client.get(f"/runs/{run.pk}/?tab=evidence&upto=1000&type=call.sent").content.decode()
    assert "500 of them call.sent" in filtered


def test_cancel_is_a_post_that_requests_cancellation_once(client, member):
    run = f.run_create(status="running", owner=member)  # only the owner or an operator cancels
    assert client.get(f"/runs/{run.pk}/cancel/").status_code == 405
    # Without the page's script the button asks once more on a page; nothing changes yet.
    ask = client.post(f"/runs/{run.pk}/cancel/")
    assert ask.status_code == 200 and 'id="cancel-confirm-form"' in ask.content.decode()
    assert 'name="confirm" value="yes"' in ask.content.decode()
    run.refresh_from_db()
    assert run.cancel_requested_at is None
    assert not RunEvent.objects.filter(run=run, type="run.cancel_requested").exists()
    response = client.post(f"/runs/{run.pk}/cancel/", {"confirm": "yes"})
    assert response.status_code == 303
    run.refresh_from_db()
    assert run.cancel_requested_at is not None
    assert RunEvent.objects.filter(run=run, type="run.cancel_requested").count() == 1


def test_create_evaluation_reviews_then_starts_once_with_the_same_key(client, member):
    for benchmark in ("mmlu-pro", "gpqa"):
        source_prepare(benchmark=benchmark, profile="smoke")
    f.target_create(slug="sim-strong", model="sim-strong", fixed_params={"temperature": 0})
    page = client.get("/runs/new/?profile=smoke").content.decode()
    assert "mmlu-pro" in page and "gpqa" in page and "Select all benchmarks" in page
    assert "temperature = 0" in page  # fixed params shown read-only
    form = {
        "profile": "smoke",
        "seed": "20260918",
        "name": "from the form",
        "benchmarks": ["mmlu-pro", "gpqa"],
        "targets": ["sim-strong"],
        "total_timeout_s": "300",
        "idle_timeout_s": "60",
        "max_output_tokens": "1024",
        "max_output_chars": "200000",
        "concurrency": "2",
        "max_calls_per_case": "4",
        "case_timeout_s": "900",
        "max_run_seconds": "86400",
        "failure_policy": "stop",
        "slots": "1",
        "action": "review",
    }
    review = client.post("/runs/new/", form)
    html = review.content.decode()
    assert review.status_code == 200 and "Review plan" in html, html[:3000]
    assert Run.objects.count() == 0  # reviewing starts nothing
    key = re.search(r'name="idempotency_key" value="([0-9a-f]+)"', html).group(1)
    plan_hash = re.search(r'<code id="plan-hash">([0-9a-f]{64})</code>', html).group(1)
    assert 'Max output tokens</th><td class="num">1024 tokens per call' in html
    start = {**form, "action": "start", "idempotency_key": key, "reviewed_plan_sha256": plan_hash}
    first = client.post("/runs/new/", start)
    second = client.post("/runs/new/", start)  # a resubmitted form
    assert first.status_code == second.status_code == 303
    assert first["Location"] == second["Location"]
    assert Run.objects.count() == 1
    assert Run.objects.get().plan_sha256 == plan_hash


def test_create_evaluation_explains_plan_errors_in_words(client, member):
    source_prepare(benchmark="simpleqa", profile="smoke")
    f.target_create(slug="subject-a")
    html = client.post(
        "/runs/new/",
        {
            "profile": "smoke",
            "seed": "20260918",
            "name": "x",
            "benchmarks": ["simpleqa"],
            "targets": ["subject-a"],
            "total_timeout_s": "300",
            "idle_timeout_s": "600",
            "max_output_tokens": "10",
            "max_output_chars": "10",
            "concurrency": "1",
            "max_calls_per_case": "1",
            "case_timeout_s": "900",
            "max_run_seconds": "86400",
            "failure_policy": "stop",
            "slots": "1",
            "action": "review",
        },
    ).content.decode()
    assert "must be ≤ total_timeout_s" in html
    assert Run.objects.count() == 0


def test_evaluate_dataset_link_prefills_create_evaluation(client, member):
    dataset = es.fixture_dataset(["mmlu-pro", "simpleqa"], name="chosen data")
    page = client.get(f"/datasets/{dataset.pk}/").content.decode()
    assert f'href="/runs/new/?dataset={dataset.pk}"' in page
    form = client.get(f"/runs/new/?dataset={dataset.pk}").content.decode()
    assert "chosen data" in form
    assert re.search(r'value="mmlu-pro" id="bench-mmlu-pro" checked', form)


def test_no_page_shows_a_reference_answer(client, member):
    dataset = es.fixture_dataset(["simpleqa"], name="refs")
    subject = f.target_create(slug="subject-a")
    judge = f.target_create(slug="judge-a")
    run = f.run_create(
        dataset=dataset, status="completed", manifest=manifest_for([subject], ["simpleqa"])
    )
    cell_ids = []
    for question in dataset.questions.all():
        cell = Cell.objects.create(
            run=run,
            question=question,
            target=subject,
            benchmark="simpleqa",
            status="completed",
            scored=True,
            correct=False,
            final_answer="I am not sure",
            grade={"grader": "judge", "verdict": "incorrect"},
        )
        cell_ids.append(cell.pk)
        f.call_create(cell=cell, content="I am not sure", status="completed")
        # The judge saw the reference answer; the engine records that request as sent.
        answer = question.secret.data["answer"]
        f.call_create(
            cell=cell,
            role="judge",
            target=judge,
            status="completed",
            request={"messages": [{"role": "user", "content": f"Gold target: {answer}"}]},
            content=f"The gold target is {answer}; the response is INCORRECT",
        )
    urls = [
        f"/runs/{run.pk}/?tab={tab}"
        for tab in ("results", "questions", "calls", "evidence", "recipe")
    ]
    urls += [f"/runs/{run.pk}/questions/{pk}/" for pk in cell_ids]
    urls += [f"/runs/{run.pk}/calls/{c.pk}/" for c in Call.objects.filter(cell__run=run)]
    urls += [f"/runs/{run.pk}/?tab=calls&call={c.pk}" for c in Call.objects.filter(cell__run=run)]
    urls += ["/", f"/runs/new/?dataset={dataset.pk}"]
    for url in urls:
        html = client.get(url).content.decode()
        for reference in SIMPLEQA_REFERENCES:
            assert reference not in html, (url, reference)
