"""The simulated models write working code (issue 22, point 6): on the bundled LiveCodeBench and
SciCode fixtures, a model at accuracy 1.0 writes programs the real sandboxed graders pass, at
accuracy 0 programs they fail, and at accuracy p it writes the working program for a share of
the questions that a binomial bound computed here accepts. Requests go over HTTP to a running
simulator; SciCode is asked one step per turn, the model's replies kept, as the engine does."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import httpx
import pytest

from datasets.answer_key import answer_key_from_sources
from datasets.benchmarks import get_adapter
from datasets.scicode_fixture_data import write_fixture_test_data
from runs.engine.code_grading import grade_livecodebench, grade_scicode, scicode_step_prompts
from runs.engine.sandbox_command import SandboxLimits, sandbox_available
from srbench.simulator.oracle import AnswerKey, subject_answer
from srbench.simulator.testing import running_simulator

LCB = get_adapter("livecodebench")
SCICODE = get_adapter("scicode")
SEED = 7


@pytest.fixture(scope="module")
def key() -> AnswerKey:
    return answer_key_from_sources(
        [("livecodebench", str(LCB.fixture_path())), ("scicode", str(SCICODE.fixture_path()))]
    )


def _chat(url: str, model: str, messages: list[dict[str, Any]]) -> str:
    body = {"model": model, "messages": messages, "seed": SEED}
    reply = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=30)
    reply.raise_for_status()
    return reply.json()["choices"][0]["message"]["content"]


def _scicode_replies(url: str, model: str, payload: dict[str, Any]) -> list[str]:
    messages = SCICODE.messages(payload)
    replies = []
    for step, prompt in enumerate(scicode_step_prompts(payload)):
        if step:
            messages = [*messages, {"role": "user", "content": prompt}]
        content = _chat(url, model, messages)
        replies.append(content)
        messages = [*messages, {"role": "assistant", "content": content}]
    return replies


@pytest.mark.parametrize("accuracy", [1.0, 0.0])
def test_the_strong_model_writes_code_the_real_graders_pass_exactly_at_accuracy_one(
    key, tmp_path, accuracy
):
    assert sandbox_available(), "bubblewrap missing: run scripts/ensure_sandbox.sh"
    passes = accuracy == 1.0
    h5 = write_fixture_test_data(tmp_path / "test_data.h5")
    models = {"sim-strong": {"accuracy": accuracy, "ttft_s": 0.0, "tokens_per_second": 0.0}}
    with running_simulator(answer_key=key, models=models) as url:
        for question in LCB.load(LCB.fixture_path()):
            answer = _chat(url, "sim-strong", LCB.messages(question.payload))
            assert "```python\n" in answer
            grade = grade_livecodebench(
                answer=answer,
                payload=question.payload,
                secret=question.secret,
                limits=SandboxLimits(wall_s=5.0, cpu_s=5.0),
            )
            assert grade["correct"] is passes, (question.native_id, grade)
        for question in SCICODE.load(SCICODE.fixture_path()):
            replies = _scicode_replies(url, "sim-strong", question.payload)
            assert all("```python\ndef " in r for r in replies), replies
            grade = grade_scicode(
                step_replies=replies, payload=question.payload, secret=question.secret, h5_path=h5
            )
            assert grade["correct"] is passes, (question.native_id, grade)
            if passes:
                assert grade["steps_passed"] == grade["steps_total"]
            else:
                # A wrong problem is one slipped step (and the steps built on it).
                assert grade["steps_passed"] < grade["steps_total"]


def _binomial_tail_bound(n: int, p: float, alpha: float) -> float:
    """A deviation d with P(|K - np| > d) <= alpha for K ~ Binomial(n, p), from the exact
    probability mass function (in log space, so large n does not overflow)."""

    def pmf(k: int) -> float:
        log = math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
        return math.exp(log + k * math.log(p) + (n - k) * math.log(1 - p))

    by_deviation = sorted(((abs(k - n * p), pmf(k)) for k in range(n + 1)), reverse=True)
    outside = 0.0
    for deviation, mass in by_deviation:
        # Everything farther out than this deviation holds at most alpha of the mass.
        if outside + mass > alpha:
            return deviation
        outside += mass
    return 0.0


def test_at_accuracy_p_the_share_of_working_programs_is_binomial(key, tmp_path):
    """Each (model, question, seed) writes either exactly the accuracy-1 program or exactly the
    accuracy-0 one (proven to pass and fail above), the same every time; over many seeds the
    share of working ones is within the exact binomial bound at alpha 1e-6. A few of each are
    graded for real."""
    p = 0.6
    prompts: list[tuple[str, list[str]]] = []
    for question in LCB.load(LCB.fixture_path()):
        prompts.append((question.native_id, [LCB.messages(question.payload)[-1]["content"]]))
    for question in SCICODE.load(SCICODE.fixture_path()):
        prompts.append((question.native_id, scicode_step_prompts(question.payload)))

    def replies(texts: list[str], seed: int, accuracy: float) -> tuple[list[str], set]:
        answers = [
            subject_answer(
                key, model="sim-strong", seed=seed, prompt_text=t, accuracy_for=lambda b: accuracy
            )
            for t in texts
        ]
        return [a.content for a in answers], {a.correct for a in answers}

    seeds = range(400)
    working = trials = 0
    examples: dict[bool, tuple[str, int, list[str]]] = {}
    for native_id, texts in prompts:
        right, _ = replies(texts, 0, 1.0)
        for seed in seeds:
            wrong, _ = replies(texts, seed, 0.0)
            got, flags = replies(texts, seed, p)
            assert got == replies(texts, seed, p)[0]  # deterministic
            # One roll per problem: every step of a SciCode problem agrees.
            assert len(flags) == 1
            correct = flags.pop()
            assert got == (right if correct else wrong), (native_id, seed)
            working += int(correct)
            trials += 1
            examples.setdefault(correct, (native_id, seed, got))
    bound = _binomial_tail_bound(trials, p, 1e-6)
    assert abs(working - trials * p) <= bound, (working, trials, bound)

    # The rolled answers grade as rolled (one right and one wrong example, for real).
    h5 = write_fixture_test_data(tmp_path / "test_data.h5")
    questions = {
        q.native_id: (adapter, q)
        for adapter in (LCB, SCICODE)
        for q in adapter.load(adapter.fixture_path())
    }
    assert set(examples) == {True, False}
    for correct, (native_id, _seed, got) in examples.items():
        adapter, question = questions[native_id]
        if adapter is SCICODE:
            grade = grade_scicode(
                step_replies=got, payload=question.payload, secret=question.secret, h5_path=h5
            )
        else:
            grade = grade_livecodebench(
                answer=got[0], payload=question.payload, secret=question.secret
            )
        assert grade["correct"] is correct, (native_id, grade)


def test_packaged_scicode_problems_without_a_reference_get_no_invented_code(key):
    """nvidia-scicode carries no ground-truth code: the simulator has nothing to write, so it
    answers generically (correct unknown) rather than pretending."""
    from datasets.packages import locate

    located = locate("scicode")
    packaged = answer_key_from_sources([("scicode", str(located.path))])
    question = SCICODE.load(Path(located.path))[0]
    prompt = scicode_step_prompts(question.payload)[0]
    answer = subject_answer(
        packaged, model="sim-strong", seed=SEED, prompt_text=prompt, accuracy_for=lambda b: 1.0
    )
    assert answer.benchmark == "scicode" and answer.correct is None
    assert "```python" not in answer.content
