"""The call machinery of the run driver (DESIGN §4): the database thread, the ledger's group
commit, and one model call from its committed row through the stream to its closed record,
with the stop rules every episode shares.

The event loop only does network work; every database write goes to one dedicated thread
(Django connections are per thread), in the order the ledger needs: the Call row commits
before the request leaves, evidence and outcome commit together afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, TypeVar

import httpx
from django.utils import timezone

from runs.engine import store
from runs.engine.anthropic import wire_request
from runs.engine.call_record import Stream, accounting_fields, evidence_fields, router_fields
from runs.engine.client import EngineClient
from runs.engine.group_commit import UNREACHABLE, DbThread, LedgerBatcher
from runs.engine.guards import output_cap_violation, repeated_tail_block, stream_byte_cap
from runs.engine.leases import ClaimLost, LeaseHolder
from runs.engine.sse import SSEError
from runs.engine.transport import RequestHeld
from runs.ledger.accounting import (
    CALL_USAGE_COLUMNS,
    HTTP_ERROR_BODY_CAP,
    NOT_SENT_ERROR,
    KnownFailure,
    known_failure_unbilled,
    worst_case_call_cost,
)
from runs.ledger.hooks import live_snapshot_keep
from runs.models import CallStatus, CellStatus

log = logging.getLogger(__name__)
T = TypeVar("T")

EXPECTED_HASH_HEADER = "x-sr-bench-expected-config-hash"
MAX_CALLS_HEADER = "x-sr-bench-max-inference-calls"
CALL_ID_HEADER = "x-srbench-call-id"
# Fields of a response worth keeping: routing decisions, receipts, rate limits, request ids.
KEPT_HEADER_PREFIXES = (
    "x-vsr-",
    "x-request-id",
    "x-ratelimit-",
    "retry-after",
    "openai-",
    "x-litellm-attempted-",  # a gateway's own re-sends (runs.ledger.accounting)
    "x-litellm-version",  # a LiteLLM gateway answered (runs.ledger.accounting)
)
REPETITION_MIN_BLOCK = 64
REPETITION_REPEATS = 8
REPETITION_CHECK_BYTES = 8192
# An HTTP error body is read to its end up to HTTP_ERROR_BODY_CAP (runs.ledger.accounting, whose
# rule for a failure's cost reads it); a call whose bytes_received exceeds it was cut short.
# Fault injection for the kill trials (tests/chaos/test_kill_after_calls.py), never set in
# production: a comma-separated list of benchmarks. The worker SIGKILLs itself when it is about
# to finish a cell of one of them — every call of the cell is committed, its grade is not.
FAULT_KILL_BEFORE_FINISH = os.environ.get("SRBENCH_FAULT_KILL_BEFORE_FINISH", "")
BUDGET_STOP = "budget: the next call could exceed max_cost_usd"
# How often the driver looks whether the run's percentile snapshot needs recomputing.
SNAPSHOT_CHECK_S = 5.0


def http_error_text(status: int, phrase: str, body: bytes) -> str:
    """A readable error for a non-200 answer: status, phrase and the provider's message."""
    detail = body[:500].decode("utf-8", "replace")
    try:
        parsed = json.loads(body)
        message = parsed.get("error", {}).get("message") if isinstance(parsed, dict) else None
        if isinstance(message, str):
            detail = message
    except (ValueError, RecursionError):
        pass
    return f"HTTP {status} {phrase}: {detail}".strip()


@dataclass
class Activity:
    """A call's live activity (R10.3). While it streams, nothing is written here per chunk:
    the checkpoint reads the stream's size and its connection's last arrival itself."""

    stage: str
    last: float  # time.time() of the last activity
    bytes: int = 0
    dirty: bool = True
    raw: bytearray | None = None  # the stream's bytes so far, while it streams
    net: Any = None  # its connection (runs.engine.transport: read_at is the last arrival)

    def snapshot(self) -> tuple[float, int] | None:
        """(last activity, bytes) if they changed since the last checkpoint, else None."""
        if self.raw is not None and len(self.raw) != self.bytes:
            self.bytes = len(self.raw)
            read_at = getattr(self.net, "read_at", None)
            now = time.time()
            self.last = now if read_at is None else now - (time.monotonic() - read_at)
            self.dirty = True
        if not self.dirty:
            return None
        self.dirty = False
        return self.last, self.bytes


