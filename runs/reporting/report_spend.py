"""A run report's money and tokens (R1.1, R1.2): a target's tokens and costs, each total
given only when complete and beside it the known partial sum, the reasons a total is unknown or
known only at least, and the run's spend. The rules themselves (what a call costs, why usage is
unknown, a gateway's re-sends) live in `runs.ledger.accounting`; this module sums them."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from runs.ledger.accounting import (
    STREAM_USAGE_CHECKED_KEY,
    STREAM_USAGE_ESTIMATE_KEY,
    errors_not_billed_reason,
    gateway_estimate_reason,
    gateway_resent_reason,
    gateway_unchecked_caution,
    no_stream_usage_reason,
    sum_known,
    unpriced_calls_reason,
)
from runs.reporting.report_types import Spend, TargetReport

__all__ = ["BUCKETS", "run_spend", "target_spend", "usage_caution", "usage_unknown_reason"]

BUCKETS = ("input_tokens", "cached_input_tokens", "cache_write_tokens", "output_tokens")


def target_spend(
    total: dict[str, int],
    sums: dict[str, dict[str, Any]],
    missing_subject: int,
    resent: dict[str, int],
) -> dict[str, Any]:
    """The target's tokens and costs (`TargetReport`'s fields): a total only when every
    planned cell contributes a known value, beside it the known partial sum. A role with a call
    a gateway re-sent upstream (``resent``, per role) has no total: what the earlier attempts
    used is unknown, the known sum is a lower bound."""
    subject = sums.get("subject", {})
    cells_all_subject_known = (
        missing_subject == 0 and total["planned"] > 0 and total["completed"] == total["planned"]
    )
    whole = cells_all_subject_known and not resent.get("subject")
    usage_complete = whole and subject.get("usage_unknown", 1) == 0
    cost_complete = whole and subject.get("cost_unknown", 1) == 0
    neutral_complete = whole and subject.get("neutral_unknown", 1) == 0
    evaluation = [sums[r] for r in ("judge", "simulator") if r in sums]
    # Exact sums (sum_known's precision), never a float: a report shows the ledger's digits.
    # A known partial sum is None, never 0, when no call of its kind has a known cost (a target
    # without prices); with no evaluation calls at all, nothing was spent on evaluation.
    evaluation_costs = [e["cost"] for e in evaluation if e["cost"] is not None]
    evaluation_known = (
        sum_known(evaluation_costs).known_sum if evaluation_costs or not evaluation else None
    )
    evaluation_complete = all(e["cost_unknown"] == 0 for e in evaluation) and not any(
        resent.get(r) for r in ("judge", "simulator")
    )
    subject_known = subject.get("cost")
    spend_parts = [subject_known, *evaluation_costs]
    spend_known = (
        sum_known(p for p in spend_parts if p is not None).known_sum
        if any(p is not None for p in spend_parts)
        else None
    )
    return {
        "tokens": {
            b.removesuffix("_tokens"): (subject.get(b) if usage_complete else None) for b in BUCKETS
        },
        "tokens_known_partial": {b.removesuffix("_tokens"): subject.get(b) for b in BUCKETS},
        "subject_cost_usd": subject_known if cost_complete else None,
        "known_cost_usd": subject_known,
        "evaluation_cost_usd": evaluation_known if evaluation_complete else None,
        "known_evaluation_cost_usd": evaluation_known,
        "total_spend_usd": spend_known if cost_complete and evaluation_complete else None,
        "known_total_spend_usd": spend_known,
        "cache_neutral_cost_usd": subject.get("neutral") if neutral_complete else None,
        "cache_neutral_unknown_reason": _cache_neutral_unknown_reason(
            total,
            missing_subject,
            subject,
            cells_all_subject_known,
            neutral_complete,
            resent.get("subject", 0),
        ),
    }


def usage_unknown_reason(
    snapshot: dict[str, Any],
    notes: dict[str, dict[str, int]],
    by_role: dict[str, Any],
    unbilled: dict[str, tuple[int, frozenset[str]]] | None = None,
    *,
    ended: bool = True,
) -> str | None:
    """The target's reasons why tokens and cost are unknown or known only at least, each said
    once, in `runs.ledger.accounting`'s words; None when there is none. Calls of unknown cost
    for another reason than those named are counted once the run has ended (``ended``): before,
    a call in flight has no cost yet and is no such call. ``unbilled`` (per role): the known
    failures counted as $0 by their targets' frozen terms and those targets, whose assumption
    is said beside the figures that count them."""
    subject = notes.get("subject", {})
    subject_calls = by_role.get("subject", {}).get("calls")
    no_usage = subject.get("no_stream_usage", 0)
    # Calls whose cost is unknown for another reason than a stream without usage or a gateway's
    # estimate (a hostile or missing receipt, no price, a failure): a null cost is never shown
    # without a reason.
    estimated = subject.get("usage_estimated", 0)
    unknown_cost = by_role.get("subject", {}).get("cost_unknown", 0)
    unpriced = unknown_cost - no_usage - estimated if ended else 0
    reasons = [
        no_stream_usage_reason(no_usage, subject_calls),
        gateway_estimate_reason(
            estimated,
            subject_calls,
            snapshot.get(STREAM_USAGE_ESTIMATE_KEY) or "a gateway's estimate",
        ),
        unpriced_calls_reason(unpriced, subject_calls),
        *(
            unpriced_calls_reason(
                by_role.get(role, {}).get("cost_unknown", 0) if ended else 0,
                by_role.get(role, {}).get("calls"),
                role,
            )
            for role in ("judge", "simulator")
        ),
        *(
            errors_not_billed_reason(
                (unbilled or {}).get(role, (0, frozenset()))[0],
                by_role.get(role, {}).get("calls"),
                role,
                (unbilled or {}).get(role, (0, frozenset()))[1],
            )
            for role in ("subject", "judge", "simulator")
        ),
        *(
            gateway_resent_reason(
                notes.get(role, {}).get("gateway_resent", 0),
                by_role.get(role, {}).get("calls"),
                role,
            )
            for role in ("subject", "judge", "simulator")
        ),
    ]
    return " ".join(r for r in reasons if r) or None


def usage_caution(
    snapshot: dict[str, Any], notes: dict[str, dict[str, int]], by_role: dict[str, Any]
) -> str | None:
    """Why the target's known tokens and cost may be a gateway's estimate: its subject calls
    were answered through LiteLLM and the plan froze no check of its stream usage."""
    if snapshot.get(STREAM_USAGE_ESTIMATE_KEY) or snapshot.get(STREAM_USAGE_CHECKED_KEY):
        return None
    answered = notes.get("subject", {}).get("gateway_answered", 0)
    return gateway_unchecked_caution(answered, by_role.get("subject", {}).get("calls"))


def _cache_neutral_unknown_reason(
    total: dict[str, int],
    missing_subject: int,
    subject: dict[str, Any],
    cells_all_subject_known: bool,
    neutral_complete: bool,
    resent: int,
) -> str | None:
    """Why a target's cache-neutral cost is null, from the same counts that made it null. A
    call's own reason (an unpriced receipt entry's model, a missing entry) is its cost note."""
    if neutral_complete:
        return None
    if not cells_all_subject_known:
        if total["planned"] == 0:
            return "no planned cells"
        if missing_subject:
            return f"{missing_subject} planned cells have no subject call"
        return (
            f"{total['planned'] - total['completed']} of {total['planned']} planned cells "
            "have no completed result"
        )
    unknown = subject.get("neutral_unknown")
    if not unknown and resent:
        return (
            f"{resent} of {subject.get('calls')} subject calls were re-sent upstream by a "
            "gateway: what the earlier attempts used is unknown"
        )
    return (
        f"{unknown} of {subject.get('calls')} subject calls have no cache-neutral cost (a "
        "stream without usage, a missing or unusable usage receipt entry, a model without a "
        "price, or an entry whose model has no price; each call's cost note names it)"
    )


def run_spend(
    targets: list[TargetReport], sums: dict[str, Any] | None, ended: bool, resent: int
) -> Spend:
    """The run's total spend over every call of every role, and beside it the waste: what its
    failed and unknown-outcome calls cost. A known part is None when no cost of it is known
    (never 0 for "no price"). The total is given when every call made has a known cost and no
    more can be made: the run has ended (a cell never dispatched cost nothing, issue 35 item
    7), or every target's own total is complete; and no call was re-sent upstream by a gateway
    (``resent``: its earlier attempts' cost is unknown, the known total is a lower bound)."""
    if sums is None:  # no call at all (a preview, or nothing dispatched yet)
        return Spend(None, None, None, None, waste_calls=0, waste_calls_cost_unknown=0)
    settled = ended or all(t.total_spend_usd is not None for t in targets)
    complete = sums["unknown"] == 0 and settled and not resent
    # No failed or unknown call: nothing was wasted, a known 0.
    waste_known = sums["waste_known"] if sums["waste_calls"] else Decimal(0)
    return Spend(
        total_spend_usd=sums["known"] if complete else None,
        known_total_spend_usd=sums["known"],
        waste_usd=waste_known if sums["waste_unknown"] == 0 else None,
        known_waste_usd=waste_known,
        waste_calls=sums["waste_calls"],
        waste_calls_cost_unknown=sums["waste_unknown"],
        gateway_resent_calls=resent,
    )
