"""Per-question pages of a run (issue 35 item 7): every target's answer and verdict side by side,
with a failures-only filter, and the transcript of an agent episode (τ³, Terminal-Bench).

Plain GET pages whose state is the query string, like the run page (runs.interfaces.views): htmx only
swaps the table in place, asking for the same URL and receiving a named partial. What is shown
of a cell or a call passes runs.interfaces.public, the one rule the other pages and the API follow.
"""

from __future__ import annotations

from typing import Any

from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from runs.interfaces.questions import (
    episode_context,
    question_filters,
    question_group_cells,
    question_groups,
    side_by_side_rows,
)
from runs.interfaces.views import PAGE_SIZE
from runs.models import Run

_ON = ("1", "on", "true", "yes")


@require_GET
@vary_on_headers("HX-Request")
def run_side_by_side(request: HttpRequest, run_id: int) -> HttpResponse:
    """Per question (and attempt slot): each target's answer and verdict in the plan's target
    order, 25 questions a page; `failures=1` keeps the questions where at least one target's
    result is wrong, failed or of unknown outcome, `disagree=1` those where one is right and
    another fails; `benchmark` narrows to one benchmark."""
    run = get_object_or_404(Run.objects.defer("manifest"), pk=run_id)
    filters = question_filters(request.GET, run=run, names=("benchmark",))
    failures_only = request.GET.get("failures", "") in _ON
    disagree = request.GET.get("disagree", "") in _ON
    where = filters.where()
    groups = question_groups(run=run, where=where, failures_only=failures_only, disagree=disagree)
    page = Paginator(groups, PAGE_SIZE).get_page(request.GET.get("page"))
    keys = [(g["question_id"], g["slot"]) for g in page.object_list]
    cells = question_group_cells(run=run, keys=keys, where=where) if keys else []
    context: dict[str, Any] = {
        "nav": "runs",
        "run": run,
        "filters": filters,
        "failures_only": failures_only,
        "disagree": disagree,
        "page": page,
        "targets": filters.targets,
        "rows": side_by_side_rows(list(page.object_list), cells, filters.targets),
    }
    htmx = getattr(request, "htmx", False)
    template = "runs/side_by_side.html#side-by-side" if htmx else "runs/side_by_side.html"
    return render(request, template, context)


@require_GET
def run_transcript(request: HttpRequest, run_id: int, cell_id: int) -> HttpResponse:
    """Every turn of an agent episode, public part only: the agent's messages, its tool calls
    with their arguments and the tool results (a terminal command and its output), and the
    simulated user's messages, in order."""
    run = get_object_or_404(Run.objects.defer("manifest"), pk=run_id)
    episode = episode_context(run=run, cell_id=cell_id)
    if episode is None:
        raise Http404("No such question result in this run.")
    return render(request, "runs/transcript.html", {"nav": "runs", "run": run, "episode": episode})
