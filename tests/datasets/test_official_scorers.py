"""The official scorers beside the sr-bench ones (issue 22 point 5), against hand-computed values:
SimpleQA's F-score, HLE's RMS calibration error (both binning conventions), ARC Prize pass@2
per test output; the official templates read from the installed package, never imported."""

from __future__ import annotations

import json
import math
import sys
from fractions import Fraction

import pytest

from datasets import official
from datasets.grading import grade_grid, score_arc_prize_task
from srbench.canonical import sha256_hex
from srbench.simulator.official_judge import official_judge_reply
from srbench.simulator.oracle import judge_reply, judge_verdict

Z = 1.959963984540054


def wilson(k: float, n: int) -> list[float]:
    """Wilson score interval, written out here independently of srbench.stats."""
    p = k / n
    centre = (p + Z * Z / (2 * n)) / (1 + Z * Z / n)
    half = Z * math.sqrt(p * (1 - p) / n + Z * Z / (4 * n * n)) / (1 + Z * Z / n)
    return [max(0.0, centre - half), min(1.0, centre + half)]


# --- SimpleQA ------------------------------------------------------------------------------------


def test_simpleqa_f_score_is_the_harmonic_mean_of_correct_and_correct_given_attempted():
    # 3 correct, 1 incorrect, 1 not attempted, 1 without an official verdict (never graded).
    verdicts = ["correct", "incorrect", "correct", "not_attempted", "correct", None]
    s = official.simpleqa_summary(verdicts)
    assert (s["questions"], s["graded"], s["without_verdict"]) == (6, 5, 1)
    assert s["counts"] == {"correct": 3, "incorrect": 1, "not_attempted": 1}
    assert s["correct"] == pytest.approx(0.6)
    assert s["incorrect"] == pytest.approx(0.2)
    assert s["not_attempted"] == pytest.approx(0.2)
    assert s["correct_given_attempted"] == pytest.approx(0.75)
    # By hand: 2 · 0.6 · 0.75 / (0.6 + 0.75) = 0.9 / 1.35 = 2/3.
    assert s["f_score"] == pytest.approx(2 / 3)
    assert s["value"] == s["f_score"]
    assert s["correct_wilson_95"] == pytest.approx(wilson(3, 5))
    assert s["not_attempted_wilson_95"] == pytest.approx(wilson(1, 5))
    assert s["correct_given_attempted_wilson_95"] == pytest.approx(wilson(3, 4))
    lo, hi = s["f_score_interval"]["bounds"]
    assert 0 <= lo <= 2 / 3 <= hi <= 1
    assert "bootstrap" in s["f_score_interval"]["method"]
    # Seeded: the same counts give the same interval.
    assert official.simpleqa_summary(verdicts)["f_score_interval"] == s["f_score_interval"]


def test_simpleqa_nothing_attempted_and_nothing_graded():
    s = official.simpleqa_summary(["not_attempted", "not_attempted"])
    assert s["correct_given_attempted"] is None  # 0/0 is unknown, not 0
    assert s["correct_given_attempted_wilson_95"] is None
    assert s["f_score"] == 0.0  # nothing correct: the harmonic mean with a zero term
    empty = official.simpleqa_summary([None, None])
    assert empty["value"] is None and empty["reason"]
    assert official.simpleqa_summary(["correct"] * 4)["f_score_interval"]["bounds"] == [1.0, 1.0]


def test_simpleqa_grade_is_read_strictly():
    assert official.parse_simpleqa_grade("A") == "correct"
    assert official.parse_simpleqa_grade(" B\n") == "incorrect"
    assert official.parse_simpleqa_grade("C") == "not_attempted"
    for reply in ("", "D", "A: CORRECT", "The grade is A", "a"):
        with pytest.raises(official.MalformedOfficialVerdict):
            official.parse_simpleqa_grade(reply)


# --- HLE -----------------------------------------------------------------------------------------


def test_calibration_error_one_bin_by_hand():
    # n = 4 < 100: one bin. Mean confidence (0.9+0.8+0.6+0.3)/4 = 0.65, accuracy 0.5: 0.15.
    value = official.rms_calibration_error([90, 80, 60, 30], [True, False, True, False])
    assert value == pytest.approx(0.15)
    # CAIS returns None below 100 answers and keeps no bin below 200.
    assert official.rms_calibration_error([50] * 150, [True] * 150, convention="cais") is None


