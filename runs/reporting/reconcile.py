"""`reconcile-usage` (R2, DESIGN §5) and the effective usage every reader uses.

Reconciliation re-parses each call's saved SSE evidence with the decoder the live engine used
and re-prices what it proves with the manifest's frozen prices. Nothing recorded changes: the
result is one appended, versioned :class:`~runs.models.UsageCorrection` whose ``corrections``
JSON holds the corrected usage of every call. Readers (report, comparison, export) take a
call's usage from the latest correction when it has an entry for the call, else from the call
row: :func:`effective_call_sums` is that rule, in SQL.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal, NamedTuple

from django.db import connection, transaction
from django.db.models import Count, F, Q

from runs.engine.sse import ChatStreamAccumulator, SSEError, decode_sse
from runs.ledger.accounting import (
    GATEWAY_ANSWERED_HEADER,
    GATEWAY_ESTIMATE_NOTE,
    GATEWAY_RESENT_START,
    NO_STREAM_USAGE_NOTE,
    NO_STREAM_USAGE_REMEDY,
    NOT_SENT_ERROR,
    NOT_SENT_NOTE,
    NOT_SENT_USAGE,
    STREAM_USAGE_ESTIMATE_KEY,
    KnownFailure,
    PriceError,
    call_accounting,
    errors_billed_by_target,
    errors_not_billed_words,
    http_error_before_stream,
    known_failure_unbilled,
    sum_known,
)
from runs.ledger.corrections import version_append, version_appended
from runs.ledger.events import events_append
from runs.ledger.usage import mom_evidence
from runs.models import (
    TERMINAL_RUN_STATUSES,
    Call,
    CallStatus,
    Cell,
    Run,
    UsageCorrection,
    UsageCorrectionEntry,
)
from runs.models.evidence import EvidenceUnreadable, evidence_decode
from runs.reporting.report_types import Correction
from srbench.canonical import sha256_bytes, sha256_hex
from srbench.money import money_stored, money_text
from srbench.refusals import Refusal

__all__ = [
    "RULES_VERSION",
    "ReconcileRefused",
    "ReconcileResult",
    "CallEffectiveCost",
    "call_effective_costs",
    "correction_summary",
    "cost_note_counts",
    "effective_call_sums",
    "effective_cell_costs",
    "known_failures",
    "latest_corrections",
    "usage_reconcile",
]

# Part of the evidence hash: a change to these rules must produce a new correction version for
# the same evidence, never be hidden behind the old one.
# 2: a gateway's re-sends lead a call's note as at close, and a stream usage the plan froze as a
# gateway's estimate is unknown (runs.ledger.accounting.call_accounting).
RULES_VERSION = "reconcile-usage/2"

BUCKET_COLUMNS = ("input_tokens", "cached_input_tokens", "cache_write_tokens", "output_tokens")
MONEY_COLUMNS = ("cost_usd", "cache_neutral_cost_usd")


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
        accumulator.feed_events(decode_sse([raw]))
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


# --------------------------------------------------------------------------------------------
# Effective usage, in SQL


def _entries_sql(among: str) -> str:
    """One row per corrected call of each run's latest correction (``among``: only the calls
    of the id array given), with its version: the correction's rows, read by call."""
    columns = ", ".join(f"x.{col}" for col in (*BUCKET_COLUMNS, *MONEY_COLUMNS))
    return (
        f"SELECT l.version, x.call_id, {columns}, x.outcome, x.reason FROM latest l "
        f"JOIN {UsageCorrectionEntry._meta.db_table} x ON x.correction_id = l.id {among}"
    )


class RunKnownFailure(NamedTuple):
    """A failed call of a run answered with an HTTP error before any stream byte
    (`runs.ledger.accounting.http_error_before_stream`): where it is (its cell, the cell's
    target, its role), whose terms apply (``slug``, the call's own target: a judge's for a judge
    call) and whether those terms make it a known $0 (``unbilled``)."""

    call_id: int
    run_id: int
    cell_id: int
    target_id: int
    role: str
    slug: str
    unbilled: bool


