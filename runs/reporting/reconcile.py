"""`reconcile-usage` (R2, DESIGN §5); the effective usage every reader takes from what it appends
is `runs.reporting.effective`.

Reconciliation re-parses each call's saved SSE evidence with the decoder the live engine used
and re-prices what it proves with the manifest's frozen prices. Nothing recorded changes: the
result is one appended, versioned :class:`~runs.models.UsageCorrection` whose ``corrections``
JSON holds the corrected usage of every call. Readers (report, comparison, export) take a
call's usage from the latest correction when it has an entry for the call, else from the call
row: `runs.reporting.effective.effective_call_sums` is that rule, in SQL.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.db import transaction

from runs.engine.sse import ChatStreamAccumulator, SSEDecoder, SSEError
from runs.ledger.accounting import (
    NO_STREAM_USAGE_NOTE,
    NO_STREAM_USAGE_REMEDY,
    NOT_SENT_ERROR,
    NOT_SENT_NOTE,
    NOT_SENT_USAGE,
    STREAM_USAGE_ESTIMATE_KEY,
    PriceError,
    call_accounting,
    sum_known,
)
from runs.ledger.corrections import version_append, version_appended
from runs.ledger.events import events_append
from runs.ledger.usage import mom_evidence
from runs.models import TERMINAL_RUN_STATUSES, Call, Run, UsageCorrection
from runs.models.evidence import EvidenceUnreadable, evidence_decode
from runs.reporting.effective import BUCKET_COLUMNS, MONEY_COLUMNS
from runs.reporting.report_types import Correction
from srbench.canonical import sha256_bytes, sha256_hex
from srbench.money import money_stored, money_text
from srbench.refusals import Refusal

__all__ = [
    "RULES_VERSION",
    "ReconcileRefused",
    "ReconcileResult",
    "correction_summary",
    "usage_reconcile",
]

# Part of the evidence hash: a change to these rules must produce a new correction version for
# the same evidence, never be hidden behind the old one.
# 2: a gateway's re-sends lead a call's note as at close, and a stream usage the plan froze as a
# gateway's estimate is unknown (runs.ledger.accounting.call_accounting).
RULES_VERSION = "reconcile-usage/2"


class ReconcileRefused(Refusal):
    """The run cannot be reconciled (not terminal, preview mode, unknown)."""

    http_status = 409
    code = "reconcile_refused"


@dataclass(frozen=True)
class ReconcileResult:
    correction: UsageCorrection
    created: bool


# --------------------------------------------------------------------------------------------
# One call


def _money_text(value: Decimal | None) -> str | None:
    """The amount as the ledger column stores it (every digit, srbench.money.money_stored), so
    a recomputed cost is compared with the recorded one exactly (issue 35 item 5)."""
    return money_text(money_stored(value))


def _lower(headers: Mapping[str, Any] | None) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in (headers or {}).items()}


def _mom_proof(headers: dict[str, str]) -> str | None:
    """Why a MoM call's usage cannot be attributed (None: it can). Only a proven direct call or
    a complete per-call receipt says what the router's internal calls cost (R2.5); the rule
    lives in ``runs.ledger.usage.mom_evidence``, which the engine's pricing applies too."""
    evidence = mom_evidence(headers)
    return None if evidence.proven else f"MoM call is not attributable: {evidence.reason}"


def _unverifiable(call_id: int, reason: str) -> dict[str, Any]:
    # Missing or conflicting evidence leaves the usage unknown (R2.4), whatever the receipt said.
    return {
        "call_id": call_id,
        "outcome": "unverifiable",
        "reason": reason,
        **dict.fromkeys(BUCKET_COLUMNS),
        **dict.fromkeys(MONEY_COLUMNS),
    }