@dataclass
class CallOutcome:
    call_id: int | None  # None: refused by the budget, nothing sent
    ok: bool = False
    content: str = ""
    truncated: bool = False
    error_code: str = ""
    error: str = ""
    transport_failure: bool = False
    tool_calls: tuple[Any, ...] = ()


def request_headers(call_id: int, target: store.TargetInfo) -> dict[str, str]:
    headers = {CALL_ID_HEADER: str(call_id)}
    if target.api_key:
        headers["authorization"] = f"Bearer {target.api_key}"
    if target.kind == "mom" and target.config_hash:
        headers[EXPECTED_HASH_HEADER] = target.config_hash
        if target.max_inference_calls:
            headers[MAX_CALLS_HEADER] = str(target.max_inference_calls)
    return headers


def transport_error(exc: BaseException, limits: dict[str, Any]) -> tuple[str, str]:
    """The error code and text of a call that ended in an exception (the first match wins)."""
    if isinstance(exc, TimeoutError):
        return "total_timeout", f"no complete answer within {limits['total_timeout_s']}s"
    if isinstance(exc, httpx.ReadTimeout):
        return "idle_timeout", f"no bytes for {limits['idle_timeout_s']}s"
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        # No connection was made: nothing was sent (accounting.NOT_SENT_ERROR).
        return NOT_SENT_ERROR, str(exc) or type(exc).__name__
    if isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError):
        return "stream_disconnected", str(exc) or type(exc).__name__
    if isinstance(exc, httpx.HTTPError):
        return "transport_error", f"{type(exc).__name__}: {exc}"
    return "sse_error", str(exc)  # SSEError


def unread(stream: Stream, exc: Exception, call_id: int) -> None:
    """A call this code could not finish — a bug, or something a server sent that it did not
    foresee — ends failed (`response_unread`), usage and cost unknown, what arrived kept as its
    evidence: never a crashed cell and an unsettled call whose record is lost."""
    log.exception("call %s: srbench could not finish it", call_id)
    stream.error_code = "response_unread"
    stream.error = f"srbench could not finish this call: {type(exc).__name__}: {exc}"[:1000]


# A call's accounting columns when its response could not be read (`Caller._close`).
UNREAD_ACCOUNTING: dict[str, Any] = {
    **dict.fromkeys(CALL_USAGE_COLUMNS),
    "cost_note": "response unread: usage and cost unknown",
}


