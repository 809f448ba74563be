"""Read paths of the runs app, shared by the API, the CLI (through the API) and the pages."""

from __future__ import annotations

from typing import Any

from django.db.models import Count, F, IntegerField, Max, OuterRef, Q, QuerySet, Subquery
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


# --- pages (issue 8) -------------------------------------------------------------------------


def runs_list_rows(queryset: QuerySet[Run]) -> QuerySet[Run]:
    """What a Runs row shows, as correlated subqueries rather than joins.

    `runs_with_progress` joins cells and events in one GROUP BY, which multiplies a large run's
    cells by its events; here each count is a subquery the database evaluates only for the 25
    rows of the page. The frozen manifest (megabytes for a standard run) is not loaded; only
    its target list is, for the target types.
    """

    def cells(**filters: Any) -> Subquery:
        return Subquery(
            Cell.objects.filter(run=OuterRef("pk"), **filters)
            .order_by()
            .values("run")
            .annotate(n=Count("pk"))
            .values("n")[:1],
            output_field=IntegerField(),
        )

    last_event = RunEvent.objects.filter(run=OuterRef("pk")).order_by("-seq").values("created_at")
    return (
        queryset.select_related("owner")
        .defer("manifest")
        .annotate(
            manifest_targets=F("manifest__targets"),
            cells_total=cells(),
            cells_completed=cells(status="completed"),
            cells_failed=cells(status__in=["failed", "sent_unknown"]),
            last_event_at=Subquery(last_event[:1]),
        )
    )


def run_last_update(run: Run) -> Any:
    """The last persisted change: the newest event, or the row itself if that is newer."""
    last = getattr(run, "last_event_at", None)
    return max(last, run.updated_at) if last else run.updated_at


def runs_target_types(run: Run) -> list[str]:
    targets = getattr(run, "manifest_targets", None)
    if targets is None:
        return target_types(run)
    return sorted({t["kind"] for t in targets or []})


def events_loaded(
    *, run: Run, upto: int, types: list[str] | None = None, offset: int = 0, limit: int = 25
) -> list[RunEvent]:
    """One display page out of the events already loaded (seq ≤ upto): the loaded set is a
    snapshot named by its cursor, so a page or a filter never reads past what was loaded."""
    qs = RunEvent.objects.filter(run=run, seq__lte=upto)
    if types:
        qs = qs.filter(type__in=types)
    return list(qs.order_by("seq")[offset : offset + min(limit, MAX_EVENT_PAGE)])


def events_loaded_count(*, run: Run, upto: int, types: list[str] | None = None) -> int:
    qs = RunEvent.objects.filter(run=run, seq__lte=upto)
    if types:
        qs = qs.filter(type__in=types)
    return qs.count()


def events_loaded_types(*, run: Run, upto: int) -> list[str]:
    return list(
        RunEvent.objects.filter(run=run, seq__lte=upto)
        .order_by("type")
        .values_list("type", flat=True)
        .distinct()
    )


def events_exist_after(*, run: Run, seq: int) -> bool:
    return RunEvent.objects.filter(run=run, seq__gt=seq).exists()


def cell_with_calls(*, run: Run, cell_id: int) -> tuple[Cell, list[Call]] | None:
    cell = Cell.objects.filter(run=run, pk=cell_id).select_related("target", "question").first()
    if cell is None:
        return None
    calls = list(
        cell.calls.select_related("target")
        .defer("request", "content", "reasoning", "tool_calls", "usage_raw", "response_headers")
        .order_by("pk")
    )
    return cell, calls


def call_full(*, run: Run, call_id: int) -> Call | None:
    """One call with all its content, read on demand (R13.1)."""
    return (
        Call.objects.select_related("cell", "cell__question", "target")
        .filter(cell__run=run, pk=call_id)
        .first()
    )


def plan_worst_case_subject_cost(manifest: dict[str, Any]) -> dict[str, Any]:
    """An upper bound on the subject calls of a frozen plan, before any model call.

    Each case makes one subject call per target and slot (mcq, judge and grid kinds); its
    input is bounded by the request's bytes (a byte-level tokenizer never makes more tokens
    than bytes) and its output by max_tokens, at the dearest model the target may serve,
    times a router's internal call cap — the same bound the engine reserves against the
    budget. Judge calls carry the hidden reference answer, so no bound is computed for them
    here; the budget cap (max_cost_usd) is what limits them. None when a price is missing.
    """
    import json
    from decimal import Decimal

    from datasets.benchmarks import get_adapter
    from datasets.models import Question
    from runs.accounting import price_for_model

    question_ids = [qid for qid, _sha, _b in manifest["cases"]]
    payloads = dict(Question.objects.filter(pk__in=question_ids).values_list("pk", "payload"))
    limits = manifest["limits"]
    total: Decimal | None = Decimal(0)
    per_target: dict[str, str | None] = {}
    for target in manifest["targets"]:
        table = manifest["prices"].get(target["slug"], {})
        models = [target["model"]] if target["kind"] == "single" else list(table)
        prices = [price_for_model(table, m) for m in models]
        if not prices or any(p is None for p in prices):
            per_target[target["slug"]] = None
            total = None
            continue
        max_tokens = int(target["fixed_params"].get("max_tokens") or limits["max_output_tokens"])
        bound = Decimal(0)
        for qid, _sha, benchmark in manifest["cases"]:
            messages = get_adapter(benchmark).messages(payloads[qid])
            input_upper = len(json.dumps(messages).encode()) + 64
            bound += max(
                (p.input * input_upper + p.output * max_tokens) / Decimal(1_000_000)
                for p in prices
                if p is not None
            )
        bound *= manifest["slots"] * (target.get("max_inference_calls") or 1)
        per_target[target["slug"]] = format(bound.quantize(Decimal("0.000001")), "f")
        if total is not None:
            total += bound
    return {
        "subject_usd": None if total is None else format(total.quantize(Decimal("0.000001")), "f"),
        "per_target": per_target,
        "judged_benchmarks": sorted(manifest["judges"]),
    }
