"""A simulator per test module with fast timings; counters and caches reset per test."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from srbench.simulator.oracle import AnswerKey
from srbench.simulator.testing import running_simulator

FAST = {
    "models": {
        "sim-strong": {"ttft_s": 0.0, "tokens_per_second": 0.0, "chunk_tokens": 2},
        "sim-weak": {"ttft_s": 0.0, "tokens_per_second": 0.0, "chunk_tokens": 2},
        "sim-anthropic": {"ttft_s": 0.0, "tokens_per_second": 0.0},
        "sim-judge": {"ttft_s": 0.0},
        "sim-user": {"ttft_s": 0.0},
        # Same behaviour as sim-strong but never caches: its usage is repeatable byte for byte.
        "sim-nocache": {
            "accuracy": 0.9,
            "prefix_cache": False,
            "chunk_tokens": 3,
            "reasoning": "Thinking it over.",
        },
        # A model that calls tools when offered.
        "sim-tools": {"use_tools": True},
        # A model with a fault in its config rather than in the request.
        "sim-flaky": {"faults": ["429"]},
    }
}

MCQ_PROMPT = "Which planet is the largest?\nA) Mars\nB) Venus\nC) Jupiter\nD) Earth"
JUDGE_PROMPT = "Who wrote the novel 'Dracula'?"
GRID_PROMPT = "Solve this ARC puzzle: [[1,0],[0,1]] -> ?"
CODE_PROMPT = "Write a function add(a, b) returning the sum."


def answer_key() -> AnswerKey:
    key = AnswerKey()
    key.add(
        MCQ_PROMPT,
        "mmlu-pro",
        "mcq",
        {"answer": "C"},
        {"options": ["Mars", "Venus", "Jupiter", "Earth"]},
    )
    key.add(JUDGE_PROMPT, "simpleqa", "judge", {"answer": "Bram Stoker"})
    key.add(GRID_PROMPT, "arc-agi-2", "grid", {"outputs": [[[0, 1], [1, 0]]]})
    key.add(
        CODE_PROMPT, "livecodebench", "code", {"solution": "def add(a, b):\n    return a + b\n"}
    )
    return key


@pytest.fixture(scope="module")
def sim_url() -> Iterator[str]:
    with running_simulator(answer_key=answer_key(), **FAST) as url:
        yield url


@pytest.fixture
def sim(sim_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=sim_url, timeout=10) as client:
        client.post("/_sim/reset").raise_for_status()
        yield client


def chat_body(model: str, content: str, *, stream: bool = True, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": content}],
        "stream": stream,
        **extra,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body
