"""A call shows the tokens the report counts for it beside the recorded ones (DESIGN §5, SPEC
R2.2, R13.1; session 9, helper rc).

After a usage correction the report sums the corrected buckets of a call (its latest
correction's entry, else the ledger row: `runs.reporting.effective._effective_calls_sql`), but
the per-call views — the API's calls list and call detail, the Calls tab and the call page —
showed only the row's recorded buckets: the report counted 20 cached and 30 output tokens for a
call whose page said 0 and 10. Each call now carries ``effective_*_tokens`` beside the recorded
``*_tokens`` (the evidence, unchanged); an unknown stays null, never 0.

A page of calls reads a correction's entries for that page only: it read (and expanded) the
whole latest correction — every corrected call of the run — for each page.
"""

from __future__ import annotations

import hashlib
import re
import time

import pytest
from django.db import connection
from rest_framework.test import APIClient

import tests.runs.test_reconcile as rec
from datasets.models import Question
from runs.models import Call, UsageCorrectionEntry
from runs.reporting.effective import _effective_calls_sql, effective_call_sums
from runs.reporting.reconcile import usage_reconcile
from tests import factories as f
from tests.compare import builders as b

BUCKETS = ("input_tokens", "cached_input_tokens", "cache_write_tokens", "output_tokens")


def report_call_tokens(run_id: int) -> dict[int, dict[str, int | None]]:
    """What the report's own sums count of each bucket for each call (one call per cell)."""
    by_cell = {r["cell_id"]: r for r in effective_call_sums(run_ids=[run_id], group_by="cell_role")}
    out = {}
    for pk, cell in Call.objects.filter(cell__run_id=run_id).values_list("pk", "cell_id"):
        row = by_cell[cell]
        assert row["calls"] == 1
        out[pk] = {bucket: row[bucket] for bucket in BUCKETS}
    return out


@pytest.mark.django_db
def test_a_usage_correction_shows_the_tokens_the_report_counts_beside_the_recorded_ones(client):
    ops = f.user_create(username="ops", staff=True)
    run, valid, truncated, conflicting, missing = rec.damaged_run()
    recorded = {
        c.pk: {bucket: getattr(c, bucket) for bucket in BUCKETS}
        for c in Call.objects.filter(cell__run=run)
    }
    usage_reconcile(run_id=run.pk)
    counted = report_call_tokens(run.pk)
    # Independently of the rule: the evidence says 120 prompt tokens of which 20 cached, and
    # 30 output; the broken evidence proves nothing, so the report counts those as unknown.
    assert counted[valid.pk] == {
        "input_tokens": 100,
        "cached_input_tokens": 20,
        "cache_write_tokens": 0,
        "output_tokens": 30,
    }
    for call in (truncated, conflicting, missing):
        assert counted[call.pk] == dict.fromkeys(BUCKETS)
    assert recorded[valid.pk] == {
        "input_tokens": 100,
        "cached_input_tokens": 0,
        "cache_write_tokens": 0,
        "output_tokens": 10,
    }

    api = APIClient()
    api.force_authenticate(ops)
    listed = {c["id"]: c for c in api.get(f"/api/v1/runs/{run.pk}/calls/").json()["results"]}
    assert set(listed) == set(counted)
    for pk, tokens in counted.items():
        detail = api.get(f"/api/v1/runs/{run.pk}/calls/{pk}/").json()
        for shown in (listed[pk], detail):
            for bucket in BUCKETS:
                assert shown[f"effective_{bucket}"] == tokens[bucket], (pk, bucket, shown)
                assert shown[bucket] == recorded[pk][bucket], (pk, bucket, shown)  # kept

    client.force_login(ops)
    tab = client.get(f"/runs/{run.pk}/?tab=calls").content.decode()
    rows = dict(
        re.findall(
            rf'<tr><td class="num"><a href="/runs/{run.pk}/calls/(\d+)/">(.*?)</tr>', tab, re.S
        )
    )
    assert (
        '<td class="num">30 <span class="meta effective-tokens-note">(as the report counts it; recorded: 10)</span></td>'
        in rows[str(valid.pk)]
    )
    assert "(as the report counts it; recorded: 10)" in rows[str(missing.pk)]
    page = client.get(f"/runs/{run.pk}/calls/{valid.pk}/").content.decode()
    usage = re.search(r'<table class="compact usage" id="call-usage">(.*?)</table>', page, re.S)
    text = re.sub(r"\s+", " ", usage.group(1))
    assert (
        '<th>cache-read input</th><td class="num">20 <span class="meta effective-tokens-note">(as the report counts it; recorded: 0)</span>'
        in text
    )
    assert (
        '<th>output</th><td class="num">30 <span class="meta effective-tokens-note">(as the report counts it; recorded: 10)</span>'
        in text
    )
    assert '<th>uncached input</th><td class="num">100</td>' in text  # unchanged: one figure


