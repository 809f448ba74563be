"""The engine's writes to the ledger: short, synchronous transactions run on the driver's
database thread. The order matters and is the point of this module:

- a Call row with status `sent` is committed before its request leaves (write-ahead);
- cells are claimed with a fencing token and a lease, and finished only by their holder;
- the budget is reserved under a lock on the run row before every call.

Fencing (issue 34, docs/reliability.md "Fencing"): every write a driver makes carries its
claim — opening a call, marking it streaming, closing it with its evidence, renewing a lease,
finishing or releasing a cell — and is checked against the cell's status and claim token and
the run's status in the same transaction; a write whose claim is gone changes nothing and says
so (`FENCED`, False, or the cell missing from a renewal). The database refuses the same writes
whatever code path makes them (srbench.dbguards.fencing_sql).

One lock order for every ledger writer (the driver's batches and heartbeat, the recovery pass,
the end of a run, recovery): the run row first, then its cells, then their calls.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Exists, F, OuterRef
from django.utils import timezone

from datasets.models import Question
from runs.ledger.accounting import STREAM_USAGE_ESTIMATE_KEY
from runs.ledger.bulk_sql import bulk_insert_sql, bulk_update_sql, first_per_key
from runs.ledger.events import events_append
from runs.ledger.selectors import target_api_key
from runs.models import (
    TERMINAL_RUN_STATUSES,
    Call,
    CallEvidence,
    CallStatus,
    Cell,
    CellStatus,
    Run,
    RunStatus,
    Target,
    WireApi,
)
from runs.models.evidence import evidence_fields
from srbench.money import money_text


@dataclass(frozen=True)
class TargetInfo:
    slug: str
    kind: str
    base_url: str
    model: str
    fixed_params: dict[str, Any]
    prices: dict[str, Any]
    config_hash: str | None
    max_inference_calls: int | None
    preview_url: str | None
    api_key: str | None
    target_id: int
    api: str = WireApi.OPENAI  # the API the target speaks
    # Why the target's stream usage is a gateway's estimate, as the plan froze it ("" when the
    # target check showed nothing so): such calls' tokens and cost are unknown.
    stream_usage_estimate: str = ""
    errors_billed: bool | None = None  # as the plan froze it (None: the plan predates it)


@dataclass(frozen=True)
class RunContext:
    run_id: int
    manifest: dict[str, Any]
    started_at: Any
    targets: dict[int, TargetInfo]  # by target id
    judges: dict[str, TargetInfo]  # by benchmark
    simulators: dict[str, TargetInfo]  # by benchmark: who plays the user (τ³)
    started_now: bool  # this call moved the run from queued to running


@dataclass(frozen=True)
class ClaimedCell:
    cell_id: int
    token: int
    target_id: int
    benchmark: str
    payload: dict[str, Any]
    secret: dict[str, Any]


def _target_info(target: Target, snapshot: dict[str, Any], prices: dict[str, Any]) -> TargetInfo:
    """Requests use the frozen snapshot (never a later edit of the target); the key is read
    live because it is a credential, not part of what is measured."""
    return TargetInfo(
        slug=snapshot["slug"],
        kind=snapshot["kind"],
        base_url=snapshot["base_url"],
        model=snapshot["model"],
        fixed_params=snapshot["fixed_params"],
        prices=prices,
        config_hash=snapshot["config_hash"],
        max_inference_calls=snapshot["max_inference_calls"],
        preview_url=snapshot.get("preview_url"),
        api_key=target_api_key(target=target),
        target_id=target.pk,
        api=snapshot.get("api", WireApi.OPENAI),
        stream_usage_estimate=snapshot.get(STREAM_USAGE_ESTIMATE_KEY) or "",
        errors_billed=snapshot.get("errors_billed"),
    )


def run_begin(*, run_id: int) -> RunContext | None:
    """Move a queued run to running (once) and load what a driver needs. None when the run
    is not (or no longer) running: a redelivered or late task then does nothing."""
    started_now = False
    with transaction.atomic(durable=True):
        run = Run.objects.select_for_update().get(pk=run_id)
        if run.may_start:
            started_now = True
            run.status = RunStatus.RUNNING
            run.started_at = timezone.now()
            run.save(update_fields=["status", "started_at", "updated_at"])
            events_append(run_id=run_id, events=[("run.started", {})])
        if run.status != RunStatus.RUNNING:
            return None
    manifest = run.manifest
    by_slug = {t.slug: t for t in Target.objects.filter(slug__in=_slugs(manifest))}
    targets = {
        by_slug[s["slug"]].pk: _target_info(
            by_slug[s["slug"]], s, manifest["prices"].get(s["slug"], {})
        )
        for s in manifest["targets"]
    }
    judges = {
        b: _target_info(by_slug[s["slug"]], s, manifest["prices"].get(s["slug"], {}))
        for b, s in manifest["judges"].items()
    }
    simulators = {
        b: _target_info(by_slug[s["slug"]], s, manifest["prices"].get(s["slug"], {}))
        for b, s in manifest.get("simulators", {}).items()
    }
    return RunContext(run_id, manifest, run.started_at, targets, judges, simulators, started_now)


def _slugs(manifest: dict[str, Any]) -> set[str]:
    return (
        {t["slug"] for t in manifest["targets"]}
        | {j["slug"] for j in manifest["judges"].values()}
        | {u["slug"] for u in manifest.get("simulators", {}).values()}
    )


@dataclass(frozen=True)
class ClaimCells:
    """Claim up to `limit` pending cells for this worker, never more than the run's
    concurrency across all workers. Its result: (claimed, pending left) or None when the run
    no longer dispatches. Applied after the batch's finishes, in the same transaction: the
    cells that ended free their slots for the replacements without a second round trip."""

    worker: str
    limit: int
    concurrency: int
    lease_seconds: float


ClaimRows = tuple[list[tuple[int, int, int, str, int]], int | None] | None


def _cells_claim(op: ClaimCells, run_id: int, now: Any) -> ClaimRows:
    """The claim's writes, inside the caller's transaction: (claimed rows, pending left), or
    None when the run no longer dispatches. `now` is the transaction's time: a cell claimed
    in the batch that finished another starts when that one finished."""
    # The run row lock serialises claims of this run across workers, so the count of
    # running cells below cannot be raced past the plan's concurrency.
    run = (
        Run.objects.select_for_update()
        .only("status", "cancel_requested_at", "stop_reason")
        .get(pk=run_id)
    )
    if not run.accepts_claims:
        return None
    running = Cell.objects.filter(run_id=run_id).running().count()
    n = min(op.limit, op.concurrency - running)
    rows: list[tuple[int, int, int, str, int]] = []
    if n > 0:
        lease = now + timedelta(seconds=op.lease_seconds)
        # One statement: lock, claim and read back the claimed cells.
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE runs_cell SET status = %s, claim_token = claim_token + 1, "
                "claimed_by = %s, lease_expires_at = %s, started_at = %s "
                "WHERE id IN (SELECT id FROM runs_cell WHERE run_id = %s "
                "AND status = %s ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED) "
                "RETURNING id, claim_token, target_id, benchmark, question_id",
                [CellStatus.RUNNING, op.worker, lease, now, run_id, CellStatus.PENDING, n],
            )
            rows = sorted(cursor.fetchall())
    # Only worth a count when nothing was claimed: then the caller decides whether the
    # run is drained or other workers hold the concurrency.
    pending_left = Cell.objects.filter(run_id=run_id).pending().count() if not rows else None
    return rows, pending_left


def _claimed_cells(claimed: ClaimRows) -> tuple[list[ClaimedCell], int | None] | None:
    """The claimed rows with their questions, read after the claim committed."""
    if claimed is None:
        return None
    rows, pending_left = claimed
    if not rows:
        return [], pending_left
    questions = {
        q.pk: q
        for q in Question.objects.filter(pk__in={r[4] for r in rows}).select_related("secret")
    }
    return [
        ClaimedCell(
            cell_id, token, target_id, benchmark, questions[qid].payload, questions[qid].secret.data
        )
        for cell_id, token, target_id, benchmark, qid in rows
    ], pending_left


# The result of an open whose claim is gone: the cell is no longer running under the op's
# token, or the run is no longer running. Nothing was written; the request must not leave.
FENCED = "fenced"


def writer_session() -> None:
    """Make this thread's connection a ledger writer's: PostgreSQL ends its session when it
    sits idle inside a transaction for half a lease (at least 5 s). A worker frozen mid-
    transaction (a VM pause, SIGSTOP) then releases the run and cell rows it locked instead of
    holding every other writer of the run — the recovery pass included — until it wakes; its
    own transaction is rolled back, and whatever it retries meets the fencing. Our writers'
    transactions are a few statements with no waiting in between. Once per connection."""
    raw = connection.connection
    if raw is not None and getattr(raw, "_srbench_writer", False):
        return
    connection.ensure_connection()
    timeout_ms = int(max(5.0, float(settings.SRBENCH_CELL_LEASE_SECONDS) / 2) * 1000)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT set_config('idle_in_transaction_session_timeout', %s, false)",
            [str(timeout_ms)],
        )
    connection.connection._srbench_writer = True


def run_lock(run_id: int) -> str:
    """Lock the run row, the first lock of every ledger write transaction (run -> cell ->
    call); returns the run's status. Plain SQL: it runs in every batch of the hot path."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT status FROM runs_run WHERE id = %s FOR UPDATE", [run_id])
        row = cursor.fetchone()
    if row is None:
        raise Run.DoesNotExist(f"run {run_id}")
    return row[0]


