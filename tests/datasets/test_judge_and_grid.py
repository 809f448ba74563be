"""The judge protocol (messages out, verdict in) and ARC exact grid grading."""

from __future__ import annotations

import json

import pytest

from datasets.grading import (
    MalformedVerdict,
    grade_grid,
    judge_messages,
    parse_judge_block,
    parse_verdict,
)


def test_judge_message_ends_with_exactly_one_json_block_that_round_trips() -> None:
    question = 'Who wrote "Dune"?\nAnswer in full.'
    reference = "Frank Herbert"
    response = "It was ```Frank Herbert``` — née {unknown}, ünïcode ok"
    messages = judge_messages(question, reference, response)
    last = messages[-1]
    assert last["role"] == "user"
    assert last["content"].endswith("\n```")
    block = last["content"].rsplit("```json\n", 1)[1].removesuffix("\n```")
    assert json.loads(block) == {"question": question, "reference": reference, "response": response}
    assert list(json.loads(block)) == ["question", "reference", "response"]
    assert parse_judge_block(last["content"]) == json.loads(block)


@pytest.mark.parametrize(
    ("reply", "verdict"),
    [
        ('{"verdict": "correct"}', "correct"),
        ('  \n{"verdict":"incorrect"}\n ', "incorrect"),
        ('```json\n{"verdict": "not_attempted"}\n```', "not_attempted"),
        ('\n```json\n{"verdict": "correct"}\n```\n', "correct"),
        ('```\n{"verdict": "correct"}\n```', "correct"),
    ],
)
def test_parse_verdict_accepts_the_verdict_object(reply: str, verdict: str) -> None:
    assert parse_verdict(reply) == verdict


@pytest.mark.parametrize(
    "reply",
    [
        "correct",
        "A",
        '{"verdict": "Correct"}',
        '{"verdict": "CORRECT"}',
        '{"verdict": "partially correct"}',
        '{"verdict": "correct", "reason": "matches"}',
        '{"grade": "correct"}',
        '["correct"]',
        '{"verdict": true}',
        'The verdict is {"verdict": "correct"}',
        '{"verdict": "correct"} I am confident.',
        '```json\n{"verdict": "correct"}',
        "",
        "{}",
    ],
)
def test_parse_verdict_rejects_anything_else(reply: str) -> None:
    with pytest.raises(MalformedVerdict):
        parse_verdict(reply)


OUT_A = [[1, 0], [0, 1]]
OUT_B = [[3]]


def test_grid_exact_match_from_a_fenced_block() -> None:
    reply = f"The rule flips rows.\n```json\n{json.dumps([OUT_A, OUT_B])}\n```"
    grade = grade_grid(reply, [OUT_A, OUT_B])
    assert grade.correct and grade.status == "ok" and grade.pairs_correct == 2


def test_grid_takes_the_last_array_not_an_earlier_draft() -> None:
    reply = f"Draft: {json.dumps([[[9, 9], [9, 9]], OUT_B])}\nFinal: {json.dumps([OUT_A, OUT_B])}"
    assert grade_grid(reply, [OUT_A, OUT_B]).correct


def test_grid_one_wrong_cell_is_wrong() -> None:
    grade = grade_grid(json.dumps([[[1, 0], [0, 2]], OUT_B]), [OUT_A, OUT_B])
    assert not grade.correct and grade.pairs_correct == 1 and grade.status == "ok"


def test_grid_wrong_dimensions_are_wrong() -> None:
    assert not grade_grid(json.dumps([[[1, 0, 0], [0, 1, 0]]]), [OUT_A]).correct


def test_grid_missing_output_is_wrong_count() -> None:
    grade = grade_grid(json.dumps([OUT_A]), [OUT_A, OUT_B])
    assert not grade.correct and grade.status == "wrong_count"


def test_grid_single_bare_grid_accepted_for_one_output() -> None:
    assert grade_grid(f"Output:\n{json.dumps(OUT_A)}", [OUT_A]).correct


def test_grid_unparsed_when_no_grid_list() -> None:
    grade = grade_grid("I could not find the rule [sorry].", [OUT_A])
    assert grade.status == "unparsed" and not grade.correct


def test_grid_inside_think_block_is_ignored() -> None:
    reply = f"<think>{json.dumps([OUT_A])}</think>No idea."
    assert grade_grid(reply, [OUT_A]).status == "unparsed"
