"""Run pages (SPEC R7, R10, R13, R14): Runs, Run detail, Targets. Create evaluation (R8)
lives in runs.interfaces.views_evaluation.

Every page is a plain GET page or a POST form that works with JavaScript off; htmx only adds
polling and partial swaps, asking for the same URL and receiving a named partial of the same
template (`page.html#partial`). The URL is the state: filters, tab, cursors and page numbers
live in the query string, so a reload, a bookmark or a dropped connection loses nothing.
Reading never starts, restarts or resubmits anything; the only writes are Start evaluation
(idempotent by its key) and Cancel.
"""

from __future__ import annotations

import uuid
from fractions import Fraction
from typing import Any

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import HttpResponseClientRefresh, push_url

from datasets.benchmarks import ADAPTERS
from datasets.provenance import provenance_summary
from runs.interfaces.forms import RECOVERY_SCOPES, RecoveryScopeForm, RunFilterForm
from runs.interfaces.page_actions import run_actions
from runs.interfaces.public import (
    call_usage_rows,
    public_call_content,
    public_cell,
    public_cell_error,
    public_event_payload,
    with_effective_costs,
)
from runs.interfaces.questions import episode_context, is_agent, question_filters
from runs.ledger import selectors
from runs.ledger.hooks import run_tab_context
from runs.ledger.permissions import may_act_on_run, run_action_require
from runs.models import CellStatus, Run, RunStatus, Target
from runs.models.live import CELL_SUM_FIELDS
from runs.planning.services import run_cancel
from runs.reporting.effective import latest_corrections
from runs.reporting.live_report import (
    SNAPSHOT_SECONDS,
    LiveSection,
    live_section,
    run_results_compute,
)
from runs.reporting.reconcile import correction_summary
from runs.reporting.report import incomplete_reasons
from runs.reporting.report_types import Report
from runs.settlement.lineage import recovery_page_lineage
from runs.settlement.recovery import recovery_plan_read, recovery_submit
from runs.settlement.recovery_pages import PlanPages
from runs.settlement.recovery_rules import REASONS, recovery_offer
from runs.vocabulary.recovery_modes import RecoveryPlanMode
from srbench.refusals import Refusal
from srbench.stats import renormalised_weights

PAGE_SIZE = 25  # rows shown per page everywhere (R13.1, R14.1)
# The report's four exclusive token classes (R1.1), in words.
TOKEN_LABELS = (
    ("input", "uncached input"),
    ("cached_input", "cache-read input"),
    ("cache_write", "cache-write input"),
    ("output", "output"),
)
TABS = ("results", "questions", "calls", "evidence", "recipe")
# Shown wherever in-flight activity is (R10.3), in these words.
STREAM_ACTIVITY_WARNING = (
    "Stream activity shows that bytes are arriving; it proves neither answer quality nor "
    "billed tokens. Tokens and cost need a complete usage receipt."
)
# R3.2, beside every cache-neutral figure.
CACHE_NEUTRAL_CAVEAT = (
    "Cache-neutral cost prices every input token at the ordinary input price: a "
    "counterfactual token-equivalent, neither a bill nor a measured cache-free run."
)


def _template(request: HttpRequest, page: str, partial: str) -> str:
    return f"{page}#{partial}" if getattr(request, "htmx", False) else page


def query_int(value: str | None, default: int = 0, *, low: int = 0) -> int:
    """A number from the query string. A missing or hand-mangled value falls back to `default`
    rather than failing: the URL is the page's state and any URL must still render."""
    try:
        return max(low, int(value)) if value not in (None, "") else default
    except ValueError:
        return default


def canonical_items(by_benchmark: dict[str, Any]) -> list[tuple[str, Any]]:
    """A per-benchmark mapping in the spec's benchmark order (ADAPTERS), whatever order
    the database or JSON gave it in."""
    rank = {b: i for i, b in enumerate(ADAPTERS)}
    return sorted(by_benchmark.items(), key=lambda kv: (rank.get(kv[0], len(rank)), kv[0]))