def _held_by_call() -> Exists:
    """The call's cell is still running under the claim the call was opened with."""
    return Exists(
        Cell.objects.filter(
            pk=OuterRef("cell_id"), status=CellStatus.RUNNING, claim_token=OuterRef("claim_token")
        )
    )


@dataclass(frozen=True)
class OpenCall:
    """Commit a Call row (status `sent`) before its request leaves, only while the cell is
    running under `token` in a running run; with a budget, reserve its worst-case cost first.
    Result: the call id, None when the budget refuses it, or FENCED when the claim is gone."""

    cell_id: int
    token: int
    role: str
    sequence: int
    target_id: int
    request: dict[str, Any]
    reservation: Decimal | None
    worker: str


@dataclass(frozen=True)
class CloseCall:
    """Record a call's outcome and its evidence together and settle its reservation, only
    while the call is open and its cell still held under its claim. Result: whether it was
    recorded (False: the call was settled elsewhere; nothing was written)."""

    call_id: int
    fields: dict[str, Any]
    raw: bytes
    reserved: Decimal | None
    failure: dict[str, Any] | None
    unbilled: bool = False  # a known $0 (`known_failure_unbilled`): its reservation released


@dataclass(frozen=True)
class FinishCell:
    """Finish a cell held with this fencing token; a zombie whose claim was taken over (its
    lease expired) changes nothing. Result: whether it finished the cell."""

    cell_id: int
    token: int
    status: str
    correct: bool | None
    grade: dict[str, Any] | None
    final_answer: str
    error: str

    def failed(self, error: str) -> FinishCell:
        """This finish as a failure without a verdict: what it would have graded is not all
        in the ledger."""
        return dataclasses.replace(
            self, status=CellStatus.FAILED, correct=None, grade=None, error=error
        )


