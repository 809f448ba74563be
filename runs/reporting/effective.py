"""The effective usage every reader uses (R2, DESIGN §5): a call's usage and cost from the latest
usage correction when it has an entry for the call (`runs.reporting.reconcile` appends them),
else from the call row, and a known failure its target does not bill at a known $0
(`runs.ledger.accounting.known_failure_unbilled`). :func:`effective_call_sums` is that rule, in
SQL; the report, the live results, the comparison, exports, lineage, recovery and the per-call
views all read it from here.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence
from decimal import Decimal
from typing import Any, Literal, NamedTuple

from django.db import connection
from django.db.models import Count, F, Q

from runs.ledger.accounting import (
    GATEWAY_ANSWERED_HEADER,
    GATEWAY_ESTIMATE_NOTE,
    GATEWAY_RESENT_START,
    NO_STREAM_USAGE_NOTE,
    KnownFailure,
    errors_billed_by_target,
    errors_not_billed_words,
    http_error_before_stream,
    known_failure_unbilled,
)
from runs.models import Call, CallStatus, Cell, Run, UsageCorrection, UsageCorrectionEntry

__all__ = [
    "BUCKET_COLUMNS",
    "MONEY_COLUMNS",
    "NO_CALL_SPEND",
    "NO_CALL_SUMS",
    "NOTE_COUNTS",
    "WASTE_CALL_STATUSES",
    "CallEffectiveCost",
    "RunKnownFailure",
    "call_effective_costs",
    "cost_note_counts",
    "effective_call_sums",
    "effective_cell_costs",
    "effective_run_spend",
    "known_failures",
    "latest_corrections",
]

# A call's usage buckets and money columns, as the ledger row and a correction's entry hold them.
BUCKET_COLUMNS = ("input_tokens", "cached_input_tokens", "cache_write_tokens", "output_tokens")
MONEY_COLUMNS = ("cost_usd", "cache_neutral_cost_usd")


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
