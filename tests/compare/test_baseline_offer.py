"""Step 1 of the Compare page read a page at a time (issue 38: O(page shown), not O(runs)).

The offer of baselines is paged and counted by the database (`compare.selectors.baseline_offer`).
What it offers must be what the rule says (R11.1): a live, terminal, top-level run with a single
model whose every cell has an outcome, and at least one other run comparable with it (or another
target of its own). The expected offer here is worked out independently: comparability by the
comparison's own re-verification (`runs_differences`, pair by pair), outcomes from the cells.
"""

from __future__ import annotations

import re

import pytest
from rest_framework.test import APIClient

from compare import selectors
from compare.compatibility import runs_differences
from compare.views import PAGE_SIZE
from runs.models import CELL_OUTCOMES, TERMINAL_RUN_STATUSES, Cell, Run, RunSummary
from srbench.digits import ascii_digits
from tests import factories as f
from tests.compare import builders as b

pytestmark = pytest.mark.django_db


def _expected(q: str = "") -> list[tuple[int, int, list[str]]]:
    """(run id, comparable runs, single models with complete results), newest first."""
    runs = list(
        Run.objects.filter(
            mode=Run.Mode.LIVE, status__in=TERMINAL_RUN_STATUSES, parent__isnull=True
        ).order_by("-created_at", "-id")
    )
    q = q.strip().lower()
    out = []
    for run in runs:
        targets = run.manifest["targets"]
        complete = [
            t["slug"]
            for t in targets
            if t["kind"] == "single"
            and not Cell.objects.filter(run=run, target__slug=t["slug"])
            .exclude(status__in=CELL_OUTCOMES)
            .exists()
        ]
        partners = sum(1 for o in runs if o.pk != run.pk and not runs_differences(run, o))
        if not complete or not (partners or len(targets) > 1):
            continue
        words = [run.name.lower()] + [str(t[k]).lower() for t in targets for k in ("slug", "model")]
        by_id = ascii_digits(q.lstrip("#")) and int(q.lstrip("#")) == run.pk
        if q and not by_id and not any(q in w for w in words):
            continue
        out.append((run.pk, partners, complete))
    return out


@pytest.fixture
def many_kinds_of_runs():
    """Several fingerprint groups, prices two ways in a group, a run pricing one model two ways,
    recovery children, non-terminal and preview runs, a cell without an outcome and runs whose
    summary row is missing."""
    qs3, qs4, qs2 = (
        b.questions({"mmlu-pro": 3}),
        b.questions({"mmlu-pro": 4}),
        b.questions({"gpqa": 2}),
    )
    base, weak, cand = b.target("o-base"), b.target("o-weak", model="m-weak"), b.target("o-cand")
    dearer = {model: {**row, "output": "99"} for model, row in b.PRICES.items()}
    dear = b.target("o-dear", prices=dearer)
    spelled = {model: {**row, "output": "15.0"} for model, row in b.PRICES.items()}
    router = b.target("o-router", kind="mom")
    made = [
        b.run(qs3, {base: [True, False, True], weak: [False, False, True]}),
        b.run(qs3, {cand: [True, True, False]}),
        b.run(qs3, {b.target("o-spelled", prices=spelled): [True, True, True]}),
        b.run(qs3, {dear: [True, True, True]}),
        b.run(qs3, {dear: [False, True, True]}, status="failed"),
        b.run(qs3, {base: [True, "cancelled", True]}, status="cancelled"),
        b.run(qs3, {base: [True, True, True]}, status="running"),
        b.run(qs3, {base: [True, True, True]}, mode="preview"),
        b.run(qs3, {router: [True, True, True]}),
        b.run(qs4, {cand: [True, True, False, False]}),
        b.run(qs4, {base: [True, None, False, True]}),
        b.run(qs4, {base: [True, True, True, True], dear: [True, True, True, True]}),
        b.run(qs2, {cand: [True, True]}),  # alone in its group
        # A price that is not a number equal to itself: comparable with no run (runs_differences).
        b.run(qs4, {b.target("o-nan", prices={"m-strong": {"input": "NaN"}}): [True] * 4}),
        b.run(qs2, {router: [True, True], weak: [True, False]}, status="interrupted"),
    ]
    # A recovery child of a comparable run, planned like it (never offered: not top-level).
    f.run_create(
        manifest=b.manifest(qs3, [cand]),
        status="completed",
        parent=made[1],
        dataset=made[1].dataset,
    )
    Cell.objects.filter(run=made[10], correct__isnull=True).update(status="sent_unknown")
    RunSummary.objects.filter(run__in=[made[9], made[10], made[13]]).delete()
    for i, run in enumerate(made):
        Run.objects.filter(pk=run.pk).update(
            name=f"Offer run {i} {'even' if i % 2 == 0 else 'odd'}"
        )
    return made


