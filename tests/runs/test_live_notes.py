"""A running run's Results count the gateway's notes as the calls land (fourth outside probe
item 2; R1 unknown stays unknown, R10.2; docs/decisions.md "jc: live gateway notes"). The live
report (`runs.reporting.live_report`) read the trigger-kept sums, which held no note counts:
until the run ended, a call the gateway re-sent left the run's spend looking complete, a
gateway's estimate was not said, and no `usage_caution` was shown. Migration 0025's triggers
count them per (run, target, role, waste) in the transaction that writes the call; the live
report passes them to the one report rule the full report uses (`report_from_batch`)."""

from __future__ import annotations

from importlib import import_module

import pytest
from django.db import connection
from django.utils import timezone

from runs.ledger import accounting
from runs.models import Call, LiveCallSums
from runs.reporting.effective import NOTE_COUNTS, cost_note_counts
from runs.reporting.live_report import run_results_compute
from runs.reporting.report import run_report_compute
from tests.compare import builders as b
from tests.runs.test_live_sums import sums_doc

pytestmark = pytest.mark.django_db(transaction=True)

RESENT = {"x-litellm-attempted-retries": "1", "x-litellm-version": "1.110.2"}
ANSWERED = {"x-litellm-version": "1.110.2"}
RESENT_NOTE = f"{accounting.gateway_resent_note(RESENT)}; priced as m"


def test_the_migrations_frozen_words_are_the_rules_words():
    migration = import_module("runs.migrations.0025_live_note_counts")
    assert set(migration.NOTES) == set(NOTE_COUNTS)
    assert migration.NO_STREAM_USAGE_NOTE == accounting.NO_STREAM_USAGE_NOTE
    assert migration.GATEWAY_ESTIMATE_NOTE == accounting.GATEWAY_ESTIMATE_NOTE
    assert migration.GATEWAY_RESENT_START == accounting.GATEWAY_RESENT_START
    assert migration.GATEWAY_ANSWERED_HEADER == accounting.GATEWAY_ANSWERED_HEADER


def _running_run():
    """A running run: of its four subject calls, one the gateway re-sent, one LiteLLM answered,
    one whose note only looks like the words (LIKE's `_` and `%` would match it), one open."""
    qs = b.questions({"mmlu-pro": 4})
    t = b.target(f"live-gw-{next(b._seq)}")
    look_alike = "usage missing: no usage_object"  # `_` where the words have a space
    fields = [
        {"response_headers": RESENT, "cost_note": RESENT_NOTE},
        {"response_headers": ANSWERED},
        {"cost_note": look_alike},
        {"status": "streaming", "cost_usd": None, "cache_neutral_cost_usd": None},
    ]
    return b.run(qs, {t: [True] * 4}, call_fields={t: fields}, status="running"), t


def test_a_running_runs_report_counts_the_gateways_notes_as_they_land(client):
    run, t = _running_run()

    live = run_results_compute(run=run)

    assert live.live
    target = live.report.targets[0]
    assert live.report.spend.gateway_resent_calls == 1
    assert live.report.spend.total_spend_usd is None  # a lower bound, said as such
    assert target.total_spend_usd is None and target.known_total_spend_usd is not None
    assert "the gateway re-sent 1 of 4 subject calls upstream" in target.usage_unknown_reason
    assert target.usage_caution.startswith("2 of 4 subject calls were answered through a LiteLLM")
    assert "no stream usage" not in (target.usage_unknown_reason or "")
    # The same figures as the full report's, which counts the notes from the calls.
    assert sums_doc(live.report) == sums_doc(run_report_compute(run=run))
    # The running run's page says it.
    client.force_login(run.owner)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert '<span id="run-spend-at-least">at least' in page
    assert f'id="usage-caution-{t.slug}"' in page

    # The open call closes re-sent and estimated; then it is deleted: the counts follow.
    open_call = Call.objects.get(cell__run=run, status="streaming")
    Call.objects.filter(pk=open_call.pk).update(
        status="completed",
        finished_at=timezone.now(),
        response_headers=RESENT,
        cost_note=f"{accounting.gateway_resent_note(RESENT)}; {accounting.GATEWAY_ESTIMATE_NOTE}",
    )
    assert _live_counts(run) == _full_counts(run)
    assert _live_counts(run)["gateway_resent"] == 2
    assert _live_counts(run)["usage_estimated"] == 1
    assert sums_doc(run_results_compute(run=run).report) == sums_doc(run_report_compute(run=run))
    Call.objects.filter(pk=open_call.pk).delete()
    assert _live_counts(run) == _full_counts(run) and _live_counts(run)["gateway_resent"] == 1


def _live_counts(run) -> dict[str, int]:
    rows = LiveCallSums.objects.filter(run_id=run.pk).values(*NOTE_COUNTS)
    return {name: sum(r[name] for r in rows) for name in NOTE_COUNTS}


def _full_counts(run) -> dict[str, int]:
    got = cost_note_counts(run_ids=[run.pk]).values()
    return {name: sum(n[name] for n in got) for name in NOTE_COUNTS}


def test_the_migrations_backfill_counts_the_notes_of_calls_made_before_it():
    migration = import_module("runs.migrations.0025_live_note_counts")
    run, _t = _running_run()
    kept = _live_counts(run)
    assert kept["gateway_resent"] == 1 and kept["gateway_answered"] == 2
    LiveCallSums.objects.filter(run_id=run.pk).update(**dict.fromkeys(NOTE_COUNTS, 0))
    with connection.cursor() as cursor:
        for statement in migration.BACKFILL:
            cursor.execute(statement)
    assert _live_counts(run) == kept == _full_counts(run)
