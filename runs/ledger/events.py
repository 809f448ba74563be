"""Run events (R14): append-only, chronological, cursor = per-run sequence number.

Appending notifies the run's PostgreSQL channel (`events_channel`) in the same transaction, so
a long poll on the events (runs/interfaces/events_wait.py) wakes when they commit, never before."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import transaction

from runs.ledger.bulk_sql import bulk_insert_sql
from runs.models import RunEvent

EVENTS_CHANNEL_PREFIX = "srbench_run_events_"


def events_channel(run_id: int) -> str:
    """The LISTEN/NOTIFY channel of one run's events (issue 38 item 3)."""
    return f"{EVENTS_CHANNEL_PREFIX}{int(run_id)}"


def events_append(*, run_id: int, events: Sequence[tuple[str, dict[str, Any]]]) -> None:
    """Append events with consecutive sequence numbers. Must run inside a transaction: the
    counter row is locked so concurrent workers never interleave or reuse numbers."""
    if not events:
        return
    assert transaction.get_connection().in_atomic_block, "events_append needs a transaction"
    connection = transaction.get_connection()
    # One statement: the UPDATE locks the counter row, returns the new value and queues the
    # run's notification (delivered at commit; several in one transaction are one).
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runs_run SET last_event_seq = last_event_seq + %s WHERE id = %s "
            "RETURNING last_event_seq, pg_notify(%s || id::text, '')",
            [len(events), run_id, EVENTS_CHANNEL_PREFIX],
        )
        last, _ = cursor.fetchone()
    last -= len(events)
    bulk_insert_sql(
        RunEvent,
        fields=("run", "seq", "type", "payload"),
        rows=[
            (run_id, last + i, kind, payload) for i, (kind, payload) in enumerate(events, start=1)
        ],
    )