def _reconcile_call(
    row: dict[str, Any], snapshot: Mapping[str, Any], prices: Mapping[str, Any]
) -> dict[str, Any]:
    kind = snapshot.get("kind") or row["target__kind"]
    call_id = row["id"]
    if row["error_code"] == NOT_SENT_ERROR:
        # No connection was made: nothing left, nothing used, nothing billed — known, with no
        # stream to read (runs.ledger.accounting.NOT_SENT_USAGE).
        zero = {c: NOT_SENT_USAGE[c] for c in (*BUCKET_COLUMNS, *MONEY_COLUMNS)}
        return _entry(row, zero, NOT_SENT_NOTE)
    body, digest = row["evidence__body"], row["evidence__sha256"]
    if body is None:
        return _unverifiable(call_id, "no saved evidence")
    try:
        raw = evidence_decode(row["evidence__codec"], body)
    except EvidenceUnreadable as exc:
        return _unverifiable(call_id, str(exc))
    if sha256_bytes(raw) != digest:
        return _unverifiable(call_id, "evidence bytes do not match their recorded sha256")
    accumulator = ChatStreamAccumulator(clock=lambda: 0.0)
    try:
        # As the engine read it: plain events as text (the common-chunk shortcut's input).
        decoder = SSEDecoder()
        accumulator.feed_events(decoder.feed_plain(raw))
        accumulator.feed_events(decoder.close())
    except SSEError as exc:
        return _unverifiable(call_id, f"evidence is not a decodable event stream: {exc}")
    result = accumulator.result()
    if result.done_count != 1:
        return _unverifiable(call_id, f"evidence has {result.done_count} [DONE] markers, not 1")
    if not result.complete:
        return _unverifiable(call_id, f"evidence stream is incomplete: {result.incomplete_reason}")
    if (result.served_model or "") != row["served_model"]:
        return _unverifiable(
            call_id,
            f"model in evidence {result.served_model!r} differs from the receipt "
            f"{row['served_model']!r}",
        )
    if (result.finish_reason or "") != row["finish_reason"]:
        return _unverifiable(
            call_id,
            f"finish_reason in evidence {result.finish_reason!r} differs from the receipt "
            f"{row['finish_reason']!r}",
        )
    if result.usage != row["usage_raw"]:
        return _unverifiable(call_id, "usage in evidence differs from the recorded raw usage")

    # A router's receipts and a gateway's re-sends, read as the engine read them at close.
    headers = _lower(row["response_headers"])
    if kind == "mom":
        problem = _mom_proof(headers)
        if problem:
            return _unverifiable(call_id, problem)
    try:
        # The same composition the engine applied when it closed the call.
        buckets, cost, neutral, note = call_accounting(
            kind=kind,
            usage=result.usage,
            served_model=result.served_model,
            headers=headers,
            price_table=prices,
            usage_estimated=bool(snapshot.get(STREAM_USAGE_ESTIMATE_KEY)),
        )
    except PriceError as exc:
        return _unverifiable(call_id, f"malformed frozen price: {exc}")

    found = {
        "input_tokens": None if buckets is None else buckets.input,
        "cached_input_tokens": None if buckets is None else buckets.cached_input,
        "cache_write_tokens": None if buckets is None else buckets.cache_write,
        "output_tokens": None if buckets is None else buckets.output,
        "cost_usd": cost,
        "cache_neutral_cost_usd": neutral,
    }
    return _entry(
        row,
        found,
        f"{note}; {NO_STREAM_USAGE_REMEDY}" if note.endswith(NO_STREAM_USAGE_NOTE) else note,
    )


def _entry(row: dict[str, Any], found: dict[str, Any], note: str) -> dict[str, Any]:
    """The call's reconciled usage (`found`: its buckets and costs), verified or changed
    against what the ledger holds; `note` says why when nothing changed."""
    entry: dict[str, Any] = {
        "call_id": row["id"],
        **{c: found[c] for c in BUCKET_COLUMNS},
        **{c: _money_text(found[c]) for c in MONEY_COLUMNS},
    }
    changed = [c for c in BUCKET_COLUMNS if entry[c] != row[c]] + [
        c
        for c in MONEY_COLUMNS
        if (None if entry[c] is None else Decimal(entry[c])) != row[c]  # numeric, not textual
    ]
    entry["outcome"] = "changed" if changed else "verified"
    # A stream without usage says what evidence would make it known (issue 39).
    entry["reason"] = f"changed: {', '.join(changed)}" if changed else note
    return entry


# --------------------------------------------------------------------------------------------
# One run