def test_calibration_error_two_bins_and_the_cais_convention_by_hand():
    # 250 answers: 100 at 20 % (10 right), 100 at 50 % (60 right), 50 at 90 % (45 right).
    conf = [20] * 100 + [50] * 100 + [90] * 50
    right = (
        [k < 10 for k in range(100)] + [k < 60 for k in range(100)] + [k < 45 for k in range(50)]
    )
    # Bins of 100, the last taking the remainder: [0, 100) and [100, 250).
    # Bin 1: 0.2 vs 0.1, weight 0.4 → 0.4 · 0.01 = 0.004.
    # Bin 2: confidence (50 + 45)/150 = 0.6333…, accuracy 105/150 = 0.7, weight 0.6
    #        → 0.6 · (1/15)² = 0.0026666….
    expected = math.sqrt(0.004 + 0.6 * (1 / 15) ** 2)
    assert official.rms_calibration_error(conf, right) == pytest.approx(expected)
    # CAIS drops the last bin: √0.004.
    assert official.rms_calibration_error(conf, right, convention="cais") == pytest.approx(
        math.sqrt(0.004)
    )
    # Order of the input does not matter.
    pairs = list(zip(conf, right, strict=True))[::-1]
    assert official.rms_calibration_error(
        [c for c, _ in pairs], [r for _, r in pairs]
    ) == pytest.approx(expected)


def test_hle_summary_counts_a_question_without_judgement_as_wrong():
    s = official.hle_summary([(True, 90), (False, 80), (True, 60), (False, 30), None])
    assert (s["questions"], s["judged"], s["without_judgement"], s["correct"]) == (5, 4, 1, 2)
    assert s["accuracy"] == pytest.approx(2 / 5)
    assert s["accuracy_wilson_95"] == pytest.approx(wilson(2, 5))
    assert s["accuracy_wald_half_width"] == pytest.approx(Z * math.sqrt(0.4 * 0.6 / 5))
    assert s["calibration_error"] == pytest.approx(0.15)
    assert s["calibration_error_cais"] is None and s["calibration_error_cais_reason"]
    lo, hi = s["calibration_error_interval"]["bounds"]
    assert 0 <= lo <= hi <= 1
    assert official.hle_summary([None, None])["value"] is None


def test_hle_judgement_is_read_strictly():
    reply = json.dumps(
        {"extracted_final_answer": "42", "reasoning": "r", "correct": "yes", "confidence": 150}
    )
    assert official.parse_hle_judgement(reply) == {
        "extracted_final_answer": "42",
        "correct": True,
        "confidence": 100,  # clamped, as inspect_evals does
    }
    assert official.parse_hle_judgement(f"```json\n{reply}\n```")["correct"] is True
    lines = "extracted_final_answer: 7\nreasoning: differs\nfrom 8\ncorrect: no\nconfidence: 35%"
    assert official.parse_hle_judgement(lines) == {
        "extracted_final_answer": "7",
        "correct": False,
        "confidence": 35,
    }
    for bad in (
        "yes",
        json.dumps({"correct": "yes", "confidence": 1}),
        reply.replace('"yes"', '"maybe"'),
        reply.replace("150", '"high"'),
    ):
        with pytest.raises(official.MalformedOfficialVerdict):
            official.parse_hle_judgement(bad)


# --- ARC Prize pass@2 ---------------------------------------------------------------------------

A = [[1, 2], [3, 4]]
B = [[5]]
C = [[0, 0, 0]]


def test_arc_pass_at_2_hand_checked_cases():
    # One output, the second attempt right.
    assert official.arc_task_score([[False], [True]], 1) == 1
    # Two outputs, one of two right (in either attempt).
    assert official.arc_task_score([[True, False], [False, False]], 2) == Fraction(1, 2)
    # Two outputs, each right in a different attempt: both count.
    assert official.arc_task_score([[True, False], [False, True]], 2) == 1
    # Three outputs, the first attempt gave no gradable answer.
    assert official.arc_task_score([None, [True, True, False]], 3) == Fraction(2, 3)
    s = official.arc_summary(
        [
            (1, [[False], [True]]),
            (2, [[True, False], [False, False]]),
            (3, [None, [True, True, False]]),
        ],
        slots=2,
    )
    # (1 + 1/2 + 2/3) / 3 = 13/18.
    assert s["exact"] == "13/18"
    assert s["value"] == pytest.approx(13 / 18)
    assert s["tasks_fully_solved"] == 1 and s["test_outputs"] == 6
    assert s["wilson_95"] == pytest.approx(wilson(13 / 6, 3))