# --- Runs (R7) -------------------------------------------------------------------------------


def _runs_page(
    request: HttpRequest, form: RunFilterForm, sort: str
) -> tuple[Any, list[Run], dict[int, tuple[str, ...]]]:
    """The page of runs the list shows, in its order, and (score sort only) each run's
    benchmark set: scores are ranked only within one set (issue 35 item 7). The page is
    chosen on bare run ids and only its 25 rows are read with what a row shows: an OFFSET
    over the annotated rows evaluated the annotations of every skipped run."""
    runs = selectors.runs_filter(Run.objects.all(), **form.filters())
    number = request.GET.get("page")
    if sort != "score":
        ids = selectors.runs_sorted(runs, sort).values_list("pk", flat=True)
        page = Paginator(ids, PAGE_SIZE).get_page(number)
        rows = selectors.runs_list_rows(Run.objects.filter(pk__in=page.object_list))
        return page, list(selectors.runs_sorted(rows, sort)), {}
    ranked = Paginator(selectors.runs_ranked_by_set(runs), PAGE_SIZE).get_page(number)
    sets: dict[int, tuple[str, ...]] = dict(ranked.object_list)
    position = {pk: i for i, pk in enumerate(sets)}
    rows = selectors.runs_list_rows(Run.objects.filter(pk__in=list(sets)))
    return ranked, sorted(rows, key=lambda r: position[r.pk]), sets


@require_GET
@vary_on_headers("HX-Request")
def run_list(request: HttpRequest) -> HttpResponse:
    form = RunFilterForm(request.GET)
    sort = form.ordering()
    page, page_runs, sets = _runs_page(request, form, sort)
    decorated = selectors.runs_decorate(page_runs)
    data = selectors.runs_data_provenance(decorated)
    rows = [
        {
            "run": run,
            "last_update": selectors.run_last_update(run),
            "target_types": selectors.runs_target_types(run),
            # Beside the score: where each benchmark's questions came from (issue 35).
            "data": canonical_items(data[run.pk]),
            "data_summary": provenance_summary(data[run.pk]),
            "benchmark_set": sets.get(run.pk),
        }
        for run in decorated
    ]
    return render(
        request,
        _template(request, "runs/run_list.html", "runs-table"),
        {
            "nav": "runs",
            "form": form,
            "refused": form.refused(),
            "sort": sort,
            "page": page,
            "rows": rows,
            "any_active": any(not r["run"].is_terminal for r in rows),
            "rendered_at": timezone.now(),
        },
    )


@require_GET
def target_list(request: HttpRequest) -> HttpResponse:
    return render(
        request, "runs/target_list.html", {"targets": Target.objects.all(), "nav": "targets"}
    )


# --- Run detail (R10, R13, R14) ------------------------------------------------------------------


def _run_header(run_id: int) -> Run:
    run = selectors.runs_list_rows(Run.objects.filter(pk=run_id)).first()
    if run is None:
        raise Http404("No such run.")
    return selectors.runs_decorate([run])[0]


def _partial_results(run: Run, manifest: dict[str, Any], live: LiveSection) -> list[dict[str, Any]]:
    """Per target and benchmark while the run runs (issue 23, R10.2): completed of planned,
    correct, and accuracy with its 95% Wilson interval over the cases completed so far — a
    partial figure, labelled so, never the final score (that is over planned cases, at the end).
    The interval is the one the final report would give for those cells, n = questions
    (`runs.reporting.live_report.live_section`, issue 35 item 4)."""
    if not manifest.get("benchmarks") or not manifest.get("targets"):
        return []  # not a frozen plan's manifest (a hand-made row): nothing to count
    slugs = dict(
        Target.objects.filter(slug__in=[t["slug"] for t in manifest["targets"]]).values_list(
            "slug", "pk"
        )
    )
    zero = dict.fromkeys(CELL_SUM_FIELDS, 0)
    rows = []
    for target in manifest["targets"]:
        tid = slugs.get(target["slug"])
        by_benchmark = {b: live.cells.get((tid, b), zero) for b in manifest["benchmarks"]}
        for benchmark, b in canonical_items(by_benchmark):
            completed = b["completed"]
            questions, interval = live.intervals.get((tid, benchmark), (0, None))
            rows.append(
                {
                    "target": target["slug"],
                    "benchmark": benchmark,
                    "planned": sum(b[s] for s in CellStatus.values),
                    "completed": completed,
                    "correct": b["correct"],
                    "failed": b["failed"],
                    "accuracy": b["correct"] / completed if completed else None,
                    "interval": interval,
                    "questions": questions,
                    "attempts": live.slots,
                }
            )
    return rows