def chunk_sink(stream: Stream, max_chars: int) -> Callable[[bytes, float], bool]:
    """What is done with each chunk of the body, as it arrives at ``read_at``: True when
    an output guard ended the read (its error set on `stream`).

    Until the first token every read is read at once (TTFT is its arrival). After it, reads
    are kept and read in one batch when a guard could next fire: every
    REPETITION_CHECK_BYTES, past the character cap (a character costs at least a byte, so
    fewer bytes than the cap cannot breach it) or the byte cap, and at the stream's end
    (`Stream.catch_up`) — the same checks on the same text as reading each read at once, for
    a fraction of the Python steps a read (issue 38 item 2; docs/decisions.md)."""
    raw, acc, decoder = stream.raw, stream.acc, stream.decoder
    byte_cap = stream_byte_cap(max_chars)  # checked per chunk; the message only on a breach
    next_repetition_check = REPETITION_CHECK_BYTES
    batch_until = min(next_repetition_check - 1, max_chars, byte_cap)

    def on_chunk(chunk: bytes, read_at: float) -> bool:
        nonlocal next_repetition_check, batch_until
        raw.extend(chunk)
        size = len(raw)
        if size <= batch_until and acc.first_token_at is not None:
            if stream.unread_from is None:
                stream.unread_from = size - len(chunk)
            return False
        acc.read_at = read_at
        if stream.unread_from is None:
            acc.feed_events(decoder.feed_plain(chunk))
        else:
            stream.catch_up()
        if acc.content_chars + acc.reasoning_chars > max_chars or size > byte_cap:
            violation = output_cap_violation(
                content_chars=acc.content_chars,
                reasoning_chars=acc.reasoning_chars,
                received_bytes=size,
                max_output_chars=max_chars,
            )
            if violation:
                stream.error_code, stream.error = "output_cap", violation
                return True
        if size >= next_repetition_check:
            next_repetition_check = size + REPETITION_CHECK_BYTES
            batch_until = min(next_repetition_check - 1, max_chars, byte_cap)
            if repeated_tail_block(
                acc.content, min_block=REPETITION_MIN_BLOCK, repeats=REPETITION_REPEATS
            ):
                stream.error_code, stream.error = "repetition", "the output repeats itself"
                return True
        return False

    return on_chunk


