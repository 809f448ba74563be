"""Read paths of the runs app, shared by the API, the CLI (through the API) and the pages."""

from __future__ import annotations

from typing import Any

from django.db.models import Count, Max, Q, QuerySet
from django.utils import timezone

from runs.models import Call, Cell, Run, RunEvent

ACTIVE_CALL_STATUSES = ("sent", "streaming")
MAX_DETAIL_PAGE = 100  # R13.1: results and calls are read at most 100 at a time
MAX_EVENT_PAGE = 1000  # R14.2


def runs_with_progress(queryset: QuerySet[Run] | None = None) -> QuerySet[Run]:
    """Runs annotated with what a list row shows (R7.1): completed/denominator, failures,
    the last persisted update and the target types — one query for a whole page."""
    qs = queryset if queryset is not None else Run.objects.all()
    return qs.select_related("owner").annotate(
        cells_total=Count("cells", distinct=True),
        cells_completed=Count("cells", filter=Q(cells__status="completed"), distinct=True),
        cells_failed=Count(
            "cells", filter=Q(cells__status__in=["failed", "sent_unknown"]), distinct=True
        ),
        last_event_at=Max("events__created_at"),
    )


def runs_filter(
    qs: QuerySet[Run],
    *,
    name: str = "",
    model: str = "",
    status: str = "",
    mode: str = "",
    profile: str = "",
) -> QuerySet[Run]:
    if name:
        qs = qs.filter(name__icontains=name)
    if model:
        # The frozen manifest names every target's model; match on the cell targets' models.
        qs = qs.filter(
            Q(cells__target__model__icontains=model) | Q(cells__target__slug__icontains=model)
        ).distinct()
    if status:
        qs = qs.filter(status=status)
    if mode:
        qs = qs.filter(mode=mode)
    if profile:
        qs = qs.filter(profile=profile)
    return qs


def run_elapsed_seconds(run: Run) -> float | None:
    """From timestamps, not from completed cells, so it ticks while nothing completes (R10.2)."""
    if run.started_at is None:
        return None
    return ((run.finished_at or timezone.now()) - run.started_at).total_seconds()


def target_types(run: Run) -> list[str]:
    return sorted({t["kind"] for t in run.manifest.get("targets", [])})


def calls_page(
    *, run: Run, after: int = 0, limit: int = MAX_DETAIL_PAGE, active: bool = False
) -> list[Call]:
    qs = Call.objects.filter(cell__run=run, pk__gt=after)
    if active:
        qs = qs.filter(status__in=ACTIVE_CALL_STATUSES)
    return list(
        qs.select_related("cell", "target")
        .defer("request", "content", "reasoning", "tool_calls", "usage_raw", "response_headers")
        .order_by("pk")[: min(limit, MAX_DETAIL_PAGE)]
    )


def results_page(*, run: Run, after: int = 0, limit: int = MAX_DETAIL_PAGE) -> list[Cell]:
    return list(
        Cell.objects.filter(run=run, pk__gt=after)
        .select_related("target", "question")
        .defer("question__payload")
        .order_by("pk")[: min(limit, MAX_DETAIL_PAGE)]
    )


def events_page(
    *, run: Run, after: int = 0, limit: int = MAX_EVENT_PAGE, types: list[str] | None = None
) -> list[RunEvent]:
    qs = RunEvent.objects.filter(run=run, seq__gt=after)
    if types:
        qs = qs.filter(type__in=types)
    return list(qs.order_by("seq")[: min(limit, MAX_EVENT_PAGE)])


def call_live_view(call: Call) -> dict[str, Any]:
    """What an in-flight call shows (R10.3): stage, elapsed, last activity, bytes received.
    Stream activity proves neither answer quality nor billed tokens."""
    now = timezone.now()
    return {
        "stage": call.stage,
        "elapsed_seconds": ((call.finished_at or now) - call.sent_at).total_seconds(),
        "last_activity_at": call.last_activity_at.isoformat() if call.last_activity_at else None,
        "bytes_received": call.bytes_received,
    }
