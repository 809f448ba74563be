"""The oracle's answers, the simulated judge and the simulated user."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from datasets.answer_key import answer_key_from_sources
from srbench.simulator import agents, oracle
from srbench.simulator.oracle import (
    USER_STOP,
    AnswerKey,
    judge_block,
    judge_verdict,
    parse_judge_block,
    subject_answer,
)
from srbench.simulator.testing import running_simulator
from tests.simulator.conftest import CODE_PROMPT, GRID_PROMPT, JUDGE_PROMPT, MCQ_PROMPT

ANSWER_LINE = re.compile(r"Answer: ([A-Z])$")


def answer(key: AnswerKey, prompt: str, *, model: str = "m", seed: int = 1, accuracy: float):
    return subject_answer(
        key, model=model, seed=seed, prompt_text=prompt, accuracy_for=lambda _benchmark: accuracy
    )


def mcq_key(n: int) -> tuple[AnswerKey, list[str]]:
    key = AnswerKey()
    prompts = [f"Question {i}: pick one." for i in range(n)]
    for i, prompt in enumerate(prompts):
        key.add(
            prompt, "mmlu-pro", "mcq", {"answer": "ABCD"[i % 4]}, {"options": ["w", "x", "y", "z"]}
        )
    return key, prompts


def test_mcq_accuracy_follows_the_configured_rate():
    key, prompts = mcq_key(600)
    for rate in (0.9, 0.55):
        correct = sum(bool(answer(key, p, accuracy=rate).correct) for p in prompts)
        assert abs(correct / len(prompts) - rate) < 0.06


def test_mcq_answer_names_exactly_one_letter_which_is_right_only_when_correct():
    key, prompts = mcq_key(50)
    for i, prompt in enumerate(prompts):
        result = answer(key, prompt, accuracy=0.5)
        letters = ANSWER_LINE.findall(result.content)
        assert len(letters) == 1 and letters[0] in "ABCD"
        assert (letters[0] == "ABCD"[i % 4]) == result.correct


def test_same_model_seed_and_question_always_decide_the_same_way():
    key, prompts = mcq_key(40)
    first = [answer(key, p, accuracy=0.5) for p in prompts]
    assert first == [answer(key, p, accuracy=0.5) for p in prompts]
    other_seed = [answer(key, p, accuracy=0.5, seed=2).correct for p in prompts]
    assert other_seed != [a.correct for a in first]


def test_judge_kind_answers_pass_or_fail_the_simulated_judge_as_decided():
    key = AnswerKey()
    key.add(JUDGE_PROMPT, "simpleqa", "judge", {"answer": "Bram Stoker"})
    key.add("In what year did Apollo 11 land?", "simpleqa", "judge", {"answer": "1969"})
    for prompt, reference in (
        (JUDGE_PROMPT, "Bram Stoker"),
        ("In what year did Apollo 11 land?", "1969"),
    ):
        right = answer(key, prompt, accuracy=1.0)
        wrong = answer(key, prompt, accuracy=0.0)
        assert right.correct is True and judge_verdict(reference, right.content) == "correct"
        assert wrong.correct is False and judge_verdict(reference, wrong.content) == "incorrect"


def test_grid_answer_is_the_outputs_json_and_a_wrong_one_differs_in_exactly_one_cell():
    key = AnswerKey()
    outputs = [[[0, 1, 2], [3, 4, 5]], [[9]]]
    key.add(GRID_PROMPT, "arc-agi-2", "grid", {"outputs": outputs})
    assert json.loads(answer(key, GRID_PROMPT, accuracy=1.0).content) == outputs
    wrong = json.loads(answer(key, GRID_PROMPT, accuracy=0.0).content)
    flat = lambda grids: [v for g in grids for row in g for v in row]  # noqa: E731
    assert sum(a != b for a, b in zip(flat(wrong), flat(outputs), strict=True)) == 1


def test_code_answer_with_a_solution_is_a_python_block():
    key = AnswerKey()
    key.add(CODE_PROMPT, "livecodebench", "code", {"solution": "def add(a, b):\n    return a+b"})
    right = answer(key, CODE_PROMPT, accuracy=1.0).content
    assert "```python\ndef add(a, b):\n    return a+b\n```" in right
    # The wrong program is a plausible slip: the same function, its return value off.
    wrong = answer(key, CODE_PROMPT, accuracy=0.0).content
    assert "```python\ndef add(a, b):\n    return 1.5 * (a+b)\n```" in wrong


def test_unknown_prompt_gets_a_deterministic_generic_reply():
    key = AnswerKey()
    one = answer(key, "hello there", accuracy=1.0)
    assert one.correct is None and one.benchmark is None
    assert one == answer(key, "hello there", accuracy=1.0)


@pytest.mark.parametrize(
    ("reference", "response", "verdict"),
    [
        ("Bram Stoker", "It was written by bram stoker!", "correct"),
        ("The Hague", "hague", "correct"),
        ("4", "The answer is 42.", "incorrect"),
        ("Paris", "Lyon", "incorrect"),
        ("Paris", "", "not_attempted"),
        ("Paris", "I don't know.", "not_attempted"),
    ],
)
def test_judge_verdict_normalises_case_punctuation_articles_and_whitespace(
    reference, response, verdict
):
    assert judge_verdict(reference, response) == verdict


def test_judge_block_round_trips_through_the_parser():
    text = "Grade this.\n\n" + judge_block('Q "quoted"?', "Réponse", "a\n```b```")
    assert parse_judge_block(text) == {
        "question": 'Q "quoted"?',
        "reference": "Réponse",
        "response": "a\n```b```",
    }


def judge(sim: httpx.Client, reference: str, response: str) -> str:
    prompt = "Grade the response against the reference.\n\n" + judge_block(
        "Q?", reference, response
    )
    body = {"model": "sim-judge", "messages": [{"role": "user", "content": prompt}]}
    reply = sim.post("/v1/chat/completions", json=body).json()
    return reply["choices"][0]["message"]["content"]


def test_simulated_judge_replies_with_a_json_verdict(sim: httpx.Client):
    assert json.loads(judge(sim, "Bram Stoker", "Bram Stoker wrote it.")) == {"verdict": "correct"}
    assert json.loads(judge(sim, "Bram Stoker", "Mary Shelley")) == {"verdict": "incorrect"}
    assert json.loads(judge(sim, "Bram Stoker", "I don't know")) == {"verdict": "not_attempted"}


def test_simulated_judge_without_a_block_replies_with_no_verdict(sim: httpx.Client):
    body = {"model": "sim-judge", "messages": [{"role": "user", "content": "Grade this."}]}
    content = sim.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]["content"]
    with pytest.raises(json.JSONDecodeError):
        json.loads(content)


def test_simulated_user_follows_the_scenario_and_stops_after_the_configured_turns(
    sim: httpx.Client,
):
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You want to cancel order 42. Your name is Mia."},
        {"role": "user", "content": "Hello, how can I help?"},
    ]
    replies = []
    for _ in range(3):  # sim-user stops after 3 turns in the default config
        body = {"model": "sim-user", "messages": messages}
        reply = sim.post("/v1/chat/completions", json=body).json()["choices"][0]["message"][
            "content"
        ]
        replies.append(reply)
        messages += [
            {"role": "assistant", "content": reply},
            {"role": "user", "content": "Anything else?"},
        ]
    assert "cancel order 42" in replies[0] and "Mia" in replies[1]
    assert USER_STOP not in replies[0] + replies[1]
    assert replies[2].endswith(USER_STOP)


@dataclass
class FakeQuestion:
    benchmark: str
    native_id: str
    subject: str
    payload: dict[str, Any]
    secret: dict[str, Any]


class FakeAdapter:
    key = "mmlu-pro"
    kind = "mcq"

    def load(self, path: str) -> list[FakeQuestion]:
        return [
            FakeQuestion(
                "mmlu-pro",
                "q1",
                "math",
                {"question": f"From {path}: 1+1?", "options": ["1", "2"]},
                {"answer": "B"},
            )
        ]

    def messages(self, payload: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            {"role": "system", "content": "Answer."},
            {"role": "user", "content": payload["question"]},
        ]


def test_answer_key_from_sources_reads_questions_through_the_adapters(monkeypatch):
    import datasets.answer_key as builder

    monkeypatch.setattr(builder, "get_adapter", lambda key: FakeAdapter())
    key = answer_key_from_sources([("mmlu-pro", "file.jsonl")])
    assert len(key) == 1
    result = answer(key, "From file.jsonl: 1+1?", accuracy=1.0)
    assert result.benchmark == "mmlu-pro" and result.content.endswith("Answer: B")


def test_streamed_mcq_reply_over_http_matches_the_oracle(sim: httpx.Client):
    body = {"model": "sim-weak", "messages": [{"role": "user", "content": MCQ_PROMPT}]}
    content = sim.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]["content"]
    assert len(ANSWER_LINE.findall(content)) == 1


@pytest.mark.parametrize("correct", [True, False])
def test_livecodebench_answers_pass_the_sandboxed_grader_exactly_when_correct(correct):
    from pathlib import Path

    from datasets.benchmarks.livecodebench import ADAPTER as LCB
    from runs.engine.code_grading import grade_livecodebench
    from runs.engine.sandbox_command import SandboxLimits, sandbox_available

    assert sandbox_available(), "bubblewrap missing: run scripts/ensure_sandbox.sh"
    fixture = Path(__file__).resolve().parents[2] / "datasets/fixtures/livecodebench/test.jsonl"
    key = answer_key_from_sources([("livecodebench", str(fixture))])
    for question in LCB.load(fixture):
        prompt = LCB.messages(question.payload)[-1]["content"]
        reply = answer(key, prompt, accuracy=1.0 if correct else 0.0)
        assert reply.correct is correct
        grade = grade_livecodebench(
            answer=reply.content,
            payload=question.payload,
            secret=question.secret,
            limits=SandboxLimits(wall_s=3.0, cpu_s=3.0),
        )
        assert grade["correct"] is correct, (question.native_id, grade)


# -- agent tasks (τ³, Terminal-Bench); end-to-end loops are in test_agents.py ---------------------


def _fixture(*parts: str) -> str:
    from pathlib import Path

    return str(Path(__file__).resolve().parents[2].joinpath("datasets", "fixtures", *parts))


def test_answer_key_indexes_agent_tasks_by_their_opening_message():
    from pathlib import Path

    from datasets.benchmarks.tau3 import ADAPTER as TAU3
    from datasets.benchmarks.terminal_bench import ADAPTER as TB

    sources = [
        (TAU3, _fixture("tau3", "domains")),
        (TB, _fixture("terminal-bench", "tasks")),
    ]
    key = answer_key_from_sources([(adapter.key, path) for adapter, path in sources])
    assert len(key) == 7
    for adapter, path in sources:
        for question in adapter.load(Path(path)):
            entry = key.lookup(oracle.first_user_text(adapter.messages(question.payload)))
            assert entry is not None and entry.kind == "agent"
            assert entry.secret == question.secret and entry.payload == question.payload


def _agent_key(secret: dict[str, Any], payload: dict[str, Any] | None = None) -> AnswerKey:
    key = AnswerKey()
    key.add("Open the task.", "tau3", "agent", secret, payload or {})
    return key


def _turn(key: AnswerKey, messages: list[dict[str, Any]], tools: list[Any], accuracy: float):
    return agents.agent_turn(
        key, model="m", seed=1, messages=messages, tools=tools, accuracy_for=lambda _b: accuracy
    )


TOOLS = [
    {"type": "function", "function": {"name": n, "parameters": {"properties": {p: {}}}}}
    for n, p in (("get_thing", "thing_id"), ("change_thing", "thing_id"))
]
SECRET = {
    "evaluation_criteria": {
        "actions": [
            {"name": "get_thing", "arguments": {"thing_id": "T-1"}},
            {"name": "change_thing", "arguments": {"thing_id": "T-1"}},
        ],
        "communicate_info": ["code 42"],
    }
}


def test_agent_turns_follow_the_gold_actions_then_answer_with_the_required_outputs():
    key = _agent_key(SECRET)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Open the task."}]
    seen = []
    for _ in range(3):
        turn = _turn(key, messages, TOOLS, 1.0)
        assert turn is not None and turn.correct is True and turn.benchmark == "tau3"
        seen.append((turn.tool_name, turn.arguments))
        if turn.tool_name is None:
            break
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [{"id": "x"}]},
            {"role": "tool", "tool_call_id": "x", "content": "{}"},
            # A user turn in between changes nothing: the opening still identifies the task.
            {"role": "user", "content": "ok"},
        ]
    assert seen[:2] == [
        ("get_thing", '{"thing_id": "T-1"}'),
        ("change_thing", '{"thing_id": "T-1"}'),
    ]
    assert seen[2] == (None, None)
    final = _turn(key, messages, TOOLS, 1.0)
    assert "code 42" in final.content and final.content.endswith(oracle.AGENT_CLOSING)


def test_the_wrong_agent_sends_its_last_write_to_another_record_and_omits_outputs():
    db = {"things": {"T-1": {"thing_id": "T-1"}, "T-2": {"thing_id": "T-2"}}}
    plan = agents.tau_plan(oracle.KeyEntry("tau3", "agent", SECRET, {"db": db}), False, TOOLS)
    assert [(a.name, a.arguments) for a in plan.actions] == [
        ("get_thing", {"thing_id": "T-1"}),
        ("change_thing", {"thing_id": "T-2"}),
    ]
    assert "code 42" not in plan.final


def test_the_wrong_agent_on_a_read_only_task_makes_an_unrequested_write():
    secret = {"evaluation_criteria": {"actions": [SECRET["evaluation_criteria"]["actions"][0]]}}
    plan = agents.tau_plan(oracle.KeyEntry("tau3", "agent", secret, {"db": {}}), False, TOOLS)
    assert [(a.name, a.arguments) for a in plan.actions][-1] == (
        "change_thing",
        {"thing_id": "T-1"},
    )


def test_agent_turn_ignores_unknown_and_non_agent_prompts():
    key = _agent_key(SECRET)
    key.add("A question.", "simpleqa", "judge", {"answer": "x"})
    for opening in ("Something else.", "A question."):
        assert _turn(key, [{"role": "user", "content": opening}], TOOLS, 1.0) is None


def test_agent_tasks_sharing_an_opening_are_not_played():
    key = _agent_key(SECRET)
    key.add("Open the task.", "tau3", "agent", {"evaluation_criteria": {"actions": []}})
    assert _turn(key, [{"role": "user", "content": "Open the task."}], TOOLS, 1.0) is None


def test_solution_scripts_split_into_typed_commands():
    script = (
        "#!/usr/bin/env bash\n"
        "# set up\n"
        "set -e\n\n"
        "python3 - <<'PY'\nprint('a')\n\nprint('b')\nPY\n"
        "cat <<-EOF > out.txt\n\tx\n\tEOF\n"
        "echo one \\\n  two\n"
    )
    assert agents.split_shell_script(script) == [
        "set -e",
        "python3 - <<'PY'\nprint('a')\n\nprint('b')\nPY",
        "cat <<-EOF > out.txt\n\tx\n\tEOF",
        "echo one \\\n  two",
    ]


def test_legacy_solution_yaml_gives_its_keystroke_commands():
    secret = {
        "solution": [
            {
                "path": "solution.yaml",
                "encoding": "utf-8",
                "content": "- command: ls\n  min_timeout_sec: 1\n- command: make all\n",
            }
        ]
    }
    assert agents.solution_commands(secret) == ["ls", "make all"]


def test_the_simulated_user_stops_when_the_agent_closes_and_not_before(sim: httpx.Client):
    system = f"You are a caller.\n\n{oracle.SCENARIO_HEADING}\nWhat you know: Your order is 7."
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system},
        {"role": "user", "content": "Hi! How can I help you today?"},
        {"role": "assistant", "content": "I want to cancel an order."},
        {"role": "user", "content": "Which order is it?"},
    ]
    body = {"model": "sim-user", "messages": messages}
    reply = sim.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]
    assert reply["content"] == "My order is 7."
    messages += [
        {"role": "assistant", "content": reply["content"]},
        {"role": "user", "content": f"Cancelled. {oracle.AGENT_CLOSING}"},
    ]
    body = {"model": "sim-user", "messages": messages}
    reply = sim.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]
    assert reply["content"].endswith(USER_STOP)


@pytest.mark.parametrize("reference", ["A", "B", "(A)", "E"])
def test_a_multiple_choice_judge_question_is_answered_wrongly_with_another_letter(reference):
    key = AnswerKey()
    prompt = f"HLE question keyed {reference}: pick one of A-E."
    key.add(prompt, "hle", "judge", {"answer": reference})
    right = answer(key, prompt, accuracy=1.0)
    wrong = answer(key, prompt, accuracy=0.0)
    assert right.correct is True and judge_verdict(reference, right.content) == "correct"
    assert wrong.correct is False and judge_verdict(reference, wrong.content) == "incorrect"


def test_a_wrong_answer_to_an_hle_question_keyed_a_is_served_over_http():
    key = AnswerKey()
    prompt = "Which option is right? Answer A, B, C or D."
    key.add(prompt, "hle", "judge", {"answer": "A"})
    config = {"models": {"sim-zero": {"accuracy": 0.0, "ttft_s": 0.0}}}
    with running_simulator(answer_key=key, **config) as url:
        reply = httpx.post(
            f"{url}/v1/chat/completions",
            json={"model": "sim-zero", "messages": [{"role": "user", "content": prompt}]},
            timeout=10,
        )
    assert reply.status_code == 200
    content = reply.json()["choices"][0]["message"]["content"]
    assert content.startswith("The answer is ") and judge_verdict("A", content) == "incorrect"