def _live(run: Run) -> dict[str, Any]:
    """In-flight calls with stage, elapsed, last activity and bytes (R10.3), and while the run
    has not ended the counters (one read: the header's progress and the Results section's
    counts show these same numbers) and the partial results so far."""
    active = selectors.active_calls_page(run) if not run.is_terminal else []
    context: dict[str, Any] = {
        "active_calls": [{"call": c, **selectors.call_live_view(c)} for c in active],
        "elapsed_seconds": selectors.run_elapsed_seconds(run),
        "stream_warning": STREAM_ACTIVITY_WARNING,
        "rendered_at": timezone.now(),
        "partial_results": [],
        "counters": None,
    }
    if not run.is_terminal:
        # The cached head, never the megabyte case list (a page's run row defers the manifest).
        manifest = (
            (run.manifest or {}) if "manifest" in run.__dict__ else selectors.manifest_head(run)
        )
        live = live_section(run, manifest)
        context["counters"] = live.counters
        context["counters_incomplete"] = incomplete_reasons(run, live.counters)
        # A queued run has nothing completed yet: the partial rows start with the run.
        if run.status == RunStatus.RUNNING:
            context["partial_results"] = _partial_results(run, manifest, live)
    return context


@require_GET
@vary_on_headers("HX-Request")
def run_detail(request: HttpRequest, run_id: int) -> HttpResponse:
    run = _run_header(run_id)
    tab = request.GET.get("tab", "results")
    if tab not in TABS:
        tab = "results"
    htmx_target = getattr(getattr(request, "htmx", None), "target", None)
    if htmx_target == "run-live":
        # The page was opened while the run was active and it has ended since: reload it
        # once so the final report replaces the live view.
        if run.is_terminal and request.GET.get("was") == "active":
            return HttpResponseClientRefresh()
        return render(
            request,
            "runs/run_detail.html#live",
            {"run": run, **_live(run), "tab": tab, "poll": True},
        )

    context: dict[str, Any] = {
        "nav": "runs",
        "run": run,
        "tab": tab,
        "tabs": TABS,
        "last_update": selectors.run_last_update(run),
        "target_types": selectors.runs_target_types(run),
        "may_act": may_act_on_run(request.user, run),
        # Export, Compare and the CLI commands of this run (issue 35 item 7).
        "actions": run_actions(request, run),
        # "Review recovery plan" only when some cell may be recovered (else why not).
        "recovery_offer": recovery_offer(run)
        if run.is_terminal and run.mode == Run.Mode.LIVE
        else None,
        **_live(run),
    }
    context.update(TAB_CONTEXT[tab](request, run))
    if tab == "evidence" and request.GET.get("read"):
        # A read moved the cursor: the address becomes the snapshot it names, so a reload
        # shows the same events instead of reading again.
        canonical = request.GET.copy()
        canonical.pop("read")
        canonical["upto"] = str(context["upto"])
        url = f"{reverse('runs:detail', args=[run.pk])}?{canonical.urlencode()}"
        if not getattr(request, "htmx", False):
            return HttpResponseRedirect(url)
        response = render(request, "runs/run_detail.html#tab-body", context)
        return push_url(response, url)
    if getattr(request, "htmx", False) and htmx_target == "tab-body":
        return render(request, "runs/run_detail.html#tab-body", context)
    return render(request, "runs/run_detail.html", context)


