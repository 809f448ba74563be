"""ARC Prize pass@2 (issue 22 point 5): each test output scores 1 if either of at most two
attempts matches it exactly; a task scores the mean over its test outputs. Every expected value
below was worked out by hand from the grids written next to it."""

from __future__ import annotations

from fractions import Fraction

import pytest

from datasets.grading import (
    ARC_PRIZE_LABEL,
    ARC_PRIZE_SCORER_VERSION,
    arc_prize_attempts,
    grade_grid,
    score_arc_prize,
    score_arc_prize_task,
)

A = [[1, 2], [3, 4]]
B = [[5, 6], [7, 8]]
C = [[0]]
A_TRANSPOSED = [[1, 3], [2, 4]]
A_WIDER = [[1, 2, 0], [3, 4, 0]]


def test_one_output_first_attempt_right() -> None:
    result = score_arc_prize_task([[A, B]], [A])
    assert result.outputs_correct == (True,)
    assert result.score == 1


def test_one_output_second_attempt_right_still_counts() -> None:
    assert score_arc_prize_task([[B, A]], [A]).score == 1


def test_one_output_both_attempts_wrong() -> None:
    result = score_arc_prize_task([[B, A_TRANSPOSED]], [A])
    assert result.outputs_correct == (False,) and result.score == 0


def test_two_outputs_half_right_scores_one_half() -> None:
    # Output 0 (A) is hit by attempt 2; output 1 (B) by neither: 1 of 2 outputs.
    result = score_arc_prize_task([[C, A], [A, C]], [A, B])
    assert result.outputs_correct == (True, False)
    assert result.score == Fraction(1, 2)


def test_three_outputs_two_right_scores_two_thirds() -> None:
    result = score_arc_prize_task([[A], [C, B], [A_WIDER, A_TRANSPOSED]], [A, B, C])
    assert result.outputs_correct == (True, True, False)
    assert result.score == Fraction(2, 3)


def test_exact_match_needs_the_same_dimensions_and_every_cell() -> None:
    # Same cells plus a padding column, the transposition, one cell off: none match.
    one_off = [[1, 2], [3, 5]]
    assert score_arc_prize_task([[A_WIDER, A_TRANSPOSED]], [A]).score == 0
    assert score_arc_prize_task([[one_off]], [A]).score == 0


def test_missing_attempts_and_non_grids_never_match() -> None:
    # No attempt list for output 1; a None, a string, a flat list and booleans for output 0.
    assert score_arc_prize_task([[None, "[[1, 2], [3, 4]]"]], [A, B]).score == 0
    assert score_arc_prize_task([[[1, 2, 3, 4]]], [A]).score == 0
    assert score_arc_prize_task([[[[True]]]], [[[1]]]).score == 0  # True == 1, yet not a colour
    assert score_arc_prize_task([[], [B]], [A, B]).score == Fraction(1, 2)


def test_more_than_two_attempts_is_refused_not_scored() -> None:
    with pytest.raises(ValueError, match="3 attempts"):
        score_arc_prize_task([[B, C, A]], [A])


def test_attempts_for_outputs_the_task_lacks_are_refused() -> None:
    with pytest.raises(ValueError, match="2 test outputs, but the task has 1"):
        score_arc_prize_task([[A], [B]], [A])


def test_submission_format_attempt_1_and_attempt_2() -> None:
    submission = [{"attempt_1": B, "attempt_2": A}, {"attempt_1": C}]
    attempts = arc_prize_attempts(submission)
    assert attempts == [[B, A], [C, None]]
    assert score_arc_prize_task(attempts, [A, B]).score == Fraction(1, 2)


def test_benchmark_score_is_the_mean_of_task_scores() -> None:
    # Tasks scoring 1, 1/2 and 0: (1 + 1/2 + 0) / 3 = 1/2. Per-output pooling would give 2/4.
    tasks = [
        score_arc_prize_task([[A]], [A]),
        score_arc_prize_task([[A], [C]], [A, B]),
        score_arc_prize_task([[C]], [A]),
    ]
    assert [t.score for t in tasks] == [1, Fraction(1, 2), 0]
    assert score_arc_prize(tasks) == Fraction(1, 2)
    # Weighting matters: 1 + 1/3 over two tasks is 2/3, while pooled outputs would be 2/4.
    uneven = [
        score_arc_prize_task([[A]], [A]),
        score_arc_prize_task([[A], [C], [C]], [A, B, B]),
    ]
    assert score_arc_prize(uneven) == Fraction(2, 3)
    assert score_arc_prize([]) is None


def test_labelled_and_versioned_apart_from_the_sr_bench_grader() -> None:
    result = score_arc_prize_task([[A]], [A])
    assert result.label == ARC_PRIZE_LABEL and "pass@2" in result.label
    assert result.version == ARC_PRIZE_SCORER_VERSION


def test_where_the_official_scoring_and_sr_bench_differ() -> None:
    # sr-bench: one attempt, all outputs atomic -> a half-right two-output task scores 0 there,
    # 1/2 under ARC Prize.
    reply = "```json\n[[[1, 2], [3, 4]], [[0]]]\n```"
    sr_bench = grade_grid(reply, [A, B])
    assert sr_bench.correct is False and sr_bench.pairs_correct == 1
    assert score_arc_prize_task([[A], [C]], [A, B]).score == Fraction(1, 2)