def test_arc_needs_two_attempts_and_uses_only_two():
    one = official.arc_summary([(1, [[True]])], slots=1)
    assert one["value"] is None and "two attempts" in one["reason"]
    three = official.arc_summary([(1, [[False], [False], [True]])], slots=3)
    assert three["value"] == 0 and three["attempts_used"] == 2


def test_per_output_grid_grades_combine_like_the_arc_prize_scorer():
    """The engine's per-attempt grid grades, combined over two attempts, give what ARC Prize's
    scorer (datasets.grading.score_arc_prize_task) gives from the two attempts' grids."""
    outputs = [A, B]
    first, second = [[C, B]], [[A, C]]  # attempt 1 gets output 2, attempt 2 gets output 1
    g1 = grade_grid(json.dumps(first[0]), outputs)
    g2 = grade_grid(json.dumps(second[0]), outputs)
    assert g1.outputs_correct == (False, True) and g2.outputs_correct == (True, False)
    mine = official.arc_task_score([g1.outputs_correct, g2.outputs_correct], len(outputs))
    theirs = score_arc_prize_task(
        [[first[0][0], second[0][0]], [first[0][1], second[0][1]]], outputs
    )
    assert mine == theirs.score == 1
    # A wrong number of grids still matches by position; an unparsed answer matches nothing.
    assert grade_grid(json.dumps([A]), outputs).outputs_correct == (True, False)
    assert grade_grid("no grid here", outputs).outputs_correct == (False, False)


# --- templates from the installed package ------------------------------------------------------


def test_templates_are_read_from_the_installed_package_without_importing_it():
    simpleqa = official.load_template("simpleqa")
    hle = official.load_template("hle")
    assert "inspect_evals" not in sys.modules  # read with ast, never executed
    assert simpleqa.package == "inspect-evals" and simpleqa.version != "unknown"
    assert simpleqa.sha256 == sha256_hex(simpleqa.constants)
    text = official.official_messages(
        simpleqa, question="Q?", reference="Paris", response="It is Paris."
    )[0]["content"]
    assert "Gold target: Paris\nPredicted answer: It is Paris.\n```" in text
    assert 'Just return the letters "A", "B", or "C"' in text
    judge = official.official_messages(hle, question="Q?", reference="7", response="Answer: 7")
    assert "[correct_answer]: 7" in judge[0]["content"]
    assert "if there if there" in judge[0]["content"]  # verbatim, upstream typo included


def test_no_package_means_not_available_with_the_reason(tmp_path, monkeypatch):
    with pytest.raises(official.TemplateUnavailable):
        official.load_template("simpleqa", root=tmp_path)

    def missing():
        raise official.TemplateUnavailable("the inspect-evals package is not installed here")

    monkeypatch.setattr(official, "_package_root", missing)
    entry = official.manifest_entry("hle")
    assert entry == {
        "available": False,
        "reason": "the inspect-evals package is not installed here",
    }


def test_the_simulated_judge_answers_the_official_templates():
    simpleqa = official.load_template("simpleqa")
    hle = official.load_template("hle")

    def ask(template, reference, response):
        text = official.official_messages(
            template, question="Q?", reference=reference, response=response
        )[0]["content"]
        return judge_reply(text)  # the simulated judge's entry point

    assert ask(simpleqa, "Paris", "The answer is Paris.") == "A"
    assert ask(simpleqa, "Paris", "The answer is Lyon.") == "B"
    assert ask(simpleqa, "Paris", "I don't know.") == "C"
    detail = official.official_detail(hle, ask(hle, "7", "Answer: 7\nConfidence: 85%"))
    assert (detail["status"], detail["correct"], detail["confidence"]) == ("graded", True, 85)
    detail = official.official_detail(hle, ask(hle, "7", "Answer: 8"))
    assert (detail["correct"], detail["confidence"]) == (False, 100)
    assert official_judge_reply("anything else", judge_verdict) is None


def test_an_unreadable_official_reply_is_unscored_not_a_grade():
    detail = official.official_detail(official.load_template("simpleqa"), "I think A")
    assert detail["status"] == "unparsed" and "verdict" not in detail
    detail = official.official_detail(official.load_template("hle"), "correct: yes")
    assert detail["status"] == "unparsed" and "correct" not in detail