def _results_context(request: HttpRequest, run: Run) -> dict[str, Any]:
    # R13.2: every summary figure comes from the full report over the whole ledger: stored
    # once the run is settled, and while it runs built from the sums the ledger's triggers
    # keep (issue 25), its percentiles and routing from a snapshot shown with its time.
    results = run_results_compute(run=run)
    report = results.report
    children = Paginator(run.children.order_by("pk").only("pk", "name", "status"), PAGE_SIZE)
    return {
        "report": report,
        "live_results": results.live,
        "snapshot_at": results.snapshot_at,
        "snapshot_seconds": SNAPSHOT_SECONDS,
        "chart": _accuracy_chart(report),
        # Beside the score: how many of its benchmarks are synthetic or fixture data.
        "data_summary": provenance_summary(
            {b: row.provenance for t in report.targets for b, row in t.benchmarks.items()}
        ),
        "score_weights": _score_weights(run, report),
        "token_labels": TOKEN_LABELS,
        "cache_neutral_caveat": CACHE_NEUTRAL_CAVEAT,
        "children_page": children.get_page(request.GET.get("children_page")),
        "parent": run.parent,
    }


def _score_weights(run: Run, report: Report) -> list[tuple[str, list[dict[str, str]]]]:
    """Per scored target, the weight each benchmark had in its score: the manifest's sr-bench
    weight rescaled over the benchmarks the score covers (srbench.stats.renormalised_weights,
    the rule weighted_quality applies), so a subset's weighted mean shows what it weighs."""
    manifest = selectors.manifest_head(run)["benchmarks"]
    frozen = {b: Fraction(v["weight"]) for b, v in manifest.items()}
    out = []
    for t in report.targets:
        if t.score.exact is None:
            continue
        covered = t.score.benchmarks or tuple(b for b in frozen if b in t.benchmarks)
        used = renormalised_weights(covered, frozen)
        rows = [
            {
                "benchmark": b,
                "weight": f"{float(used[b]):.4f}",
                "frozen": str(manifest[b]["weight"]),
            }
            for b, _ in canonical_items(used)
        ]
        out.append((t.slug, rows))
    return out


def _accuracy_chart(report: Report) -> dict[str, Any]:
    """Bars of accuracy with their Wilson interval, per benchmark and target, as geometry
    for an inline SVG (no chart library): x in percent of the plot width."""
    rows = []
    for target in report.targets:
        for benchmark, b in canonical_items(target.benchmarks):
            acc = None if b.accuracy is None else float(b.accuracy)
            low, high = b.wilson_95 or (None, None)
            rows.append(
                {
                    "label": f"{benchmark} · {target.slug}",
                    "provenance": b.provenance,
                    "accuracy": acc,
                    "width": None if acc is None else round(acc * 100, 2),
                    "low": None if low is None else round(low * 100, 2),
                    "high": None if high is None else round(high * 100, 2),
                }
            )
    for i, row in enumerate(rows):
        row["y"] = i * 22
    return {"rows": rows, "height": len(rows) * 22 + 4}


def _loaded_window(request: HttpRequest, records: list[Any], search_fields: Any) -> dict[str, Any]:
    """R13.1: the server read at most 100 records; search and the 25-row pages cover only
    those. `q` matches any of the record's shown fields, case-insensitively."""
    q = request.GET.get("q", "").strip()
    shown = records
    if q:
        needle = q.lower()
        shown = [r for r in records if any(needle in str(v).lower() for v in search_fields(r))]
    page = Paginator(shown, PAGE_SIZE).get_page(request.GET.get("page"))
    after = query_int(request.GET.get("after"))
    return {
        "q": q,
        "page": page,
        "after": after,
        "loaded": len(records),
        "next_after": records[-1].pk if len(records) == selectors.MAX_DETAIL_PAGE else None,
    }


