"""MCQ and ARC regrades read a cell's stored final answer, the ledger's copy, where U+0000 and
lone surrogates are U+FFFD (runs/models/fields.py); the live grade read the model's text. The
graders must decide the same from both (R15): neither character is a letter, a digit, a
bracket or a space to them. Checked over generated replies that mix answer statements, grids
and those characters."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from datasets.grading import grade_grid, grade_mcq
from datasets.mcq_grader_v1 import grade_mcq_strict_v1
from runs.models.fields import storable

HOSTILE = ["\x00", "\ud800", "\udfff", "\ufffd"]
PIECES = [
    "Answer: ",
    "The answer is ",
    "\\boxed{",
    "}",
    "**",
    "(",
    ")",
    "A",
    "B",
    "C",
    "J",
    ".",
    " ",
    "\n",
    "<think>",
    "</think>",
    "[[1, 2], [3, 4]]",
    "[[0,",
    "1]]",
    ",",
    "0",
    "1",
    "```",
    "\\u0000",
    *HOSTILE,
]
REPLIES = st.lists(st.sampled_from(PIECES), max_size=30).map("".join)


@settings(max_examples=400)
@given(REPLIES, st.sampled_from("ABC"))
def test_an_mcq_reply_grades_the_same_from_its_stored_copy(reply, letter):
    for grade in (grade_mcq, grade_mcq_strict_v1):
        live, stored = grade(reply, letter, 4), grade(storable(reply), letter, 4)
        assert (live.correct, live.extracted, live.status) == (
            stored.correct,
            stored.extracted,
            stored.status,
        ), (grade.__name__, reply)


@settings(max_examples=400)
@given(REPLIES)
def test_a_grid_reply_grades_the_same_from_its_stored_copy(reply):
    outputs = [[[1, 2], [3, 4]]]
    live, stored = grade_grid(reply, outputs), grade_grid(storable(reply), outputs)
    assert (live.correct, live.status, live.parsed) == (
        stored.correct,
        stored.status,
        stored.parsed,
    )
