"""Read paths of the runs app, shared by the API, the CLI (through the API) and the pages."""

from __future__ import annotations

import os
from decimal import Decimal
from typing import Any

from django.core.cache import cache
from django.db.models import (
    Exists,
    ExpressionWrapper,
    F,
    FloatField,
    JSONField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
)
from django.db.models.expressions import BaseExpression, RawSQL
from django.db.models.functions import Cast, Coalesce, NullIf
from django.utils import timezone

from datasets.benchmarks import ADAPTERS, get_adapter
from datasets.models import Question
from datasets.provenance import benchmarks_provenance, datasets_provenance
from runs.ledger.accounting import sent_max_tokens, worst_case_call_cost
from runs.models import (
    OPEN_CALL_STATUSES,
    TERMINAL_RUN_STATUSES,
    Call,
    Cell,
    Regrade,
    Run,
    RunEvent,
    Target,
    TargetSecret,
    UsageCorrection,
)
from srbench.money import money_text
from srbench.secrets import decrypt_secret

ACTIVE_CALL_STATUSES = OPEN_CALL_STATUSES
MAX_DETAIL_PAGE = 100  # R13.1: results and calls are read at most 100 at a time
MAX_EVENT_PAGE = 1000  # R14.2
FROZEN_TIMEOUT = 7 * 24 * 3600  # what is read from a frozen manifest is kept a week


def _cells_total() -> Any:
    """A run's planned cells: the sum of its summary row's status counts."""
    s = "summary__"
    return (
        F(s + "pending")
        + F(s + "running")
        + F(s + "completed")
        + F(s + "failed")
        + F(s + "cancelled")
        + F(s + "sent_unknown")
    )


def progress_annotations() -> dict[str, Any]:
    """What a run row shows of its cells and events (R7.1), read in O(1) per run (issue 25):
    the cells by status from the run's summary row (kept by database triggers in the
    transaction that changes the cells, see `RunSummary`), the newest event from the
    (run, seq) index. Never a count over the run's cells or a join with its events.

    `cells_failed` counts failed and sent_unknown cells (an outcome not known is not a
    success). A run without a summary row (none exists: every run gets one on insert) would
    read null, not 0."""
    s = "summary__"
    return {
        "cells_total": _cells_total(),
        "cells_completed": F(s + "completed"),
        "cells_failed": F(s + "failed") + F(s + "sent_unknown"),
        "last_event_at": Subquery(
            RunEvent.objects.filter(run=OuterRef("pk")).order_by("-seq").values("created_at")[:1]
        ),
        # The stored report of an ended run (`RunReport`, one row): null until it is computed.
        "report_score": F("stored_report__score"),
        "report_score_kind": F("stored_report__score_kind"),
        "report_score_target": F("stored_report__score_target"),
        "report_known_spend_usd": F("stored_report__known_spend_usd"),
        "report_spend_complete": F("stored_report__spend_complete"),
        "report_complete": F("stored_report__complete"),
    }


# The runs list's sort orders (issue 23): newest first unless asked; unknown values last.
RUN_SORTS = {
    "": ("-created_at", "-id"),
    "oldest": ("created_at", "id"),
    "score": (F("stored_report__score").desc(nulls_last=True), "-id"),
    "spend": (F("stored_report__known_spend_usd").desc(nulls_last=True), "-id"),
    "completeness": (F("completeness").desc(nulls_last=True), "-id"),
}


def runs_sorted(qs: QuerySet[Run], sort: str) -> QuerySet[Run]:
    """The runs ordered by one of `RUN_SORTS` (completeness = completed / planned cells,
    from the summary row)."""
    if sort == "completeness":
        qs = qs.annotate(
            completeness=ExpressionWrapper(
                Cast(F("summary__completed"), FloatField()) / NullIf(_cells_total(), 0),
                output_field=FloatField(),
            )
        )
    return qs.order_by(*RUN_SORTS.get(sort, RUN_SORTS[""]))


