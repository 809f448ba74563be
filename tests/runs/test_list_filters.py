"""The Runs page's filters and score sort (issue 35 item 7): a refused filter value drops only
itself — the other filters still apply and the page names the value it ignored — and the
score sort ranks a run only against runs over the same benchmark set, grouped and said so on
the page."""

from __future__ import annotations

import html as html_lib
import re

import pytest

from runs.engine.finish import run_report_keep
from runs.models import Run, RunReport
from tests import factories as f
from tests.compare import builders as b

pytestmark = pytest.mark.django_db


def shown_ids(page: str) -> list[int]:
    return [int(pk) for pk in re.findall(r'<tr data-run-id="(\d+)"', page)]


def notice(page: str) -> str:
    box = re.search(r'<div class="notice warning" id="refused-filters".*?</div>', page, re.S)
    return html_lib.unescape(re.sub(r"\s+", " ", box.group(0))) if box else ""


def test_one_refused_filter_value_keeps_the_others_and_is_named(client):
    """issue 35 item 7: before, one invalid value (a stale bookmark, a hand-edited URL) made
    the page drop every filter and show every run without a word."""
    alpha_done = f.run_create(name="alpha one", status="completed", mode="live")
    alpha_running = f.run_create(name="alpha two", status="running", mode="live")
    alpha_preview = f.run_create(name="alpha three", status="completed", mode="preview")
    beta = f.run_create(name="beta", status="completed", mode="live")
    client.force_login(f.user_create())

    page = client.get("/", {"name": "alpha", "status": "bogus", "mode": "live"}).content.decode()
    assert sorted(shown_ids(page)) == sorted([alpha_done.pk, alpha_running.pk])
    assert beta.pk not in shown_ids(page) and alpha_preview.pk not in shown_ids(page)
    said = notice(page)
    assert "Ignored one filter value" in said and "the other filters still apply" in said
    assert "Status “bogus”: not one of: queued, running" in said

    # Two refused values are both named; a refused sort falls back to newest first.
    page = client.get(
        "/", {"name": "alpha", "status": "completed", "profile": "huge", "sort": "cheapest"}
    ).content.decode()
    assert shown_ids(page) == [alpha_preview.pk, alpha_done.pk]  # newest first
    said = notice(page)
    assert "Ignored 2 filter values" in said
    assert "Profile “huge”: not one of: smoke, quick, standard" in said
    assert "Sort by “cheapest”: not one of: oldest, score, spend, completeness" in said

    # The table the filters swap in (htmx) says it too; valid filters say nothing.
    partial = client.get("/?status=bogus&name=beta", headers={"HX-Request": "true"})
    assert shown_ids(partial.content.decode()) == [beta.pk]
    assert "Status “bogus”" in notice(partial.content.decode())
    assert notice(client.get("/?status=completed&name=alpha").content.decode()) == ""


def ended(counts: dict[str, int], outcomes: list[bool], name: str) -> Run:
    qs = b.questions(counts)
    run = b.run(qs, {b.target("t-" + name.replace(" ", "-")): outcomes}, name=name)
    Run.objects.filter(pk=run.pk).update(name=name)
    run_report_keep(run_id=run.pk)
    return run


def test_score_sort_ranks_runs_only_within_their_benchmark_set(client, monkeypatch):
    """issue 35 item 7: a score over MMLU-Pro alone and one over MMLU-Pro + SimpleQA are not
    comparable, so the score sort groups runs by the benchmark set of their frozen manifest:
    best first within a set, the sets by their best score, runs without a score at the end
    of their set, and the page says so with a heading per set (repeated on the next page)."""
    mmlu = {"mmlu-pro": 4}
    both = {"mmlu-pro": 2, "simpleqa": 2}
    a = ended(mmlu, [True, True, False, False], "mmlu half")
    c = ended(both, [True, True, True, False], "both three quarters")
    d = ended(both, [True, False, False, False], "both quarter")
    e = ended(mmlu, [True, True, True, True], "mmlu all")
    g = ended({"simpleqa": 2}, [False, False], "simpleqa none")
    running = b.run(b.questions(mmlu), {b.target("t-running"): [True] * 4}, status="running")
    client.force_login(f.user_create())

    # The expected order, computed here from the runs' own benchmark sets and stored scores.
    runs = [a, c, d, e, g, running]
    score = dict(RunReport.objects.values_list("run_id", "score"))
    sets = {r.pk: tuple(sorted(r.manifest["benchmarks"])) for r in runs}
    best = {}
    for r in runs:
        if score.get(r.pk) is not None:
            best[sets[r.pk]] = max(best.get(sets[r.pk], -1.0), score[r.pk])
    groups = sorted(set(sets.values()), key=lambda s: (s not in best, -best.get(s, 0), s))
    expected = [
        r.pk
        for group in groups
        for r in sorted(
            (r for r in runs if sets[r.pk] == group),
            key=lambda r: (score.get(r.pk) is None, -(score.get(r.pk) or 0), -r.pk),
        )
    ]
    assert expected[:2] == [e.pk, a.pk]  # the premise: MMLU-Pro alone has the best score
    # Across sets the plain score order differs: c (0.75) would come between e and a.
    assert score[c.pk] > score[a.pk]

    page = client.get("/?sort=score").content.decode()
    assert shown_ids(page) == expected
    assert "Sorted by score" in page and "within each benchmark set" in page
    heads = re.findall(r'<tr class="set-head" data-benchmark-set="([^"]*)"', page)
    assert heads == ["mmlu-pro", "mmlu-pro,simpleqa", "simpleqa"]
    # Each heading sits right before the first run of its set.
    for head, first in zip(heads, (e, c, g), strict=True):
        after = page[page.index(f'data-benchmark-set="{head}"') :]
        assert shown_ids(after)[0] == first.pk, head

    # Page by page the order goes on, and a set cut by a page starts with its heading again.
    monkeypatch.setattr("runs.interfaces.views.PAGE_SIZE", 4)
    second = client.get("/?sort=score&page=2").content.decode()
    assert shown_ids(second) == expected[4:]
    assert re.findall(r'data-benchmark-set="([^"]*)"', second)[0] == ",".join(sets[expected[4]])
    # Other sorts are not grouped.
    assert "set-head" not in client.get("/?sort=spend").content.decode()