LedgerOp = OpenCall | CloseCall | FinishCell | ClaimCells


def ledger_apply(*, run_id: int, max_cost: Decimal | None, ops: list[LedgerOp]) -> list[Any]:
    """Apply a batch of ledger writes in ONE transaction (group commit) and return one result
    per op. Opens are applied first, then closes, then finishes, then claims, so a batch that
    holds a call's close and its cell's finish writes them in the right order, and a claim
    counts the cells the batch finished as free. The transaction commits before any caller is
    told its call is open: write-ahead holds for every call of the batch.
    """
    results: list[Any] = [None] * len(ops)
    events: list[tuple[str, dict[str, Any]]] = []
    now = timezone.now()
    with transaction.atomic(durable=True):
        run_status = run_lock(run_id)
        opens = _opens_fenced(
            [(i, op) for i, op in enumerate(ops) if isinstance(op, OpenCall)], run_status, results
        )
        allowed = (
            _budget_reserve(run_id, max_cost, opens, events) if max_cost is not None else opens
        )
        _calls_open(allowed, now, results, events)
        closes = [(i, op) for i, op in enumerate(ops) if isinstance(op, CloseCall)]
        _closes_apply(run_id, max_cost, closes, events, results)
        finishes = [(i, op) for i, op in enumerate(ops) if isinstance(op, FinishCell)]
        finished = _cells_finish(finishes, now)
        for i, op in finishes:
            results[i] = done = finished[i]
            if done:
                payload: dict[str, Any] = {"cell": op.cell_id}
                if op.status == CellStatus.COMPLETED:
                    payload["correct"] = op.correct
                else:
                    payload["error"] = op.error[:500]
                events.append((f"cell.{op.status}", payload))
        claims = {
            i: _cells_claim(op, run_id, now)
            for i, op in enumerate(ops)
            if isinstance(op, ClaimCells)
        }
        events_append(run_id=run_id, events=events)
    for i, claimed in claims.items():
        results[i] = _claimed_cells(claimed)
    return results