@dataclass
class Caller(LeaseHolder):
    """One run's calls on this worker: open, stream, close, and the stop rules of a case."""

    ctx: store.RunContext
    worker: str
    db: DbThread
    client: EngineClient
    limits: dict[str, Any]
    max_cost: Decimal | None
    ledger: LedgerBatcher
    activity: dict[int, Activity] = field(default_factory=dict)
    reserved: dict[int, Decimal | None] = field(default_factory=dict)
    # By cell: the queued closes of its calls, not yet known to be written. The cell's next
    # call waits for them; its finish names them (LedgerBatcher) and does not.
    closing: dict[int, list[asyncio.Future[Any]]] = field(default_factory=dict)
    sandbox_slots: asyncio.Semaphore = field(
        default_factory=lambda: asyncio.Semaphore(max(1, os.cpu_count() or 1))
    )
    stopping: str = ""
    # The cells this driver holds, by id: (fencing token, the task working on it). The
    # heartbeat renews their leases by token; a cell it cannot renew is abandoned.
    held: dict[int, tuple[int, asyncio.Task[Any] | None]] = field(default_factory=dict)
    lost: set[int] = field(default_factory=set)
    lease_seconds: float = 60.0
    # time.monotonic() until which every held lease is known to be unexpired: the start of the
    # last successful renewal plus a lease. Past it (the worker stalled), a request leaves only
    # after a renewal found its cell still held.
    lease_valid_until: float = float("inf")
    # A second database thread for reads kept for pages (hooks.live_snapshot_keep): never
    # the ledger's, whose writes must not wait behind them. None: nothing kept.
    side_db: DbThread | None = None
    keeping: asyncio.Task[None] | None = None

    # --- how a cell ends --------------------------------------------------------------------

    async def finish(
        self,
        cell: store.ClaimedCell,
        status: str,
        correct: bool | None,
        grade: dict[str, Any] | None,
        answer: str,
        error: str,
    ) -> None:
        closes = tuple(self.closing.pop(cell.cell_id, ()))
        if FAULT_KILL_BEFORE_FINISH and cell.benchmark in FAULT_KILL_BEFORE_FINISH.split(","):
            await asyncio.gather(*closes, return_exceptions=True)
            os.kill(os.getpid(), signal.SIGKILL)
        op = store.FinishCell(cell.cell_id, cell.token, status, correct, grade, answer, error)
        self.held.pop(cell.cell_id, None)  # no lease to renew once its finish is queued
        finished = self.ledger.enqueue(op, after=closes)
        self.cell_ending()
        if not await asyncio.shield(finished):
            self.claim_lost(cell.cell_id, "finishing it")

    def cell_ending(self) -> None:
        """The current cell's finish is queued: its slot may be claimed again (the claim
        is written after the finish; the database, not this count, bounds the concurrency)."""

    async def closes_written(self, cell_id: int) -> None:
        """Until the cell's earlier calls are closed in the ledger (a failed close raises)."""
        for future in self.closing.pop(cell_id, ()):
            await asyncio.shield(future)

    async def complete(
        self,
        cell: store.ClaimedCell,
        correct: bool | None,
        grade: dict[str, Any] | None,
        answer: str = "",
    ) -> None:
        """The cell was graded (`correct` None: an outcome recorded without a verdict)."""
        await self.finish(cell, CellStatus.COMPLETED, correct, grade, answer, "")

    async def fail(
        self,
        cell: store.ClaimedCell,
        error: str,
        answer: str = "",
        grade: dict[str, Any] | None = None,
    ) -> None:
        """The cell could not be graded: unknown, never wrong."""
        await self.finish(cell, CellStatus.FAILED, None, grade, answer, error)

    async def stop(self, reason: str) -> None:
        if not self.stopping:
            self.stopping = reason
            await self.db(store.run_stop, run_id=self.ctx.run_id, reason=reason)

    async def sandboxed(self, fn: Callable[..., T], /, **kwargs: Any) -> T:
        """Run a grader that executes code in the sandbox on a thread, a few at a time: it is
        CPU work and subprocesses, which must not stall the streams on the event loop."""
        async with self.sandbox_slots:
            return await asyncio.to_thread(lambda: fn(**kwargs))

    # --- one call of a case -----------------------------------------------------------------

    async def turn(
        self,
        cell: store.ClaimedCell,
        *,
        role: str,
        sequence: int,
        target: store.TargetInfo,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        calls_made: int,
        answer: str = "",
    ) -> CallOutcome | None:
        """One call of a case, with the one set of stop rules: the per-case call cap, the
        budget (a refused first call gives the cell back unsent), a failed call (fail closed
        by default). On a stop it finishes the cell itself (keeping `answer`) and returns
        None."""
        if calls_made >= self.limits["max_calls_per_case"]:
            cap = self.limits["max_calls_per_case"]
            await self.fail(cell, f"max_calls_per_case ({cap}) reached", answer)
            return None
        # A stopped or cancelled run sends nothing more: a cell's first call is known from the
        # heartbeat's reading (`checkpoints`); an episode's next call asks the ledger first.
        if self.stopping or (calls_made > 0 and await self.dispatch_stopped()):
            await self.end_unsent(cell, calls_made, f"{role} call {sequence + 1}", answer)
            return None
        outcome = await self.call(
            cell, role=role, sequence=sequence, target=target, messages=messages, tools=tools
        )
        # A stop is decided before the cell's end is queued: that end would otherwise queue a
        # claim of the freed slot in its own transaction, and a cell claimed there would send.
        if outcome.call_id is None:
            await self.stop(BUDGET_STOP)
            if calls_made == 0:
                await self.release(cell)
            else:
                await self.fail(cell, BUDGET_STOP, answer)
            return None
        if not outcome.ok:
            await self.stop_if_fail_closed(outcome)
            await self.fail(
                cell, f"{role} call {sequence + 1}: {outcome.error_code}: {outcome.error}", answer
            )
            return None
        return outcome

    async def dispatch_stopped(self) -> str:
        """Why the run sends nothing more, as the ledger says now ('' while it dispatches);
        remembered, so that no later call of this driver leaves either."""
        if not self.stopping:
            self.stopping = await self.db(store.run_dispatch_stop, run_id=self.ctx.run_id)
        return self.stopping

    async def end_unsent(
        self, cell: store.ClaimedCell, calls_made: int, what: str, answer: str
    ) -> None:
        """The run stopped before this cell's next call left: a cell that sent nothing goes
        back to pending (recoverable as undispatched); an episode under way ends, nothing more
        sent for it, its calls kept — cancelled when the user cancelled (no outcome), failed
        when the run stopped (fail closed, budget: recoverable as a new attempt)."""
        if calls_made == 0:
            await self.release(cell)
            return
        error = f"the run stopped before its {what} ({self.stopping}); nothing more was sent"
        cancelled = self.stopping == store.CANCEL_STOP
        status = CellStatus.CANCELLED if cancelled else CellStatus.FAILED
        await self.finish(cell, status, None, None, answer, error)

    async def release(self, cell: store.ClaimedCell) -> None:
        """Give back a cell that sent nothing: pending again, recoverable as undispatched."""
        self.held.pop(cell.cell_id, None)
        await self.db(
            store.cell_release, run_id=self.ctx.run_id, cell_id=cell.cell_id, token=cell.token
        )

    async def stop_if_fail_closed(self, outcome: CallOutcome) -> None:
        if outcome.transport_failure and self.ctx.manifest["failure_policy"] == "stop":
            await self.stop(f"first transport failure (fail closed): {outcome.error_code}")

    def request_body(
        self,
        target: store.TargetInfo,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
    ) -> dict:
        body: dict[str, Any] = {"model": target.model, "messages": messages}
        if tools:
            body["tools"] = tools
        body.update(self.ctx.manifest["sampling"])
        body["max_tokens"] = self.limits["max_output_tokens"]
        # A registered target's fixed parameters override the run's defaults (R8.6) ...
        body.update(target.fixed_params)
        # ... but the transport contract is ours: always streamed, always with usage.
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
        return body

    def reservation(self, target: store.TargetInfo, body: dict[str, Any]) -> Decimal | None:
        """Worst-case cost of a call: every request byte as an input token (tokens never
        outnumber bytes for byte-level BPE), max_tokens of output, at the dearest priced model
        the target could serve, times the router's internal call cap."""
        if self.max_cost is None:
            return None
        return worst_case_call_cost(
            target.prices,
            kind=target.kind,
            model=target.model,
            messages=body["messages"],
            max_tokens=int(body.get("max_tokens") or self.limits["max_output_tokens"]),
            max_inference_calls=target.max_inference_calls,
        )

    async def call(
        self,
        cell: store.ClaimedCell,
        *,
        role: str,
        sequence: int,
        target: store.TargetInfo,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
    ) -> CallOutcome:
        body = self.request_body(target, messages, tools)
        reservation = self.reservation(target, body)
        # One call of a cell at a time in the ledger too: the one before is closed first.
        await self.closes_written(cell.cell_id)
        call_id = await self.ledger.submit(
            store.OpenCall(
                cell.cell_id,
                cell.token,
                role,
                sequence,
                target.target_id,
                body,
                reservation,
                self.worker,
            )
        )
        if call_id == store.FENCED:
            # The claim is gone: nothing was written and the request never leaves.
            self.claim_lost(cell.cell_id, f"opening its {role} call {sequence + 1}")
            raise ClaimLost(cell.cell_id)
        if call_id is None:
            return CallOutcome(call_id=None)
        self.reserved[call_id] = reservation
        # The row is committed: from here on the request may leave, and never a second time.
        self.activity[call_id] = Activity(stage="waiting", last=time.time())
        try:
            while True:
                await self.lease_check(cell)
                try:
                    return await self._stream(call_id, cell.cell_id, target, body)
                except RequestHeld:
                    # Not a byte left: the leases ran out of their known life between the
                    # check above and the socket (a freeze); renew (or abandon) and send then.
                    continue
        finally:
            self.activity.pop(call_id, None)

    async def _stream(
        self, call_id: int, cell_id: int, target: store.TargetInfo, body: dict
    ) -> CallOutcome:
        # The chat request as the target's API says it (runs/engine/anthropic.py).
        url, wire_body, headers, reader = wire_request(
            target.api, target.base_url, body, request_headers(call_id, target)
        )
        started = time.monotonic()
        stream = Stream(started, timezone.now(), reader(started_at=started))
        activity = self.activity[call_id]
        try:
            async with asyncio.timeout(self.limits["total_timeout_s"]):
                resp = await self.client.call_send(url, wire_body, headers, self.send_gate(cell_id))
                try:
                    stream.http_status = resp.status_code
                    stream.kept = {
                        k: v
                        for k, v in resp.headers.items()
                        if k.lower().startswith(KEPT_HEADER_PREFIXES)
                    }
                    activity.stage, activity.last, activity.dirty = "streaming", time.time(), True
                    if resp.status_code != 200:
                        await self._read_error(resp, stream)
                    else:
                        await self._read_sse(resp, stream, activity)
                finally:
                    await resp.aclose()
        except (TimeoutError, httpx.HTTPError, SSEError) as exc:
            stream.error_code, stream.error = transport_error(exc, self.limits)
        except RequestHeld:
            raise  # not a byte left: `call` sends it once the leases are renewed
        except Exception as exc:  # noqa: BLE001 - a request that left always gets its record
            unread(stream, exc, call_id)
        except asyncio.CancelledError:
            # A case timeout or shutdown cancelled us mid-stream: record what we have (the
            # write is queued, not awaited), then let the cancellation go on.
            stream.error_code = "cancelled"
            stream.error = "the case timed out or the worker stopped"
            self._close(call_id, cell_id, target, stream)
            raise
        return self._close(call_id, cell_id, target, stream)

    @staticmethod
    async def _read_error(resp: httpx.Response, stream: Stream) -> None:
        raw = stream.raw
        async for chunk in resp.aiter_bytes():
            raw += chunk
            if len(raw) > HTTP_ERROR_BODY_CAP:
                break
        stream.error_code = f"http_{resp.status_code}"
        stream.error = http_error_text(resp.status_code, resp.reason_phrase, bytes(raw))

    async def _read_sse(self, resp: httpx.Response, stream: Stream, activity: Activity) -> None:
        """The per-chunk path: evidence, live activity, and the output caps checked as the
        bytes arrive (a breach ends the read with its error set on `stream`)."""
        # The engine's transport stamps each read as it comes off the socket: TTFT is that
        # stamp, not the moment this loop got to the bytes (issue 25).
        net = resp.extensions.get("network_stream")
        if getattr(net, "sent_at", None) is not None:
            # ... and it starts when the request left, not before a connection was opened.
            stream.acc.started_at = net.sent_at
        activity.raw, activity.net = stream.raw, net
        on_chunk = chunk_sink(stream, self.limits["max_output_chars"])
        # Without a content encoding the raw body is the SSE itself: skip httpx's decoder
        # layers on the per-chunk path.
        encoded = resp.headers.get("content-encoding", "identity") != "identity"
        if not encoded and getattr(net, "framing", None) == -1 and hasattr(net, "pump"):
            # The engine's transport hands each read's bytes to the sink as they arrive, from
            # its protocol callback: no task wake-up per chunk.
            await net.pump(on_chunk)
        else:
            stamped = hasattr(net, "read_at")
            async for chunk in resp.aiter_bytes() if encoded else resp.aiter_raw():
                if on_chunk(chunk, net.read_at if stamped else time.monotonic()):
                    break
        if not stream.error_code:  # not stopped by a guard
            stream.catch_up()
            stream.acc.feed_events(stream.decoder.close())

    def _close(
        self, call_id: int, cell_id: int, target: store.TargetInfo, stream: Stream
    ) -> CallOutcome:
        """Queue the call's record (outcome and evidence): the cell's next call or finish
        waits for it or names it (`closing`), nobody else needs it written first."""
        try:
            stream.catch_up()  # a read that ended early (timeout, disconnect) kept some unread
        except SSEError as exc:
            if not stream.error_code:
                stream.error_code, stream.error = transport_error(exc, self.limits)
        result = stream.acc.result()
        if not stream.error_code and not result.complete:
            stream.error_code = "incomplete_stream"
            stream.error = result.incomplete_reason or result.error or "the stream did not finish"
        fields = evidence_fields(stream, result)
        lower = {k.lower(): v for k, v in stream.kept.items()}
        try:
            if target.kind == "mom":
                router_fields(target, lower, fields, stream)
            fields.update(accounting_fields(target, lower, stream, result))
        except Exception as exc:  # noqa: BLE001 - the call's record must be written whatever
            fields.update(UNREAD_ACCOUNTING)
            unread(stream, exc, call_id)
        error_code, error = stream.error_code, stream.error
        ok = not error_code
        fields["status"] = (
            CallStatus.COMPLETED
            if ok
            else (CallStatus.CANCELLED if error_code == "cancelled" else CallStatus.FAILED)
        )
        fields["error_code"], fields["error"] = error_code, error
        failure = None if ok else {"error_code": error_code, "error": error[:500]}
        unbilled = not ok and known_failure_unbilled(
            KnownFailure(
                fields["status"],
                fields["http_status"],
                error_code,
                fields["bytes_received"],
                fields.get("inference_call_count"),
            ),
            target.errors_billed,
        )
        close = store.CloseCall(
            call_id, fields, bytes(stream.raw), self.reserved.pop(call_id, None), failure, unbilled
        )
        self.closing.setdefault(cell_id, []).append(self.ledger.enqueue(close))
        return CallOutcome(
            call_id=call_id,
            ok=ok,
            content=result.content,
            truncated=result.truncated,
            error_code=error_code,
            error=error,
            transport_failure=not ok and error_code not in ("cancelled",),
            tool_calls=result.tool_calls,
        )

    # --- the loop's heartbeat ---------------------------------------------------------------

    async def checkpoints(self, lease_seconds: float) -> None:
        """At most once a second: live activity of in-flight calls; every third of a lease:
        renew this worker's cell leases (a worker that stops renewing is presumed dead);
        every few seconds: the run's percentile snapshot kept young for its Results page."""
        renew_every = max(lease_seconds / 3, 0.5)
        next_renew = time.monotonic() + renew_every
        next_keep = time.monotonic() + SNAPSHOT_CHECK_S
        next_activity = time.monotonic() + 1.0
        while True:
            # Woken on time for the renewal, not at the next whole second after it: a renewal a
            # tick late would leave a stalled loop or a queued write less of the lease as slack.
            await asyncio.sleep(min(1.0, max(next_renew - time.monotonic(), 0.05)))
            if self.side_db is not None and time.monotonic() >= next_keep:
                next_keep = time.monotonic() + SNAPSHOT_CHECK_S
                if self.keeping is None or self.keeping.done():
                    self.keeping = asyncio.create_task(self._snapshot_keep(self.side_db))
            dirty = []
            if time.monotonic() >= next_activity:
                next_activity = time.monotonic() + 1.0
                if not self.stopping:  # a cancel, or another worker's stop: no first call leaves
                    with contextlib.suppress(*UNREACHABLE):
                        await self.dispatch_stopped()
                dirty = [
                    (pk, a.stage, datetime.fromtimestamp(snap[0], tz=UTC), snap[1])
                    for pk, a in list(self.activity.items())
                    if (snap := a.snapshot()) is not None
                ]
            if time.monotonic() >= next_renew:
                # First after a stall: a cell settled elsewhere meanwhile is abandoned before
                # its activity is written or its next call is opened.
                next_renew = time.monotonic() + renew_every
                await self.leases_renew(lease_seconds)
                next_renew = max(next_renew, time.monotonic())
            if dirty:
                with contextlib.suppress(*UNREACHABLE):  # live activity only; the next one tells
                    await self.db(store.calls_checkpoint, run_id=self.ctx.run_id, activity=dirty)

    async def _snapshot_keep(self, side_db: DbThread) -> None:
        try:
            await side_db(live_snapshot_keep, run_id=self.ctx.run_id)
        except Exception:  # a page's figure, never the run's concern
            log.exception("run %s: keeping the live snapshot failed", self.ctx.run_id)
