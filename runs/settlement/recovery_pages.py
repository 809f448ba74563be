"""A reviewed recovery plan read a page at a time (R13.3, R15): the one rule for what a page
states, whether the plan was computed just now or kept (runs/settlement/recovery_store.py).

A page is the plan without its per-cell lists (`plan_summary`: every field, the count of
selected cells, the counts over the whole plan) plus ≤ 100 candidates and ≤ 100 exclusions
after a cursor each (the cell id, by the API's one keyset rule: null when no cell follows). The
lists are `PlanItems`: a computed plan's lists in memory (`ComputedItems`), or a kept plan's
chunks read O(page) rows at a time (`recovery_store.KeptItems`).
"""

from __future__ import annotations

from abc import abstractmethod
from bisect import bisect_right
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, overload

from runs.settlement.lineage import MAX_LINEAGE_PAGE
from srbench.api import Keyset
from srbench.money import money_text

# R13.3 with R13.1: candidates and exclusions are read ≤ 100 at a time.
MAX_RECOVERY_PAGE = MAX_LINEAGE_PAGE
# A plan's cells, ascending by id, as the plan stands (srbench.api.Keyset, the one cursor rule).
PLAN_PAGE = Keyset("after", key="cell", tail=False)
# The plan's per-cell lists, by their key in the plan (each ascends by cell id, `cell_rows`).
ELIGIBLE = "eligible_cells"
EXCLUDED = "excluded"
PLAN_LISTS = (ELIGIBLE, EXCLUDED)
# Every eligible id by default: a page carries its count only (600 KB a page at 100,000 cells).
SELECTED = "selected_cells"


class PlanItems(Sequence[dict[str, Any]]):
    """One list of a plan: its length, items by position (the page-numbered recovery page's
    paginator), and the first `n` items after a cell id (the API's keyset pages)."""

    @abstractmethod
    def following(self, after: int, n: int) -> list[dict[str, Any]]: ...

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(index, slice):
            return self.slice(index)
        items = self.slice(slice(index, index + 1 if index != -1 else None))
        if not items:
            raise IndexError(index)
        return items[0]

    @abstractmethod
    def slice(self, index: slice) -> list[dict[str, Any]]: ...


class ComputedItems(PlanItems):
    """A list of a plan computed in this request."""

    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def slice(self, index: slice) -> list[dict[str, Any]]:
        return self.items[index]

    def following(self, after: int, n: int) -> list[dict[str, Any]]:
        start = bisect_right(self.items, after, key=lambda i: i["cell"])
        return self.items[start : start + n]


def plan_summary(plan: dict[str, Any]) -> dict[str, Any]:
    """What every page of a plan states besides its two pages, in the order a page states it:
    the plan without its lists, the count of selected cells and the counts over the whole
    plan (what a kept plan keeps in one row)."""
    return {
        **{k: v for k, v in plan.items() if k not in (*PLAN_LISTS, SELECTED)},
        "selected_cells_count": len(plan[SELECTED]),
        "counts": {
            "eligible": len(plan[ELIGIBLE]),
            "excluded": len(plan[EXCLUDED]),
            "excluded_by_reason": dict(Counter(e["reason"] for e in plan[EXCLUDED])),
        },
    }


def previous_attempts_cost(eligible: Sequence[dict[str, Any]]) -> str | None:
    """What the earlier attempts of every eligible cell cost, summed over the figures the plan
    knows (the recovery page's "extra cost" line of failed mode)."""
    previous = [e.get("previous_attempt_cost_usd") for e in eligible]
    return money_text(sum((Decimal(p) for p in previous if p), Decimal(0)))


@dataclass(frozen=True)
class PlanPages:
    """A reviewed plan as its pages read it: `summary` (`plan_summary`), the two lists, and
    the recovery page's total of earlier attempts' cost."""

    summary: dict[str, Any]
    eligible: PlanItems
    excluded: PlanItems
    previous_attempts_cost: str | None

    @classmethod
    def of(cls, plan: dict[str, Any]) -> PlanPages:
        return cls(
            summary=plan_summary(plan),
            eligible=ComputedItems(plan[ELIGIBLE]),
            excluded=ComputedItems(plan[EXCLUDED]),
            previous_attempts_cost=previous_attempts_cost(plan[ELIGIBLE]),
        )

    def page(
        self, *, eligible_after: int = 0, excluded_after: int = 0, limit: int = MAX_RECOVERY_PAGE
    ) -> dict[str, Any]:
        """The summary with each list cut to one page after its cursor."""
        limit = max(1, min(limit, MAX_RECOVERY_PAGE))
        eligible, next_eligible = _cut(self.eligible, eligible_after, limit)
        excluded, next_excluded = _cut(self.excluded, excluded_after, limit)
        return {
            **self.summary,
            ELIGIBLE: eligible,
            "next_eligible_after": next_eligible,
            EXCLUDED: excluded,
            "next_excluded_after": next_excluded,
        }

    def for_template(self) -> dict[str, Any]:
        """The plan as the recovery page's template reads it: the summary's fields, and the
        lists as sequences it counts and the paginator slices."""
        return {**self.summary, ELIGIBLE: self.eligible, EXCLUDED: self.excluded}


def _cut(items: PlanItems, after: int, limit: int) -> tuple[list[dict[str, Any]], int | None]:
    rows = items.following(after, limit + 1)
    return rows[:limit], PLAN_PAGE.next_cursor(rows[:limit], more=len(rows) > limit)


def recovery_plan_page(
    plan: dict[str, Any],
    *,
    eligible_after: int = 0,
    excluded_after: int = 0,
    limit: int = MAX_RECOVERY_PAGE,
) -> dict[str, Any]:
    """A whole plan with its candidate and exclusion lists cut to one page each (R13.3);
    totals and reasons are counted over the whole plan."""
    return PlanPages.of(plan).page(
        eligible_after=eligible_after, excluded_after=excluded_after, limit=limit
    )
