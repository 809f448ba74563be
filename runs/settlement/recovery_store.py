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

How it is kept: one small row (`StoredRecoveryPlan.summary_json`: the plan without its lists,
the counts a page states, the key order to put a whole plan back together) and the lists in
chunks of `CHUNK_CELLS` items (`StoredRecoveryPlanChunk`), so a page reads the summary and at
most two chunks a list (a keyset read on `last_cell`), whatever the plan's size: the plan kept
as one text was ~25 MB at 100,000 cells, read and parsed whole for each page of 100 (0.4–0.6 s).
A kept plan is written in one transaction and never updated, so the chunks read by its id are
all of it or — when a new state replaced it between the two reads — none: a read that finds
none where the summary says items follow raises `KeptPlanGone`, and the caller computes.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import Count, Max

from runs.ledger.selectors import run_settled_fingerprint
from runs.models import RecoveryRequest, Run, StoredRecoveryPlan, StoredRecoveryPlanChunk
from runs.settlement.recovery_pages import (
    ELIGIBLE,
    EXCLUDED,
    PLAN_LISTS,
    SELECTED,
    PlanItems,
    PlanPages,
    plan_summary,
    previous_attempts_cost,
)
from srbench.canonical import sha256_hex

# Bump whenever what a plan computes changes (its rules, its fields, its wording), or how it
# is kept, so plans kept by the code before are not served by the code after.
RECOVERY_PLAN_CACHE_VERSION = "recovery-plan-v2"
# Items of one list per chunk row: a page of ≤ 100 after any cell lies in two chunks.
CHUNK_CELLS = 100


class KeptPlanGone(Exception):
    """The kept plan was replaced between reading its summary and reading its items."""


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


class KeptItems(PlanItems):
    """One list of a kept plan, read from its chunks a page at a time."""

    def __init__(self, plan_id: int, plan_list: str, length: int, last_cell: int | None) -> None:
        self.plan_id = plan_id
        self.plan_list = plan_list
        self.length = length
        self.last_cell = last_cell

    def __len__(self) -> int:
        return self.length

    def _chunks(self) -> Any:
        return StoredRecoveryPlanChunk.objects.filter(
            plan_id=self.plan_id, plan_list=self.plan_list
        )

    def _items(self, texts: list[str], expected: bool) -> list[dict[str, Any]]:
        if expected and not texts:
            raise KeptPlanGone(self.plan_id)
        return [item for text in texts for item in json.loads(text)]

    def following(self, after: int, n: int) -> list[dict[str, Any]]:
        """The first `n` items whose cell > `after`: the first chunk holding one gives ≥ 1,
        each next chunk CHUNK_CELLS more (a page of 100 and the one past it: two chunks)."""
        texts = list(
            self._chunks()
            .filter(last_cell__gt=after)
            .order_by("last_cell")
            .values_list("items_json", flat=True)[: 1 + math.ceil((n - 1) / CHUNK_CELLS)]
        )
        expected = self.last_cell is not None and self.last_cell > after
        return [i for i in self._items(texts, expected) if i["cell"] > after][:n]

    def slice(self, index: slice) -> list[dict[str, Any]]:
        """Items by position (the recovery page's numbered pages, a paginator's slice)."""
        start, stop, _ = index.indices(self.length)
        if start >= stop:
            return []
        first = start // CHUNK_CELLS
        texts = list(
            self._chunks()
            .filter(seq__gte=first, seq__lte=(stop - 1) // CHUNK_CELLS)
            .order_by("seq")
            .values_list("items_json", flat=True)
        )
        offset = first * CHUNK_CELLS
        return self._items(texts, True)[start - offset : stop - offset]

    def all(self) -> list[dict[str, Any]]:
        return self.slice(slice(0, self.length))


@dataclass(frozen=True)
class KeptPlan(PlanPages):
    """A kept plan's pages, and the whole plan put back together (`whole`: O(plan))."""

    keys: tuple[str, ...] = ()

    def whole(self) -> dict[str, Any]:
        """The plan as computed: its fields in their order, its lists whole, and every
        eligible cell selected (only a plan of all eligible cells is kept)."""
        assert isinstance(self.eligible, KeptItems) and isinstance(self.excluded, KeptItems)
        lists = {ELIGIBLE: self.eligible.all(), EXCLUDED: self.excluded.all()}
        lists[SELECTED] = [e["cell"] for e in lists[ELIGIBLE]]
        return {k: lists[k] if k in lists else self.summary[k] for k in self.keys}


def recovery_plan_kept(*, run_id: int, mode: str, key: str) -> KeptPlan | None:
    """The plan kept for this run and mode under `key`, read a page at a time; None when none
    is, or the kept one names another state of the ledger."""
    row = (
        StoredRecoveryPlan.objects.filter(run_id=run_id, mode=mode, fingerprint=key)
        .values_list("pk", "summary_json")
        .first()
    )
    if row is None:
        return None
    kept = json.loads(row[1])
    counts = kept["summary"]["counts"]
    lists = {
        name: KeptItems(row[0], name, counts[count], kept["last_cells"][name])
        for name, count in ((ELIGIBLE, "eligible"), (EXCLUDED, "excluded"))
    }
    return KeptPlan(
        summary=kept["summary"],
        eligible=lists[ELIGIBLE],
        excluded=lists[EXCLUDED],
        previous_attempts_cost=kept["previous_attempts_cost"],
        keys=tuple(kept["keys"]),
    )


CHUNK_COLUMNS = ("plan_id", "plan_list", "seq", "last_cell", "items_json")


def _chunks_write(plan_id: int, plan: dict[str, Any]) -> None:
    """The plan's lists in chunks, by COPY: 1,000 rows of ~25 KB at 100,000 cells took 1.8 s
    through `bulk_create` and 0.18 s so (the computation they are kept from takes seconds)."""
    table = StoredRecoveryPlanChunk._meta.db_table
    with connection.cursor() as cursor:
        copy = f"COPY {table} ({', '.join(CHUNK_COLUMNS)}) FROM STDIN"
        with cursor.cursor.copy(copy) as rows:
            for name in PLAN_LISTS:
                items = plan[name]
                for seq, start in enumerate(range(0, len(items), CHUNK_CELLS)):
                    chunk = items[start : start + CHUNK_CELLS]
                    rows.write_row((plan_id, name, seq, chunk[-1]["cell"], json.dumps(chunk)))


def recovery_plan_store(*, run_id: int, mode: str, key: str, plan: dict[str, Any]) -> None:
    """Keep a plan of all eligible cells under `key`, replacing the run's plan of this mode,
    in one transaction. Two reviewers computing at once both computed the state each read:
    the one that commits second finds the first's row and keeps nothing (the next review of a
    newer state replaces it)."""
    summary = {
        "summary": plan_summary(plan),
        "keys": list(plan),
        "last_cells": {name: plan[name][-1]["cell"] if plan[name] else None for name in PLAN_LISTS},
        "previous_attempts_cost": previous_attempts_cost(plan[ELIGIBLE]),
    }
    try:
        with transaction.atomic():
            StoredRecoveryPlan.objects.filter(run_id=run_id, mode=mode).delete()
            row = StoredRecoveryPlan.objects.create(
                run_id=run_id, mode=mode, fingerprint=key, summary_json=json.dumps(summary)
            )
            _chunks_write(row.pk, plan)
    except IntegrityError:
        pass


def recovery_plans_forget(*, run_id: int) -> None:
    """Drop every plan kept for the run (a submission found the reviewed plan is not the plan
    now: the next review computes it afresh)."""
    StoredRecoveryPlan.objects.filter(run_id=run_id).delete()
