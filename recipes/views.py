"""Recipe pages (R12.3, R12.5): Frozen recipes, one recipe, a run's Recipe tab, downloads.

Plain GET pages; the list pages by `?page=` so it works as a plain link with JavaScript off.
"""

from __future__ import annotations

import json

from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_GET

from recipes.models import Recipe
from recipes.selectors import (
    ARTEFACT_LABEL,
    recipe_artefact,
    recipe_confirmations,
    recipe_list,
    run_recipe_availability,
    target_pinned_hash,
)
from runs.models import Run

PAGE_SIZE = 25


def recipe_download_response(recipe: Recipe) -> HttpResponse:
    body = json.dumps(recipe_artefact(recipe=recipe), indent=2, ensure_ascii=False)
    response = HttpResponse(body + "\n", content_type="application/json; charset=utf-8")
    filename = f"recipe-run{recipe.run_id}-{recipe.target.slug}.json"
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


def _recipe_context(recipe: Recipe) -> dict[str, object]:
    pin = target_pinned_hash(run=recipe.run, target=recipe.target)
    return {
        "recipe": recipe,
        "pinned_config_hash": pin,
        "confirmations": recipe_confirmations(run=recipe.run, target=recipe.target),
        "body_json": json.dumps(recipe.body, indent=2, ensure_ascii=False, sort_keys=True),
    }


@require_GET
def recipe_list_page(request: HttpRequest) -> HttpResponse:
    page = Paginator(recipe_list(), PAGE_SIZE).get_page(request.GET.get("page"))
    return render(request, "recipes/recipe_list.html", {"nav": "recipes", "page": page})


@require_GET
def recipe_detail_page(request: HttpRequest, pk: int) -> HttpResponse:
    recipe = get_object_or_404(recipe_list(), pk=pk)
    context = {"nav": "recipes", "artefact_label": ARTEFACT_LABEL, **_recipe_context(recipe)}
    return render(request, "recipes/recipe_detail.html", context)


@require_GET
def recipe_download(request: HttpRequest, pk: int) -> HttpResponse:
    return recipe_download_response(get_object_or_404(recipe_list(), pk=pk))


@require_GET
def run_recipe_page(request: HttpRequest, run_id: int) -> HttpResponse:
    """A run's Recipe tab: only this run's own snapshot, else "unavailable" and why."""
    run = get_object_or_404(Run, pk=run_id)
    availability = run_recipe_availability(run=run)
    return render(
        request,
        "recipes/run_recipe.html",
        {
            "nav": "runs",
            "run": run,
            "availability": availability,
            "entries": [_recipe_context(r) for r in availability.recipes],
            "artefact_label": ARTEFACT_LABEL,
        },
    )
