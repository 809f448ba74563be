"""Services of the runs app (`<entity>_<verb>`, keyword-only; each write is one durable
transaction). Interfaces (admin, API, CLI, tasks) call these, never the ORM directly for writes."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import IntegrityError, connection, transaction
from django.db.models import Max
from django.utils import timezone

from runs.engine import doorbell
from runs.engine.finish import run_finish_if_done
from runs.ledger.events import events_append
from runs.ledger.idempotency import IdempotencyKey, IdempotencyKeyReused, key_value
from runs.models import ACTIVE_RUN_STATUSES, Call, Cell, CellStatus, Run, Target, TargetSecret
from runs.planning.plans import plan_freeze
from srbench.canonical import sha256_hex
from srbench.secrets import encrypt_secret


def target_set_api_key(*, target: Target, api_key: str) -> None:
    """Store (or replace) a target's API key, encrypted. An empty key removes the stored one."""
    with transaction.atomic():
        if api_key:
            TargetSecret.objects.update_or_create(
                target=target, defaults={"api_key_encrypted": encrypt_secret(api_key)}
            )
        else:
            TargetSecret.objects.filter(target=target).delete()


# --- runs ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NewCell:
    question_id: int
    target_id: int
    slot: int
    benchmark: str


def run_insert(*, run: Run, cells: list[NewCell], created: dict[str, Any] | None = None) -> Run:
    """The one way a run comes into being (a submitted plan, a recovery's child): the run row,
    all its cells and its ``run.created`` event, in the caller's transaction. ``created`` adds
    keys to the event (a child's lineage). Dispatch is the caller's: after its commit."""
    if not connection.in_atomic_block:
        raise RuntimeError("run_insert must run inside the caller's transaction")
    # One backward probe of the calls' primary key (Run.calls_after_id).
    run.calls_after_id = Call.objects.aggregate(last=Max("id"))["last"] or 0
    run.save(force_insert=True)
    Cell.objects.bulk_create(
        Cell(
            run=run,
            question_id=c.question_id,
            target_id=c.target_id,
            slot=c.slot,
            benchmark=c.benchmark,
        )
        for c in cells
    )
    targets = [t["slug"] for t in run.manifest["targets"]]
    events_append(
        run_id=run.pk,
        events=[
            (
                "run.created",
                {"plan_sha256": run.plan_sha256, "cells": len(cells), "targets": targets}
                | (created or {}),
            )
        ],
    )
    return run


def child_run_insert(
    *,
    parent: Run,
    manifest: dict[str, Any],
    cells: list[NewCell],
    owner: Any,
    created: dict[str, Any],
    idempotency_key: str | None = None,
) -> Run:
    """A child run of ``parent`` (a recovery's, a re-judge's) by `run_insert`, in the caller's
    transaction: the parent's mode, profile and dataset, the child's own manifest (its name the
    manifest's, cut to the column) and plan hash, ``parent`` as its lineage. Dispatch is the
    caller's: after its commit."""
    return run_insert(
        run=Run(
            name=manifest["name"][: Run._meta.get_field("name").max_length],
            mode=parent.mode,
            profile=parent.profile,
            manifest=manifest,
            plan_sha256=sha256_hex(manifest),
            dataset_id=parent.dataset_id,
            owner=owner,
            parent=parent,
            idempotency_key=idempotency_key,
        ),
        cells=cells,
        created=created,
    )


def run_create(
    *, owner: Any, plan: dict[str, Any], idempotency_key: str | None = None
) -> tuple[Run, bool]:
    """Freeze the plan, create the run with all its cells, and ring the doorbell after commit.

    Idempotent by (owner, idempotency_key) through the one replay helper (runs/ledger/idempotency.py):
    the same key with the same request (`request_sha256`: what the client sent, not the frozen
    plan, which a target check made in between would move) returns the same run with the plan
    it was frozen with (created=False); with a different request it raises
    IdempotencyKeyReused; a key that cannot be stored, InvalidIdempotencyKey.
    """
    key = IdempotencyKey.parse(idempotency_key)
    sent = request_sha256(plan)

    def same(run: Run) -> bool:
        if run.request_sha256:
            return run.request_sha256 == sent
        return run.plan_sha256 == plan_freeze(data=plan).plan_sha256  # a run before runs/0024

    def replayed() -> Run | None:
        if key is None:
            return None
        return key.replay(Run.objects.filter(owner=owner), same=same, reused=_run_key_reused)

    # A resend is answered before any freeze: its run keeps the plan frozen when it was made.
    if (existing := replayed()) is not None:
        return existing, False
    frozen = plan_freeze(data=plan)
    try:
        with transaction.atomic(durable=True):
            run = run_insert(
                run=Run(
                    name=frozen.manifest["name"],
                    mode=frozen.manifest["mode"],
                    profile=frozen.dataset.profile,
                    manifest=frozen.manifest,
                    plan_sha256=frozen.plan_sha256,
                    dataset=frozen.dataset,
                    owner=owner,
                    idempotency_key=key_value(key),
                    request_sha256=sent,
                ),
                cells=[
                    NewCell(question_id=qid, target_id=target.pk, slot=slot, benchmark=benchmark)
                    for target in frozen.targets
                    for qid, _sha, benchmark in frozen.manifest["cases"]
                    for slot in range(frozen.manifest["slots"])
                ],
            )
            transaction.on_commit(lambda: doorbell.run_dispatch(run_id=run.pk))
    except IntegrityError:
        # A concurrent request with the same key won the race: answer as a replay would.
        if (existing := replayed()) is None:
            raise
        return existing, False
    return run, True


def request_sha256(plan: dict[str, Any]) -> str:
    """The hash of a run-creation request as the client sent it (the plan document, without
    the idempotency key): what a resend with the same key must match. Money a form gives as a
    Decimal is written as its text, so the same form gives the same hash."""
    return sha256_hex(json.loads(json.dumps(plan, cls=DjangoJSONEncoder)))


def _run_key_reused(run: Run) -> IdempotencyKeyReused:
    return IdempotencyKeyReused(
        f"idempotency key already used for run {run.pk} with a different plan "
        f"({run.plan_sha256[:12]}…)",
        run=run,
        detail={"run": run.pk, "plan_sha256": run.plan_sha256},
    )


def run_cancel(*, run: Run, user: Any = None) -> bool:
    """Request cancellation: new dispatch stops at once; in-flight calls finish and keep their
    evidence. Idempotent: a second request changes nothing. Returns whether this call did it."""
    with transaction.atomic(durable=True):
        updated = Run.objects.filter(
            pk=run.pk, cancel_requested_at__isnull=True, status__in=ACTIVE_RUN_STATUSES
        ).update(cancel_requested_at=timezone.now())
        if updated:
            events_append(
                run_id=run.pk,
                events=[("run.cancel_requested", {"by": getattr(user, "username", None)})],
            )
            # A queued run that no worker has started ends here.
            Cell.objects.filter(run=run).pending().update(status=CellStatus.CANCELLED)
    if updated:
        run_finish_if_done(run_id=run.pk)
    return bool(updated)
