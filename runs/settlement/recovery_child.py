"""The child run a reviewed recovery plan creates (R15.4), in the submission's transaction
(runs/settlement/recovery.py `recovery_submit`, which claims the parent cells and dispatches
after commit): the parent's frozen manifest cut to the selected cells with a ``recovery``
marker saying where the child came from; a new attempt's next slot in failed mode; a re-judge
child of judge calls only in judge_only mode. The parent is never modified."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.db.models import Max

from runs.models import Cell, Run
from runs.planning import services
from runs.settlement import rejudge
from runs.settlement.rejudge import ChildRunRefused
from runs.vocabulary.recovery_modes import RecoveryPlanMode
from srbench.canonical import sha256_hex
from srbench.refusals import echo_items

__all__ = ["judge_only_recovery_child", "recovery_child_create", "recovery_child_doc"]


def _recovery_marker(
    parent: Run, content: dict[str, Any], selected_ids: list[int], plan_sha256: str
) -> dict[str, Any]:
    """Where a recovery child came from (its manifest's ``recovery``)."""
    return {
        "parent_run": parent.pk,
        "parent_plan_sha256": parent.plan_sha256,
        "mode": content["mode"],
        "recovery_plan_sha256": plan_sha256,
        "selected_cells": selected_ids,
        "selected_cells_sha256": sha256_hex(selected_ids),
        "eligible_cells": [e["cell"] for e in content["eligible_cells"]],
        "parent_snapshot": content["parent"],
        "recovery_subset": True,
    }


def recovery_child_doc(child: Run) -> dict[str, Any] | None:
    """What the recovery API (201, and 200 on a replay) and the CLI say of where a child came
    from: its manifest's ``recovery`` marker with the selected and eligible parent cells as a
    count, the first few ids and how many were left out (`srbench.refusals.echo_items`, the
    rule refusals follow) — a run of 100,000 cells answered every id twice, 1,178,960 bytes — and
    where all of them are read: the child's cells (``cells``), one per selected parent cell
    (same question and target; the same slot, or the next one in failed mode), paged. The
    ``selected_cells_sha256`` identifies the whole selection. None for a run that is no
    recovery child."""
    marker = child.manifest.get("recovery") if isinstance(child.manifest, dict) else None
    if not marker:
        return None
    return {
        **{k: v for k, v in marker.items() if k not in ("selected_cells", "eligible_cells")},
        "selected_cells": echo_items(marker["selected_cells"]),
        "eligible_cells": echo_items(marker["eligible_cells"]),
        "cells": f"/api/v1/runs/{child.pk}/results/",
    }


def _child_manifest(
    parent: Run, content: dict[str, Any], chosen: list[dict[str, Any]], plan_sha256: str
) -> dict[str, Any]:
    """The parent's frozen manifest limited to the selection. Targets, judges, prices,
    sampling, limits and failure policy are copied unchanged so the child's results stay
    comparable with the parent's; `recovery` records where the child came from."""
    m = parent.manifest
    questions = {c["question"] for c in chosen}
    benchmarks = {c["benchmark"] for c in chosen}
    slugs = {c["target"] for c in chosen}
    cases = [c for c in m["cases"] if c[0] in questions]
    return {
        **m,
        "name": f"{m['name']} · recovery ({content['mode']})",
        "benchmarks": {
            b: {**v, "cases": sum(1 for c in cases if c[2] == b)}
            for b, v in m["benchmarks"].items()
            if b in benchmarks
        },
        "cases": cases,
        "targets": [t for t in m["targets"] if t["slug"] in slugs],
        "judges": {b: j for b, j in m["judges"].items() if b in benchmarks},
        "recovery": _recovery_marker(parent, content, [c["cell"] for c in chosen], plan_sha256),
    }


def recovery_child_create(
    parent: Run,
    content: dict[str, Any],
    chosen: list[dict[str, Any]],
    plan_sha256: str,
    mode: str,
    user: Any,
) -> Run:
    """The child run of an undispatched or failed recovery over the chosen plan entries, in
    the caller's transaction (runs/settlement/recovery.py claims the parent cells and dispatches
    after commit)."""
    manifest = _child_manifest(parent, content, chosen, plan_sha256)
    target_ids = dict(
        Cell.objects.filter(pk__in=[c["cell"] for c in chosen]).values_list("pk", "target_id")
    )
    if mode == RecoveryPlanMode.FAILED:
        # A new attempt gets the next slot of its (question, target): it is a different
        # attempt from the parent's, and a later comparison must not confuse the two.
        top = {
            (r["question_id"], r["target_id"]): r["top"]
            for r in Cell.objects.filter(run=parent)
            .values("question_id", "target_id")
            .annotate(top=Max("slot"))
        }
        slot_of = {c["cell"]: top[(c["question"], target_ids[c["cell"]])] + 1 for c in chosen}
    else:
        slot_of = {c["cell"]: c["slot"] for c in chosen}
    return services.child_run_insert(
        parent=parent,
        manifest=manifest,
        cells=[
            services.NewCell(
                question_id=c["question"],
                target_id=target_ids[c["cell"]],
                slot=slot_of[c["cell"]],
                benchmark=c["benchmark"],
            )
            for c in chosen
        ],
        owner=user,
        created={
            "recovery": {"parent": parent.pk, "mode": mode, "recovery_plan_sha256": plan_sha256}
        },
    )


def judge_only_recovery_child(
    parent: Run,
    content: dict[str, Any],
    chosen_ids: list[int],
    plan_sha256: str,
    quote: dict[str, Any],
    confirmed: Decimal | None,
    user: Any,
) -> Run:
    """The child of a judge-only recovery (runs/settlement/rejudge.py
    `judge_only_child_create`), once the confirmed amount is `quote` (the selection's),
    exactly; else refused, nothing created."""
    try:
        worst = rejudge.confirmation_check(quote, confirmed, what="judging")
    except ChildRunRefused as exc:  # the same refusal; a recovery answers it with 422
        raise ChildRunRefused(exc.code, exc.message, http_status=422, detail=exc.detail) from None
    return rejudge.judge_only_child_create(
        parent,
        cell_ids=chosen_ids,
        quote=quote,
        worst=worst,
        user=user,
        recovery=_recovery_marker(parent, content, chosen_ids, plan_sha256)
        | {"judge_cost_quote": quote},
    )