def known_failures(
    *, run_ids: Sequence[int], call_ids: Sequence[int] | None = None
) -> list[RunKnownFailure]:
    """The runs' known failures (``call_ids``: only among those calls), each judged by
    `runs.ledger.accounting.known_failure_unbilled` with its target's ``errors_billed`` frozen
    in that run's plan. The effective costs every reader sums (`_effective_calls_sql`), the
    per-call views (`call_effective_costs`), the live results and recovery all take the $0 from
    here, so one call has one cost everywhere."""
    if not run_ids:
        return []
    rows = list(
        Call.objects.filter(
            cell__run_id__in=run_ids,
            status=CallStatus.FAILED,
            http_status__gte=400,
            cost_usd__isnull=True,
            **({} if call_ids is None else {"pk__in": call_ids}),
        ).values_list(
            "pk",
            "cell__run_id",
            "cell_id",
            "cell__target_id",
            "role",
            "target__slug",
            "status",
            "http_status",
            "error_code",
            "bytes_received",
            "inference_call_count",
        )
    )
    if not rows:
        return []  # the common case: no plan is read (a manifest is megabytes at 100,000 cases)
    terms = {
        pk: errors_billed_by_target(
            {"targets": targets or [], "judges": judges or {}, "simulators": simulators or {}}
        )
        for pk, targets, judges, simulators in Run.objects.filter(
            pk__in={row[1] for row in rows}
        ).values_list(
            "pk", F("manifest__targets"), F("manifest__judges"), F("manifest__simulators")
        )
    }
    out = []
    for pk, run_id, cell_id, target_id, role, slug, status, http, code, received, n in rows:
        failure = KnownFailure(status, http, code, received, n)
        if http_error_before_stream(failure):
            unbilled = known_failure_unbilled(failure, terms[run_id].get(slug))
            out.append(RunKnownFailure(pk, run_id, cell_id, target_id, role, slug, unbilled))
    return out


def _unbilled_ids(failures: Sequence[RunKnownFailure] | None) -> list[int] | None:
    """The ids of the known failures counted as a known 0 (None: not read yet)."""
    return None if failures is None else [f.call_id for f in failures if f.unbilled]


def _effective_calls_sql(
    run_ids: Sequence[int],
    *,
    call_ids: Sequence[int] | None = None,
    unbilled: Sequence[int] | None = None,
) -> tuple[str, list[Any]]:
    """The ``WITH`` clause that defines ``eff``: one row per call of the runs (``call_ids``:
    only those) with its effective buckets and costs (run_id, target_id of the cell, cell_id,
    role, status, buckets, costs; call_id and the correction's version, outcome and reason).
    A call's costs are those of the latest correction's entry for it, else its row's; a known
    failure its target does not bill (`known_failures`; ``unbilled``: their ids, when the
    caller has read them) costs a known 0, cache-neutrally too, and keeps its unknown tokens."""
    call_t, cell_t = Call._meta.db_table, Cell._meta.db_table
    correction_t = UsageCorrection._meta.db_table
    marks = ", ".join(["%s"] * len(run_ids))
    if unbilled is None:
        failures = known_failures(run_ids=run_ids, call_ids=call_ids)
        unbilled = [f.call_id for f in failures if f.unbilled]
    among = "" if call_ids is None else "AND c.id = ANY(%s::bigint[])"
    effective = ",\n".join(
        f"CASE WHEN e.call_id IS NULL THEN c.{col} ELSE e.{col} END AS {col}"
        for col in BUCKET_COLUMNS
    )
    effective += ",\n" + ",\n".join(
        f"CASE WHEN c.id = ANY(%s::bigint[]) THEN 0 "
        f"WHEN e.call_id IS NULL THEN c.{col} ELSE e.{col} END AS {col}"
        for col in MONEY_COLUMNS
    )
    sql = f"""
        WITH latest AS (
            SELECT uc.id, uc.run_id, uc.version FROM {correction_t} uc
            WHERE uc.run_id IN ({marks}) AND uc.version = (
                SELECT MAX(v.version) FROM {correction_t} v WHERE v.run_id = uc.run_id)
        ),
        entries AS ({_entries_sql("" if call_ids is None else "AND x.call_id = ANY(%s::bigint[])")}),
        eff AS (
            SELECT cell.run_id, cell.target_id, cell.id AS cell_id, c.role, c.status, {effective},
                c.id AS call_id, e.version AS correction_version,
                e.outcome AS correction_outcome, e.reason AS correction_reason
            FROM {call_t} c JOIN {cell_t} cell ON cell.id = c.cell_id
            LEFT JOIN entries e ON e.call_id = c.id
            WHERE cell.run_id IN ({marks}) {among}
        )"""
    if call_ids is None:
        return sql, [*run_ids, *[list(unbilled)] * len(MONEY_COLUMNS), *run_ids]
    ids = list(call_ids)
    return sql, [*run_ids, ids, *[list(unbilled)] * len(MONEY_COLUMNS), *run_ids, ids]


GroupBy = Literal["target_role", "cell_role"]
# `effective_call_sums`' row of a role no call was sent in, where none could be: every count 0
# and every sum a known 0 (e.g. the subject role of a re-judge child, which never calls it).
NO_CALL_SUMS: dict[str, Any] = {
    **dict.fromkeys(("calls", "usage_unknown", "cost_unknown", "neutral_unknown"), 0),
    **dict.fromkeys(BUCKET_COLUMNS, 0),
    "cost": Decimal(0),
    "neutral": Decimal(0),
}


