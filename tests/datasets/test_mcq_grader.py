"""The frozen MCQ grader `mcq-strict/1` against replies a real model produces: runs whose
manifest names it are still graded by it, so its behaviour must not move. The current grader,
`mcq-final/2`, has its own table in test_mcq_reference_rule.py."""

from __future__ import annotations

import pytest

from datasets.mcq_grader_v1 import grade_mcq_strict_v1 as grade_mcq

# (reply, correct letter, n_options, expected extracted, expected status, expected strict)
CASES: list[tuple[str, str, int, str | None, str, bool]] = [
    ("The answer is (C).", "C", 4, "C", "ok", True),
    ("Step 1... Step 2... The answer is C", "C", 4, "C", "ok", True),
    ("**Answer:** C", "C", 4, "C", "ok", True),
    ("Answer: **C**", "C", 4, "C", "ok", True),
    ("**Answer: C**", "C", 4, "C", "ok", True),
    ("Answer: (C)", "C", 4, "C", "ok", True),
    ("Answer: C)", "C", 4, "C", "ok", True),
    ("ANSWER: C", "C", 4, "C", "ok", True),
    ("Answer:\nC", "C", 4, "C", "ok", True),
    ("The answer is: C", "C", 4, "C", "ok", True),
    ("The correct answer is option C.", "C", 4, "C", "ok", True),
    ("The answer is C because the derivative vanishes there.", "C", 4, "C", "ok", True),
    ("The answer is $C$", "C", 4, "C", "ok", True),
    ("The answer is (C) 42 m", "C", 4, "C", "ok", True),
    ("Answer: C\n\nExplanation: A is wrong because it ignores friction.", "C", 4, "C", "ok", True),
    ("\\boxed{C}", "C", 4, "C", "ok", True),
    ("So we get $\\boxed{C}$.", "C", 4, "C", "ok", True),
    ("\\boxed{\\text{C}}", "C", 4, "C", "ok", True),
    ("\\boxed{(C)}", "C", 4, "C", "ok", True),
    ("Answer: $\\boxed{C}$", "C", 4, "C", "ok", True),
    ("C", "C", 4, "C", "ok", True),
    ("C.\nBecause the other options contradict the data.", "C", 4, "C", "ok", True),
    ("(C)\nThe others fail.", "C", 4, "C", "ok", True),
    ("C. 42 newtons, since F = ma.", "C", 4, "C", "ok", True),
    ("The answer is C. Answer: C", "C", 4, "C", "ok", True),
    ("Answer: B\nAnswer: B", "B", 4, "B", "ok", True),
    ("A good first step is to balance the equation. The answer is (C).", "C", 4, "C", "ok", True),
    ("The answer is a function of temperature; Answer: C", "C", 4, "C", "ok", True),
    ("Answer: J", "J", 10, "J", "ok", True),
    # wrong but cleanly parsed
    ("**The answer is (B)**", "C", 4, "B", "ok", True),
    # lower case: accepted, but not the strict format
    ("answer: c", "C", 4, "C", "ok", False),
    ("The answer is (c).", "C", 4, "C", "ok", False),
    ("so the answer is c", "C", 4, "C", "ok", False),
    ("c", "C", 4, "C", "ok", False),
    ("the answer is d.", "C", 4, "D", "ok", False),
    # reasoning blocks are not the answer
    ("<think>The answer is B</think>The answer is C", "C", 4, "C", "ok", True),
    ("<THINK>Answer: B</THINK>\nAnswer: C", "C", 4, "C", "ok", True),
    ("Answer: B would be tempting.</think>\nAnswer: C", "C", 4, "C", "ok", True),
    ("<think>Answer: B</think>", "B", 4, None, "unparsed", False),
    ("<think>still thinking, the answer is B", "B", 4, None, "unparsed", False),
    # several distinct letters: ambiguous, wrong
    ("The answer is B. Wait, actually the answer is C.", "C", 4, None, "ambiguous", False),
    ("Answer: B\n\\boxed{C}", "C", 4, None, "ambiguous", False),
    ("The answer is A or B.", "A", 4, None, "ambiguous", False),
    ("Answer: B, C", "B", 4, None, "ambiguous", False),
    ("Answer: A/B", "A", 4, None, "ambiguous", False),
    ("A\n\nThe answer is (C)", "C", 4, None, "ambiguous", False),
    # no stated answer: never guess the last letter in the reasoning
    ("I think B is plausible, but C seems right. So overall, C.", "C", 4, None, "unparsed", False),
    ("Option C looks best.", "C", 4, None, "unparsed", False),
    ("", "C", 4, None, "unparsed", False),
    ("The answer isn't B; it's C.", "C", 4, None, "unparsed", False),
    ("The answer is I think B", "B", 10, None, "unparsed", False),
    ("\\boxed{42}", "C", 4, None, "unparsed", False),
    ("Answer: 42", "C", 4, None, "unparsed", False),
    ("The answer is either of them.", "C", 4, None, "unparsed", False),
    # letters beyond the options are rejected
    ("Answer: E", "A", 4, None, "unparsed", False),
    ("Answer: Z", "A", 10, None, "unparsed", False),
    ("\\boxed{E}", "A", 4, None, "unparsed", False),
]


@pytest.mark.parametrize(("reply", "correct", "n", "extracted", "status", "strict"), CASES)
def test_mcq_grader_reads_only_a_stated_answer(
    reply: str, correct: str, n: int, extracted: str | None, status: str, strict: bool
) -> None:
    grade = grade_mcq(reply, correct, n)
    assert (grade.extracted, grade.status, grade.strict_format) == (extracted, status, strict)
    assert grade.correct == (status == "ok" and extracted == correct)


def test_table_covers_at_least_forty_replies() -> None:
    assert len(CASES) >= 40


def test_out_of_range_letter_counts_as_another_answer_for_ambiguity() -> None:
    assert grade_mcq("Answer: E\n\\boxed{B}", "B", 4).status == "ambiguous"
