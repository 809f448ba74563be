"""The simulator plays τ³ and Terminal-Bench agents (and the τ³ user) end to end.

The two loops below are deliberately plain: they are the reference for the run driver's agent
loop (see runs/engine/tau.py for the contract). The τ³ loop uses the ``openai`` client without
streaming; the Terminal-Bench loop streams with raw httpx and assembles the tool-call deltas
with the engine's own SSE accumulator, as the driver does.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from datasets.answer_key import answer_key_from_sources
from datasets.benchmarks.tau3 import ADAPTER as TAU3
from datasets.benchmarks.terminal_bench import ADAPTER as TB
from runs.engine.sandbox_command import sandbox_available
from runs.engine.sse import ChatStreamAccumulator, decode_sse
from runs.engine.tau import (
    MAX_CALLS,
    MAX_STEPS,
    TauEnvironment,
    agent_texts,
    assistant_message,
    first_messages,
    is_conversation_end,
    tau_reward,
    terminal_tool_content,
    tool_message,
    user_simulator_messages,
)
from runs.engine.terminal import terminal_session_start
from srbench.simulator.testing import running_simulator

FIXTURES = Path(__file__).resolve().parents[2] / "datasets" / "fixtures"
TAU_DOMAINS = FIXTURES / "tau3" / "domains"
TB_TASKS = FIXTURES / "terminal-bench" / "tasks"
TAU_TASKS = {q.payload["task_id"]: q for q in TAU3.load(TAU_DOMAINS)}
TB_QUESTIONS = {q.native_id: q for q in TB.load(TB_TASKS)}
# Tasks graded entirely here (hold_limit needs the NL judge; see test_tau.py).
GRADABLE_TAU_TASKS = ["renew_simple", "renew_overdue", "hold_and_wrong_surname"]

MODELS = {
    "agent-right": {"accuracy": 1.0},
    "agent-wrong": {"accuracy": 0.0},
    "sim-user": {"role": "user", "stop_after_turns": 4},
}


@pytest.fixture(scope="module")
def sim_url() -> Iterator[str]:
    key = answer_key_from_sources([("tau3", str(TAU_DOMAINS)), ("terminal-bench", str(TB_TASKS))])
    fast = {"ttft_s": 0.0, "tokens_per_second": 0.0, "chunk_tokens": 4}
    with running_simulator(
        answer_key=key, models={name: fast | spec for name, spec in MODELS.items()}
    ) as url:
        yield url


# -- τ³ ------------------------------------------------------------------------------------------


def run_tau_episode(client: openai.OpenAI, model: str, task_id: str) -> dict[str, Any]:
    """One τ³ episode: agent turns with tool execution, the user simulator after every text turn,
    stop on a user stop marker or a limit, then the reward."""
    q = TAU_TASKS[task_id]
    env = TauEnvironment.from_payload(q.payload)
    messages = first_messages(q.payload)
    tools = env.tool_schemas()
    calls = steps = 0
    termination = "max_steps"
    while steps < MAX_STEPS and calls < MAX_CALLS:
        steps += 1
        calls += 1
        reply = client.chat.completions.create(model=model, messages=messages, tools=tools)
        message = reply.choices[0].message
        messages.append(assistant_message(message.content, _calls(message.tool_calls)))
        if message.tool_calls:
            for call in message.tool_calls:
                result = env.call_tool(call.function.name, call.function.arguments)
                messages.append(tool_message(call.id, result))
            continue
        calls += 1
        user = client.chat.completions.create(
            model="sim-user", messages=user_simulator_messages(q.payload, messages)
        )
        user_text = user.choices[0].message.content or ""
        messages.append({"role": "user", "content": user_text})
        if is_conversation_end(user_text):
            termination = "user_stop"
            break
    result = tau_reward(
        payload=q.payload,
        secret=q.secret,
        environment=env,
        agent_outputs=agent_texts(messages),
        termination=termination,
    )
    return result | {"messages": messages, "environment": env}


def _calls(tool_calls: Any) -> list[dict[str, str]]:
    return [
        {"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
        for c in tool_calls or []
    ]


@pytest.fixture
def client(sim_url: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{sim_url}/v1", api_key="sim", max_retries=0) as c:
        yield c


@pytest.mark.parametrize("task_id", GRADABLE_TAU_TASKS)
def test_a_correct_simulated_agent_earns_reward_1_on_tau(client, task_id):
    result = run_tau_episode(client, "agent-right", task_id)
    assert result["reward"] == 1, result["detail"]
    assert result["detail"]["termination"] == "user_stop"
    gold = TAU_TASKS[task_id].secret["evaluation_criteria"]["actions"]
    made = [(c.name, c.arguments) for c in result["environment"].calls]
    assert made == [(a["name"], a["arguments"]) for a in gold]
    # The user simulator stopped right after the agent's final answer.
    assert result["messages"][-1]["content"].endswith("###STOP###")
    assert result["messages"][-2]["role"] == "assistant"


@pytest.mark.parametrize("task_id", GRADABLE_TAU_TASKS)
def test_a_wrong_simulated_agent_earns_reward_0_on_tau(client, task_id):
    result = run_tau_episode(client, "agent-wrong", task_id)
    assert result["reward"] == 0, result["detail"]
    assert result["detail"]["termination"] == "user_stop"
    # Wrong in what it did, not only in what it said.
    assert not result["db_match"]


def test_tau_episodes_are_deterministic(client):
    first = run_tau_episode(client, "agent-right", "renew_simple")["messages"]
    assert run_tau_episode(client, "agent-right", "renew_simple")["messages"] == first


def test_the_correct_agent_says_the_required_outputs_and_the_wrong_one_does_not(client):
    right = agent_texts(run_tau_episode(client, "agent-right", "renew_overdue")["messages"])
    wrong = agent_texts(run_tau_episode(client, "agent-wrong", "renew_overdue")["messages"])
    assert any("2.00" in text for text in right)
    assert not any("2.00" in text for text in wrong)


# -- Terminal-Bench --------------------------------------------------------------------------------


def needs_sandbox(test):  # type: ignore[no-untyped-def]
    """make test installs bubblewrap; a missing sandbox fails the test rather than skipping."""

    @functools.wraps(test)
    def checked(*args, **kwargs):  # type: ignore[no-untyped-def]
        assert sandbox_available(), "bubblewrap missing: run scripts/ensure_sandbox.sh"
        return test(*args, **kwargs)

    return checked


def stream_chat(http: httpx.Client, body: dict[str, Any]) -> Any:
    """One streamed call, decoded the way the engine decodes it."""
    body = body | {"stream": True, "stream_options": {"include_usage": True}}
    accumulator = ChatStreamAccumulator()
    with http.stream("POST", "/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        accumulator.feed_events(decode_sse(response.iter_bytes()))
    result = accumulator.result()
    assert result.complete, result.incomplete_reason
    return result


def run_terminal_episode(http: httpx.Client, model: str, task_id: str) -> tuple[int, list]:
    """One Terminal-Bench episode: each `terminal` call runs in the task's sandbox; the agent's
    first text-only reply ends it; the task's own tests decide."""
    q = TB_QUESTIONS[task_id]
    messages = TB.messages(q.payload)
    with terminal_session_start(q.payload, q.secret) as session:
        for _ in range(MAX_STEPS):
            reply = stream_chat(
                http, {"model": model, "messages": messages, "tools": q.payload["tools"]}
            )
            messages.append(assistant_message(reply.content, reply.tool_calls))
            if not reply.tool_calls:
                break
            for call in reply.tool_calls:
                try:
                    command = json.loads(call.arguments)["command"]
                except (ValueError, KeyError, TypeError):
                    content = "Error: arguments must be a JSON object with a `command` string"
                else:
                    content = terminal_tool_content(*session.run_command(command))
                messages.append(tool_message(call.id, content))
        reward, _detail = session.verify()
    return reward, messages