# `effective_run_spend`'s row of a run that sent no call: nothing spent, a known 0, nothing
# wasted.
NO_CALL_SPEND: dict[str, Any] = {
    "known": Decimal(0),
    "unknown": 0,
    "waste_known": None,
    "waste_unknown": 0,
    "waste_calls": 0,
}


def effective_call_sums(
    *,
    run_ids: Sequence[int],
    group_by: GroupBy,
    failures: Sequence[RunKnownFailure] | None = None,
) -> list[dict[str, Any]]:
    """Sums of the effective usage of the runs' calls, grouped in SQL.

    A call's usage and costs come from the latest correction of its run when that correction
    has an entry for it (a null there is unknown, not "fall back"), else from the call row.
    ``group_by`` is ``target_role`` (run, target of the cell, role) or ``cell_role`` (run,
    cell, role). Each row carries ``calls``, ``usage_unknown``, ``cost_unknown``,
    ``neutral_unknown``, the sums of the four buckets, ``cost`` and ``neutral``; sums over only
    unknown values are None, and a sum is complete only when its ``*_unknown`` is 0.
    ``failures``: the runs' `known_failures`, when the caller has read them.
    """
    if not run_ids:
        return []
    keys = {"target_role": "target_id", "cell_role": "cell_id"}[group_by]
    effective, params = _effective_calls_sql(run_ids, unbilled=_unbilled_ids(failures))
    sql = f"""
        {effective}
        SELECT run_id, {keys}, role, COUNT(*),
            SUM(CASE WHEN output_tokens IS NULL THEN 1 ELSE 0 END),
            SUM(CASE WHEN cost_usd IS NULL THEN 1 ELSE 0 END),
            SUM(CASE WHEN cache_neutral_cost_usd IS NULL THEN 1 ELSE 0 END),
            SUM(input_tokens), SUM(cached_input_tokens), SUM(cache_write_tokens),
            SUM(output_tokens), SUM(cost_usd), SUM(cache_neutral_cost_usd)
        FROM eff GROUP BY run_id, {keys}, role
    """
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    names = (
        "run_id",
        keys,
        "role",
        "calls",
        "usage_unknown",
        "cost_unknown",
        "neutral_unknown",
        *BUCKET_COLUMNS,
        "cost",
        "neutral",
    )
    out = []
    for row in rows:
        record = dict(zip(names, row, strict=True))
        for name in ("cost", "neutral"):
            # PostgreSQL numeric arrives as an exact Decimal; anything else is a defect.
            assert record[name] is None or isinstance(record[name], Decimal), record[name]
        for name in (*BUCKET_COLUMNS, "calls", "usage_unknown", "cost_unknown", "neutral_unknown"):
            if record[name] is not None:
                record[name] = int(record[name])
        out.append(record)
    return out


# What a call's cost note says of its usage, counted by the report once per target
# (runs.ledger.accounting's words): a stream without usage, a stream whose usage the plan froze
# as a gateway's estimate, a request the gateway re-sent upstream (its note starts so); and
# whether a LiteLLM gateway answered it (its kept header).
NOTE_COUNTS = {
    "no_stream_usage": Q(cost_note__endswith=NO_STREAM_USAGE_NOTE),
    "usage_estimated": Q(cost_note__endswith=GATEWAY_ESTIMATE_NOTE),
    "gateway_resent": Q(cost_note__startswith=GATEWAY_RESENT_START),
    "gateway_answered": Q(response_headers__has_key=GATEWAY_ANSWERED_HEADER),
}


def cost_note_counts(*, run_ids: Sequence[int]) -> dict[tuple[int, int, str], dict[str, int]]:
    """Per (run, target of the cell, role): how many calls' cost notes say each of
    :data:`NOTE_COUNTS`; a group where none says anything is absent."""
    rows = (
        Call.objects.filter(cell__run_id__in=run_ids)
        .filter(functools.reduce(operator.or_, NOTE_COUNTS.values()))
        .values_list("cell__run_id", "cell__target_id", "role")
        .annotate(**{name: Count("id", filter=q) for name, q in NOTE_COUNTS.items()})
    )
    return {
        (run_id, target_id, role): dict(zip(NOTE_COUNTS, counts, strict=True))
        for run_id, target_id, role, *counts in rows
    }


# A call that spent money and produced nothing usable: an error, or a call whose outcome is
# unknown (sent, then lost). Cancelled calls were stopped on purpose and are not waste.
WASTE_CALL_STATUSES = (CallStatus.FAILED, CallStatus.SENT_UNKNOWN)


