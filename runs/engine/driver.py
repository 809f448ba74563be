"""The run driver: one asyncio loop per task holding many concurrent streams (DESIGN §4).

The event loop only does network work; every database write goes to one dedicated thread
(Django connections are per thread), in the order the ledger needs: the Call row commits
before the request leaves, evidence and outcome commit together afterwards.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import logging
import os
import signal
import socket
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, TypeVar

import httpx
from django.conf import settings
from django.db import connection
from django.utils import timezone

from datasets.benchmarks import get_adapter
from datasets.grading import MalformedVerdict
from runs.accounting import call_accounting, worst_case_call_cost
from runs.engine import scoring, store
from runs.engine.finish import run_finish_if_done
from runs.engine.sse import (
    ChatStreamAccumulator,
    SSEDecoder,
    SSEError,
    output_cap_violation,
    repeated_tail_block,
    stream_byte_cap,
)
from runs.engine.transport import engine_client
from srbench.money import money_stored

log = logging.getLogger(__name__)
T = TypeVar("T")

EXPECTED_HASH_HEADER = "x-sr-bench-expected-config-hash"
MAX_CALLS_HEADER = "x-sr-bench-max-inference-calls"
CALL_ID_HEADER = "x-srbench-call-id"
# Fields of a response worth keeping: routing decisions, receipts, rate limits, request ids.
KEPT_HEADER_PREFIXES = ("x-vsr-", "x-request-id", "x-ratelimit-", "retry-after", "openai-")
REPETITION_MIN_BLOCK = 64
REPETITION_REPEATS = 8
REPETITION_CHECK_BYTES = 8192
# An HTTP error body is read to its end up to this size; a call whose bytes_received exceeds it
# was cut short (recovery then treats its outcome as not fully known).
HTTP_ERROR_BODY_CAP = 65536
# Agent episodes (benchmarks.md §8–9): step cap per case and per terminal command time.
AGENT_MAX_STEPS = 30
TERMINAL_COMMAND_S = 30
# Fault injection for the kill trials (tests/chaos/test_kill_after_calls.py), never set in
# production: a comma-separated list of benchmarks. The worker SIGKILLs itself when it is about
# to finish a cell of one of them — every call of the cell is committed, its grade is not.
FAULT_KILL_BEFORE_FINISH = os.environ.get("SRBENCH_FAULT_KILL_BEFORE_FINISH", "")


def http_error_text(status: int, phrase: str, body: bytes) -> str:
    """A readable error for a non-200 answer: status, phrase and the provider's message."""
    detail = body[:500].decode("utf-8", "replace")
    try:
        parsed = json.loads(body)
        message = parsed.get("error", {}).get("message") if isinstance(parsed, dict) else None
        if isinstance(message, str):
            detail = message
    except ValueError:
        pass
    return f"HTTP {status} {phrase}: {detail}".strip()


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class DbThread:
    """All ORM work of one driver on one thread, so it keeps one connection and never blocks
    the event loop."""

    def __init__(self) -> None:
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="srbench-db")

    async def __call__(self, fn: Callable[..., T], /, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.pool, lambda: fn(**kwargs))

    def close(self) -> None:
        # `connection` is looked up in the pool's thread: `connection.close` written here would
        # bind the caller's connection and fail Django's thread check, leaving this one open.
        self.pool.submit(lambda: connection.close()).result()
        self.pool.shutdown(wait=True)


class LedgerBatcher:
    """Group commit: ledger writes submitted while a transaction is in flight are applied
    together in the next one. Nobody is told "your call is open" before its row committed."""

    def __init__(self, db: DbThread, run_id: int, max_cost: Decimal | None) -> None:
        self.db = db
        self.run_id = run_id
        self.max_cost = max_cost
        self.pending: list[tuple[store.LedgerOp, asyncio.Future[Any]]] = []
        self.wakeup = asyncio.Event()
        self.busy = False
        self.task = asyncio.create_task(self._loop())

    async def submit(self, op: store.LedgerOp) -> Any:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.pending.append((op, future))
        self.wakeup.set()
        # Shielded: a cancelled caller (case timeout) must not lose a write already queued.
        return await asyncio.shield(future)

    async def _apply(self, ops: list[store.LedgerOp]) -> list[Any]:
        return await self.db(
            store.ledger_apply, run_id=self.run_id, max_cost=self.max_cost, ops=ops
        )

    async def _loop(self) -> None:
        while True:
            await self.wakeup.wait()
            self.wakeup.clear()
            batch, self.pending = self.pending, []
            if not batch:
                continue
            self.busy = True
            try:
                results = await self._apply([op for op, _ in batch])
            except Exception:
                # One bad write must not fail its neighbours: apply them one by one.
                log.exception("ledger batch failed; retrying its writes one by one")
                for op, future in batch:
                    try:
                        future.set_result((await self._apply([op]))[0])
                    except Exception as exc:
                        future.set_exception(exc)
                self.busy = False
                continue
            for (_, future), result in zip(batch, results, strict=True):
                future.set_result(result)
            self.busy = False

    async def close(self) -> None:
        while self.pending or self.wakeup.is_set() or self.busy:
            await asyncio.sleep(0.01)
        self.task.cancel()


