"""Know a server before paying for a run: a target's preflight (issue 39).

A handful of tiny model calls, quoted first at their worst case (`runs.ledger.accounting
.worst_case_call_cost`, the one home of that rule) and sent only when the caller confirms that
exact quote:

1. ``stream-usage``: a stream with ``stream_options.include_usage`` and ``max_tokens`` 1 — does
   the stream carry usage, with cached-token fields? which model is served, and is it priced?
   what ``finish_reason`` does a ``max_tokens`` cut get?
2. ``plain-usage``: the same request not streamed — does a plain answer carry usage (the
   evidence that could make a stream's unknown usage known)?
3. ``concurrency-2`` then, only if both stayed whole, ``concurrency-4``: one stream, and once its
   first event arrived the others at once — does a new request cut the stream in progress, and
   up to what concurrency do streams stay whole?
4. ``context-probe``, only when neither ``/props`` nor ``/models`` says the context: one plain
   request of a bounded prompt and one output token — the refusal states the context, or the
   answer shows a prompt of that size fits.

Each call is a `PreflightCall` row committed (status ``sent``) before it leaves and never sent
again; its usage and cost are kept (unknown stays null). Each finding says what it will do to a
run; the facts are kept on the `TargetPreflight` for the plan review (`runs.preflight.plan`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from runs.ledger.accounting import (
    KnownFailure,
    PriceError,
    call_accounting,
    errors_not_billed_words,
    known_failure_unbilled,
    sum_known,
    worst_case_call_cost,
)
from runs.ledger.selectors import target_api_key
from runs.ledger.usage import HEADER_CALL_COUNT, header_count
from runs.models import CallStatus, Target
from runs.models.preflight import (
    PreflightCall,
    PreflightCallStatus,
    PreflightStatus,
    TargetPreflight,
)
from runs.preflight.findings import findings_build
from runs.preflight.wire import WireResult, advertised_context, send_once
from srbench.money import money_text

PROMPT = "Count from 1 to 200, the numbers separated by spaces, and write nothing else."
CUT_MAX_TOKENS = 1
CONCURRENCY_MAX_TOKENS = 48
CONCURRENCY_LEVELS = (2, 4)
DEFAULT_CONTEXT_PROBE_TOKENS = 8192
MAX_CONTEXT_PROBE_TOKENS = 131_072
FIRST_EVENT_WAIT_S = 60.0
# A preflight still "running" this long after it began was interrupted (a crashed process):
# it no longer blocks the next one.
STALE_AFTER = timedelta(minutes=15)
CALL_ID_HEADER = "x-srbench-call-id"
EXPECTED_HASH_HEADER = "x-sr-bench-expected-config-hash"
MAX_CALLS_HEADER = "x-sr-bench-max-inference-calls"


class PreflightRefused(Exception):
    """Nothing was sent: ``code`` names why (cost not confirmed, one already running)."""

    def __init__(self, code: str, message: str, quote: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.quote = quote


@dataclass(frozen=True)
class PlannedCall:
    purpose: str
    stream: bool
    max_tokens: int
    messages: tuple[dict[str, str], ...]


def probe_messages(tokens: int) -> tuple[dict[str, str], ...]:
    """A prompt of about ``tokens`` tokens: one short word per token in every tokenizer."""
    return ({"role": "user", "content": "a " * tokens + "\nReply OK."},)


def planned_calls(context_probe_tokens: int = DEFAULT_CONTEXT_PROBE_TOKENS) -> list[PlannedCall]:
    """Every call a preflight may send, in order: the quote covers all of them, although the
    second concurrency level and the context probe are sent only when needed."""
    short = ({"role": "user", "content": PROMPT},)
    calls = [
        PlannedCall("stream-usage", True, CUT_MAX_TOKENS, short),
        PlannedCall("plain-usage", False, CUT_MAX_TOKENS, short),
    ]
    for level in CONCURRENCY_LEVELS:
        calls += [
            PlannedCall(f"concurrency-{level}", True, CONCURRENCY_MAX_TOKENS, short)
            for _ in range(level)
        ]
    calls.append(PlannedCall("context-probe", False, 1, probe_messages(context_probe_tokens)))
    return calls


def request_body(target: Target, call: PlannedCall) -> dict[str, Any]:
    """The target's fixed parameters, then the preflight's own fields (they always win)."""
    body: dict[str, Any] = {k: v for k, v in target.fixed_params.items() if k != "max_tokens"}
    body.update(model=target.model, messages=list(call.messages), max_tokens=call.max_tokens)
    body["stream"] = call.stream
    if call.stream:
        body["stream_options"] = {"include_usage": True}
    else:
        body.pop("stream_options", None)
    return body


def _call_worst_case(target: Target, call: PlannedCall) -> Decimal | None:
    return worst_case_call_cost(
        target.prices,
        kind=target.kind,
        model=target.model,
        messages=list(call.messages),
        max_tokens=call.max_tokens,
        max_inference_calls=target.max_inference_calls,
    )


def preflight_quote(
    *, target: Target, context_probe_tokens: int = DEFAULT_CONTEXT_PROBE_TOKENS
) -> dict[str, Any]:
    """What a preflight may send and its worst case, before anything is sent. The worst case
    is None (unknown) when the target has no price for a model it may serve."""
    calls = planned_calls(context_probe_tokens)
    costs = [_call_worst_case(target, c) for c in calls]
    total = sum_known(costs).total
    return {
        "target": target.slug,
        "planned_calls": len(calls),
        "context_probe_tokens": context_probe_tokens,
        "calls": [
            {
                "purpose": c.purpose,
                "stream": c.stream,
                "max_tokens": c.max_tokens,
                "worst_case_usd": money_text(cost),
            }
            for c, cost in zip(calls, costs, strict=True)
        ],
        "worst_case_usd": money_text(total),
        "words": _quote_words(len(calls), total),
    }


def _quote_words(calls: int, total: Decimal | None) -> str:
    bound = "unknown (the target has no price for a model it may serve)"
    if total is not None:
        bound = f"{money_text(total)} USD"
    return (
        f"up to {calls} tiny calls (most send 1 output token; the concurrency probe 48; the "
        f"context probe only when the server does not say its context); worst case {bound}"
    )


def target_preflight(
    *,
    target: Target,
    confirm_worst_case_usd: str | None,
    user: Any = None,
    context_probe_tokens: int = DEFAULT_CONTEXT_PROBE_TOKENS,
    idempotency_key: str = "",
) -> TargetPreflight:
    """Run a preflight of ``target`` once its quote is confirmed: ``confirm_worst_case_usd``
    must equal the quote's ``worst_case_usd`` (None confirms an unknown worst case). A key
    already used for this target returns that preflight and sends nothing."""
    quote = preflight_quote(target=target, context_probe_tokens=context_probe_tokens)
    if idempotency_key:
        earlier = TargetPreflight.objects.filter(
            target=target, idempotency_key=idempotency_key
        ).first()
        if earlier is not None:
            return earlier
    if confirm_worst_case_usd != quote["worst_case_usd"]:
        raise PreflightRefused(
            "cost_not_confirmed",
            f"confirm the preflight's worst case ({quote['worst_case_usd'] or 'unknown'}) "
            "to send its calls; nothing was sent",
            quote,
        )
    TargetPreflight.objects.filter(
        target=target, status=PreflightStatus.RUNNING, created_at__lt=timezone.now() - STALE_AFTER
    ).update(status=PreflightStatus.FAILED, error="interrupted", finished_at=timezone.now())
    try:
        with transaction.atomic():
            preflight = TargetPreflight.objects.create(
                target=target,
                created_by=user if getattr(user, "is_authenticated", False) else None,
                idempotency_key=idempotency_key,
                base_url=target.base_url,
                model=target.model,
                planned_calls=quote["planned_calls"],
                worst_case_usd=Decimal(quote["worst_case_usd"])
                if quote["worst_case_usd"] is not None
                else None,
            )
    except IntegrityError as exc:
        raise PreflightRefused(
            "preflight_running",
            f"a preflight of {target.slug} is running; nothing was sent",
            quote,
        ) from exc
    _Session(preflight, target, context_probe_tokens).run()
    return preflight


class _Session:
    """One preflight's sending: numbered rows, one request each, then the findings."""

    def __init__(self, preflight: TargetPreflight, target: Target, probe_tokens: int) -> None:
        self.preflight = preflight
        self.target = target
        self.plan = {c.purpose: c for c in planned_calls(probe_tokens)}
        self.url = target.base_url.rstrip("/") + "/chat/completions"
        self.headers = {"accept": "text/event-stream, application/json"}
        if key := target_api_key(target=target):
            self.headers["authorization"] = f"Bearer {key}"
        if target.kind == Target.Kind.MOM and target.config_hash:
            self.headers[EXPECTED_HASH_HEADER] = target.config_hash
        if target.kind == Target.Kind.MOM and target.max_inference_calls:
            self.headers[MAX_CALLS_HEADER] = str(target.max_inference_calls)
        self.sequence = 0
        self.rows: list[PreflightCall] = []

    def run(self) -> None:
        preflight = self.preflight
        try:
            usage = self.send([self.plan["stream-usage"]])[0]
            plain = self.send([self.plan["plain-usage"]])[0]
            levels = self.concurrency()
            context = self.context()
            facts, findings = findings_build(
                target=self.target, usage=usage, plain=plain, levels=levels, context=context
            )
            for name, value in facts.items():
                setattr(preflight, name, value)
            preflight.findings = findings
            preflight.status = PreflightStatus.COMPLETED
        except Exception as exc:  # recorded, never re-sent: the rows say what left
            preflight.status = PreflightStatus.FAILED
            preflight.error = f"{type(exc).__name__}: {exc}"[:1000]
        costs = [row.effective_cost_usd for row in self.rows]
        spent = sum_known(costs)
        preflight.cost_usd, preflight.known_cost_usd = spent.total, spent.known_sum
        preflight.finished_at = timezone.now()
        preflight.save()

    def send(self, calls: list[PlannedCall], *, staggered: bool = False) -> list[WireResult]:
        """Commit a row per call, then send each once. ``staggered``: the first alone, the
        others together once its first event arrived (the concurrency probe)."""
        rows = [self._row(call) for call in calls]
        results = [WireResult() for _ in calls]
        threads = [
            threading.Thread(
                target=send_once,
                args=(self.url, self._headers(row), row.request, result),
                daemon=True,
            )
            for row, result in zip(rows, results, strict=True)
        ]
        threads[0].start()
        if staggered and len(threads) > 1:
            results[0].first_event.wait(FIRST_EVENT_WAIT_S)
            results[0].ended_before_next = results[0].ended.is_set()
        for thread in threads[1:]:
            thread.start()
        for thread in threads:
            thread.join()
        for row, result in zip(rows, results, strict=True):
            self._settle(row, result)
        return results

    def _headers(self, row: PreflightCall) -> dict[str, str]:
        return {**self.headers, CALL_ID_HEADER: f"preflight-{self.preflight.pk}-{row.sequence}"}

    def _row(self, call: PlannedCall) -> PreflightCall:
        self.sequence += 1
        row = PreflightCall.objects.create(
            preflight=self.preflight,
            sequence=self.sequence,
            purpose=call.purpose,
            stream=call.stream,
            request=request_body(self.target, call),
            worst_case_usd=_call_worst_case(self.target, call),
            sent_at=timezone.now(),
        )
        self.rows.append(row)
        return row

    def _settle(self, row: PreflightCall, result: WireResult) -> None:
        row.http_status = result.http_status
        row.served_model = result.served_model[:200]
        row.finish_reason = result.finish_reason[:32]
        row.saw_done = result.saw_done if row.stream else None
        row.usage_raw = result.usage
        row.content = result.content
        row.error = result.error or result.incomplete_reason
        row.status = PreflightCallStatus.COMPLETED if result.whole else PreflightCallStatus.FAILED
        try:
            accounting = call_accounting(
                kind=self.target.kind,
                usage=result.usage,
                served_model=result.served_model or None,
                headers=result.headers,
                price_table=self.target.prices,
            )
        except PriceError as exc:
            row.cost_note = f"price error: {exc}"[:200]
        else:
            if accounting.buckets is not None:
                b = accounting.buckets
                row.input_tokens, row.output_tokens = b.input, b.output
                # A cache bucket the server did not report is unknown, not 0 (as on run calls).
                row.cached_input_tokens = b.cached_input if b.cached_reported else None
                row.cache_write_tokens = b.cache_write if b.cache_write_reported else None
            row.cost_usd = accounting.cost
            row.cost_note = (accounting.note or "")[:200]
        if row.cost_usd is None and row.http_status not in (None, 200):
            row.cost_note = row.cost_note or f"HTTP {row.http_status} before any stream byte"
        # The one rule of an unbilled error answer, read off the wire now: a `PreflightCall` has
        # no error_code, bytes_received nor inference_call_count column (the preflight's ledger
        # predates the rule), so the decision is stored (`error_unbilled`); the row keeps its
        # null cost and says the assumption, the total and every page count the 0
        # (`PreflightCall.effective_cost_usd`).
        failure = KnownFailure(
            CallStatus.FAILED if row.status == PreflightCallStatus.FAILED else CallStatus.COMPLETED,
            row.http_status,
            result.error_code,
            result.bytes_received,
            header_count(result.headers.get(HEADER_CALL_COUNT, "")),
        )
        if row.cost_usd is None and known_failure_unbilled(failure, self.target.errors_billed):
            row.error_unbilled = True
            words = errors_not_billed_words([self.target.slug])
            row.cost_note = f"{row.cost_note}; counted as $0 ({words})"[:200]
        row.finished_at = timezone.now()
        row.save()

    def concurrency(self) -> dict[int, list[WireResult] | None]:
        """Each level's streams, the first alone and the rest once it began; a level after
        one that cut a stream is not tried (None)."""
        levels: dict[int, list[WireResult] | None] = {}
        cut = False
        for level in CONCURRENCY_LEVELS:
            if cut:
                levels[level] = None
                continue
            calls = [self.plan[f"concurrency-{level}"]] * level
            results = self.send(calls, staggered=True)
            levels[level] = results
            cut = not all(r.whole for r in results)
        return levels

    def context(self) -> dict[str, Any]:
        """The context the server says (no model call), else what the bounded probe showed."""
        tokens, source = advertised_context(self.target.base_url, self.target.model, self.headers)
        if tokens:
            return {"tokens": tokens, "source": source, "probe": None}
        probe = self.send([self.plan["context-probe"]])[0]
        return {"tokens": 0, "source": "", "probe": probe, "probe_row": self.rows[-1]}