def runs_ranked_by_set(qs: QuerySet[Run]) -> list[tuple[int, tuple[str, ...]]]:
    """The score sort (issue 35 item 7): a score is ranked only against the scores of runs
    over the same benchmark set — the benchmarks of the frozen manifest, which the score
    covers; a score over other benchmarks is not comparable. Within a set, best score first
    (runs without a score last, newest first among equals); the sets in order of their best
    score, sets without any score last. Returns (run id, benchmark set) for every run of
    `qs` in that order: one query over run ids and stored scores plus the cached manifest
    keys (`manifest_benchmark_keys`), never a manifest per request."""
    runs: list[Run] = list(
        qs.only("id", "created_at", "plan_sha256")
        .annotate(best=F("stored_report__score"))
        .order_by()
    )
    keys = manifest_benchmark_keys(runs)
    rank = {b: i for i, b in enumerate(ADAPTERS)}
    sets = {
        r.pk: tuple(sorted(keys[r.pk], key=lambda b: (rank.get(b, len(rank)), b))) for r in runs
    }
    best: dict[tuple[str, ...], float] = {}
    for r in runs:
        if r.best is not None:  # type: ignore[attr-defined]
            best[sets[r.pk]] = max(best.get(sets[r.pk], r.best), r.best)  # type: ignore[attr-defined]

    def order(r: Run) -> tuple[Any, ...]:
        group = sets[r.pk]
        score = r.best  # type: ignore[attr-defined]
        return (
            group not in best,
            -best.get(group, 0.0),
            group,
            score is None,
            -(score or 0.0),
            -r.pk,
        )

    return [(r.pk, sets[r.pk]) for r in sorted(runs, key=order)]


def runs_with_progress(queryset: QuerySet[Run] | None = None) -> QuerySet[Run]:
    """Runs annotated with what a list row or a run poll shows (R7.1, R10.2): completed /
    denominator, failures and the last persisted update, each read from indexed per-run
    figures (`progress_annotations`), so a poll costs the same at 1,000 cells as at 100,000
    (R13: reads cost O(page), not O(run)). The frozen manifest is deferred: a standard run's
    case list is megabytes; what is read from it comes from `manifest_target_kinds` /
    `manifest_head` (cached), or loads it on first access."""
    qs = queryset if queryset is not None else Run.objects.all()
    return qs.select_related("owner").defer("manifest").annotate(**progress_annotations())


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
        # An EXISTS rather than a join + DISTINCT, so the filtered ids can be sliced into a page.
        qs = qs.filter(
            Exists(
                Cell.objects.filter(run=OuterRef("pk")).filter(
                    Q(target__model__icontains=model) | Q(target__slug__icontains=model)
                )
            )
        )
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
    *,
    run: Run,
    after: int = 0,
    limit: int = MAX_DETAIL_PAGE,
    active: bool = False,
    among: list[int] | None = None,
) -> list[Call]:
    """A page of the run's calls in id order; ``among``: only those ids (already a page)."""
    qs = Call.objects.filter(cell__run=run, pk__gt=max(after, run.calls_after_id or 0))
    if active:
        qs = qs.filter(status__in=ACTIVE_CALL_STATUSES)
    if among is not None:
        qs = qs.filter(pk__in=among)
    return list(
        qs.select_related("cell", "target")
        .defer("request", "content", "reasoning", "tool_calls", "usage_raw", "response_headers")
        .order_by("pk")[: min(limit, MAX_DETAIL_PAGE)]
    )


def active_calls_page(run: Run) -> list[Call]:
    """The first page of in-flight calls. Their ids come from the call status index, each
    in-flight call's run from one probe of its cell: a join on the run's cells reads every
    cell of the run (100,000 at 100,000 calls), and a walk in id order passes every finished
    call after the first in-flight one (a stream stuck since the start, or in-flight calls
    spread over a long run). What is read grows with the calls in flight (of every run: the
    status index is not per run), not with the run; only those created after the run
    (`Run.calls_after_id`) have their cell probed."""
    run_of_cell = Cell.objects.filter(pk=OuterRef("cell_id")).values("run_id")[:1]
    ids = sorted(
        Call.objects.filter(status__in=ACTIVE_CALL_STATUSES)
        # `+ 0`: the floor stays a filter on the status index's rows, checked before the
        # probe. As an index condition the planner ANDs it with a range of the primary key,
        # which reads every call of the run (101,000 index entries at 100,000 calls).
        .alias(call_id=F("pk") + 0)
        .filter(call_id__gt=run.calls_after_id or 0)
        .annotate(run_of_cell=Subquery(run_of_cell))
        .filter(run_of_cell=run.pk)
        .values_list("pk", flat=True)
    )[:MAX_DETAIL_PAGE]
    return calls_page(run=run, active=True, among=ids) if ids else []