@dataclass
class Activity:
    stage: str
    last: float  # time.time() of the last activity: cheap on the per-chunk path
    bytes: int = 0
    dirty: bool = True


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


@dataclass
class Driver:
    ctx: store.RunContext
    worker: str
    db: DbThread
    client: httpx.AsyncClient
    limits: dict[str, Any]
    max_cost: Decimal | None
    ledger: LedgerBatcher
    activity: dict[int, Activity] = field(default_factory=dict)
    reserved: dict[int, Decimal | None] = field(default_factory=dict)
    sandbox_slots: asyncio.Semaphore = field(
        default_factory=lambda: asyncio.Semaphore(max(1, os.cpu_count() or 1))
    )
    stopping: str = ""

    # --- one cell ---------------------------------------------------------------------------

    async def run_cell(self, cell: store.ClaimedCell) -> None:
        try:
            async with asyncio.timeout(self.limits["case_timeout_s"]):
                await self._run_cell(cell)
        except TimeoutError:
            await self.finish(
                cell,
                "failed",
                None,
                None,
                "",
                f"case timeout after {self.limits['case_timeout_s']}s",
            )
        except Exception as exc:  # a bug must fail the cell, not leave it running forever
            log.exception("cell %s crashed", cell.cell_id)
            await self.finish(
                cell, "failed", None, None, "", f"internal error: {type(exc).__name__}: {exc}"
            )

    async def _run_cell(self, cell: store.ClaimedCell) -> None:
        target = self.ctx.targets[cell.target_id]
        adapter = get_adapter(cell.benchmark)
        if self.ctx.manifest["mode"] == "preview":
            await self._run_preview(cell, target)
            return
        if cell.benchmark == "scicode":
            await self._run_scicode(cell, target)
            return
        if cell.benchmark == "terminal-bench":
            await self._run_terminal(cell, target)
            return
        if cell.benchmark == "tau3":
            await self._run_tau(cell, target)
            return
        subject = await self._turn(
            cell,
            role="subject",
            sequence=0,
            target=target,
            messages=adapter.messages(cell.payload),
            calls_made=0,
        )
        if subject is None:
            return
        answer = subject.content
        if subject.truncated:
            # finish_reason "length": the answer was cut off. A wrong answer, not a failure.
            await self.finish(
                cell,
                "completed",
                False,
                {"grader": "truncated", "finish_reason": "length"},
                answer,
                "",
            )
            return
        if adapter.kind == "code":
            grade = await self.sandboxed(
                scoring.grade_code,
                benchmark=cell.benchmark,
                payload=cell.payload,
                secret=cell.secret,
                answers=[answer],
            )
            await self.finish(cell, "completed", grade.correct, grade.detail, answer, "")
            return
        if not scoring.needs_judge(cell.benchmark):
            try:
                # The version frozen in the manifest, not today's: a run resumed after an
                # upgrade keeps one grader for all its cells.
                grade = scoring.grade_direct(
                    benchmark=cell.benchmark,
                    payload=cell.payload,
                    secret=cell.secret,
                    answer=answer,
                    grader_version=self.ctx.manifest["benchmarks"][cell.benchmark].get(
                        "grader_version"
                    ),
                )
            except scoring.GradingUnavailable as exc:
                await self.finish(cell, "failed", None, None, answer, str(exc))
                return
            await self.finish(cell, "completed", grade.correct, grade.detail, answer, "")
            return
        judge_target = self.ctx.judges[cell.benchmark]
        judge = await self._turn(
            cell,
            role="judge",
            sequence=0,
            target=judge_target,
            messages=scoring.judge_request_messages(
                payload=cell.payload, secret=cell.secret, answer=answer
            ),
            calls_made=1,
            answer=answer,
        )
        if judge is None:
            return
        if judge.truncated:
            await self.finish(cell, "failed", None, None, answer, "judge reply truncated")
            return
        try:
            grade = scoring.grade_from_verdict(judge.content)
        except MalformedVerdict as exc:
            await self.finish(cell, "failed", None, None, answer, f"malformed judge verdict: {exc}")
            return
        # The official scorer beside the sr-bench grade (issue 22 point 5), when the plan asked
        # for it: its outcome is recorded under grade["official"], never changing `correct`.
        if (official := await self._official_judge(cell, judge_target, answer)) is not None:
            grade = dataclasses.replace(grade, detail={**grade.detail, "official": official})
        await self.finish(cell, "completed", grade.correct, grade.detail, answer, "")

    async def _official_judge(
        self, cell: store.ClaimedCell, judge_target: store.TargetInfo, answer: str
    ) -> dict[str, Any] | None:
        """The official template's judge call (sequence 1, after the sr-bench judge), or None
        when the plan did not ask for it. A failure here is recorded as the official outcome;
        the sr-bench grade stands."""
        from datasets import official

        frozen = self.ctx.manifest["benchmarks"][cell.benchmark].get("official_scoring")
        template, not_run = scoring.official_judge(cell.benchmark, frozen)
        if template is None:
            return not_run
        if self.limits["max_calls_per_case"] <= 2:
            return official.not_graded("max_calls_per_case leaves no room for the official judge")
        outcome = await self.call(
            cell,
            role="judge",
            sequence=1,
            target=judge_target,
            messages=official.official_messages(
                template,
                question=cell.payload["question"],
                reference=str(cell.secret["answer"]),
                response=answer,
            ),
        )
        if outcome.call_id is None:
            await self.stop("budget: the next call could exceed max_cost_usd")
            return official.not_graded("budget: the official judge call could exceed max_cost_usd")
        if not outcome.ok:
            if outcome.transport_failure and self.ctx.manifest["failure_policy"] == "stop":
                await self.stop(f"first transport failure (fail closed): {outcome.error_code}")
            reason = f"official judge call: {outcome.error_code}: {outcome.error}"
            return official.not_graded(reason, "failed")
        if outcome.truncated:
            return official.not_graded("official judge reply truncated", "failed")
        return official.official_detail(template, outcome.content)

    async def sandboxed(self, fn: Callable[..., T], /, **kwargs: Any) -> T:
        """Run a grader that executes code in the sandbox on a thread, a few at a time: it is
        CPU work and subprocesses, which must not stall the streams on the event loop."""
        async with self.sandbox_slots:
            return await asyncio.to_thread(lambda: fn(**kwargs))

    async def _run_preview(self, cell: store.ClaimedCell, target: store.TargetInfo) -> None:
        """A preview run asks the router where it would send the case; nothing is answered,
        nothing is billed. The config hash must be the target's pin (R12.3)."""
        from types import SimpleNamespace

        from recipes.preview import PreviewError, PreviewNotPossible, route_preview

        context = self.ctx.manifest.get("preview_context") or {}
        as_target = SimpleNamespace(
            slug=target.slug,
            kind=target.kind,
            model=target.model,
            preview_url=target.preview_url,
            config_hash=target.config_hash or "",
        )
        messages = get_adapter(cell.benchmark).messages(cell.payload)
        try:
            result = await asyncio.to_thread(
                lambda: route_preview(target=as_target, messages=messages, **context)
            )
        except (PreviewError, PreviewNotPossible) as exc:
            await self.finish(cell, "failed", None, None, "", f"route preview: {exc}")
            return
        routing = {
            k: result.get(k)
            for k in (
                "selected_model",
                "decision",
                "selection_status",
                "config_hash",
                "config_hash_matches",
            )
        }
        if result.get("config_hash_matches") is not True:
            await self.finish(
                cell,
                "failed",
                None,
                {"preview": routing},
                "",
                f"router config {result.get('config_hash')} is not the pinned {target.config_hash}",
            )
            return
        await self.finish(cell, "completed", None, {"preview": routing}, "", "")

    async def _turn(
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
            await self.finish(
                cell,
                "failed",
                None,
                None,
                answer,
                f"max_calls_per_case ({self.limits['max_calls_per_case']}) reached",
            )
            return None
        outcome = await self.call(
            cell, role=role, sequence=sequence, target=target, messages=messages, tools=tools
        )
        if outcome.call_id is None:
            if calls_made == 0:
                await self.db(store.cell_release, cell_id=cell.cell_id, token=cell.token)
            else:
                await self.finish(
                    cell,
                    "failed",
                    None,
                    None,
                    answer,
                    "budget: the next call could exceed max_cost_usd",
                )
            await self.stop("budget: the next call could exceed max_cost_usd")
            return None
        if not outcome.ok:
            await self.finish(
                cell,
                "failed",
                None,
                None,
                answer,
                f"{role} call {sequence + 1}: {outcome.error_code}: {outcome.error}",
            )
            if outcome.transport_failure and self.ctx.manifest["failure_policy"] == "stop":
                await self.stop(f"first transport failure (fail closed): {outcome.error_code}")
            return None
        return outcome

    async def _run_terminal(self, cell: store.ClaimedCell, target: store.TargetInfo) -> None:
        """Terminal-Bench: the subject drives one `terminal` tool inside the task's sandboxed
        directory; its first text-only reply ends the episode; the task's own tests decide."""
        from runs.engine.tau import assistant_message, terminal_tool_content, tool_message
        from runs.engine.terminal import terminal_session_start, tool_command

        adapter = get_adapter(cell.benchmark)
        try:
            session = await asyncio.to_thread(terminal_session_start, cell.payload, cell.secret)
        except Exception as exc:  # a task that cannot be set up is not a wrong answer
            await self.finish(cell, "failed", None, None, "", f"task set-up failed: {exc}")
            return
        try:
            messages = adapter.messages(cell.payload)
            tools = cell.payload["tools"]
            steps = 0
            for step in range(AGENT_MAX_STEPS):
                outcome = await self._turn(
                    cell,
                    role="subject",
                    sequence=step,
                    target=target,
                    messages=messages,
                    tools=tools,
                    calls_made=step,
                )
                if outcome is None:
                    return
                steps = step + 1
                messages = [*messages, assistant_message(outcome.content, outcome.tool_calls)]
                if not outcome.tool_calls:
                    break
                for call in outcome.tool_calls:
                    command = tool_command(call.arguments)
                    if command is None:
                        content = "Error: arguments must be a JSON object with a `command` string"
                    else:
                        result = await self.sandboxed(
                            lambda c=command: session.run_command(c, timeout=TERMINAL_COMMAND_S)
                        )
                        content = terminal_tool_content(*result)
                    messages = [*messages, tool_message(call.id, content)]
            reward, detail = await self.sandboxed(session.verify)
        finally:
            await asyncio.to_thread(session.close)
        await self.finish(
            cell,
            "completed",
            reward == 1,
            {"grader": "terminal-bench", "reward": reward, "steps": steps, "detail": detail},
            messages[-1].get("content") or "",
            "",
        )

    async def _run_tau(self, cell: store.ClaimedCell, target: store.TargetInfo) -> None:
        """τ³: the subject uses the domain's tools under its policy while the plan's simulator
        target plays the user; the reward compares the final database and required outputs."""
        from runs.engine import tau

        try:
            # Off the event loop: an airline episode loads and copies a 7 MB database (~0.5 s)
            # while other cells' streams are being read on this loop.
            environment = await asyncio.to_thread(tau.TauEnvironment.from_payload, cell.payload)
        except tau.TauError as exc:
            await self.finish(cell, "failed", None, None, "", f"τ³ task not runnable: {exc}")
            return
        user_target = self.ctx.simulators[cell.benchmark]
        messages = tau.first_messages(cell.payload)
        tools = environment.tool_schemas()
        termination = "max_steps"
        subject_calls = user_calls = 0
        for _ in range(tau.MAX_STEPS):
            outcome = await self._turn(
                cell,
                role="subject",
                sequence=subject_calls,
                target=target,
                messages=messages,
                tools=tools,
                calls_made=subject_calls + user_calls,
            )
            if outcome is None:
                return
            subject_calls += 1
            messages = [*messages, tau.assistant_message(outcome.content, outcome.tool_calls)]
            if outcome.tool_calls:
                for call in outcome.tool_calls:
                    result = environment.call_tool(call.name, call.arguments)
                    messages = [*messages, tau.tool_message(call.id, result)]
                continue
            user = await self._turn(
                cell,
                role="simulator",
                sequence=user_calls,
                target=user_target,
                messages=tau.user_simulator_messages(cell.payload, messages),
                calls_made=subject_calls + user_calls,
            )
            if user is None:
                return
            user_calls += 1
            messages = [*messages, {"role": "user", "content": user.content}]
            if tau.is_conversation_end(user.content):
                termination = "user_stop"
                break
        reward = await asyncio.to_thread(  # a gold replay on a fresh database: off the loop
            functools.partial(
                tau.tau_reward,
                payload=cell.payload,
                secret=cell.secret,
                environment=environment,
                agent_outputs=tau.agent_texts(messages),
                termination=termination,
            )
        )
        detail = {"grader": "tau3", "termination": termination, **reward}
        judge = self.ctx.judges.get(cell.benchmark)
        pending = reward["detail"].get("not_evaluated", {})
        if not reward["complete"] and set(pending) == {"NL_ASSERTION"} and judge is not None:
            verdicts = await self._judge_assertions(
                cell,
                judge,
                pending["NL_ASSERTION"],
                tau.agent_texts(messages),
                calls_made=subject_calls + user_calls,
            )
            if verdicts is None:
                return
            components = dict(reward["detail"]["components"])
            components["NL_ASSERTION"] = all(verdicts.values())
            normal = termination in tau.NORMAL_TERMINATIONS
            passed = normal and all(v is True for v in components.values())
            detail.update(reward=int(passed), complete=True, nl_verdicts=verdicts)
            detail["detail"] = {**reward["detail"], "components": components}
            await self.finish(cell, "completed", passed, detail, "", "")
            return
        if not reward.get("complete", True):
            # Natural-language assertions need a judge we do not run yet: unknown, not wrong.
            await self.finish(
                cell,
                "failed",
                None,
                detail,
                "",
                "τ³ task has assertions this grader does not evaluate yet (not scored)",
            )
            return
        await self.finish(cell, "completed", reward["reward"] == 1, detail, "", "")

    async def _judge_assertions(
        self,
        cell: store.ClaimedCell,
        judge: store.TargetInfo,
        assertions: list[str],
        agent_texts: list[str],
        *,
        calls_made: int,
    ) -> dict[str, bool] | None:
        """τ³ natural-language assertions graded by the plan's judge, one judge call each, with
        the judge protocol of the judged benchmarks (a malformed verdict fails the cell)."""
        transcript = "\n\n".join(agent_texts)
        verdicts: dict[str, bool] = {}
        for i, assertion in enumerate(assertions):
            outcome = await self._turn(
                cell,
                role="judge",
                sequence=i,
                target=judge,
                messages=scoring.judge_messages_for(
                    question=f"Does the agent's side of this conversation satisfy: {assertion}",
                    reference=assertion,
                    response=transcript,
                ),
                calls_made=calls_made + i,
            )
            if outcome is None:
                return None
            try:
                verdicts[assertion] = scoring.grade_from_verdict(outcome.content).correct
            except MalformedVerdict as exc:
                await self.finish(cell, "failed", None, None, "", f"malformed judge verdict: {exc}")
                return None
        return verdicts

    async def _run_scicode(self, cell: store.ClaimedCell, target: store.TargetInfo) -> None:
        """One user turn per sub-step, each reply kept in the conversation; graded once every
        step has an answer (the main problem is correct only if every step passes)."""
        from runs.engine.code_grading import scicode_step_prompts

        adapter = get_adapter(cell.benchmark)
        messages = adapter.messages(cell.payload)
        prompts = scicode_step_prompts(cell.payload)
        replies: list[str | None] = []
        for step, prompt in enumerate(prompts):
            if step:
                messages = [*messages, {"role": "user", "content": prompt}]
            outcome = await self._turn(
                cell,
                role="subject",
                sequence=step,
                target=target,
                messages=messages,
                calls_made=step,
            )
            if outcome is None:
                return
            replies.append(outcome.content)
            messages = [*messages, {"role": "assistant", "content": outcome.content}]
        try:
            grade = await self.sandboxed(
                scoring.grade_code,
                benchmark=cell.benchmark,
                payload=cell.payload,
                secret=cell.secret,
                answers=replies,
            )
        except scoring.GradingUnavailable as exc:
            await self.finish(cell, "failed", None, None, replies[-1] if replies else "", str(exc))
            return
        await self.finish(
            cell,
            "completed",
            grade.correct,
            grade.detail,
            "\n\n".join(r or "" for r in replies),
            "",
        )

    async def finish(
        self,
        cell: store.ClaimedCell,
        status: str,
        correct: bool | None,
        grade: dict[str, Any] | None,
        answer: str,
        error: str,
    ) -> None:
        if FAULT_KILL_BEFORE_FINISH and cell.benchmark in FAULT_KILL_BEFORE_FINISH.split(","):
            os.kill(os.getpid(), signal.SIGKILL)
        await self.ledger.submit(
            store.FinishCell(cell.cell_id, cell.token, status, correct, grade, answer, error)
        )

    async def stop(self, reason: str) -> None:
        if not self.stopping:
            self.stopping = reason
            await self.db(store.run_stop, run_id=self.ctx.run_id, reason=reason)

    # --- one call -------------------------------------------------------------------------

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
        call_id = await self.ledger.submit(
            store.OpenCall(
                cell.cell_id, role, sequence, target.target_id, body, reservation, self.worker
            )
        )
        if call_id is None:
            return CallOutcome(call_id=None)
        self.reserved[call_id] = reservation
        # The row is committed: from here on the request may leave, and never a second time.
        self.activity[call_id] = Activity(stage="waiting", last=time.time())
        try:
            return await self._stream(call_id, target, body)
        finally:
            self.activity.pop(call_id, None)

    async def _stream(self, call_id: int, target: store.TargetInfo, body: dict) -> CallOutcome:
        headers = {CALL_ID_HEADER: str(call_id)}
        if target.api_key:
            headers["authorization"] = f"Bearer {target.api_key}"
        if target.kind == "mom" and target.config_hash:
            headers[EXPECTED_HASH_HEADER] = target.config_hash
            if target.max_inference_calls:
                headers[MAX_CALLS_HEADER] = str(target.max_inference_calls)
        url = target.base_url.rstrip("/") + "/chat/completions"
        raw = bytearray()
        decoder = SSEDecoder()
        started = time.monotonic()
        sent_wall = timezone.now()
        acc = ChatStreamAccumulator(started_at=started)
        http_status: int | None = None
        kept: dict[str, str] = {}
        error_code = error = ""
        activity = self.activity[call_id]
        max_chars = self.limits["max_output_chars"]
        byte_cap = stream_byte_cap(max_chars)  # checked per chunk; the message only on a breach
        next_repetition_check = REPETITION_CHECK_BYTES
        try:
            async with asyncio.timeout(self.limits["total_timeout_s"]):
                async with self.client.stream("POST", url, json=body, headers=headers) as resp:
                    http_status = resp.status_code
                    kept = {
                        k: v
                        for k, v in resp.headers.items()
                        if k.lower().startswith(KEPT_HEADER_PREFIXES)
                    }
                    activity.stage, activity.last, activity.dirty = (
                        "streaming",
                        time.time(),
                        True,
                    )
                    if resp.status_code != 200:
                        async for chunk in resp.aiter_bytes():
                            raw += chunk
                            if len(raw) > HTTP_ERROR_BODY_CAP:
                                break
                        error_code = f"http_{resp.status_code}"
                        error = http_error_text(resp.status_code, resp.reason_phrase, bytes(raw))
                    else:
                        # Without a content encoding the raw body is the SSE itself: skip
                        # httpx's decoder layers on the per-chunk path.
                        encoded = resp.headers.get("content-encoding", "identity") != "identity"
                        chunks = resp.aiter_bytes() if encoded else resp.aiter_raw()
                        async for chunk in chunks:
                            raw += chunk
                            activity.bytes, activity.last, activity.dirty = (
                                len(raw),
                                time.time(),
                                True,
                            )
                            acc.feed_events(decoder.feed(chunk))
                            if (
                                acc.content_chars + acc.reasoning_chars > max_chars
                                or len(raw) > byte_cap
                            ):
                                violation = output_cap_violation(
                                    content_chars=acc.content_chars,
                                    reasoning_chars=acc.reasoning_chars,
                                    received_bytes=len(raw),
                                    max_output_chars=max_chars,
                                )
                                if violation:
                                    error_code, error = "output_cap", violation
                                    break
                            if len(raw) >= next_repetition_check:
                                next_repetition_check = len(raw) + REPETITION_CHECK_BYTES
                                if repeated_tail_block(
                                    acc.content,
                                    min_block=REPETITION_MIN_BLOCK,
                                    repeats=REPETITION_REPEATS,
                                ):
                                    error_code, error = "repetition", "the output repeats itself"
                                    break
                        else:
                            acc.feed_events(decoder.close())
        except TimeoutError:
            error_code, error = (
                "total_timeout",
                f"no complete answer within {self.limits['total_timeout_s']}s",
            )
        except httpx.ReadTimeout:
            error_code, error = "idle_timeout", f"no bytes for {self.limits['idle_timeout_s']}s"
        except httpx.ConnectError as exc:
            error_code, error = "connect_error", str(exc) or type(exc).__name__
        except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
            error_code, error = "stream_disconnected", str(exc) or type(exc).__name__
        except httpx.HTTPError as exc:
            error_code, error = "transport_error", f"{type(exc).__name__}: {exc}"
        except SSEError as exc:
            error_code, error = "sse_error", str(exc)
        except asyncio.CancelledError:
            # A case timeout or shutdown cancelled us mid-stream: record what we have, then
            # let the cancellation go on. Shielded so the record is written.
            await asyncio.shield(
                self._close(
                    call_id,
                    target,
                    acc,
                    raw,
                    http_status,
                    kept,
                    "cancelled",
                    "the case timed out or the worker stopped",
                    started,
                    sent_wall,
                )
            )
            raise
        return await self._close(
            call_id, target, acc, raw, http_status, kept, error_code, error, started, sent_wall
        )

    async def _close(
        self,
        call_id: int,
        target: store.TargetInfo,
        acc: ChatStreamAccumulator,
        raw: bytearray,
        http_status: int | None,
        kept: dict[str, str],
        error_code: str,
        error: str,
        started: float,
        sent_wall: Any,
    ) -> CallOutcome:
        result = acc.result()
        if not error_code and not result.complete:
            error_code = "incomplete_stream"
            error = result.incomplete_reason or result.error or "the stream did not finish"
        served = result.served_model or ""
        usage = result.usage
        fields: dict[str, Any] = {
            "http_status": http_status,
            "response_headers": kept,
            "served_model": served,
            "finish_reason": result.finish_reason or "",
            "content": result.content,
            "reasoning": result.reasoning,
            "tool_calls": [dataclasses.asdict(t) for t in result.tool_calls] or None,
            "usage_raw": usage,
            "stage": "done",
            "bytes_received": len(raw),
            "finished_at": timezone.now(),
            "duration_ms": (time.monotonic() - started) * 1000,
            "ttft_ms": None if result.ttft_s is None else result.ttft_s * 1000,
            "first_token_at": None
            if result.ttft_s is None
            else sent_wall + timedelta(seconds=result.ttft_s),
            "last_activity_at": timezone.now(),
        }
        lower = {k.lower(): v for k, v in kept.items()}
        if target.kind == "mom":
            fields["selected_model"] = lower.get("x-vsr-selected-model", "")
            fields["selected_decision"] = lower.get("x-vsr-selected-decision", "")
            fields["config_hash_ack"] = lower.get("x-vsr-config-hash", "")[:64]
            count = lower.get("x-vsr-inference-call-count", "")
            fields["inference_call_count"] = int(count) if count.isdigit() else None
            if (
                http_status == 200
                and not error_code
                and fields["config_hash_ack"] != target.config_hash
            ):
                error_code = "config_hash_mismatch"
                error = (
                    f"router acknowledged config {fields['config_hash_ack'] or 'nothing'}, "
                    f"expected {target.config_hash}"
                )
        if result.complete and (not error_code or error_code == "config_hash_mismatch"):
            buckets, cost, cache_neutral, note = call_accounting(
                kind=target.kind,
                usage=usage,
                served_model=served,
                headers=lower,
                price_table=target.prices,
            )
        else:
            # Usage is trusted only from a finished stream (one [DONE], a finish_reason): a
            # usage chunk in a broken stream stays in the evidence but is not a receipt.
            buckets, cost, cache_neutral = None, None, None
            note = "stream incomplete: usage unverified"
        if buckets is not None:
            fields.update(
                input_tokens=buckets.input,
                cached_input_tokens=buckets.cached_input,
                cache_write_tokens=buckets.cache_write,
                output_tokens=buckets.output,
                cached_reported=buckets.cached_reported,
                cache_write_reported=buckets.cache_write_reported,
            )
        # Rounded here as the column rounds, by the rule reconcile-usage uses (srbench.money).
        fields.update(
            cost_usd=money_stored(cost),
            cache_neutral_cost_usd=money_stored(cache_neutral),
            cost_note=note[:200],
        )
        ok = not error_code
        fields["status"] = (
            "completed" if ok else ("cancelled" if error_code == "cancelled" else "failed")
        )
        fields["error_code"], fields["error"] = error_code, error
        failure = None if ok else {"error_code": error_code, "error": error[:500]}
        await self.ledger.submit(
            store.CloseCall(call_id, fields, bytes(raw), self.reserved.pop(call_id, None), failure)
        )
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

    # --- the loop ---------------------------------------------------------------------------

    async def checkpoints(self, lease_seconds: float) -> None:
        """At most once a second: live activity of in-flight calls; every third of a lease:
        renew this worker's cell leases (a worker that stops renewing is presumed dead)."""
        renew_every = max(lease_seconds / 3, 0.5)
        next_renew = time.monotonic() + renew_every
        while True:
            await asyncio.sleep(1.0)
            dirty = [
                (pk, a.stage, datetime.fromtimestamp(a.last, tz=UTC), a.bytes)
                for pk, a in list(self.activity.items())
                if a.dirty
            ]
            for pk, *_ in dirty:
                if pk in self.activity:
                    self.activity[pk].dirty = False
            if dirty:
                await self.db(store.calls_checkpoint, activity=dirty)
            if time.monotonic() >= next_renew:
                next_renew = time.monotonic() + renew_every
                await self.db(
                    store.leases_renew,
                    run_id=self.ctx.run_id,
                    worker=self.worker,
                    lease_seconds=lease_seconds,
                )


async def drive(run_id: int) -> str | None:
    """Drive one run on this worker until nothing more can be dispatched here."""
    db = DbThread()
    try:
        ctx = await db(store.run_begin, run_id=run_id)
        if ctx is None:
            return None
        if ctx.started_now:
            # Before any call: the recipe must describe the router that answers this run
            # (R12.2). Only at the start, so a redelivered task never captures a later config.
            from recipes.services import run_recipes_capture

            await db(run_recipes_capture, run_id=run_id)
        limits = ctx.manifest["limits"]
        max_cost = None if limits.get("max_cost_usd") is None else Decimal(limits["max_cost_usd"])
        concurrency = int(limits["concurrency"])
        lease_seconds = float(settings.SRBENCH_CELL_LEASE_SECONDS)
        timeout = httpx.Timeout(
            connect=10.0, read=float(limits["idle_timeout_s"]), write=30.0, pool=None
        )
        pool = httpx.Limits(max_connections=concurrency + 8, max_keepalive_connections=concurrency)
        async with engine_client(timeout=timeout, limits=pool) as client:
            driver = Driver(
                ctx=ctx,
                worker=worker_id(),
                db=db,
                client=client,
                limits=limits,
                max_cost=max_cost,
                ledger=LedgerBatcher(db, run_id, max_cost),
            )
            ticker = asyncio.create_task(driver.checkpoints(lease_seconds))
            deadline = ctx.started_at + timedelta(seconds=float(limits["max_run_seconds"]))
            inflight: set[asyncio.Task[None]] = set()
            refill = max(1, concurrency // 8)
            try:
                while not driver.stopping:
                    if timezone.now() >= deadline:
                        await driver.stop(f"max_run_seconds ({limits['max_run_seconds']}) reached")
                        break
                    free = concurrency - len(inflight)
                    pending_left = None
                    # Claim in batches: a claim is a transaction under the run row lock, so
                    # refilling one slot at a time would cost a claim per call.
                    if free >= refill or (free > 0 and not inflight):
                        claimed = await db(
                            store.cells_claim,
                            run_id=run_id,
                            worker=driver.worker,
                            limit=free,
                            concurrency=concurrency,
                            lease_seconds=lease_seconds,
                        )
                        if claimed is None:
                            break  # cancelled, stopped or ended elsewhere
                        cells, pending_left = claimed
                        for cell in cells:
                            inflight.add(asyncio.create_task(driver.run_cell(cell)))
                    if not inflight:
                        if pending_left == 0:
                            break
                        await asyncio.sleep(0.5)  # other workers hold the concurrency
                        continue
                    _, inflight = await asyncio.wait(
                        inflight, timeout=1.0, return_when=asyncio.FIRST_COMPLETED
                    )
                    if concurrency - len(inflight) < refill:
                        # Let a few more slots free up before the next claim.
                        await asyncio.sleep(0.02)
                        inflight = {t for t in inflight if not t.done()}
                if inflight:
                    await asyncio.wait(inflight)
            finally:
                ticker.cancel()
                await driver.ledger.close()
        return await db(run_finish_if_done, run_id=run_id)
    finally:
        db.close()