def _bulk_questions(n: int) -> list[Question]:
    tag = time.time_ns()
    return Question.objects.bulk_create(
        Question(
            benchmark="mmlu-pro",
            native_id=f"t{tag}-{i}",
            subject="s",
            payload={"question": f"Q{i}?", "options": ["a", "b", "c", "d"]},
            content_sha256=hashlib.sha256(f"{tag}-{i}".encode()).hexdigest(),
        )
        for i in range(n)
    )


CORRECTED_CALLS = 10_000


@pytest.mark.django_db
def test_a_page_of_calls_reads_only_its_own_entries_of_a_large_correction():
    """10,000 calls, every one an entry of the latest correction (no evidence: unverifiable).
    A page of 100 calls (the API's largest) takes its effective figures from its own 100
    entries, not from the whole correction. Timed and printed, not asserted (the machine is
    shared); the number of correction entries the page's query reads is asserted."""
    ops = f.user_create(username="ops", staff=True)
    qs = _bulk_questions(CORRECTED_CALLS)
    t = b.target("many")
    run = b.run(qs, {t: [True] * CORRECTED_CALLS}, status="completed")
    correction = usage_reconcile(run_id=run.pk).correction
    assert correction.unverifiable_count == CORRECTED_CALLS
    with connection.cursor() as cursor:  # as autovacuum would, after the bulk insert
        cursor.execute("ANALYZE runs_cell, runs_call, runs_usagecorrectionentry")
    api = APIClient()
    api.force_authenticate(ops)
    url = f"/api/v1/runs/{run.pk}/calls/"
    api.get(url, {"limit": 100})  # warm
    timings, pages, after = [], [], 0
    for _ in range(5):
        started = time.perf_counter()
        page = api.get(url, {"limit": 100, "after": after}).json()
        timings.append(time.perf_counter() - started)
        pages.append(page)
        after = page["next_after"]
    print(
        f"\nAPI calls page of 100 with a correction of {CORRECTED_CALLS:,} calls: "
        + ", ".join(f"{s * 1000:.1f} ms" for s in timings)
    )
    for page in pages:
        assert len(page["results"]) == 100
        assert all(c["effective_output_tokens"] is None for c in page["results"])
        assert all(c["output_tokens"] == 10 for c in page["results"])
    # The page's own rule, as the planner runs it: the correction's entries it reads.
    ids = [c["id"] for c in pages[-1]["results"]]
    effective, params = _effective_calls_sql([run.pk], call_ids=ids, unbilled=[])
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {effective} SELECT * FROM eff", params)
        plan = cursor.fetchone()[0]
    read = _rows_read(plan[0]["Plan"], UsageCorrectionEntry._meta.db_table)
    print(f"correction entries read for a page of 100: {read:,}")
    assert read <= 100


def _rows_read(node: dict, table: str) -> int:
    """Rows the plan's scans of ``table`` returned, over all their loops."""
    own = node["Actual Rows"] * node["Actual Loops"] if node.get("Relation Name") == table else 0
    return own + sum(_rows_read(child, table) for child in node.get("Plans", []))