def _call_rows(run: Run) -> Iterable[dict[str, Any]]:
    return (
        Call.objects.filter(cell__run=run)
        .order_by("pk")
        .values(
            "id",
            "target__slug",
            "target__kind",
            "served_model",
            "finish_reason",
            "error_code",
            "usage_raw",
            "response_headers",
            "evidence__body",
            "evidence__codec",
            "evidence__sha256",
            *BUCKET_COLUMNS,
            *MONEY_COLUMNS,
        )
        .iterator(chunk_size=500)
    )


def _target_snapshots(manifest: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """Targets as frozen in the plan (kind, what the target check found of its stream usage),
    so a later edit of a target cannot change the rules."""
    snapshots = [
        *manifest.get("targets", []),
        *manifest.get("judges", {}).values(),
        *manifest.get("simulators", {}).values(),
    ]
    return {s["slug"]: s for s in snapshots}


def usage_reconcile(*, run_id: int) -> ReconcileResult:
    """Rebuild the run's usage from its saved evidence and append one correction (R2).

    Makes no model call and changes no call, evidence or manifest. Idempotent: the correction
    is keyed by a sha256 over every call's evidence hash and :data:`RULES_VERSION`, so running
    it again on the same evidence returns the same correction (``created=False``) instead of a
    new version.
    """
    run = Run.objects.filter(pk=run_id).first()
    if run is None:
        raise ReconcileRefused(f"run {run_id} does not exist")
    if run.mode != Run.Mode.LIVE:
        raise ReconcileRefused(f"run {run_id} is a {run.mode} run: only live runs have usage")
    if run.status not in TERMINAL_RUN_STATUSES:
        raise ReconcileRefused(
            f"run {run_id} is {run.status}: reconcile a run only once it has ended"
        )
    snapshots = _target_snapshots(run.manifest)
    prices = run.manifest.get("prices", {})

    entries: list[dict[str, Any]] = []
    recorded_costs: list[Decimal | None] = []
    evidence_ids: list[tuple[int, str | None]] = []
    for row in _call_rows(run):
        slug = row["target__slug"]
        entries.append(_reconcile_call(row, snapshots.get(slug, {}), prices.get(slug, {})))
        recorded_costs.append(row["cost_usd"])
        evidence_ids.append((row["id"], row["evidence__sha256"]))
    evidence_sha = sha256_hex({"rules": RULES_VERSION, "calls": evidence_ids})

    verified = sum(1 for e in entries if e["outcome"] != "unverifiable")
    changed = sum(1 for e in entries if e["outcome"] == "changed")
    old_known = sum_known(recorded_costs).known_sum
    new_known = sum_known(
        None if e["cost_usd"] is None else Decimal(e["cost_usd"]) for e in entries
    ).known_sum

    with transaction.atomic(durable=True):
        correction, created = version_append(
            UsageCorrection,
            run_id=run.pk,
            key={"evidence_sha256": evidence_sha},
            fields={
                "verified_count": verified,
                "changed_count": changed,
                "unverifiable_count": len(entries) - verified,
                "old_known_cost_usd": old_known,
                "new_known_cost_usd": new_known,
                "corrections": {"rules_version": RULES_VERSION, "calls": entries},
            },
        )
        if not created:
            return ReconcileResult(correction, created=False)
        events_append(
            run_id=run.pk,
            events=[
                (
                    "usage.reconciled",
                    {
                        "version": correction.version,
                        "evidence_sha256": evidence_sha,
                        "verified": verified,
                        "changed": changed,
                        "unverifiable": len(entries) - verified,
                        "old_known_cost_usd": money_text(old_known),
                        "new_known_cost_usd": money_text(new_known),
                    },
                )
            ],
        )
        version_appended(run_id=run.pk)  # the report of the corrected state, in this commit
    correction.refresh_from_db()  # the stored Decimal precision, as every later reader sees it
    return ReconcileResult(correction, created=True)


def correction_summary(correction: UsageCorrection | None) -> dict[str, Any] | None:
    """What a report shows about the correction in effect (R2.3): the typed report's receipt
    (`runs.reporting.report_types.Correction`, its one home) as JSON."""
    typed = Correction.of(correction)
    return None if typed is None else typed.to_doc()