def results_page(
    *, run: Run, after: int = 0, limit: int = MAX_DETAIL_PAGE, where: Q | None = None
) -> list[Cell]:
    """A page of the run's question results in id order; ``where``: only those matching
    (the Questions tab's filters, `runs.interfaces.questions`), so the 100 read are 100 that match."""
    return list(
        Cell.objects.filter(run=run, pk__gt=after)
        .filter(where or Q())
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
    """The Run rows a Runs page or a Run detail header shows, without the frozen manifest
    (megabytes for a standard run); evaluate it, then pass the rows to `runs_decorate`.

    The cell counts and the newest event come with the rows (`progress_annotations`: the
    run's summary row and one index probe), the same for 10 cells or 100,000.
    """
    return runs_with_progress(queryset)


def runs_decorate(runs: list[Run]) -> list[Run]:
    """Adds the target types of the frozen manifest to loaded runs (R7.1), read once per run
    and then cached; the cell counts were annotated by `runs_list_rows`."""
    kinds = manifest_target_kinds(runs)
    for run in runs:
        run.target_kinds = kinds[run.pk]  # type: ignore[attr-defined]
    return runs


def _frozen_key(kind: str, run: Run) -> str:
    # The manifest is frozen (a database trigger refuses any change to it), so what is read
    # from it is named by the run's identity and never goes stale. created_at guards against
    # a primary key reused after a rollback (SQLite).
    return f"srbench:{kind}:{run.pk}:{run.created_at.timestamp()}:{run.plan_sha256}"


def manifest_target_kinds(runs: list[Run]) -> dict[int, list[str]]:
    """The sorted target kinds of each run's frozen manifest. Reading even one key of a large
    manifest makes the database decompress all of it (~100 ms for 100,000 cases), so each
    run's kinds are read once and then kept in the cache."""
    keys = {_frozen_key("target-kinds", r): r for r in runs}
    found = cache.get_many(list(keys))
    out = {keys[k].pk: v for k, v in found.items()}
    missing = [r for k, r in keys.items() if k not in found]
    loaded = [r for r in missing if "manifest" in r.__dict__]
    for run in loaded:
        out[run.pk] = target_types(run)
    wanted = [r.pk for r in missing if "manifest" not in r.__dict__]
    if wanted:
        for pk, targets in Run.objects.filter(pk__in=wanted).values_list(
            "pk", F("manifest__targets")
        ):
            out[pk] = sorted({t["kind"] for t in targets or []})
    cache.set_many({_frozen_key("target-kinds", r): out[r.pk] for r in missing}, FROZEN_TIMEOUT)
    return out


def manifest_benchmark_keys(runs: list[Run]) -> dict[int, list[str]]:
    """The benchmarks of each run's frozen manifest, read once per run and then cached like
    `manifest_target_kinds`."""
    keys = {_frozen_key("benchmark-keys", r): r for r in runs}
    found = cache.get_many(list(keys))
    out = {keys[k].pk: v for k, v in found.items()}
    missing = [r for k, r in keys.items() if k not in found]
    for run in missing:
        if "manifest" in run.__dict__:
            out[run.pk] = list((run.manifest or {}).get("benchmarks") or {})
    wanted = [r.pk for r in missing if r.pk not in out]
    if wanted:
        for pk, benchmarks in Run.objects.filter(pk__in=wanted).values_list(
            "pk", F("manifest__benchmarks")
        ):
            out[pk] = list(benchmarks or {})
    cache.set_many({_frozen_key("benchmark-keys", r): out[r.pk] for r in missing}, FROZEN_TIMEOUT)
    return out


def runs_data_provenance(runs: list[Run]) -> dict[int, dict[str, str]]:
    """Per run, per planned benchmark: where its questions came from (`datasets.provenance`),
    for a page of runs in a fixed number of queries."""
    benchmarks = manifest_benchmark_keys(runs)
    by_dataset = datasets_provenance(r.dataset_id for r in runs)
    return {
        r.pk: benchmarks_provenance(by_dataset.get(r.dataset_id, {}), benchmarks[r.pk])
        for r in runs
    }


# The attribute `without_case_list` gives each run: its frozen manifest without the case list.
MANIFEST_WITHOUT_CASES = "manifest_without_cases"


def without_case_list(qs: QuerySet[Run], *, kept: BaseExpression | None = None) -> QuerySet[Run]:
    """Runs with their frozen manifest deferred and, as `MANIFEST_WITHOUT_CASES`, every field of
    it but the case list (megabytes of JSON at 100,000 cases), cut by the database: for
    readers that need the manifest's small fields of several runs (a comparison). ``kept``: a
    copy of those fields kept elsewhere, read first (null where there is none); cutting a
    toasted manifest still decompresses all of it."""
    column = f'"{Run._meta.db_table}"."manifest"'
    head: BaseExpression = RawSQL(f"{column} - %s", ("cases",), output_field=JSONField())
    if kept is not None:
        head = Coalesce(kept, head, output_field=JSONField())
    return qs.defer("manifest").annotate(**{MANIFEST_WITHOUT_CASES: head})


def manifest_without_cases(run: Run, *, load: bool = True) -> Any:
    """Every field of the run's frozen manifest the run was loaded with, the case list aside:
    the fields `without_case_list` cut, else the manifest itself if loaded; else, with
    ``load``, the manifest read now (None without). The one accessor of a manifest's small
    fields (a comparison's verdict, margins, limits and weights; `manifest_head`)."""
    head = getattr(run, MANIFEST_WITHOUT_CASES, None)
    if head is not None:
        return head
    if load or "manifest" in run.__dict__:
        return run.manifest
    return None


def manifest_head(run: Run) -> dict[str, Any]:
    """The targets and benchmarks of the run's frozen manifest (what a report reads), without
    loading its case list; cached like `manifest_target_kinds`. ``rejudge`` is a re-judge
    child's marker cut to the run whose answers it judges (``{"parent_run": N}``), else None."""
    loaded = manifest_without_cases(run, load=False)
    if loaded is not None:
        rejudged = (loaded.get("rejudge") or {}).get("parent_run")
        return {
            "targets": loaded["targets"],
            "benchmarks": loaded["benchmarks"],
            "not_run": loaded.get("not_run", []),
            "slots": int(loaded.get("slots") or 1),
            "rejudge": None if rejudged is None else {"parent_run": rejudged},
        }
    # -2: with not_run (issue 22); -3: with slots (the attempts per question, issue 35); -4:
    # with the re-judge's parent (a re-judge child's own subject spend is a known 0)
    key = _frozen_key("manifest-head-4", run)
    head = cache.get(key)
    if head is None:
        targets, benchmarks, not_run, slots, rejudged = Run.objects.filter(pk=run.pk).values_list(
            F("manifest__targets"),
            F("manifest__benchmarks"),
            F("manifest__not_run"),
            F("manifest__slots"),
            F("manifest__rejudge__parent_run"),
        )[0]
        head = {
            "targets": targets,
            "benchmarks": benchmarks,
            "not_run": not_run or [],
            "slots": int(slots or 1),
            "rejudge": None if rejudged is None else {"parent_run": rejudged},
        }
        cache.set(key, head, FROZEN_TIMEOUT)
    return head


# A settled run's cells are not written by the engine any more, but a cell changed by hand
# (or by a tool) changes its run's status counts, which the triggers keep in the summary row.
SETTLED_SUMMARY_FIELDS = tuple(
    f"summary__{s}" for s in ("pending", "running", "completed", "failed", "cancelled")
) + ("summary__sent_unknown",)


def run_settled_fingerprint(run: Run) -> tuple[Any, ...] | None:
    """What names a settled run's report, or None when the run is not settled.

    Settled: terminal, with a finish time (else the wall time still ticks), no running cell
    and no call in flight. The engine writes a cell only while it is running under its claim
    token, a call only while it is `sent`/`streaming`, and the recovery pass only touches
    those; a finished call never changes in place (a trigger refuses it). What can still
    change a settled run's report is then in this tuple: the run row (status, times, stop
    reason, names, event cursor), the usage correction in effect (corrections are appended,
    never edited), the latest regrade and the targets its frozen slugs name. A regrade changes
    no cell and no figure of the report, but the report served names the regrade it was kept
    with (`report_version`, issue 38 item 1), so a regrade names a new state too.
    """
    # Each part is a subquery on the run's id, not correlated, so each runs once on its own
    # index (a correlated EXISTS over calls was planned as a scan of every call).
    row = (
        Run.objects.filter(pk=run.pk)
        .annotate(
            busy_cells=Exists(Cell.objects.running().filter(run_id=run.pk)),
            busy_calls=Exists(Call.objects.open().filter(cell__run_id=run.pk)),
            correction=Subquery(
                UsageCorrection.objects.filter(run_id=run.pk).order_by("-version").values("pk")[:1]
            ),
            regrade=Subquery(
                Regrade.objects.filter(run_id=run.pk).order_by("-version").values("version")[:1]
            ),
        )
        .values_list(
            "status",
            "mode",
            "name",
            "profile",
            "parent_id",
            "created_at",
            "started_at",
            "finished_at",
            "updated_at",
            "stop_reason",
            "last_event_seq",
            "plan_sha256",
            "busy_cells",
            "busy_calls",
            "correction",
            "regrade",
            *SETTLED_SUMMARY_FIELDS,
        )
        .first()
    )
    if row is None or row[0] not in TERMINAL_RUN_STATUSES or row[7] is None or row[12] or row[13]:
        return None
    slugs = [t["slug"] for t in manifest_head(run)["targets"]]
    targets = sorted(Target.objects.filter(slug__in=slugs).values_list("pk", "slug"))
    return (run.pk, *row, tuple(targets))


def runs_settled_fingerprints(runs: list[Run]) -> dict[int, tuple[Any, ...] | None]:
    """`run_settled_fingerprint` of several runs from six queries, whatever their number (a
    comparison reads twenty-one): the same tuple, part for part (a test holds them equal).
    The runs should carry their manifests (else each head is read from the cache)."""
    ids = [r.pk for r in runs]
    fields = ("status", "mode", "name", "profile", "parent_id", "created_at", "started_at")
    fields += ("finished_at", "updated_at", "stop_reason", "last_event_seq", "plan_sha256")
    rows = {
        pk: rest
        for pk, *rest in Run.objects.filter(pk__in=ids).values_list(
            "pk", *fields, *SETTLED_SUMMARY_FIELDS
        )
    }
    busy_cells = set(
        Cell.objects.running().filter(run_id__in=ids).values_list("run_id", flat=True).distinct()
    )
    busy_calls = set(
        Call.objects.open()
        .filter(cell__run_id__in=ids)
        .values_list("cell__run_id", flat=True)
        .distinct()
    )
    corrections = dict(
        UsageCorrection.objects.filter(run_id__in=ids)
        .order_by("run_id", "-version")
        .distinct("run_id")
        .values_list("run_id", "pk")
    )
    regrades = dict(
        Regrade.objects.filter(run_id__in=ids)
        .order_by("run_id", "-version")
        .distinct("run_id")
        .values_list("run_id", "version")
    )
    slugs = {r.pk: {t["slug"] for t in manifest_head(r)["targets"]} for r in runs}
    known = list(
        Target.objects.filter(slug__in=set().union(*slugs.values())).values_list("pk", "slug")
    )
    out: dict[int, tuple[Any, ...] | None] = {}
    for pk in ids:
        row = rows.get(pk)
        if (
            row is None
            or row[0] not in TERMINAL_RUN_STATUSES
            or row[7] is None
            or pk in busy_cells
            or pk in busy_calls
        ):
            out[pk] = None
            continue
        targets = tuple(sorted(t for t in known if t[1] in slugs[pk]))
        head, summary = row[: len(fields)], row[len(fields) :]
        out[pk] = (
            pk,
            *head,
            False,
            False,
            corrections.get(pk),
            regrades.get(pk),
            *summary,
            targets,
        )
    return out


def run_last_update(run: Run) -> Any:
    """The last persisted change: the newest event, or the row itself if that is newer."""
    last = getattr(run, "last_event_at", None)
    return max(last, run.updated_at) if last else run.updated_at


def runs_target_types(run: Run) -> list[str]:
    kinds = getattr(run, "target_kinds", None)
    return target_types(run) if kinds is None else kinds


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


def cell_episode(*, run: Run, cell_id: int) -> tuple[Cell, list[Call], Call | None] | None:
    """An agent episode's cell, its calls in id order (replies, no requests) and its last
    subject call with its request: that request carries the whole conversation before it, so
    one request is read however many turns the episode had."""
    found = cell_with_calls(run=run, cell_id=cell_id)
    if found is None:
        return None
    cell, _ = found
    calls = list(
        cell.calls.select_related("target")
        .defer("request", "reasoning", "usage_raw", "response_headers")
        .order_by("pk")
    )
    subject = [c.pk for c in calls if c.role == Call.Role.SUBJECT]
    last = Call.objects.filter(pk=subject[-1]).first() if subject else None
    return cell, calls, last


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
    times a router's internal call cap — the bound the engine reserves against the budget,
    from the same function (``runs.ledger.accounting.worst_case_call_cost``). Judge calls carry the
    hidden reference answer, so no bound is computed for them here; the budget cap
    (max_cost_usd) is what limits them. None when a price is missing; exact, never rounded.
    """
    question_ids = [qid for qid, _sha, _b in manifest["cases"]]
    payloads = dict(Question.objects.filter(pk__in=question_ids).values_list("pk", "payload"))
    limits = manifest["limits"]
    total: Decimal | None = Decimal(0)
    per_target: dict[str, str | None] = {}
    for target in manifest["targets"]:
        table = manifest["prices"].get(target["slug"], {})
        max_tokens = sent_max_tokens(target["fixed_params"], limits)
        calls = [
            worst_case_call_cost(
                table,
                kind=target["kind"],
                model=target["model"],
                messages=get_adapter(benchmark).messages(payloads[qid]),
                max_tokens=max_tokens,
                max_inference_calls=target.get("max_inference_calls"),
            )
            for qid, _sha, benchmark in manifest["cases"]
        ]
        if any(call is None for call in calls):
            per_target[target["slug"]] = None
            total = None
            continue
        bound = sum((call for call in calls if call is not None), Decimal(0)) * manifest["slots"]
        per_target[target["slug"]] = money_text(bound)
        if total is not None:
            total += bound
    return {
        "subject_usd": money_text(total),
        "per_target": per_target,
        "judged_benchmarks": sorted(manifest["judges"]),
        # Judge calls per case and slot of a judged benchmark: two where the plan asked for the
        # official scorer beside sr-bench's (issue 22 point 5), each reserved against the budget.
        "judge_calls_per_case": {
            b: 2 if ((v.get("official_scoring") or {}).get("available")) else 1
            for b, v in sorted(manifest["benchmarks"].items())
            if v.get("kind") == "judge"
        },
    }


def target_api_key(*, target: Target) -> str | None:
    """The key to send, for the engine only: a stored key wins, else the named env variable."""
    secret = TargetSecret.objects.filter(target=target).first()
    if secret is not None:
        return decrypt_secret(secret.api_key_encrypted)
    if target.api_key_env:
        return os.environ.get(target.api_key_env)
    return None
