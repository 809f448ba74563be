"""A kept recovery plan is read O(page) rows a page (runs/settlement/recovery_store.py): one small
summary row, and its per-cell lists in chunks read by a keyset on their last cell. Every page
read from the kept plan is the page cut from the plan computed afresh, byte for byte: both
lists, several cursors (inside a chunk, on a chunk's last cell, the last page, after the last
cell, beyond the end), several limits; the numbered recovery page too. No model is called."""

from __future__ import annotations

import json
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runs.models import Cell, CellStatus, Run, StoredRecoveryPlan, StoredRecoveryPlanChunk
from runs.settlement import recovery
from runs.settlement.recovery_pages import ELIGIBLE, EXCLUDED, recovery_plan_page
from runs.settlement.recovery_store import (
    CHUNK_CELLS,
    KeptPlanGone,
    recovery_plan_kept,
    recovery_plan_key,
    recovery_plans_forget,
)
from runs.vocabulary.recovery_modes import RecoveryPlanMode
from tests import factories as f
from tests.conftest import purge_broker
from tests.runs.recovery_support import plan_computations
from tests.runs.test_recovery_plan_kept import interrupted_parent

pytestmark = pytest.mark.django_db

MODES = (RecoveryPlanMode.UNDISPATCHED, RecoveryPlanMode.FAILED)


@pytest.fixture(autouse=True)
def _clean_broker():
    yield
    purge_broker()


@pytest.fixture
def computations(monkeypatch) -> list[int]:
    return plan_computations(monkeypatch)


def mixed_parent(owner) -> Run:
    """QUESTIONS cells: every third completed, every fifth (from the second) failed at a known
    cost, the rest never dispatched — both lists of both modes hold items, and the undispatched
    lists span more than one chunk."""
    run = interrupted_parent(owner)
    cells = list(Cell.objects.filter(run=run).order_by("pk"))
    Cell.objects.filter(pk__in=[c.pk for c in cells[::3]]).update(status=CellStatus.COMPLETED)
    for k in range(1, len(cells), 5):
        cell = cells[k]
        if k % 3:  # not one of the completed (every third by position, not by id)
            f.call_create(
                cell=cell, target=run.target, status="failed", output_tokens=10, cost_usd="0.0002"
            )
            Cell.objects.filter(pk=cell.pk).update(status=CellStatus.FAILED)
    return run


def page_bytes(client, run: Run, mode: str, **cursors) -> bytes:
    response = client.get(f"/api/v1/runs/{run.pk}/recovery-plan/", {"mode": mode, **cursors})
    assert response.status_code == 200, response.content[:300]
    return response.content