def _questions_context(request: HttpRequest, run: Run) -> dict[str, Any]:
    # Target, benchmark and outcome narrow what is read (issue 35 item 7): the 100 loaded are
    # 100 that match; a refused value is named and the valid filters still apply.
    filters = question_filters(request.GET, run=run)
    cells = selectors.results_page(
        run=run, after=query_int(request.GET.get("after")), where=filters.where()
    )
    # Searched and shown as a member sees it (runs.interfaces.public): a search over the stored error
    # would answer whether hidden text is in it.
    context = _loaded_window(
        request,
        cells,
        lambda c: (
            c.benchmark,
            c.question.native_id,
            c.question.subject,
            c.target.slug,
            c.status,
            c.final_answer,
            public_cell_error(c.error),
        ),
    )
    context["rows"] = [
        {"cell": c, "error": public_cell_error(c.error), "agent": is_agent(c.benchmark)}
        for c in context["page"].object_list
    ]
    context["filters"] = filters
    return context


def _calls_context(request: HttpRequest, run: Run) -> dict[str, Any]:
    calls = selectors.calls_page(run=run, after=query_int(request.GET.get("after")))
    context = _loaded_window(
        request,
        calls,
        lambda c: (
            c.cell.benchmark,
            c.role,
            c.status,
            c.target.slug,
            c.served_model,
            c.selected_model,
            c.error_code,
            c.finish_reason,
        ),
    )
    # Each shown call's cost as the report counts it, beside the recorded one.
    with_effective_costs(list(context["page"].object_list), run_id=run.pk)
    open_id = query_int(request.GET.get("call"))
    if open_id:
        call = selectors.call_full(run=run, call_id=open_id)
        if call is not None:
            context["open_call"] = _call_context(call)
    return context


def _evidence_context(request: HttpRequest, run: Run) -> dict[str, Any]:
    """R14: a snapshot named by its cursor (`upto`, the last loaded seq). Opening reads at
    most 1,000 events; Load more / Refresh read at most 1,000 more after the cursor. A page
    or a type filter only ever covers what is loaded."""
    upto = query_int(request.GET.get("upto"))
    action = request.GET.get("read")
    if not request.GET.get("upto") or action in ("more", "refresh"):
        fresh = selectors.events_page(run=run, after=upto, limit=selectors.MAX_EVENT_PAGE)
        if fresh:
            upto = fresh[-1].seq
        last_read_full = len(fresh) == selectors.MAX_EVENT_PAGE
    else:
        last_read_full = False
    types = [t for t in request.GET.getlist("type") if t]
    loaded = selectors.events_loaded_count(run=run, upto=upto)
    matching = selectors.events_loaded_count(run=run, upto=upto, types=types) if types else loaded
    paginator = Paginator(range(matching), PAGE_SIZE)
    page = paginator.get_page(request.GET.get("page"))
    offset = (page.number - 1) * PAGE_SIZE
    events = [
        {
            "seq": e.seq,
            "created_at": e.created_at,
            "type": e.type,
            "payload": public_event_payload(e.type, e.payload),
        }
        for e in selectors.events_loaded(run=run, upto=upto, types=types, offset=offset)
    ]
    # The receipt of the correction in effect (R2.3), as the report shows it.
    correction = correction_summary(latest_corrections(run_ids=[run.pk]).get(run.pk))
    return {
        "upto": upto,
        "loaded": loaded,
        "matching": matching,
        "types": types,
        "type_choices": selectors.events_loaded_types(run=run, upto=upto),
        "events": events,
        "events_page": page,
        # "Load more" is offered when the last read came back full, or newer events exist.
        "more_available": last_read_full or selectors.events_exist_after(run=run, seq=upto),
        "read_at": timezone.now(),
        "correction": correction,
        "parent": run.parent,
        "children_page": Paginator(
            run.children.order_by("pk").only("pk", "name", "status"), PAGE_SIZE
        ).get_page(request.GET.get("children_page")),
    }