def _opens_fenced(
    opens: list[tuple[int, OpenCall]], run_status: str, results: list[Any]
) -> list[tuple[int, OpenCall]]:
    """The opens whose cell is running under their token in a running run, with those cells
    locked (after the run); the others' result is FENCED."""
    if not opens:
        return []
    held: dict[int, int] = {}
    if run_status == RunStatus.RUNNING:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT id, claim_token FROM runs_cell WHERE id = ANY(%s) AND status = %s "
                "ORDER BY id FOR UPDATE",
                [sorted({op.cell_id for _, op in opens}), CellStatus.RUNNING.value],
            )
            held = dict(cursor.fetchall())
    allowed = []
    for i, op in opens:
        if held.get(op.cell_id) == op.token:
            allowed.append((i, op))
        else:
            results[i] = FENCED
    return allowed


def _budget_reserve(
    run_id: int,
    max_cost: Decimal,
    opens: list[tuple[int, OpenCall]],
    events: list[tuple[str, dict[str, Any]]],
) -> list[tuple[int, OpenCall]]:
    """Reserve each open's worst-case cost under the run row lock, in order; an open the
    budget cannot hold is refused (an event says why). Returns the opens allowed."""
    if not opens:
        return []
    committed = (
        Run.objects.select_for_update()
        .values_list("budget_committed_usd", flat=True)
        .get(pk=run_id)
    )
    reserved = Decimal(0)
    allowed: list[tuple[int, OpenCall]] = []
    for i, op in opens:
        if op.reservation is None or committed + reserved + op.reservation > max_cost:
            events.append(
                (
                    "budget.refused",
                    {
                        "cell": op.cell_id,
                        "role": op.role,
                        # Exact text: str() of the column's 0 is "0E-10".
                        "committed_usd": money_text(committed + reserved),
                        "reservation_usd": money_text(op.reservation),
                        "max_cost_usd": money_text(max_cost),
                    },
                )
            )
            continue
        reserved += op.reservation
        allowed.append((i, op))
    if reserved:
        Run.objects.filter(pk=run_id).update(
            budget_committed_usd=F("budget_committed_usd") + reserved
        )
    return allowed


# The columns of an opened call, in the order of `_calls_open`'s rows.
_CALL_OPEN_FIELDS = (
    *("cell", "role", "sequence", "target", "request", "worker", "claim_token"),
    *("status", "stage", "sent_at", "reserved_cost_usd"),
)


def _calls_open(
    allowed: list[tuple[int, OpenCall]],
    now: Any,
    results: list[Any],
    events: list[tuple[str, dict[str, Any]]],
) -> None:
    """Write the Call rows (status `sent`) of the allowed opens; each op's result is its id."""
    if not allowed:
        return
    rows = [
        (op.cell_id, op.role, op.sequence, op.target_id, op.request, op.worker, op.token)
        + (CallStatus.SENT.value, Call.Stage.WAITING.value, now, op.reservation)
        for _, op in allowed
    ]
    # A call is one (cell, role, sequence): the constraint call_unique_sequence.
    ids = {
        (cell, role, sequence): pk
        for pk, cell, role, sequence in bulk_insert_sql(
            Call, fields=_CALL_OPEN_FIELDS, rows=rows, returning=("id", "cell", "role", "sequence")
        )
    }
    for i, op in allowed:
        pk = ids[(op.cell_id, op.role, op.sequence)]
        results[i] = pk
        events.append(("call.sent", {"call": pk, "cell": op.cell_id, "role": op.role}))


