"""Reviewed recovery plans kept by the state of their parent's ledger (fourth outside probe,
item 1): a plan of a 100,000-cell run takes seconds to compute, and a reviewer — the recovery
page, `benchmark recover-plan` — reads it a page of 100 at a time, so each state of the ledger
is computed once per mode and its later pages are read from `StoredRecoveryPlan`.

What names a state (`recovery_plan_key`): the settled run's fingerprint — the one the stored
report uses (`runs.ledger.selectors.run_settled_fingerprint`: run row, cell counts by status,
the usage correction and regrade in effect, the targets) — plus the parent's recovery requests
(each claims its cells in the same transaction, the only other write a plan reads: a claimed
cell is excluded) and the plan code's version. A run that is not settled has no key and its
plan is computed on every read. Kept rows are only ever read under the key computed now, so a
ledger that moved on is never answered from its old plan; and a submission never reads them
(`recovery_submit` recomputes under the parent's lock and checks the reviewed hash).
"""

from __future__ import annotations

import json
from typing import Any

from django.db.models import Count, Max

from runs.ledger.selectors import run_settled_fingerprint
from runs.models import RecoveryRequest, Run, StoredRecoveryPlan
from srbench.canonical import sha256_hex

# Bump whenever what a plan computes changes (its rules, its fields, its wording), so plans
# kept by the code before are not served by the code after.
RECOVERY_PLAN_CACHE_VERSION = "recovery-plan-v1"


def recovery_plan_key(run: Run, mode: str) -> str | None:
    """The name of the state of `run`'s ledger a plan of `mode` is computed from; None when
    the run is not settled (its plan is then never kept)."""
    fingerprint = run_settled_fingerprint(run)
    if fingerprint is None:
        return None
    claims = RecoveryRequest.objects.filter(parent_id=run.pk).aggregate(
        n=Count("pk"), last=Max("pk")
    )
    parts = [RECOVERY_PLAN_CACHE_VERSION, mode, claims["n"], claims["last"], *fingerprint]
    return sha256_hex([str(p) for p in parts])


def recovery_plan_stored(*, run_id: int, mode: str, key: str) -> dict[str, Any] | None:
    """The plan kept for this run and mode under `key`; None when none is, or the kept one
    names another state of the ledger."""
    text = (
        StoredRecoveryPlan.objects.filter(run_id=run_id, mode=mode, fingerprint=key)
        .values_list("plan_json", flat=True)
        .first()
    )
    return None if text is None else json.loads(text)


def recovery_plan_store(*, run_id: int, mode: str, key: str, plan: dict[str, Any]) -> None:
    """Keep a plan under `key`, replacing the run's plan of this mode (one statement: two
    reviewers computing at once both write, the last wins — both computed the same state)."""
    StoredRecoveryPlan.objects.bulk_create(
        [StoredRecoveryPlan(run_id=run_id, mode=mode, fingerprint=key, plan_json=json.dumps(plan))],
        update_conflicts=True,
        unique_fields=["run", "mode"],
        update_fields=["fingerprint", "plan_json", "computed_at"],
    )


def recovery_plans_forget(*, run_id: int) -> None:
    """Drop every plan kept for the run (a submission found the reviewed plan is not the plan
    now: the next review computes it afresh)."""
    StoredRecoveryPlan.objects.filter(run_id=run_id).delete()