def effective_run_spend(
    *, run_ids: Sequence[int], failures: Sequence[RunKnownFailure] | None = None
) -> dict[int, dict[str, Any]]:
    """Per run: the sum of the known effective costs of all its calls (``known``) and of its
    failed and unknown-outcome calls (``waste_known``), with how many costs each leaves
    unknown (``unknown``, ``waste_unknown``) and ``waste_calls``. A sum over no known cost is
    None; a run with no calls is absent. ``failures``: as `effective_call_sums`'."""
    if not run_ids:
        return {}
    effective, params = _effective_calls_sql(run_ids, unbilled=_unbilled_ids(failures))
    waste = "status IN (" + ", ".join(["%s"] * len(WASTE_CALL_STATUSES)) + ")"
    sql = f"""
        {effective}
        SELECT run_id, SUM(cost_usd), COUNT(*) - COUNT(cost_usd),
            SUM(cost_usd) FILTER (WHERE {waste}),
            COUNT(*) FILTER (WHERE {waste}) - COUNT(cost_usd) FILTER (WHERE {waste}),
            COUNT(*) FILTER (WHERE {waste})
        FROM eff GROUP BY run_id
    """
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, *WASTE_CALL_STATUSES * 4])
        rows = cursor.fetchall()
    names = ("known", "unknown", "waste_known", "waste_unknown", "waste_calls")
    return {run_id: dict(zip(names, values, strict=True)) for run_id, *values in rows}


def latest_corrections(*, run_ids: Sequence[int]) -> dict[int, UsageCorrection]:
    """The correction in effect for each run that has one. The per-call JSON is not loaded: a
    report shows only the summary, and the sums read the JSON in SQL."""
    out: dict[int, UsageCorrection] = {}
    for c in (
        UsageCorrection.objects.filter(run_id__in=run_ids)
        .defer("corrections")
        .order_by("run_id", "-version")
    ):
        out.setdefault(c.run_id, c)
    return out


def effective_cell_costs(*, run_ids: Sequence[int], role: str) -> list[tuple[int, float | None]]:
    """Per cell of the runs with calls in ``role``: the sum of their effective costs, or None
    when any of them has no known cost. Floats (exact sums in SQL, then rounded once) for
    numeric work over many cells; the same effective rule as :func:`effective_call_sums`."""
    if not run_ids:
        return []
    effective, params = _effective_calls_sql(run_ids)
    sql = f"""
        {effective}
        SELECT cell_id, CASE WHEN COUNT(cost_usd) = COUNT(*)
            THEN CAST(SUM(cost_usd) AS DOUBLE PRECISION) END
        FROM eff WHERE role = %s GROUP BY cell_id
    """
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, role])
        return cursor.fetchall()


class CallEffectiveCost(NamedTuple):
    """One call's costs and token buckets as every reader counts them (`_effective_calls_sql`,
    the report's own rule; unknown: None) and, when the costs are not simply the ledger row's,
    why (``note``, else None)."""

    cost_usd: Decimal | None
    cache_neutral_cost_usd: Decimal | None
    note: str | None
    input_tokens: int | None
    cached_input_tokens: int | None
    cache_write_tokens: int | None
    output_tokens: int | None


def _effective_note(failure: RunKnownFailure | None, row: Sequence[Any]) -> str | None:
    version, outcome, reason = row
    if failure is not None and failure.unbilled:
        return (
            "an HTTP error answer before any stream byte, not billed "
            f"({errors_not_billed_words([failure.slug])}); its tokens are unknown"
        )
    if version is None or outcome == "verified":
        return None
    return f"corrected by usage correction v{version}" + (f" ({reason})" if reason else "")


def call_effective_costs(*, run_id: int, call_ids: Sequence[int]) -> dict[int, CallEffectiveCost]:
    """The effective costs and tokens of these calls of a run, for the per-call views (Calls
    tab, call page, question page, the API's calls and call, ``show --calls``): read with the
    report's own SQL, so a call shows what the report counts for it, the recorded one beside
    it. A page reads only its own calls' correction entries (by index)."""
    if not call_ids:
        return {}
    failures = {f.call_id: f for f in known_failures(run_ids=[run_id], call_ids=call_ids)}
    unbilled = _unbilled_ids(list(failures.values()))
    effective, params = _effective_calls_sql([run_id], call_ids=call_ids, unbilled=unbilled)
    sql = f"""{effective}
        SELECT call_id, cost_usd, cache_neutral_cost_usd, {", ".join(BUCKET_COLUMNS)},
            correction_version, correction_outcome, correction_reason
        FROM eff"""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    return {
        pk: CallEffectiveCost(cost, neutral, _effective_note(failures.get(pk), rest[4:]), *rest[:4])
        for pk, cost, neutral, *rest in rows
    }