def _closes_apply(
    run_id: int,
    max_cost: Decimal | None,
    closes: list[tuple[int, CloseCall]],
    events: list[tuple[str, dict[str, Any]]],
    results: list[Any],
) -> None:
    """Record closed calls' outcomes and evidence, and move the budget from each call's
    reservation to its known cost; a close whose call was settled elsewhere (its claim is
    gone) writes nothing, neither outcome nor evidence, and its result is False."""
    recorded = _calls_close(closes)
    for i, op in closes:
        results[i] = op.call_id in recorded
    closes = [(i, op) for i, op in closes if op.call_id in recorded]
    budget_delta = Decimal(0)
    for _, op in closes:
        cost = op.fields.get("cost_usd")
        cost = Decimal(0) if cost is None and op.unbilled else cost
        if max_cost is not None and cost is not None and op.reserved is not None:
            budget_delta += cost - op.reserved
        if op.failure is not None:
            events.append(("call.failed", {"call": op.call_id, **op.failure}))
    if closes:
        kept = [(op.call_id, evidence_fields(op.raw)) for _, op in closes]
        bulk_insert_sql(
            CallEvidence,
            fields=("call", "codec", "body", "raw_size", "sha256"),
            rows=[
                (call, *(e[k] for k in ("codec", "body", "raw_size", "sha256"))) for call, e in kept
            ],
        )
    if budget_delta:
        Run.objects.filter(pk=run_id).update(
            budget_committed_usd=F("budget_committed_usd") + budget_delta
        )


# The statuses are the enum's values (constants, never input) written into the SQL text: a
# call still open whose cell is still running under the claim the call was opened with.
CLOSE_GUARD = (
    f"t.status IN ('{CallStatus.SENT.value}', '{CallStatus.STREAMING.value}') "
    f"AND EXISTS (SELECT 1 FROM runs_cell c WHERE c.id = t.cell_id "
    f"AND c.status = '{CellStatus.RUNNING.value}' AND c.claim_token = t.claim_token)"
)


def _calls_close(closes: list[tuple[int, CloseCall]]) -> set[int]:
    """Write the outcome of closed calls that are still open (sent/streaming) under their
    claim: one statement per shape of outcome. Returns the ids of the calls it closed."""
    first, repeats = first_per_key(closes, lambda op: op.call_id)
    shapes: dict[tuple[str, ...], list[tuple[Any, ...]]] = {}
    for _, op in first:
        names = tuple(op.fields)
        shapes.setdefault(names, []).append((op.call_id, *op.fields.values()))
    closed: set[int] = set()
    for names, rows in shapes.items():
        closed.update(
            bulk_update_sql(
                Call, keys=("id",), fields=names, rows=rows, where=CLOSE_GUARD, returning=True
            )
        )
    for _, op in repeats:
        if Call.objects.open().filter(_held_by_call(), pk=op.call_id).update(**op.fields):
            closed.add(op.call_id)
    return closed


def _cells_finish(finishes: list[tuple[int, FinishCell]], now: Any) -> dict[int, bool]:
    """Finish cells still running under the given fencing token; by op index, whether each
    finished its cell."""
    done: dict[int, bool] = {}

    def one(op: FinishCell) -> bool:
        return (
            Cell.objects.held(cell_id=op.cell_id, token=op.token).update(
                status=op.status,
                correct=op.correct,
                scored=op.correct is not None,
                grade=op.grade,
                final_answer=op.final_answer,
                error=op.error,
                finished_at=now,
                lease_expires_at=None,
            )
            == 1
        )

    first, repeats = first_per_key(finishes, lambda op: op.cell_id)
    if first:
        updated = set(
            bulk_update_sql(
                Cell,
                keys=("id", "claim_token"),
                fields=(
                    "status",
                    "correct",
                    "scored",
                    "grade",
                    "final_answer",
                    "error",
                    "finished_at",
                    "lease_expires_at",
                ),
                rows=[
                    (
                        op.cell_id,
                        op.token,
                        op.status,
                        op.correct,
                        op.correct is not None,
                        op.grade,
                        op.final_answer,
                        op.error,
                        now,
                        None,
                    )
                    for _, op in first
                ],
                where=f"t.status = '{CellStatus.RUNNING.value}'",
                returning=True,
            )
        )
        done.update((i, op.cell_id in updated) for i, op in first)
    for i, op in repeats:
        done[i] = one(op)
    return done