@pytest.fixture
def http(sim_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=sim_url, timeout=30) as c:
        yield c


@needs_sandbox
@pytest.mark.parametrize("task_id", sorted(TB_QUESTIONS))
def test_a_correct_simulated_agent_solves_terminal_bench_tasks(http, task_id):
    reward, messages = run_terminal_episode(http, "agent-right", task_id)
    assert reward == 1, messages
    assert messages[-1]["role"] == "assistant" and "tool_calls" not in messages[-1]


@needs_sandbox
@pytest.mark.parametrize("task_id", sorted(TB_QUESTIONS))
def test_a_wrong_simulated_agent_fails_terminal_bench_tasks(http, task_id):
    reward, messages = run_terminal_episode(http, "agent-wrong", task_id)
    assert reward == 0, messages
    commands = [
        json.loads(c["function"]["arguments"])["command"]
        for m in messages
        if m["role"] == "assistant"
        for c in m.get("tool_calls") or []
    ]
    assert commands[0] == "ls -la" and len(commands) >= 2


def test_tool_choice_none_keeps_the_agent_from_calling_tools(client):
    q = TAU_TASKS["renew_simple"]
    env = TauEnvironment.from_payload(q.payload)
    reply = client.chat.completions.create(
        model="agent-right",
        messages=first_messages(q.payload),
        tools=env.tool_schemas(),
        tool_choice="none",
    )
    assert reply.choices[0].message.tool_calls is None
    assert reply.choices[0].finish_reason == "stop"