def _recipe_context(request: HttpRequest, run: Run) -> dict[str, Any]:
    # recipes provides this tab (RecipesConfig.ready): runs does not import recipes.
    return run_tab_context("recipe", request, run)


TAB_CONTEXT = {
    "results": _results_context,
    "questions": _questions_context,
    "calls": _calls_context,
    "evidence": _evidence_context,
    "recipe": _recipe_context,
}


def _call_context(call: Any) -> dict[str, Any]:
    """Full call content (R13.1, on demand), as a member may see it (runs.interfaces.public, the same rule
    as the API): a judge call shows neither its request nor its reply (R9.3); the verdict the
    grader read is in the question's grade. Its cost as the report counts it, beside the
    recorded one (`with_effective_costs`)."""
    with_effective_costs([call], run_id=call.cell.run_id)
    return {
        "call": call,
        "shown": public_call_content(call),
        "buckets": call_usage_rows(call),
        "live": selectors.call_live_view(call),
    }


@require_GET
@vary_on_headers("HX-Request")
def run_call(request: HttpRequest, run_id: int, call_id: int) -> HttpResponse:
    run = get_object_or_404(Run.objects.defer("manifest"), pk=run_id)
    call = selectors.call_full(run=run, call_id=call_id)
    if call is None:
        raise Http404("No such call in this run.")
    return render(
        request,
        _template(request, "runs/call_detail.html", "call-panel"),
        {"nav": "runs", "run": run, **_call_context(call)},
    )


@require_GET
def run_question(request: HttpRequest, run_id: int, cell_id: int) -> HttpResponse:
    run = get_object_or_404(Run.objects.defer("manifest"), pk=run_id)
    found = selectors.cell_with_calls(run=run, cell_id=cell_id)
    if found is None:
        raise Http404("No such question result in this run.")
    cell, calls = found
    with_effective_costs(calls, run_id=run.pk)
    adapter = ADAPTERS[cell.benchmark]
    return render(
        request,
        "runs/question_detail.html",
        {
            "nav": "runs",
            "run": run,
            "cell": cell,
            # Grade, reasons and error as a member may see them (runs.interfaces.public).
            **public_cell(cell),
            "calls": calls,
            # What the subject was asked: the public payload rendered as the adapter sends it.
            "prompt_messages": adapter.messages(cell.question.payload),
            "kind": adapter.kind,
            # An agent episode's answer is its transcript (issue 35 item 7), shown here.
            "episode": episode_context(run=run, cell_id=cell.pk)
            if adapter.kind == "agent"
            else None,
        },
    )


@require_POST
def run_cancel_view(request: HttpRequest, run_id: int) -> HttpResponse:
    run = get_object_or_404(Run.objects.defer("manifest"), pk=run_id)
    run_action_require(user=request.user, run=run, action="cancel")
    if request.POST.get("confirm") != "yes":
        # Cancelling cannot be undone: without the page's script (which asks in a dialog and
        # sends confirm=yes), the button lands here and asks once more; nothing changed yet.
        return render(request, "runs/cancel_confirm.html", {"nav": "runs", "run": run}, status=200)
    if run_cancel(run=run, user=request.user):
        messages.success(
            request,
            "Cancellation requested: no new call is sent; calls in flight finish and keep their evidence.",
        )
    else:
        messages.info(
            request, "Nothing to cancel: the run has ended or cancellation was already requested."
        )
    return HttpResponseRedirect(reverse("runs:detail", args=[run.pk]), status=303)


# --- Recovery (R15.5, R13.3) ---------------------------------------------------------------------


