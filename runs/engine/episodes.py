"""One episode per kind of benchmark: how a case is asked, answered and graded (benchmarks.md).

Every episode makes its calls through `Caller.turn` (one set of stop rules) and ends the cell
with `complete` or `fail`; a turn that stopped has already ended it. The episode is chosen from
the benchmark's adapter (`episode_for`), never from its name; a re-judge child run (its
manifest's `rejudge` marker) runs the judge-only episode `rejudged`.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from datasets.benchmarks import get_adapter
from datasets.benchmarks.base import BenchmarkAdapter
from datasets.grading import MalformedVerdict
from datasets.official_prompts import PromptingUnavailable, frozen_prompting
from runs.engine import official_code, scoring, store
from runs.engine.calls import BUDGET_STOP, Caller
from runs.engine.finish import parent_answers
from runs.engine.judge_only import judge_only_answer
from runs.engine.tau_episode import tau_episode as tau_session_episode

# Agent episodes (benchmarks.md §8–9): step cap per case and per terminal command time.
AGENT_MAX_STEPS = 30
TERMINAL_COMMAND_S = 30

Episode = Callable[[Caller, store.ClaimedCell, store.TargetInfo], Awaitable[None]]


async def subject_answer(
    d: Caller,
    cell: store.ClaimedCell,
    target: store.TargetInfo,
    messages: list[dict[str, Any]] | None = None,
) -> str | None:
    """The one subject call of a single-answer case (in `messages`, else the adapter's); None
    when the cell has already ended (a stop, or a truncated answer — cut off by finish_reason
    "length": wrong, not failed)."""
    subject = await d.turn(
        cell,
        role="subject",
        sequence=0,
        target=target,
        messages=messages or get_adapter(cell.benchmark).messages(cell.payload),
        calls_made=0,
    )
    if subject is None:
        return None
    if subject.truncated:
        await d.complete(
            cell, False, {"grader": "truncated", "finish_reason": "length"}, subject.content
        )
        return None
    return subject.content


async def direct(d: Caller, cell: store.ClaimedCell, target: store.TargetInfo) -> None:
    """One answer graded by rule (multiple choice, exact grids)."""
    if (answer := await subject_answer(d, cell, target)) is None:
        return
    try:
        # The version frozen in the manifest, not today's: a run resumed after an upgrade
        # keeps one grader for all its cells.
        grade = scoring.grade_direct(
            benchmark=cell.benchmark,
            payload=cell.payload,
            secret=cell.secret,
            answer=answer,
            grader_version=d.ctx.manifest["benchmarks"][cell.benchmark].get("grader_version"),
        )
    except scoring.GradingUnavailable as exc:
        await d.fail(cell, str(exc), answer)
        return
    await d.complete(cell, grade.correct, grade.detail, answer)


async def code(d: Caller, cell: store.ClaimedCell, target: store.TargetInfo) -> None:
    """One program graded by its tests in the sandbox; asked in the benchmark's official
    prompt, and graded by its official grader too, when the plan froze them (issue 37)."""
    manifest = d.ctx.manifest
    try:
        messages = official_code.subject_messages(manifest, cell.benchmark, cell.payload)
    except PromptingUnavailable as exc:
        await d.fail(cell, f"official prompting: {exc}; nothing was sent")
        return
    if (answer := await subject_answer(d, cell, target, messages)) is None:
        return
    grade = await d.sandboxed(
        scoring.grade_code,
        benchmark=cell.benchmark,
        payload=cell.payload,
        secret=cell.secret,
        answers=[answer],
    )
    # LiveCodeBench's official outcome beside the sr-bench grade, never changing `correct`.
    detail = await d.sandboxed(
        official_code.with_official,
        manifest=manifest,
        benchmark=cell.benchmark,
        answer=answer,
        payload=cell.payload,
        secret=cell.secret,
        detail=grade.detail,
    )
    grade = dataclasses.replace(grade, detail=detail)
    await d.complete(cell, grade.correct, grade.detail, answer)


async def judged(d: Caller, cell: store.ClaimedCell, target: store.TargetInfo) -> None:
    """One answer graded by the plan's judge, with the official scorer's call beside it."""
    if (answer := await subject_answer(d, cell, target)) is None:
        return
    await judge_answer(d, cell, answer, calls_made=1)


async def rejudged(d: Caller, cell: store.ClaimedCell, target: store.TargetInfo) -> None:
    """A re-judge child's cell (issue 22 point 4, runs/settlement/rejudge.py): the parent cell's stored
    answer judged again. The subject target is never called; `target` is only whose answer
    it was."""
    marker = d.ctx.manifest["rejudge"]
    parent = int(marker["parent_run"])
    # A judge-only recovery child (runs/settlement/recovery.py) judges the answer its parent's subject
    # call stored, which was never judged: the parent cell failed before its judge call.
    read = judge_only_answer if marker.get("judge_only") else parent_answer
    answer = await d.db(read, cell_id=cell.cell_id, parent_run_id=parent)
    if answer is None:
        await d.fail(cell, f"re-judge: run {parent} holds no completed answer for this cell")
        return
    await judge_answer(d, cell, answer, calls_made=0)


async def not_rejudgeable(d: Caller, cell: store.ClaimedCell, target: store.TargetInfo) -> None:
    """A cell of a re-judge child whose benchmark is not judged: ended unsent, never asked."""
    await d.fail(cell, f"re-judge: {cell.benchmark} answers are not judged; nothing was sent")


def parent_answer(*, cell_id: int, parent_run_id: int) -> str | None:
    """What this re-judge cell is judged on (`finish.parent_answers`). Runs on the database
    thread."""
    return parent_answers({cell_id: parent_run_id}).get(cell_id)


async def judge_answer(d: Caller, cell: store.ClaimedCell, answer: str, *, calls_made: int) -> None:
    """`answer` graded by the plan's judge (sequence 0), then the official scorer's call when
    the plan froze one; ends the cell."""
    judge_target = d.ctx.judges[cell.benchmark]
    judge = await d.turn(
        cell,
        role="judge",
        sequence=0,
        target=judge_target,
        messages=scoring.judge_request_messages(
            payload=cell.payload, secret=cell.secret, answer=answer
        ),
        calls_made=calls_made,
        answer=answer,
    )
    if judge is None:
        return
    if judge.truncated:
        await d.fail(cell, "judge reply truncated", answer)
        return
    try:
        grade = scoring.grade_from_verdict(judge.content)
    except MalformedVerdict as exc:
        await d.fail(cell, f"malformed judge verdict: {exc}", answer)
        return
    # The official scorer beside the sr-bench grade (issue 22 point 5), when the plan asked
    # for it: its outcome is recorded under grade["official"], never changing `correct`.
    if (official := await official_judge(d, cell, judge_target, answer)) is not None:
        grade = dataclasses.replace(grade, detail={**grade.detail, "official": official})
    await d.complete(cell, grade.correct, grade.detail, answer)


async def official_judge(
    d: Caller, cell: store.ClaimedCell, judge_target: store.TargetInfo, answer: str
) -> dict[str, Any] | None:
    """The official template's judge call (sequence 1, after the sr-bench judge), or None
    when the plan did not ask for it. A failure here is recorded as the official outcome;
    the sr-bench grade stands."""
    from datasets import official

    frozen = d.ctx.manifest["benchmarks"][cell.benchmark].get("official_scoring")
    template, not_run = scoring.official_judge(cell.benchmark, frozen)
    if template is None:
        return not_run
    if d.limits["max_calls_per_case"] <= 2:
        return official.not_graded("max_calls_per_case leaves no room for the official judge")
    if await d.dispatch_stopped():  # a cancel or a stop: nothing more is sent (calls.turn)
        return official.not_graded(f"the run stopped before the official judge call: {d.stopping}")
    outcome = await d.call(
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
        await d.stop(BUDGET_STOP)
        return official.not_graded("budget: the official judge call could exceed max_cost_usd")
    if not outcome.ok:
        await d.stop_if_fail_closed(outcome)
        reason = f"official judge call: {outcome.error_code}: {outcome.error}"
        return official.not_graded(reason, "failed")
    if outcome.truncated:
        return official.not_graded("official judge reply truncated", "failed")
    return official.official_detail(template, outcome.content)


async def scicode(d: Caller, cell: store.ClaimedCell, target: store.TargetInfo) -> None:
    """One user turn per sub-step, each reply kept in the conversation; graded once every
    step has an answer (the main problem is correct only if every step passes). With the
    official prompting the plan froze, the package's single-turn prompt per step instead."""
    from runs.engine.code_grading import scicode_step_prompts

    frozen = official_code.frozen_entry(d.ctx.manifest, cell.benchmark)
    if frozen is not None:
        try:
            prompting = frozen_prompting(cell.benchmark, frozen)
        except PromptingUnavailable as exc:
            await d.fail(cell, f"official prompting: {exc}; nothing was sent")
            return
        assert prompting is not None
        if asked := await official_code.scicode_official_turns(d, cell, target, prompting):
            await scicode_graded(d, cell, *asked)
        return
    messages = get_adapter(cell.benchmark).messages(cell.payload)
    replies: list[str | None] = []
    for step, prompt in enumerate(scicode_step_prompts(cell.payload)):
        if step:
            messages = [*messages, {"role": "user", "content": prompt}]
        outcome = await d.turn(
            cell, role="subject", sequence=step, target=target, messages=messages, calls_made=step
        )
        if outcome is None:
            return
        replies.append(outcome.content)
        messages = [*messages, {"role": "assistant", "content": outcome.content}]
    await scicode_graded(d, cell, replies, cell.secret)


async def scicode_graded(
    d: Caller, cell: store.ClaimedCell, replies: list[str | None], secret: dict[str, Any]
) -> None:
    """A SciCode problem's step replies graded in the sandbox; ends the cell."""
    try:
        grade = await d.sandboxed(
            scoring.grade_code,
            benchmark=cell.benchmark,
            payload=cell.payload,
            secret=secret,
            answers=replies,
        )
    except scoring.GradingUnavailable as exc:
        await d.fail(cell, str(exc), replies[-1] if replies else "")
        return
    await d.complete(cell, grade.correct, grade.detail, "\n\n".join(r or "" for r in replies))


async def terminal(d: Caller, cell: store.ClaimedCell, target: store.TargetInfo) -> None:
    """Terminal-Bench: the subject drives one `terminal` tool inside the task's sandboxed
    directory; its first text-only reply ends the episode; the task's own tests decide."""
    from runs.engine.tau import assistant_message, terminal_tool_content, tool_message
    from runs.engine.terminal import AgentClock, agent_timeout_s, tool_command
    from runs.engine.terminal_runner import terminal_session_open

    try:
        session = await asyncio.to_thread(terminal_session_open, cell.payload, cell.secret)
    except Exception as exc:  # a task that cannot be set up is not a wrong answer
        await d.fail(cell, f"task set-up failed: {exc}")
        return
    try:
        messages = get_adapter(cell.benchmark).messages(cell.payload)
        tools = cell.payload["tools"]
        steps = 0
        clock = AgentClock(agent_timeout_s(cell.payload))
        for step in range(AGENT_MAX_STEPS):
            outcome = await d.turn(
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
                elif clock.left() <= 0:
                    content = clock.note()
                else:
                    timeout = min(TERMINAL_COMMAND_S, clock.left())
                    result = await clock.timed(
                        d.sandboxed(lambda c=command, t=timeout: session.run_command(c, timeout=t))
                    )
                    content = terminal_tool_content(*result)
                messages = [*messages, tool_message(call.id, content)]
            if clock.left() <= 0:
                break
        reward, detail = await d.sandboxed(session.verify)
    finally:
        await asyncio.to_thread(session.close)
    grade = {"grader": "terminal-bench", "reward": reward, "steps": steps, "detail": detail}
    if clock.left() <= 0:
        grade |= {"agent_stopped": "agent_timeout", "agent_timeout_s": clock.budget_s}
    await d.complete(cell, reward == 1, grade, messages[-1].get("content") or "")


# By the adapter's `episode` where a kind has more than one way to run, else by its `kind`.
EPISODES: dict[str, Episode] = {
    "mcq": direct,
    "grid": direct,
    "judge": judged,
    "code": code,
    "scicode": scicode,
    "terminal": terminal,
    "tau": tau_session_episode,
}


def episode_for(adapter: BenchmarkAdapter, *, rejudge: bool = False) -> Episode:
    """The adapter's episode; in a re-judge child run (its manifest says so, runs/settlement/rejudge.py)
    the judge-only episode, whatever the benchmark: a re-judge never reaches the subject."""
    if rejudge:
        return rejudged if adapter.kind == "judge" else not_rejudgeable
    return EPISODES[adapter.episode or adapter.kind]
