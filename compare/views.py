"""Compare iterations (SPEC R11, issue 9): choose a baseline, tick candidates, compare.

Everything is a plain GET: the selection lives in the URL (R11.3), so the page works without
JavaScript and a link reproduces the comparison. A change of selection arrives as ``op`` plus
the page's tick boxes; it is applied server-side and answered with a redirect to the canonical
URL *without* ``compare=1``, which is what hides an old comparison until "Compare runs" is
pressed again (R11.2). Results are computed afresh by ``comparison_compute`` on every view, so
every pair is re-verified each time.

The page renders from the typed comparison (`compare.results.Comparison`), worded by
`compare.cards` (the baseline box, result cards and legend) and placed by `compare.charts` (the
charts' geometry), not in templates, so "unknown" is decided in one place and can never be
rendered as 0; this module holds the request handling and the URL state.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET

from compare.cards import (
    baseline_box,
    card,
    chart_points,
    differences_rows,
    legend_row,
)
from compare.charts import charts
from compare.compatibility import run_comparison_problems
from compare.forms import CompareForm, ids_format
from compare.headline import headline_sentence
from compare.results import STATEMENTS
from compare.selectors import RunOption, baseline_offer, candidate_options, comparable_pool
from compare.services import CandidatesRefused, ComparisonError, comparison_compute
from runs.models import Run
from srbench.figures_text import level_text

PAGE_SIZE = 25  # baseline and candidate tables
CARDS_PER_PAGE = 25  # result cards (issue 9); charts and exports keep every comparison

# --- URL state -------------------------------------------------------------------------------


def compare_url(**params: Any) -> str:
    """``/compare/`` with the given non-empty parameters, candidates in canonical spelling."""
    if "candidates" in params and not isinstance(params["candidates"], str):
        params["candidates"] = ids_format(params["candidates"])
    query = {k: v for k, v in params.items() if v not in (None, "", False, [])}
    if query.get("compare") is True:
        query["compare"] = 1
    base = reverse("compare:index")
    return f"{base}?{urlencode(query)}" if query else base


def _apply(
    form: CompareForm, pool: dict[int, RunOption], request: HttpRequest
) -> HttpResponseRedirect:
    """A change of selection: apply the page's ticks, then the operation, then redirect."""
    d = form.cleaned_data
    before = set(d["candidates"])
    selection = (before - set(d["shown"])) | set(d["pick"])
    op = d["op"] or "apply"
    if op in ("select_all", "deselect_all"):
        # "Select all" means every run matching the search, on every page (R11.2).
        matching = {o.id for o in candidate_options(d["baseline"], d["q"] or "", pool=pool)}
        selection = selection | matching if op == "select_all" else selection - matching
    elif op == "clear":
        selection = set()
    if op == "compare":
        compare = bool(selection)
    else:
        # The old comparison stays only while the selection is exactly the compared one.
        compare = d["compare"] and selection == before
        if d["compare"] and not compare:
            messages.info(
                request,
                "The selection changed, so the previous comparison is hidden. Press "
                "“Compare runs” to compare the new selection.",
            )
    return HttpResponseRedirect(
        compare_url(
            baseline=d["baseline"],
            bt=d["bt"],
            candidates=sorted(selection),
            q=d["q"],
            page=d["goto"] or d["page"],
            compare=compare,
        )
    )


# --- the page --------------------------------------------------------------------------------


def _baseline_problem(baseline_id: int, option: RunOption | None) -> str | None:
    """Why a baseline in the URL is not one the page would offer (the link still compares:
    the server re-verifies and says what it refuses)."""
    if option is None:
        run = Run.objects.filter(pk=baseline_id).only("id", "mode", "status", "parent").first()
        if run is None:
            return f"Run {baseline_id} does not exist."
        problems = run_comparison_problems(run)
        return "; ".join(problems) if problems else f"Run {baseline_id} cannot be compared."
    if not option.single_targets:
        return f"Run {option.id} has no single-model target, so it cannot be a baseline."
    if not option.baseline_targets:
        return f"No single-model target of run {option.id} has a result for every planned case."
    if not option.can_be_baseline:
        return f"No other run is comparable with run {option.id}."
    return None


