"""Create evaluation (SPEC R8): the form, its review page and Start evaluation.

Split from runs.interfaces.views (issue 24); same URLs, names and templates. The form is a plain GET/POST
page that works with JavaScript off: choosing a profile reloads it with what that profile
offers, Review freezes the plan and shows it in words, and Start evaluation creates the run,
idempotent by the key the review page carries.
"""

from __future__ import annotations

import uuid
from typing import Any

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_http_methods

from datasets.benchmarks import ADAPTERS
from datasets.models import FrozenDataset, Source
from datasets.profiles import DEFAULT_SEED, PROFILE_NAMES, PROFILE_SPLIT
from datasets.selectors import dataset_coverage, dataset_sources, source_list
from datasets.services import CompositionConflict, CompositionInvalid, dataset_compose
from runs.engine.router_client import PreviewError, route_preview
from runs.interfaces.forms import EvaluationForm
from runs.interfaces.views import canonical_items, query_int
from runs.ledger import selectors
from runs.ledger.idempotency import IdempotencyKey, IdempotencyKeyReused, InvalidIdempotencyKey
from runs.models import Run, Target
from runs.planning.plans import SUPPORTED_KINDS, PlanError, plan_field_errors, plan_freeze
from runs.planning.services import run_create
from runs.preflight.plan import plan_preflight_review

# The review page names every limit in words with its unit (issue 23), in this order.
LIMIT_WORDS = {
    "concurrency": ("Concurrency", "calls at a time"),
    "max_cost_usd": ("Max cost", "USD"),
    "total_timeout_s": ("Request timeout", "seconds"),
    "idle_timeout_s": ("Stream idle timeout", "seconds"),
    "case_timeout_s": ("Case timeout", "seconds"),
    "max_run_seconds": ("Run deadline", "seconds"),
    "max_output_tokens": ("Max output tokens", "tokens per call"),
    "max_output_chars": ("Max output characters", "characters per call"),
    "max_calls_per_case": ("Max calls per case", "calls"),
}
SAMPLING_WORDS = {
    "temperature": "Temperature",
    "top_p": "Top p",
    "top_k": "Top k",
    "seed": "Sampling seed",
    "presence_penalty": "Presence penalty",
    "frequency_penalty": "Frequency penalty",
    "reasoning_effort": "Reasoning effort",
    "stop": "Stop sequences",
}


def default_profile() -> str:
    """The profile Create evaluation opens with when none is asked for (issue 35 item 7): the
    cheapest profile (smoke, quick, standard in that order) that has a prepared source with
    questions, so the form opens ready to fill in; smoke when nothing is prepared yet (the
    page then says how to prepare). Choosing another profile reloads the form."""
    prepared = set(Source.objects.filter(count__gt=0).values_list("profile", flat=True).distinct())
    return next((p for p in PROFILE_NAMES if p in prepared), PROFILE_NAMES[0])


