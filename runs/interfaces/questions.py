"""Question results by outcome, target and benchmark: the Questions tab's filters, the
per-question side-by-side of targets and an agent episode's transcript (issue 35 item 7).

One outcome vocabulary, the words the run pages already use for a question result: a cell that
did not complete is named by its status (failed, outcome unknown, cancelled, not finished
yet); a completed one by its grade (correct, wrong, not scored). A result *fails* when it is
wrong, failed or of unknown outcome. What is shown of a cell or a call passes runs.interfaces.public.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Count, Min, Q, QuerySet

from datasets.benchmarks import ADAPTERS
from runs.interfaces.public import grade_reasons, public_cell_error, public_grade, public_transcript
from runs.ledger import selectors
from runs.models import Call, Cell, CellStatus, Run

__all__ = [
    "FAILING",
    "OUTCOMES",
    "QuestionFilters",
    "cell_outcome",
    "episode_context",
    "is_agent",
    "question_filters",
    "question_group_cells",
    "question_groups",
    "side_by_side_rows",
]

_DONE = CellStatus.COMPLETED
# key -> (words, which cells); exclusive: every cell has exactly one outcome.
OUTCOMES: dict[str, tuple[str, Q]] = {
    "correct": ("correct", Q(status=_DONE, correct=True)),
    "wrong": ("wrong", Q(status=_DONE, correct=False)),
    "not_scored": ("not scored", Q(status=_DONE, correct__isnull=True)),
    "failed": ("failed", Q(status=CellStatus.FAILED)),
    "sent_unknown": ("outcome unknown", Q(status=CellStatus.SENT_UNKNOWN)),
    "cancelled": ("cancelled", Q(status=CellStatus.CANCELLED)),
    "unfinished": (
        "not finished yet",
        Q(status__in=[CellStatus.PENDING, CellStatus.RUNNING]),
    ),
}
FAILING = ("wrong", "failed", "sent_unknown")
_STATUS_OUTCOME: dict[str, str] = {
    CellStatus.FAILED: "failed",
    CellStatus.SENT_UNKNOWN: "sent_unknown",
    CellStatus.CANCELLED: "cancelled",
    CellStatus.PENDING: "unfinished",
    CellStatus.RUNNING: "unfinished",
}


def _any(keys: tuple[str, ...]) -> Q:
    where = Q(pk__in=[])
    for key in keys:
        where |= OUTCOMES[key][1]
    return where


def cell_outcome(cell: Cell) -> str:
    """The outcome key of one cell (`OUTCOMES`), by the same rules as its filter."""
    if cell.status != _DONE:
        return _STATUS_OUTCOME[cell.status]
    return {True: "correct", False: "wrong", None: "not_scored"}[cell.correct]


def is_agent(benchmark: str) -> bool:
    """An agent episode (τ³, Terminal-Bench): its answer is its transcript and final state."""
    adapter = ADAPTERS.get(benchmark)
    return adapter is not None and adapter.kind == "agent"


# --- filters -------------------------------------------------------------------------------------


@dataclass
class QuestionFilters:
    """The valid filters of a request, the choices they were checked against, and one message
    per refused value (that filter is dropped, the others still apply)."""

    target: str = ""
    benchmark: str = ""
    outcome: str = ""
    targets: list[str] = field(default_factory=list)
    benchmarks: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def outcomes(self) -> list[tuple[str, str]]:
        return [(key, words) for key, (words, _) in OUTCOMES.items()]

    @property
    def active(self) -> dict[str, str]:
        """The filters in force, by query parameter (kept by the search form and links)."""
        chosen = {"target": self.target, "benchmark": self.benchmark, "outcome": self.outcome}
        return {k: v for k, v in chosen.items() if v}

    def where(self) -> Q:
        where = Q()
        if self.target:
            where &= Q(target__slug=self.target)
        if self.benchmark:
            where &= Q(benchmark=self.benchmark)
        if self.outcome:
            where &= OUTCOMES[self.outcome][1]
        return where


def question_filters(
    params: Mapping[str, Any],
    *,
    run: Run,
    names: tuple[str, ...] = ("target", "benchmark", "outcome"),
) -> QuestionFilters:
    """Target, benchmark (of the run's frozen plan) and outcome from the query string. A value
    that is not one of them is refused with a message saying so; the valid ones still apply,
    so one mistyped parameter never silently drops every filter."""
    head = selectors.manifest_head(run)
    filters = QuestionFilters(
        targets=[t["slug"] for t in head["targets"] or []],
        benchmarks=[b for b in ADAPTERS if b in (head["benchmarks"] or {})],
    )
    choices = {
        "target": ("a target", filters.targets),
        "benchmark": ("a benchmark", filters.benchmarks),
        "outcome": ("an outcome", list(OUTCOMES)),
    }
    for name in names:
        value = str(params.get(name) or "").strip()
        if not value:
            continue
        label, allowed = choices[name]
        if value in allowed:
            setattr(filters, name, value)
        else:
            filters.errors.append(
                f"“{value[:80]}” is not {label} of this run (choose one of: "
                f"{', '.join(allowed) or 'none'}); that filter is ignored, the others apply."
            )
    return filters


# --- side by side ----------------------------------------------------------------------------------


def question_groups(
    *, run: Run, where: Q, failures_only: bool = False, disagree: bool = False
) -> QuerySet[Any, Any]:
    """One row per (question, attempt slot) of the run in first-result order, with how many of
    its results fail and how many are right. Failures only: at least one result fails;
    disagree: at least one fails and at least one is right."""
    qs = (
        Cell.objects.filter(run=run)
        .filter(where)
        .values("question_id", "slot")
        .annotate(
            first=Min("pk"),
            failing=Count("pk", filter=_any(FAILING)),
            right=Count("pk", filter=OUTCOMES["correct"][1]),
        )
    )
    if failures_only or disagree:
        qs = qs.filter(failing__gt=0)
    if disagree:
        qs = qs.filter(right__gt=0)
    return qs.order_by("first")


def question_group_cells(*, run: Run, keys: list[tuple[int, int]], where: Q) -> list[Cell]:
    """Every target's result of these (question, slot) pairs, with its target and question."""
    cells = (
        Cell.objects.filter(run=run, question_id__in={q for q, _ in keys})
        .filter(where)
        .select_related("target", "question")
        .defer("question__payload")
        .order_by("pk")
    )
    wanted = set(keys)
    return [c for c in cells if (c.question_id, c.slot) in wanted]


def _shown(cell: Cell) -> dict[str, Any]:
    """One target's result as a member may see it: outcome, answer, reasons, error."""
    grade = public_grade(cell.grade)
    outcome = cell_outcome(cell)
    return {
        "cell": cell,
        "outcome": outcome,
        "outcome_words": OUTCOMES[outcome][0],
        "failing": outcome in FAILING,
        "reasons": grade_reasons(grade),
        "error": public_cell_error(cell.error),
        "agent": is_agent(cell.benchmark),
    }


def side_by_side_rows(
    groups: list[dict[str, Any]], cells: list[Cell], targets: list[str]
) -> list[dict[str, Any]]:
    """Per (question, slot): the question and, in the plan's target order, each target's
    shown result (None where the target has no result for it)."""
    by_key: dict[tuple[int, int], dict[str, Cell]] = {}
    for cell in cells:
        by_key.setdefault((cell.question_id, cell.slot), {})[cell.target.slug] = cell
    rows = []
    for g in groups:
        results = by_key.get((g["question_id"], g["slot"]), {})
        if not results:
            continue
        first = next(iter(results.values()))
        rows.append(
            {
                "question": first.question,
                "benchmark": first.benchmark,
                "slot": g["slot"],
                "disagree": g["failing"] > 0 and g["right"] > 0,
                "results": [
                    (slug, _shown(results[slug]) if slug in results else None) for slug in targets
                ],
            }
        )
    return rows


# --- agent episodes --------------------------------------------------------------------------------


def episode_context(*, run: Run, cell_id: int) -> dict[str, Any] | None:
    """The transcript of an agent episode: every turn's public part, in order, with the call
    behind it; None when the run has no such cell."""
    found = selectors.cell_episode(run=run, cell_id=cell_id)
    if found is None:
        return None
    cell, calls, last_subject = found
    return {
        "cell": cell,
        "turns": public_transcript(calls, last_subject),
        "calls_count": len(calls),
        "subject_calls": sum(1 for c in calls if c.role == Call.Role.SUBJECT),
    }