@require_GET
def compare_page(request: HttpRequest) -> HttpResponse:
    form = CompareForm(request.GET)
    if not form.is_valid():
        # A damaged link: say what is wrong and start over rather than guess a selection.
        return render(
            request,
            "compare/compare.html",
            {"nav": "compare", "form_errors": form.errors, "statements": STATEMENTS},
            status=400,
        )
    d = form.cleaned_data
    baseline_id: int | None = d["baseline"]
    ctx: dict[str, Any] = {"nav": "compare", "statements": STATEMENTS, "d": d}
    if baseline_id is None:
        # Step 1 is counted and paged by the database: options only for the page's runs.
        shown = ((d["bpage"] or 1) - 1) * PAGE_SIZE  # its rows are read with the count
        offer = baseline_offer(d["bq"] or "", window=(shown, shown + PAGE_SIZE))
        page = Paginator(offer, PAGE_SIZE).get_page(d["bpage"])
        ctx.update(
            step=1,
            baselines=page,
            baseline_links=[(o, compare_url(baseline=o.id)) for o in page.object_list],
        )
        return render(request, "compare/compare.html", ctx)

    # Step 2 needs the baseline's fingerprint group only.
    pool = comparable_pool(baseline_id)
    if "op" in request.GET or d["goto"]:
        return _apply(form, pool, request)
    option = pool.get(baseline_id)
    offered_all = candidate_options(baseline_id, pool=pool)
    matching = candidate_options(baseline_id, d["q"], pool=pool) if d["q"] else offered_all
    page = Paginator(matching, PAGE_SIZE).get_page(d["page"])
    selection = d["candidates"]
    selected = set(selection)
    offered_ids = {o.id for o in offered_all}
    state = {
        "baseline": baseline_id,
        "bt": d["bt"],
        "candidates": ids_format(selection),
        "q": d["q"],
        "page": d["page"],
    }
    ctx.update(
        step=2,
        baseline=option,
        baseline_problem=_baseline_problem(baseline_id, option),
        candidates_page=page,
        rows=[(o, o.id in selected) for o in page.object_list],
        shown=ids_format(o.id for o in page.object_list),
        selection=selection,
        selection_text=ids_format(selection),
        selected_not_offered=sorted(selected - offered_ids),
        matching_count=len(matching),
        matching_selected=sum(1 for o in matching if o.id in selected),
        offered_count=len(offered_all),
        state=state,
        change_baseline_url=compare_url(),
        compare_requested=bool(d["compare"]),
        compare_url=compare_url(**state, compare=True),
    )
    if d["compare"] and selection:
        ctx.update(_results(request, d, baseline_id, selection, state))
    return render(request, "compare/compare.html", ctx)


def _results(
    request: HttpRequest,
    d: dict[str, Any],
    baseline_id: int,
    selection: list[int],
    state: dict[str, Any],
) -> dict[str, Any]:
    try:
        comparison = comparison_compute(
            baseline_run_id=baseline_id,
            candidate_run_ids=selection,
            baseline_target=d["bt"] or None,
        )
    except CandidatesRefused as exc:
        return {
            "refused": differences_rows(exc.runs),
            "comparison_error": "Every selected run was refused.",
        }
    except ComparisonError as exc:
        return {"comparison_error": str(exc)}
    ordered = comparison.ordered
    doc = comparison.as_dict()  # the API's document, which the headline sentence reads
    cards_page = Paginator(range(len(ordered)), CARDS_PER_PAGE).get_page(d["rpage"])
    query = {"baseline": baseline_id, "candidates": ids_format(selection)}
    if d["bt"]:
        query["baseline_target"] = d["bt"]
    base = baseline_box(comparison)
    return {
        "base": base,
        "compared": len(ordered),
        "refused": differences_rows(comparison.refused),
        "execution_differences": differences_rows(comparison.execution_differences),
        "cards_page": cards_page,
        # Each card answers the headline question in the sentence the demo and the CLI print.
        "cards": [
            card(i, ordered[i], comparison)
            | {"headline": headline_sentence(doc, ordered[i].entry.slug, ordered[i].entry.run.pk)}
            for i in cards_page.object_list
        ],
        "charts": charts(chart_points(comparison)),
        "legend": [legend_row(i, c, comparison) for i, c in enumerate(ordered)],
        "tied_links": [
            (slug, compare_url(**{**state, "bt": slug}, compare=True)) for slug in base["tied"]
        ]
        if len(base["tied"]) > 1
        else [],
        "export_csv": f"{reverse('compare-export-csv')}?{urlencode(query)}",
        "export_json": f"{reverse('compare-export-json')}?{urlencode(query)}",
        "alpha_level": f"{1 - comparison.alpha:.0%}",
        # The level of the family-wise interval each row shows (the verdict's; one family).
        "family_level": level_text(1 - ordered[0].paired.family_alpha) if ordered else "",
    }