@pytest.fixture
def api():
    client = APIClient()
    client.force_authenticate(f.user_create())
    return client


def _api_offer(api, q: str, page_size: int) -> list[tuple[int, int, list[str]]]:
    out, page = [], 1
    while True:
        doc = api.get("/api/v1/compare/baselines/", {"q": q, "page": page, "page_size": page_size})
        rows = doc.json()["results"]
        out += [(r["id"], r["comparable_runs"], list(r["baseline_targets"])) for r in rows]
        if not rows:
            assert doc.json()["count"] == len(out)
            return out
        page += 1


@pytest.mark.parametrize("q", ["", "odd", "O-DEAR", "m-weak", "#", "offer run 1", "nothing"])
def test_the_offer_paged_by_the_database_is_the_rules_offer(many_kinds_of_runs, api, q):
    expected = _expected(q)
    if q == "":
        assert len(expected) >= 5  # the fixture offers several runs, and hides as many
    assert _api_offer(api, q, page_size=2) == expected
    assert _api_offer(api, q, page_size=100) == expected


def test_an_id_search_and_the_page_show_the_rules_offer(many_kinds_of_runs, api, client):
    expected = _expected()
    first = expected[-1][0]
    assert _api_offer(api, f"#{first}", page_size=5) == _expected(f"#{first}")
    # A NUL cannot reach the database's text: refused before it, as before this change.
    assert api.get("/api/v1/compare/baselines/", {"q": "a\x00"}).status_code == 400
    client.force_login(f.user_create())
    html = client.get("/compare/").content.decode()
    rows = re.findall(r'<tr data-run="(\d+)">(.*?)</tr>', html, re.S)
    assert [int(pk) for pk, _ in rows] == [pk for pk, _, _ in expected]
    for (_, row), (_, count, complete) in zip(rows, expected, strict=True):
        assert f'data-label="Comparable runs">{count}</td>' in row
        assert f'data-label="Single models with complete results">{", ".join(complete)}</td>' in row


def test_step_one_builds_only_the_options_it_shows(client):
    """O(page shown): with more offered runs than a page, only the page's runs are read into
    options (the per-process cache of their frozen parts holds only them afterwards)."""
    qs = b.questions({"mmlu-pro": 2})
    shared = b.target("o-shared")
    runs = [b.run(qs, {shared: [True, False]}) for _ in range(PAGE_SIZE + 3)]
    client.force_login(f.user_create())
    selectors._FROZEN.clear()
    html = client.get("/compare/").content.decode()
    assert f"({PAGE_SIZE + 3} runs)" in html
    assert len(selectors._FROZEN) == PAGE_SIZE
    assert {pk for pk, _plan in selectors._FROZEN} == {r.pk for r in runs[3:]}
    html = client.get("/compare/?bpage=2").content.decode()
    assert re.findall(r'<tr data-run="(\d+)">', html) == [str(r.pk) for r in runs[2::-1]]
    # A page past the end is the last page, as Django's paginator makes it.
    assert client.get("/compare/?bpage=99").content.decode().count("<tr data-run=") == 3


def test_runs_packed_before_the_offer_facts_are_filled_once(many_kinds_of_runs, api):
    """A run whose cases were packed before the offer's facts were kept (null facts) or never
    packed at all is offered as the rule says; its facts are kept by the first offer."""
    from compare.models import PlanCases

    expected = _expected()
    assert _api_offer(api, "", page_size=100) == expected  # packs every eligible run
    PlanCases.objects.update(
        offer_targets=None, offer_singles=[], offer_terms=[], offer_prices=None
    )
    PlanCases.objects.filter(run=many_kinds_of_runs[0]).delete()
    assert _api_offer(api, "", page_size=3) == expected
    assert not PlanCases.objects.filter(offer_targets__isnull=True).exists()
    assert PlanCases.objects.filter(run=many_kinds_of_runs[0]).exists()
