"""Whether two runs measured the same thing (R11.2, DESIGN §6).

Two runs are comparable only when their frozen manifests agree on the cases, sampling,
benchmark options, weights, grader versions, the limits that change what is asked, judge targets
and the price of every model both priced. Execution limits (concurrency, timeouts, a cost cap)
decide how a run is driven, not what it asks; they may differ, and the comparison says where. Targets within one run share one manifest. Every difference is listed field by
field so a person can see why a pair was refused; nothing is reconciled silently.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from runs.ledger.selectors import manifest_without_cases
from runs.models import TERMINAL_RUN_STATUSES, Run
from srbench.refusals import Refusal

__all__ = [
    "COMPARED_FIELDS",
    "EXECUTION_LIMITS",
    "MEASURED_LIMITS",
    "Difference",
    "IncomparableRuns",
    "baseline_refusal",
    "execution_differences",
    "measured_limits",
    "model_prices",
    "run_comparison_problems",
    "runs_differences",
]

# Manifest fields that define what was measured. Dataset identity, names, targets and the
# failure policy are deliberately absent: identical cases on two datasets are the same test,
# and targets are what a comparison compares.
COMPARED_FIELDS = (
    "cases",
    "slots",
    "benchmarks",
    "sampling",
    "limits",
    "judges",
    "simulators",
    "prices",
)
# Limits that change what a model is asked or how an answer is kept: a different output budget
# or episode length is a different test. Every other limit is an execution limit (R11.2).
MEASURED_LIMITS = ("max_output_tokens", "max_output_chars", "max_calls_per_case")
EXECUTION_LIMITS = (
    "concurrency",
    "total_timeout_s",
    "idle_timeout_s",
    "case_timeout_s",
    "max_run_seconds",
    "max_cost_usd",
)
_MAX_LISTED = 5


def measured_limits(limits: Any) -> Any:
    """The part of a manifest's limits that is compared (anything unknown is kept: a limit
    nobody classified yet counts as changing the test)."""
    if not isinstance(limits, Mapping):
        return limits
    return {k: v for k, v in limits.items() if k not in EXECUTION_LIMITS}


@dataclass(frozen=True, slots=True)
class Difference:
    field: str
    baseline: Any
    candidate: Any
    text: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "field": self.field,
            "baseline": self.baseline,
            "candidate": self.candidate,
            "text": self.text,
        }


class IncomparableRuns(Refusal):
    """A pair that must not be compared, with every reason (the refusal's detail)."""

    http_status = 422
    code = "incomparable"

    def __init__(self, baseline_run: int, candidate_run: int, differences: list[Difference]):
        self.baseline_run = baseline_run
        self.candidate_run = candidate_run
        self.differences = differences
        listed = "; ".join(d.text for d in differences)
        super().__init__(
            f"run {candidate_run} is not comparable with run {baseline_run}: {listed}",
            detail={
                "baseline_run": baseline_run,
                "candidate_run": candidate_run,
                "differences": [d.as_dict() for d in differences],
            },
        )


def baseline_refusal(*, kind: str, planned: int, with_outcome: int, cases: int) -> str | None:
    """Why a target of the baseline run cannot be the baseline, or None when it can (R5.1): a
    single model with an outcome (runs.models.CELL_OUTCOMES) for every planned case. The one
    rule: the comparison applies it to its counts (compare.services), the Compare page's offer
    of baseline runs to the same counts from the ledger (compare.selectors)."""
    if kind != "single":
        return "not a single model"
    if planned != cases:
        return f"{planned} cells planned for {cases} cases"
    if with_outcome != cases:
        return f"{cases - with_outcome} case(s) without a result"
    return None


def run_comparison_problems(run: Run) -> list[str]:
    """Why a run cannot take part in any comparison, whatever it is paired with."""
    problems = []
    if run.mode != Run.Mode.LIVE:
        problems.append(f"run {run.pk} is a {run.mode} run: preview runs are never comparable")
    if run.status not in TERMINAL_RUN_STATUSES:
        problems.append(f"run {run.pk} is {run.status}: its results are not final")
    if run.parent_id is not None:
        problems.append(_child_problem(run))
    return problems


def _child_problem(run: Run) -> str:
    """Why a child run is never a comparison member. A re-judge child (runs/settlement/rejudge.py) holds
    no answer of its own: its scores are its parent's judged answers graded again, over the
    judged benchmarks only, so as a run it would compare a part of the parent's test with a
    whole one; a user who wants the re-judged scores reads its report beside the parent's,
    and compares the parent. A recovery of a re-judge child is a recovery child."""
    manifest = manifest_without_cases(run)
    marker = manifest.get("rejudge") if isinstance(manifest, dict) else None
    recovery = manifest.get("recovery") if isinstance(manifest, dict) else None
    if marker and not recovery:
        return (
            f"run {run.pk} is a re-judge of run {run.parent_id}: its scores are run "
            f"{run.parent_id}'s judged answers sent to the judge again, not answers of its own, "
            f"and cover only the judged benchmarks; compare run {run.parent_id} and read run "
            f"{run.pk}'s report for the re-judged scores"
        )
    return (
        f"run {run.pk} is a recovery child of run {run.parent_id}: it covers only its "
        "selection of cells"
    )


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _diff_values(path: str, a: Any, b: Any, out: list[Difference]) -> None:
    """Field-by-field differences of two JSON values (objects recursively, the rest whole)."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        for key in sorted(set(a) | set(b), key=str):
            sub = f"{path}.{key}"
            if key not in b:
                out.append(Difference(sub, a[key], None, f"{sub}: only in the baseline run"))
            elif key not in a:
                out.append(Difference(sub, None, b[key], f"{sub}: only in the candidate run"))
            else:
                _diff_values(sub, a[key], b[key], out)
    elif a != b:
        out.append(
            Difference(
                path, a, b, f"{path}: {_show(a)} in the baseline, {_show(b)} in the candidate"
            )
        )


def _case_differences(a: list[Any], b: list[Any]) -> list[Difference]:
    """Cases are compared as sets of (question, content hash, benchmark): the order of a plan
    is not part of what was measured."""
    if a == b:  # the usual case, the same plan in the same order: one C-level comparison
        return []
    left = {tuple(c) for c in a}
    right = {tuple(c) for c in b}
    if left == right:
        return []
    only_a = sorted(left - right)
    only_b = sorted(right - left)
    sample = [c[1][:12] for c in [*only_a, *only_b][:_MAX_LISTED]]
    text = (
        f"cases: {len(only_a)} case(s) only in the baseline and {len(only_b)} only in the "
        f"candidate (content hashes {', '.join(sample)}…)"
    )
    return [Difference("cases", len(left), len(right), text)]


def _decimal(value: Any) -> Any:
    try:
        return Decimal(str(value))
    except (InvalidOperation, ValueError):
        return value


def model_prices(manifest: Mapping[str, Any]) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Price per served model across every target and judge of a run, with the models one run
    prices two different ways (a comparison cannot say which price its costs used)."""
    prices: dict[str, dict[str, Any]] = {}
    conflicts = []
    for slug, table in sorted(manifest.get("prices", {}).items()):
        for model, entry in table.items():
            # "3" and "3.0" are the same price; compare values, not spellings.
            normal = {k: _decimal(v) for k, v in entry.items()}
            if model in prices and prices[model] != normal:
                conflicts.append(f"{model} (again under {slug})")
            prices.setdefault(model, normal)
    return prices, conflicts


def _price_differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[Difference]:
    out: list[Difference] = []
    prices_a, conflicts_a = model_prices(a)
    prices_b, conflicts_b = model_prices(b)
    for side, conflicts in (("baseline", conflicts_a), ("candidate", conflicts_b)):
        for model in conflicts:
            out.append(
                Difference("prices", None, None, f"prices: the {side} run prices {model} two ways")
            )
    for model in sorted(set(prices_a) & set(prices_b)):
        if prices_a[model] != prices_b[model]:
            found: list[Difference] = []
            _diff_values(
                f"prices[{model}]",
                {k: str(v) for k, v in prices_a[model].items()},
                {k: str(v) for k, v in prices_b[model].items()},
                found,
            )
            out.extend(found)
    return out


def runs_differences(
    baseline: Run, candidate: Run, *, same_cases: bool | None = None
) -> list[Difference]:
    """Every reason the pair is not comparable; empty means comparable. Re-run on each
    comparison, never cached: the server re-verifies every pair (R11.2). ``same_cases``: True
    when the caller knows both runs planned the same set of cases (their `PlanCases` digests
    agree); otherwise both case lists are read and compared."""
    out = [
        Difference("run", None, None, problem)
        for run in dict.fromkeys([baseline, candidate])
        for problem in run_comparison_problems(run)
    ]
    if baseline.pk == candidate.pk:
        return out
    a, b = manifest_without_cases(baseline), manifest_without_cases(candidate)
    for name in COMPARED_FIELDS:
        if name == "cases":
            if not same_cases:
                cases_a, cases_b = (
                    baseline.manifest.get("cases", []),
                    candidate.manifest.get("cases", []),
                )
                out.extend(_case_differences(cases_a, cases_b))
        elif name == "prices":
            out.extend(_price_differences(a, b))
        elif name == "limits":
            _diff_values(name, measured_limits(a.get(name)), measured_limits(b.get(name)), out)
        else:
            _diff_values(name, a.get(name), b.get(name), out)
    return out


def execution_differences(baseline: Run, candidate: Run) -> list[Difference]:
    """The execution limits in which a comparable pair differs: shown beside the comparison,
    never a reason to refuse it."""
    out: list[Difference] = []
    limits_a = manifest_without_cases(baseline).get("limits") or {}
    limits_b = manifest_without_cases(candidate).get("limits") or {}
    for key in EXECUTION_LIMITS:
        if key in limits_a or key in limits_b:
            _diff_values(f"limits.{key}", limits_a.get(key), limits_b.get(key), out)
    return out
