"""τ²'s max_errors (benchmarks.md §9: 10): an episode ends at its tenth agent tool error, with
reward 0 — live (runs.engine.tau_episode) and when a stored episode is graded again (regrade,
runs.engine.tau_session.replay_stored), both through TauSession.ended. Before, the limit was
defined and never applied: 3,000 unknown-tool calls followed by the gold actions scored 1
(helper hd's probe)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from runs.engine import tau
from runs.engine.tau_session import TOO_MANY_ERRORS, TauSession, replay_stored
from tests.runs.test_tau import TASKS, gold_actions


@dataclass
class Stored:
    """A ledger call as replay_stored reads it."""

    role: str
    sequence: int
    content: str | None
    tool_calls: list[dict[str, Any]] | None
    status: str = "completed"


def episode(task_id: str, bad_calls: int) -> list[Stored]:
    """`bad_calls` calls of an unknown tool, one a turn, then the gold actions, the agent's
    closing words and the user's stop."""
    q = TASKS[task_id]
    criteria = q.secret["evaluation_criteria"]
    calls = [
        Stored("subject", i, None, [{"id": f"bad{i}", "name": "no_such_tool", "arguments": "{}"}])
        for i in range(bad_calls)
    ]
    gold = [
        {"id": f"g{i}", "name": a["name"], "arguments": json.dumps(a["arguments"])}
        for i, a in enumerate(gold_actions(task_id))
    ]
    calls.append(Stored("subject", bad_calls, None, gold))
    closing = "Done. " + "; ".join(criteria.get("communicate_info") or [])
    calls.append(Stored("subject", bad_calls + 1, closing, None))
    calls.append(Stored("simulator", 0, "Thanks! ###STOP###", None))
    return calls


def test_the_tenth_tool_error_ends_the_episode_with_reward_0():
    q = TASKS["renew_simple"]
    correct, detail = replay_stored(
        q.payload, q.secret, episode("renew_simple", 3000), max_turns=5000
    )
    assert correct is False and detail["reward"] == 0
    assert detail["termination"] == TOO_MANY_ERRORS
    assert detail["agent_turns"] == tau.MAX_TOOL_ERRORS  # it stopped there, gold never ran
    assert f"ended after {tau.MAX_TOOL_ERRORS} tool errors" in detail["reason"]


def test_nine_tool_errors_leave_the_episode_to_its_gold_path():
    q = TASKS["renew_simple"]
    bad = tau.MAX_TOOL_ERRORS - 1
    correct, detail = replay_stored(q.payload, q.secret, episode("renew_simple", bad), max_turns=50)
    assert correct is True and detail["reward"] == 1, detail
    assert detail["termination"] == "user_stop"


def test_errors_counted_are_the_agents_tool_errors_in_one_turn_too():
    """Ten failing calls in one turn end the episode at that turn; successful calls do not
    count."""
    q = TASKS["renew_simple"]
    session = TauSession(q.payload, q.secret)
    good = [
        {"id": f"g{i}", "name": a["name"], "arguments": json.dumps(a["arguments"])}
        for i, a in enumerate(gold_actions("renew_simple"))
    ]
    session.agent(None, good)
    assert session.tool_errors == 0 and session.ended is None
    session.agent(None, [{"id": f"b{i}", "name": "nope", "arguments": "{"} for i in range(10)])
    assert session.tool_errors == 10 and session.ended == TOO_MANY_ERRORS
