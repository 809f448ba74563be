"""Reads of recipes: the pinned hash a run measured, confirmations, availability, artefact."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db.models import Count, Q, QuerySet

from recipes.models import Recipe
from runs.ledger.selectors import manifest_head
from runs.models import Call, Run, RunEvent, RunStatus, Target

ARTEFACT_LABEL = "recipe artefact, not a deployable configuration"
ARTEFACT_FORMAT = "srbench-recipe/1"
NOT_CAPTURED_EVENT = "recipe.not_captured"
CAPTURED_EVENT = "recipe.captured"


def target_pinned_hash(*, run: Run, target: Target) -> str | None:
    """The config hash this run pinned for the target: the frozen manifest's snapshot, since
    an operator updates a target's hash after a router change and old runs keep theirs.
    Falls back to the target's current pin only when the manifest does not name it."""
    for snapshot in run.manifest.get("targets") or []:
        if isinstance(snapshot, dict) and snapshot.get("slug") == target.slug:
            return snapshot.get("config_hash") or None
    return target.config_hash or None


def recipe_confirmations(*, run: Run, target: Target) -> dict[str, int | None]:
    """How the run's calls to the target acknowledged the router config (R12.3): the recipe
    says what was configured, these counts say what actually served. `missing` counts calls
    with no `x-vsr-config-hash` (never answered, refused, or a router that did not say).
    With no pin, confirmed/mismatched are unknown (None), not 0."""
    pin = target_pinned_hash(run=run, target=target)
    acked = ~Q(config_hash_ack="")
    counts = Call.objects.filter(cell__run=run, target=target).aggregate(
        calls=Count("id"),
        confirmed=Count("id", filter=acked & Q(config_hash_ack=pin or "")),
        mismatched=Count("id", filter=acked & ~Q(config_hash_ack=pin or "")),
        missing=Count("id", filter=Q(config_hash_ack="")),
    )
    if pin is None:
        counts["confirmed"] = counts["mismatched"] = None
    return counts


def recipe_list() -> QuerySet[Recipe]:
    return Recipe.objects.select_related("run", "target").order_by("-captured_at", "-id")


def _manifest_targets(run: Run) -> list[Any]:
    """The frozen manifest's targets; from its cached head when the manifest is not loaded
    (the whole one is megabytes at 100,000 cases)."""
    if "manifest" in run.__dict__:
        return list((run.manifest or {}).get("targets") or [])
    return list(manifest_head(run).get("targets") or [])


def _mom_slugs(run: Run) -> list[str]:
    return [
        s["slug"]
        for s in _manifest_targets(run)
        if isinstance(s, dict) and s.get("kind") == Target.Kind.MOM and s.get("slug")
    ]


@dataclass
class RecipeAvailability:
    available: bool
    recipes: list[Recipe]
    reason: str | None
    not_captured: list[dict[str, Any]] = field(default_factory=list)


def run_recipe_availability(*, run: Run) -> RecipeAvailability:
    """The recipes captured for this run, and if none, why (R12.5). Only this run's own
    recipes are ever read: a run without a snapshot is "unavailable" even when a later run
    of the same router captured one, because that later config may not be what served it."""
    recipes = list(recipe_list().filter(run=run).order_by("target__slug"))
    captured = {r.target.slug for r in recipes}
    # The latest refusal per target that still has no recipe (a retry may have succeeded).
    refusals: dict[str, dict[str, Any]] = {}
    for event in RunEvent.objects.filter(run=run, type=NOT_CAPTURED_EVENT).order_by("seq"):
        slug = str(event.payload.get("target", ""))
        if slug not in captured:
            refusals[slug] = {
                "target": slug,
                "reason": event.payload.get("reason"),
                "message": event.payload.get("message"),
                "at": event.created_at,
            }
    not_captured = [refusals[s] for s in sorted(refusals)]
    if recipes:
        return RecipeAvailability(True, recipes, None, not_captured)
    if not_captured:
        reason = "No recipe was captured: " + "; ".join(
            f"{r['target']}: {r['message']}" for r in not_captured
        )
    elif not _mom_slugs(run):
        reason = "This run has no MoM target, so there is no router recipe."
    elif run.status == RunStatus.QUEUED:
        reason = "Recipes are captured when the run starts; this run has not started yet."
    else:
        reason = (
            "No recipe snapshot was captured for this run (recipe capture was not enabled "
            "for its MoM target when it started). Another run's recipe is never shown instead."
        )
    return RecipeAvailability(False, [], reason, not_captured)


def recipe_artefact(*, recipe: Recipe) -> dict[str, Any]:
    """The downloadable document. Its first key says what it is: a record of the routing
    recipe that served a run, stripped of connection details, which cannot be deployed."""
    return {
        "artefact": ARTEFACT_LABEL,
        "format": ARTEFACT_FORMAT,
        "run": recipe.run_id,
        "target": recipe.target.slug,
        "captured_at": recipe.captured_at.isoformat(),
        "projection_sha256": recipe.projection_sha256,
        "config_hashes": {
            "source": recipe.source_config_hash,
            "generated": recipe.generated_config_hash,
            "active": recipe.active_config_hash,
        },
        "etag": recipe.etag,
        "redactions": recipe.redactions,
        "recipe": recipe.body,
    }