def calls_checkpoint(*, run_id: int, activity: list[tuple[int, str, Any, int]]) -> None:
    """Live activity (R10.3) of in-flight calls in one statement: (call, stage, last, bytes)."""
    if not activity:
        return
    # Only calls still open under their claim: a checkpoint that lands after a call's close
    # (or its settlement by the recovery pass) must not overwrite its final stage.
    with transaction.atomic(durable=True):
        run_lock(run_id)
        _activity_write(activity)


def _activity_write(activity: list[tuple[int, str, Any, int]]) -> None:
    bulk_update_sql(
        Call,
        keys=("id",),
        fields=("stage", "last_activity_at", "bytes_received"),
        rows=list({pk: (pk, stage, last, n) for pk, stage, last, n in activity}.values()),
        where=CLOSE_GUARD,
        extra_set=(
            f"status = CASE WHEN v.stage = '{Call.Stage.STREAMING.value}' "
            f"AND t.status = '{CallStatus.SENT.value}' "
            f"THEN '{CallStatus.STREAMING.value}' ELSE t.status END"
        ),
    )


def cell_release(*, run_id: int, cell_id: int, token: int) -> None:
    """Give back a cell that sent nothing (e.g. the budget refused its first call)."""
    with transaction.atomic(durable=True):
        run_lock(run_id)
        Cell.objects.held(cell_id=cell_id, token=token).update(
            status=CellStatus.PENDING, claimed_by="", lease_expires_at=None, started_at=None
        )


def leases_renew(*, run_id: int, held: list[tuple[int, int]], lease_seconds: float) -> set[int]:
    """Renew the leases of the cells this driver holds, (cell, token) each, while each is still
    running under that token. Returns the cells renewed: a cell missing from it was settled or
    taken over elsewhere (this worker stalled past its lease), and its work must stop."""
    if not held:
        return set()
    until = timezone.now() + timedelta(seconds=lease_seconds)
    with transaction.atomic(durable=True):
        run_lock(run_id)
        return set(
            bulk_update_sql(
                Cell,
                keys=("id", "claim_token"),
                fields=("lease_expires_at",),
                rows=[(cell_id, token, until) for cell_id, token in held],
                where=f"t.status = '{CellStatus.RUNNING.value}'",
                returning=True,
            )
        )


def run_note(*, run_id: int, event: tuple[str, dict[str, Any]]) -> None:
    """Append one event to the run (under its row lock, the ledger's lock order)."""
    with transaction.atomic(durable=True):
        run_lock(run_id)
        events_append(run_id=run_id, events=[event])


CANCEL_STOP = "cancellation was requested"


def run_dispatch_stop(*, run_id: int) -> str:
    """Why the run sends nothing more ('' while it dispatches): a cancel requested, the first
    stop reason any worker recorded, or its end. Reads only."""
    fields = ("cancel_requested_at", "stop_reason", "status")
    cancel, reason, status = Run.objects.filter(pk=run_id).values_list(*fields).get()
    if cancel is not None:
        return CANCEL_STOP
    return str(reason) or ("the run has ended" if status in TERMINAL_RUN_STATUSES else "")


def run_stop(*, run_id: int, reason: str) -> bool:
    """Stop new dispatch for the whole run (all workers); the first reason is kept. A run
    that ended meanwhile is left as it is."""
    with transaction.atomic(durable=True):
        run_lock(run_id)
        stopped = (
            Run.objects.filter(pk=run_id, stop_reason="")
            .exclude(status__in=TERMINAL_RUN_STATUSES)
            .update(stop_reason=reason)
            == 1
        )
        if stopped:
            events_append(run_id=run_id, events=[("run.dispatch_stopped", {"reason": reason})])
    return stopped
