"""Run events (R14): append-only, chronological, cursor = per-run sequence number."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import transaction

from runs.models import RunEvent


def events_append(*, run_id: int, events: Sequence[tuple[str, dict[str, Any]]]) -> None:
    """Append events with consecutive sequence numbers. Must run inside a transaction: the
    counter row is locked so concurrent workers never interleave or reuse numbers."""
    if not events:
        return
    assert transaction.get_connection().in_atomic_block, "events_append needs a transaction"
    connection = transaction.get_connection()
    # One statement: the UPDATE locks the counter row and returns the new value.
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runs_run SET last_event_seq = last_event_seq + %s WHERE id = %s "
            "RETURNING last_event_seq",
            [len(events), run_id],
        )
        (last,) = cursor.fetchone()
    last -= len(events)
    RunEvent.objects.bulk_create(
        RunEvent(run_id=run_id, seq=last + i, type=kind, payload=payload)
        for i, (kind, payload) in enumerate(events, start=1)
    )
