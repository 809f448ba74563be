"""The simulator and the dataset side agree: their graders accept the oracle's answers and the
simulated judge reads the judge prompts they write."""

from __future__ import annotations

import json

import httpx

from datasets import grading  # noqa: E402
from srbench.simulator.oracle import AnswerKey, judge_block, subject_answer


def test_strict_mcq_grader_scores_oracle_answers_as_the_oracle_decided():
    key = AnswerKey()
    prompts = [f"Q{i}: which?" for i in range(40)]
    for i, prompt in enumerate(prompts):
        key.add(
            prompt,
            "mmlu-pro",
            "mcq",
            {"answer": "ABCDEFGHIJ"[i % 10]},
            {"options": [str(n) for n in range(10)]},
        )
    for i, prompt in enumerate(prompts):
        result = subject_answer(
            key, model="m", seed=3, prompt_text=prompt, accuracy_for=lambda _b: 0.5
        )
        grade = grading.grade_mcq(result.content, "ABCDEFGHIJ"[i % 10], 10)
        assert grade.correct == result.correct, (result.content, grade)


def test_grid_grader_scores_oracle_answers_as_the_oracle_decided():
    key = AnswerKey()
    outputs = [[[1, 2], [3, 4]]]
    key.add("grid?", "arc", "grid", {"outputs": outputs})
    for accuracy in (0.0, 1.0):
        result = subject_answer(
            key, model="m", seed=1, prompt_text="grid?", accuracy_for=lambda _b, a=accuracy: a
        )
        assert grading.grade_grid(result.content, outputs).correct == result.correct


def test_simulated_judge_reads_the_dataset_judge_prompt_and_its_verdict_parses(
    sim: httpx.Client,
):
    messages = grading.judge_messages("Who wrote Dracula?", "Bram Stoker", "Bram Stoker did.")
    assert messages[-1]["content"].endswith(
        judge_block("Who wrote Dracula?", "Bram Stoker", "Bram Stoker did.")
    )
    reply = sim.post("/v1/chat/completions", json={"model": "sim-judge", "messages": messages})
    content = reply.json()["choices"][0]["message"]["content"]
    assert grading.parse_verdict(content) == "correct"
    assert json.loads(content) == {"verdict": "correct"}