def _evaluation_form(request: HttpRequest, data: Any | None) -> EvaluationForm | None:
    """The form for the profile (and seed, or chosen dataset) in `source`; what can be offered
    depends on the profile (R8.1). A GET without one opens on `default_profile`; a POST must
    name a valid one (None: the page asks for it)."""
    source = data if data is not None else request.GET
    dataset = None
    dataset_id = query_int(source.get("dataset"), 0)
    if dataset_id:
        dataset = FrozenDataset.objects.filter(pk=dataset_id).first()
    profile = dataset.profile if dataset else source.get("profile", "")
    if not profile and data is None:
        profile = default_profile()
    if profile not in PROFILE_SPLIT:
        return None
    asked = source.get("dataset")
    if data is None and asked and dataset is None:
        # The URL is the page's state and still renders; the link's dataset is not there.
        messages.warning(
            request,
            f"No frozen dataset “{asked[:40]}”: the form shows the {profile} profile's prepared "
            "benchmarks instead (Datasets lists the frozen ones).",
        )
    split = PROFILE_SPLIT[profile]  # type: ignore[index]
    seeds = sorted(
        set(source_list(profile=profile, split=split).values_list("seed", flat=True)),
        key=lambda s: (s != DEFAULT_SEED, s),
    )
    if dataset is not None:
        seed: int | None = dataset.seed
        seeds = sorted({*seeds, dataset.seed})
    else:
        seed = query_int(source.get("seed"), 0) or None
        if seed not in seeds:
            seed = seeds[0] if seeds else None
    sources = list(source_list(profile=profile, seed=seed, split=split)) if seed else []
    dataset_benchmarks: list[str] = []
    if dataset is not None:
        dataset_benchmarks = [c["benchmark"] for c in dataset_coverage(dataset=dataset)]
        if not dataset_benchmarks:
            # A dataset composed outside the sources (e.g. by a test) still has questions.
            dataset_benchmarks = sorted(
                set(dataset.questions.values_list("benchmark", flat=True)),
                key=list(ADAPTERS).index,
            )
    targets = list(Target.objects.filter(active=True).order_by("kind", "slug"))
    initial: dict[str, Any] = {
        "profile": profile,
        "seed": seed,
        "name": f"{dataset.name if dataset else profile} · {timezone.now():%Y-%m-%d %H:%M}",
    }
    if dataset is not None:
        initial["dataset"] = dataset.pk
        initial["benchmarks"] = [
            b for b in dataset_benchmarks if ADAPTERS[b].kind in SUPPORTED_KINDS
        ]
    return EvaluationForm(
        data,
        initial=initial,
        profile=profile,
        seed=seed,
        sources=sources,
        seeds=seeds,
        dataset=dataset,
        dataset_benchmarks=dataset_benchmarks,
        targets=targets,
    )


def _resolve_dataset(
    form: EvaluationForm, user: Any
) -> tuple[FrozenDataset | None, list[str] | None]:
    """The frozen dataset a plan runs on (R8.3, R8.4): a chosen dataset taken whole keeps its
    identity; one whole source or any combination is composed (content-addressed, so the
    same selection always gives the same dataset). Composition reads frozen sources only."""
    selected = form.selected_benchmarks()
    dataset = form.chosen_dataset
    if dataset is not None:
        if set(selected) == set(form.offered):
            return dataset, None
        by_benchmark = {s.benchmark: s for s in dataset_sources(dataset=dataset)}
        if all(b in by_benchmark for b in selected):
            return dataset_compose(sources=[by_benchmark[b] for b in selected], user=user), None
        # No sources recorded for this dataset: run the chosen benchmark groups of it as is.
        return dataset, selected
    chosen: list[Source] = [form.sources[b] for b in selected if b in form.sources]
    return dataset_compose(sources=chosen, user=user), None


def _plan_errors_to_form(
    form: EvaluationForm, errors: dict[str, Any], *, beside: bool = False
) -> None:
    """Plan errors in words next to the field they concern; the rest above the form. With
    ``beside`` (the plan's rules on a form that refused fields) a field the form already
    refused keeps its own error, and errors at no field of the form are left to the form's."""

    def add(field: str | None, message: str) -> None:
        unrefused = field is not None and field in form.fields and not form.has_error(field)
        if not beside or unrefused:
            form.add_error(field, message)

    for key, value in errors.items():
        if key in ("limits", "sampling") and isinstance(value, dict):
            for name, message in value.items():
                field = "sampling_seed" if key == "sampling" and name == "seed" else name
                if field in form.fields:
                    add(field, _words(message))
                else:
                    add(None, f"{key} {name}: {_words(message)}")
        elif key in ("judges", "simulators") and isinstance(value, dict):
            prefix = "judge" if key == "judges" else "simulator"
            for benchmark, message in value.items():
                field = f"{prefix}_{benchmark}"
                if field in form.fields:
                    add(field, _words(message))
                else:
                    add(None, f"{key}: {_words(message)}")
        elif key in form.fields:
            add(key, _words(value))
        else:
            add(None, f"{key}: {_words(value)}")