def cursors_of(ids: list[int]) -> list[int]:
    """Cursors across a list: its start, inside and on the edge of the first chunk, the start
    of the last page, the last cell, beyond the end."""
    picks = [0, ids[0], ids[len(ids) // 3], ids[-1], 10**12]
    if len(ids) > CHUNK_CELLS:
        picks += [ids[CHUNK_CELLS - 1], ids[CHUNK_CELLS], ids[len(ids) - 7]]
    return picks


def test_a_page_of_the_kept_plan_is_the_page_of_the_plan_computed_afresh(client, computations):
    owner = f.user_create()
    client.force_login(owner)
    run = mixed_parent(owner)
    for mode in MODES:
        whole = recovery.recovery_plan(run=run, mode=mode, selected_cells=None)
        assert whole[ELIGIBLE] and whole[EXCLUDED]
        cases = [
            {name: after, "limit": limit}
            for name, items in (("eligible_after", ELIGIBLE), ("excluded_after", EXCLUDED))
            for after in cursors_of([e["cell"] for e in whole[items]])
            for limit in (1, 7, 100)
        ]
        cases.append({"eligible_after": 10**12, "excluded_after": 10**12})
        for case in cases:
            recovery_plans_forget(run_id=run.pk)
            before = len(computations)
            fresh = page_bytes(client, run, mode, **case)  # computed (today's path), then kept
            kept = page_bytes(client, run, mode, **case)
            assert len(computations) == before + 1, case  # the second read the kept plan
            assert kept == fresh, case
            # And the page today's function cuts from the whole plan, as JSON.
            cut = recovery_plan_page(whole, **case)
            assert json.loads(kept) == json.loads(json.dumps(cut)), case


def test_the_last_page_ends_its_list_and_a_page_beyond_the_end_is_empty(client):
    owner = f.user_create()
    client.force_login(owner)
    run = mixed_parent(owner)
    mode = RecoveryPlanMode.UNDISPATCHED
    first = json.loads(page_bytes(client, run, mode))
    pages, after, seen = 0, 0, []
    while after is not None:
        body = json.loads(page_bytes(client, run, mode, eligible_after=after, limit=30))
        seen += [e["cell"] for e in body[ELIGIBLE]]
        after, pages = body["next_eligible_after"], pages + 1
    assert len(seen) == first["counts"]["eligible"] == len(set(seen))
    assert pages == -(-len(seen) // 30) and seen == sorted(seen)
    beyond = json.loads(page_bytes(client, run, mode, eligible_after=seen[-1]))
    assert beyond[ELIGIBLE] == [] and beyond["next_eligible_after"] is None
    assert beyond["counts"] == first["counts"]  # totals over the whole plan on every page


def test_a_plan_is_kept_as_a_small_summary_and_chunks_and_a_page_reads_two_chunks_a_list(client):
    owner = f.user_create()
    client.force_login(owner)
    run = mixed_parent(owner)
    mode = RecoveryPlanMode.UNDISPATCHED
    plan = recovery.recovery_plan(run=run, mode=mode)

    kept = StoredRecoveryPlan.objects.get(run=run, mode=mode)
    assert kept.fingerprint == recovery_plan_key(run, mode)
    summary = json.loads(kept.summary_json)["summary"]
    assert ELIGIBLE not in summary and "selected_cells" not in summary
    assert len(kept.summary_json) < 4_000
    for name in (ELIGIBLE, EXCLUDED):
        chunks = list(
            StoredRecoveryPlanChunk.objects.filter(plan=kept, plan_list=name).order_by("seq")
        )
        items = [i for c in chunks for i in json.loads(c.items_json)]
        assert items == json.loads(json.dumps(plan[name]))
        assert len(chunks) == -(-len(items) // CHUNK_CELLS) >= 2
        assert [c.seq for c in chunks] == list(range(len(chunks)))
        assert [c.last_cell for c in chunks] == [
            json.loads(c.items_json)[-1]["cell"] for c in chunks
        ]

    middle = plan[ELIGIBLE][CHUNK_CELLS // 2]["cell"]
    with CaptureQueriesContext(connection) as queries:
        body = json.loads(page_bytes(client, run, mode, eligible_after=middle))
    chunk_reads = [q["sql"] for q in queries if "storedrecoveryplanchunk" in q["sql"]]
    assert len(chunk_reads) == 2 and all("LIMIT 2" in sql for sql in chunk_reads), chunk_reads
    rest = len(plan[ELIGIBLE]) - CHUNK_CELLS // 2 - 1
    assert body[ELIGIBLE][0]["cell"] > middle and len(body[ELIGIBLE]) == min(100, rest) > 50


def test_the_whole_plan_read_back_is_the_plan_computed(client, computations):
    owner = f.user_create()
    run = mixed_parent(owner)
    for mode in MODES:
        computed = recovery.recovery_plan(run=run, mode=mode)
        kept = recovery.recovery_plan(run=run, mode=mode)
        assert json.dumps(kept) == json.dumps(json.loads(json.dumps(computed)))
    assert computations == [run.pk, run.pk]


def test_a_kept_plan_replaced_between_its_reads_is_read_again(client, computations):
    owner = f.user_create()
    run = mixed_parent(owner)
    mode = RecoveryPlanMode.UNDISPATCHED
    expected = recovery_plan_page(recovery.recovery_plan(run=run, mode=mode), eligible_after=5)
    pages = recovery_plan_kept(run_id=run.pk, mode=mode, key=recovery_plan_key(run, mode))
    assert pages is not None
    recovery_plans_forget(run_id=run.pk)
    with pytest.raises(KeptPlanGone):
        pages.page(eligible_after=5)
    with pytest.raises(KeptPlanGone):
        pages.eligible[0:25]

    recovery.recovery_plan(run=run, mode=mode)  # kept again
    reads: list[int] = []

    def read(pages):
        if not reads:  # a new state's reviewer replaced the plan just after its summary was read
            recovery_plans_forget(run_id=run.pk)
        reads.append(1)
        return pages.page(eligible_after=5)

    page = recovery.recovery_plan_read(run=run, mode=mode, read=read)
    assert len(reads) == 2 and json.dumps(page) == json.dumps(json.loads(json.dumps(expected)))


def tables(html: str) -> list[str]:
    found = re.findall(
        r'<table class="compact" id="(?:eligible|excluded)-cells">.*?</table>', html, re.S
    )
    heads = re.findall(r"<h2>(?:Eligible|Excluded) cells <span[^>]*>\(\d+\)</span>", html)
    pagers = re.findall(r"Page \d+ of \d+", html)
    reasons = re.findall(r'<ul id="exclusion-reasons">.*?</ul>', html, re.S)
    cost = re.findall(r'<p id="extra-cost">.*?</p>', html, re.S)
    return found + heads + pagers + reasons + cost


def test_the_recovery_page_reads_the_kept_plan_as_it_shows_the_computed_one(client, computations):
    owner = f.user_create()
    client.force_login(owner)
    run = mixed_parent(owner)
    for mode in MODES:
        for pages in ({}, {"page": 2, "excluded_page": 3}, {"page": 5, "excluded_page": 6}):
            recovery_plans_forget(run_id=run.pk)
            query = {"mode": mode, **pages}
            fresh = client.get(f"/runs/{run.pk}/recovery/", query)
            before = len(computations)
            kept = client.get(f"/runs/{run.pk}/recovery/", query)
            assert fresh.status_code == kept.status_code == 200
            assert len(computations) == before
            shown = tables(kept.content.decode())
            assert shown == tables(fresh.content.decode()) and len(shown) >= 4, pages


def test_a_page_of_a_settled_runs_kept_plan_writes_nothing_and_locks_nothing(client):
    """A settled run has nothing to reconcile (no running cell, no call in flight): each page
    of its kept plan is reads only — the reconciliation's run lock and durable transaction
    were ≈ 30 ms of every page at 100,000 cells."""
    owner = f.user_create()
    client.force_login(owner)
    run = mixed_parent(owner)
    mode = RecoveryPlanMode.UNDISPATCHED
    page_bytes(client, run, mode)  # computed and kept
    with CaptureQueriesContext(connection) as queries:
        page_bytes(client, run, mode, eligible_after=7, excluded_after=9)
    sqls = [q["sql"] for q in queries]
    written = [s for s in sqls if re.match(r"\s*(INSERT|UPDATE|DELETE)", s)]
    assert not written and not [s for s in sqls if "FOR UPDATE" in s], sqls
