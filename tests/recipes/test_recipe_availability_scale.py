"""Every run detail tab reads the run's recipe refusals (`run_recipe_availability`, R12.5):
what that reads is the refusals, the same for a run of 50 events and one of 20,000 (issue 25;
the partial index `event_recipe_not_captured`, runs/0014)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from recipes.selectors import NOT_CAPTURED_EVENT, run_recipe_availability
from runs.models import Run, RunEvent
from tests import factories as f
from tests.runs.test_run_summary import rows_read

pytestmark = pytest.mark.django_db

OTHER_TYPES = ["cell.completed", "call.sent", "cell.failed", "recipe.captured"]


def event(run: Run, seq: int, refusals: dict[int, str]) -> RunEvent:
    if seq not in refusals:
        return RunEvent(run=run, seq=seq, type=OTHER_TYPES[seq % 4], payload={})
    payload = {"target": "mom", "reason": "refused", "message": refusals[seq]}
    return RunEvent(run=run, seq=seq, type=NOT_CAPTURED_EVENT, payload=payload)


def run_with_events(events: int) -> Run:
    """A run of `events` events, two of them refusals for one MoM target: near the start and
    near the end, so the later one is what the page shows."""
    run = f.run_create(status="running", manifest={"targets": [{"slug": "mom", "kind": "mom"}]})
    refusals = {2: "first attempt", events - 1: "retry"}
    RunEvent.objects.bulk_create(
        (event(run, s, refusals) for s in range(1, events + 1)), batch_size=5000
    )
    return run


def refusal_rows_read(run: Run) -> int:
    with CaptureQueriesContext(connection) as queries:
        availability = run_recipe_availability(run=run)
    assert not availability.available
    assert [(r["target"], r["message"]) for r in availability.not_captured] == [("mom", "retry")]
    assert availability.reason == "No recipe was captured: mom: retry"
    [sql] = [q["sql"] for q in queries.captured_queries if "runs_runevent" in q["sql"]]
    return rows_read(sql)


def test_a_runs_recipe_refusals_are_read_without_reading_its_other_events():
    small, large = run_with_events(50), run_with_events(20_000)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE runs_runevent")
    small_rows, large_rows = refusal_rows_read(small), refusal_rows_read(large)
    # The two refusals, not the run's 20,000 events (20,002 rows read by the (run, seq) index).
    assert small_rows == large_rows == 2, (small_rows, large_rows)