def _words(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return " ".join(_words(v) for v in value)
    if isinstance(value, dict):
        return "; ".join(f"{k}: {_words(v)}" for k, v in value.items())
    return str(value)


def _started(owner: Any, key: str) -> bool:
    """Whether the review's key already made a run of the owner (a resubmitted Start)."""
    try:
        parsed = IdempotencyKey.parse(key)
    except InvalidIdempotencyKey:
        return False  # run_create refuses it, in its words
    return parsed is not None and parsed.made(Run.objects.filter(owner=owner)) is not None


def _frozen_plan(form: EvaluationForm, user: Any) -> tuple[dict[str, Any], Any] | None:
    """Compose (if needed) and freeze: (plan, frozen plan). On failure the form carries the
    reasons and None is returned. Never calls a model (R8.3, R8.8)."""
    try:
        dataset, benchmarks = _resolve_dataset(form, user)
    except CompositionConflict as exc:
        for conflict in exc.conflicts:
            form.add_error(None, f"These benchmarks cannot be combined: {conflict['detail']}.")
        return None
    except CompositionInvalid as exc:
        form.add_error("benchmarks", str(exc))
        return None
    assert dataset is not None
    plan = form.plan(dataset_id=dataset.pk, benchmarks=benchmarks)
    try:
        return plan, plan_freeze(data=plan)
    except PlanError as exc:
        _plan_errors_to_form(form, exc.errors)
        return None


def _route_previews(form: EvaluationForm) -> list[dict[str, Any]]:
    """R8.7: the router's choice for the prompt, per selected MoM target. No model answers."""
    data = form.cleaned_data
    chosen = set(form.data.getlist("targets"))
    mom = [t for t in form.targets if t.slug in chosen and t.kind == Target.Kind.MOM]
    if not (data.get("preview_prompt") or "").strip():
        # A prompt the form refused (a NUL character, too long) is not a missing one.
        refused = form.errors.get("preview_prompt")
        return [
            {
                "error": " ".join(map(str, refused))
                if refused
                else "Write a prompt to preview its route."
            }
        ]
    if not mom:
        return [{"error": "Route preview applies to MoM targets; tick one above."}]
    try:
        history = form.preview_messages()
    except forms.ValidationError as exc:
        return [{"error": " ".join(exc.messages)}]
    results = []
    for target in mom:
        try:
            preview = route_preview(
                target=target,
                prompt=None if history else data["preview_prompt"],
                messages=history,
                session_id=data.get("preview_session") or None,
                conversation_id=data.get("preview_conversation") or None,
            )
            results.append({"target": target, "preview": preview})
        except PreviewError as exc:
            results.append({"target": target, "error": str(exc)})
    return results


@require_http_methods(["GET", "POST"])
def evaluation_new(request: HttpRequest) -> HttpResponse:
    data = request.POST if request.method == "POST" else None
    form = _evaluation_form(request, data)
    context: dict[str, Any] = {"nav": "new", "form": form, "profiles": PROFILE_SPLIT}
    if form is None and (data is not None or request.GET.get("profile")):
        context["profile_error"] = "Choose one of the profiles below: smoke, quick or standard."
    # Said on the page, so a preselected profile is never mistaken for the user's choice.
    context["preselected"] = data is None and not (
        request.GET.get("profile") or request.GET.get("dataset")
    )
    if form is None or data is None:
        return render(request, "runs/evaluation_new.html", context)

    action = data.get("action", "review")
    valid = form.is_valid()
    if action == "preview":
        context.update(previews=_route_previews(form), hide_errors=True)
        return render(request, "runs/evaluation_new.html", context)
    if action == "edit":
        return render(request, "runs/evaluation_new.html", context)
    if not valid:
        # Every field error at once (outside probe, session 5: the margin's came only on a
        # second submission): the plan's own field rules on what the form does hold. Reads
        # nothing, composes no dataset.
        draft = form.plan(
            dataset_id=form.chosen_dataset.pk if form.chosen_dataset else 1,
            benchmarks=form.selected_benchmarks() or None,
        )
        _plan_errors_to_form(form, plan_field_errors(draft), beside=True)
        return render(request, "runs/evaluation_new.html", context)

    resolved = _frozen_plan(form, request.user)
    if resolved is None:
        return render(request, "runs/evaluation_new.html", context)
    plan, frozen = resolved

    key = data.get("idempotency_key", "")
    if action == "start" and key:
        # A resubmitted Start (its key already made a run) is the same request: run_create
        # answers it with that run, whatever a fresh freeze says now (a target check since).
        if (
            not _started(request.user, key)
            and data.get("reviewed_plan_sha256") != frozen.plan_sha256
        ):
            context["notice"] = (
                "The plan changed since it was reviewed (a target, price or dataset was "
                "edited meanwhile). Check the plan below and start again."
            )
        else:
            try:
                run, created = run_create(owner=request.user, plan=plan, idempotency_key=key)
            except IdempotencyKeyReused as exc:
                context["notice"] = (
                    f"This review was already used to start run #{exc.detail['run']} with a different "
                    "plan, so nothing was started. Review the plan again to start a new run."
                )
            except PlanError as exc:
                _plan_errors_to_form(form, exc.errors)
                return render(request, "runs/evaluation_new.html", context)
            else:
                if not created:
                    messages.info(
                        request,
                        "This evaluation was already started from this review; "
                        "nothing was submitted twice.",
                    )
                return HttpResponseRedirect(reverse("runs:detail", args=[run.pk]), status=303)

    # The review page: the frozen plan and a fresh key, generated here once, so a resubmitted
    # or double-clicked Start reuses it and finds the same run (R15.5 spirit).
    context.update(
        frozen=frozen,
        summary=_plan_review(frozen),
        idempotency_key=key or uuid.uuid4().hex,
    )
    return render(request, "runs/evaluation_review.html", context)


def _plan_review(frozen: Any) -> dict[str, Any]:
    m = frozen.manifest
    by_slug = {t.slug: t for t in frozen.targets}
    return {
        "plan_sha256": frozen.plan_sha256,
        "dataset": frozen.dataset,
        "benchmarks": [
            {
                "benchmark": b,
                **v,
                "judge": m["judges"].get(b, {}).get("slug"),
                "simulator": (m.get("simulators") or {}).get(b, {}).get("slug"),
            }
            for b, v in canonical_items(m["benchmarks"])
        ],
        # Ticked, but left out before any model call because they cannot run on this server.
        "not_run": sorted(
            m.get("not_run") or [], key=lambda e: (list(ADAPTERS).index(e["benchmark"]),)
        ),
        "cells": len(m["cases"]) * len(m["targets"]) * m["slots"],
        "cases": len(m["cases"]),
        "targets": [
            {**t, "prices": m["prices"].get(t["slug"], {}), "name": by_slug[t["slug"]].name}
            for t in m["targets"]
        ],
        "judges": [
            {"benchmark": b, **j, "prices": m["prices"].get(j["slug"], {})}
            for b, j in canonical_items(m["judges"])
        ],
        "simulators": [
            {"benchmark": b, **u, "prices": m["prices"].get(u["slug"], {})}
            for b, u in canonical_items(m.get("simulators") or {})
        ],
        "sampling": [
            {
                "key": k,
                "label": SAMPLING_WORDS.get(k, k.replace("_", " ").capitalize()),
                "value": ", ".join(repr_free(x) for x in v) if isinstance(v, list) else v,
            }
            for k, v in m["sampling"].items()
        ],
        "limits": _limit_rows(m["limits"]),
        "max_cost_usd": m["limits"].get("max_cost_usd"),
        "failure_policy": m["failure_policy"],
        "slots": m["slots"],
        "non_inferiority_margin": m.get("non_inferiority_margin"),
        "worst_case": selectors.plan_worst_case_subject_cost(m),
        "preflight": plan_preflight_review(m),  # issue 39: warned before any call
    }


def repr_free(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


def _limit_rows(limits: dict[str, Any]) -> list[dict[str, Any]]:
    """A plan's limits in words with their units (never a raw key); None stays "none"."""
    order = [k for k in LIMIT_WORDS if k in limits] + sorted(set(limits) - set(LIMIT_WORDS))
    rows = []
    for key in order:
        label, unit = LIMIT_WORDS.get(key, (key.replace("_", " ").capitalize(), ""))
        value = limits[key]
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        rows.append({"key": key, "label": label, "unit": unit, "value": value})
    return rows
