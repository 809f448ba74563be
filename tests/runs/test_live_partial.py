"""Live partial results (issue 23; SPEC R10.2 progress, R13.2 results): while a run runs, the
live section — the one the htmx poll replaces — shows completed/planned per benchmark and
target with the accuracy and Wilson interval over the cases completed so far, labelled
partial; no score and no accuracy over planned cases until the run has ended."""

from __future__ import annotations

import re

import pytest
from django.utils import timezone

from runs.models import Cell, Run
from tests import factories as f
from tests.runs.test_pages import manifest_for

# Committed transactions: the live sums the partial rows read are applied when a transaction
# commits (runs/0011_live_sums), as every write of the engine does.
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def member(client):  # type: ignore[no-untyped-def]
    user = f.user_create(username="alice")
    client.force_login(user)
    return user


def running_run(done: int, *, planned: int = 6) -> Run:
    target = f.target_create(slug="subject-a")
    run = f.run_create(
        name="live",
        status="running",
        # Stored in a non-canonical order: the pages show the spec's order (mmlu-pro first).
        manifest=manifest_for([target], benchmarks=("gpqa", "mmlu-pro")),
        started_at=timezone.now(),
    )
    for i in range(planned):
        benchmark = "gpqa" if i % 2 else "mmlu-pro"
        Cell.objects.create(
            run=run,
            question=f.question_create(benchmark=benchmark),
            target=target,
            benchmark=benchmark,
            status="completed" if i < done else "pending",
            scored=i < done,
            correct=(i % 4 == 0) if i < done else None,
        )
    return run


def completed_counts(html: str) -> dict[str, str]:
    rows = re.findall(
        r'<tr class="partial-row" data-benchmark="([a-z-]+)".*?'
        r'<span class="partial-completed">(\d+)</span> / (\d+)',
        html,
        re.S,
    )
    return {b: f"{done}/{planned}" for b, done, planned in rows}


def test_a_running_run_shows_partial_counts_and_no_score(client, member):
    run = running_run(done=2)
    html = client.get(f"/runs/{run.pk}/").content.decode()
    # Canonical order (mmlu-pro before gpqa), completed of planned, labelled partial.
    assert completed_counts(html) == {"mmlu-pro": "1/3", "gpqa": "1/3"}
    assert list(completed_counts(html)) == ["mmlu-pro", "gpqa"]
    live = re.search(r'<div id="partial-results">.*?</div>', html, re.S).group(0)
    assert "Partial results" in live and "so far" in live
    assert "[0.207, 1.000]" in live  # Wilson(1 of 1 completed), not over the 3 planned
    assert "<strong>" not in re.search(r'<p class="score[^"]*".*?</p>', html, re.S).group(0)
    assert "compact per-benchmark" not in html and "<svg" not in html

    # The poll of the live section carries the same rows, and they move.
    Cell.objects.filter(run=run, status="pending", benchmark="gpqa").update(
        status="completed", scored=True, correct=False
    )
    poll = client.get(
        f"/runs/{run.pk}/?tab=results&was=active",
        headers={"HX-Request": "true", "HX-Target": "run-live"},
    ).content.decode()
    assert poll.lstrip().startswith('<section id="run-live"')
    assert completed_counts(poll) == {"mmlu-pro": "1/3", "gpqa": "3/3"}
    # The title's status badge is refreshed by the same poll.
    assert '<span class="badge running" id="run-status" hx-swap-oob="true">running</span>' in poll


def test_a_finished_run_shows_the_score_and_no_partial_rows(client, member):
    run = running_run(done=6)
    Run.objects.filter(pk=run.pk).update(status="completed", finished_at=timezone.now())
    html = client.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="partial-results"' not in html and completed_counts(html) == {}
    score = re.search(r'<p class="score">.*?</p>', html, re.S).group(0)
    assert "<strong>" in score
    assert "compact per-benchmark" in html
    table = re.search(r'<table class="compact per-benchmark[^"]*">.*?</table>', html, re.S).group(0)
    assert re.findall(r"<tr><td>([a-z-]+)</td>", table) == ["mmlu-pro", "gpqa"]