def _recovery_context(request: HttpRequest, run: Run, mode: str) -> tuple[dict[str, Any], int]:
    """The reviewed plan of `mode` for the page, candidates and exclusions 25 a page each;
    or the refusal in words (with its HTTP status) when the run cannot be recovered now.
    Reviewing reconciles the ledger (R15.1) and never calls a model."""
    context: dict[str, Any] = {
        "nav": "runs",
        "run": run,
        "mode": mode,
        "scopes": RECOVERY_SCOPES,
        "lineage": recovery_page_lineage(run=run),
        # Generated when this page rendered: the no-JS form resubmitted with it finds the
        # same child instead of creating a second one.
        "idempotency_key": uuid.uuid4().hex,
        # Reviewing is a read for every member; submitting is for the owner and operators.
        "may_act": may_act_on_run(request.user, run),
    }
    try:
        read = lambda pages: _recovery_plan_context(request, mode, pages)  # noqa: E731
        context.update(recovery_plan_read(run=run, mode=mode, read=read))
    except Refusal as exc:
        context["refusal"] = exc.message
        return context, exc.http_status
    return context, 200


def _recovery_plan_context(request: HttpRequest, mode: str, pages: PlanPages) -> dict[str, Any]:
    """The plan's part of the recovery page: its summary, one numbered page of each list (read
    from the kept plan O(page) rows at a time), the exclusions counted by reason."""
    reasons = pages.summary["counts"]["excluded_by_reason"]
    return {
        "plan": pages.for_template(),
        "eligible_page": Paginator(pages.eligible, PAGE_SIZE).get_page(request.GET.get("page")),
        "excluded_page": Paginator(pages.excluded, PAGE_SIZE).get_page(
            request.GET.get("excluded_page")
        ),
        "excluded_by_reason": [(r, REASONS[r], n) for r, n in sorted(reasons.items())],
        "previous_attempts_cost": pages.previous_attempts_cost
        if mode == RecoveryPlanMode.FAILED
        else None,
    }


@require_http_methods(["GET", "POST"])
def run_recovery(request: HttpRequest, run_id: int) -> HttpResponse:
    """Review a recovery plan of a terminal run and submit it (R15.5). With JavaScript the
    page's script posts to the recover API and keeps the pending request in the tab; this
    view's POST is the plain-form fallback. Both go through ``recovery_submit`` under an
    idempotency key, so a resubmission returns the same child and nothing is retried here."""
    run = get_object_or_404(Run, pk=run_id)
    if request.method == "POST":
        run_action_require(user=request.user, run=run, action="recover")
    scope = RecoveryScopeForm(request.POST if request.method == "POST" else request.GET)
    if not scope.is_valid():
        # No other scope reviewed in its place: the error, the two scopes; nothing created.
        context = {"nav": "runs", "run": run, "scopes": RECOVERY_SCOPES}
        context.update(mode_errors=scope.errors, lineage=recovery_page_lineage(run=run))
        return render(request, "runs/recovery.html", context, status=400)
    mode = scope.cleaned_data["mode"]
    error = None
    if request.method == "POST":
        try:
            cells = sorted({int(c) for c in request.POST.getlist("cell")})
        except ValueError:
            cells = []
            error = "The selected cells are not cell ids."
        if error is None:
            try:
                child, created = recovery_submit(
                    run=run,
                    plan={
                        "mode": mode,
                        "plan_sha256": request.POST.get("plan_sha256", ""),
                        # Undispatched mode with nothing ticked: every eligible cell.
                        "selected_cells": cells or None,
                    },
                    idempotency_key=request.POST.get("idempotency_key", ""),
                    acknowledge_new_attempt=request.POST.get("acknowledge_new_attempt") == "on",
                    user=request.user,
                )
            except Refusal as exc:  # the API's refusals, shown on the page
                error = exc.message
            else:
                if created:
                    messages.success(
                        request, f"Recovery run #{child.pk} created from run #{run.pk}."
                    )
                else:
                    messages.info(
                        request,
                        "This recovery was already submitted with this request; nothing was "
                        "created twice.",
                    )
                return HttpResponseRedirect(reverse("runs:detail", args=[child.pk]), status=303)
    context, status = _recovery_context(request, run, mode)
    context["error"] = error
    if error is not None and status == 200:
        status = 422
    return render(request, "runs/recovery.html", context, status=status)
