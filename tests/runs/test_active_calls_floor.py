"""The live section's in-flight calls (`runs.ledger.selectors.active_calls_page`): the calls still in flight
from before a run was created (a stream stuck in an earlier run) are not probed for their
run, and the run's own finished calls are not read either (issue 25)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runs.ledger.selectors import active_calls_page
from runs.models import Call, Cell, Run
from tests import factories as f
from tests.runs.test_run_summary import build_run, rows_read

pytestmark = pytest.mark.django_db

EARLIER_IN_FLIGHT = 1_000


def with_calls(run: Run, *, in_flight: int) -> list[Call]:
    """A subject call per cell of the run; the first `in_flight` still streaming."""
    return f.calls_bulk_create(
        Cell.objects.filter(run=run).order_by("pk"),
        target=f.target_create(),
        status=lambda i: "streaming" if i < in_flight else "completed",
    )


def test_in_flight_calls_of_earlier_runs_are_not_probed_nor_the_runs_finished_calls_read():
    earlier = build_run(EARLIER_IN_FLIGHT, 0)
    with_calls(earlier, in_flight=EARLIER_IN_FLIGHT)
    later = build_run(3_150, 0)
    Run.objects.filter(pk=later.pk).update(calls_after_id=Call.objects.latest("pk").pk)
    later.refresh_from_db()
    calls = with_calls(later, in_flight=150)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE runs_call")
        cursor.execute("ANALYZE runs_cell")

    with CaptureQueriesContext(connection) as queries:
        page = active_calls_page(later)
    assert [c.pk for c in page] == [c.pk for c in calls[:100]]
    ids_sql = queries.captured_queries[0]["sql"]
    # The status index's 1,150 rows (twice: its bitmap and the heap) and a probe of each of
    # the run's 150 calls (2,600); probing the earlier run's 1,000 as well read 4,600, and
    # the floor as an index condition ANDed in a range of the primary key: the run's calls.
    assert rows_read(ids_sql) < 3 * EARLIER_IN_FLIGHT

    # A run from before runs/0013 (no floor) still finds its in-flight calls.
    Run.objects.filter(pk=later.pk).update(calls_after_id=None)
    later.refresh_from_db()
    assert [c.pk for c in active_calls_page(later)] == [c.pk for c in calls[:100]]
