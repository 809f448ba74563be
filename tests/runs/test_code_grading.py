"""LiveCodeBench and SciCode graders on the bundled fixtures, run in the real sandbox."""

from __future__ import annotations

import copy
from pathlib import Path

import h5py
import numpy as np
import pytest

from datasets.benchmarks.livecodebench import ADAPTER as LCB
from datasets.benchmarks.scicode import ADAPTER as SCICODE
from runs.engine.code_grading import (
    TargetsUnavailable,
    extract_python_code,
    grade_livecodebench,
    grade_scicode,
    lcb_stdout_matches,
    scicode_step_prompts,
)
from runs.engine.sandbox_command import SandboxLimits, sandbox_available

# make test installs bubblewrap (scripts/ensure_sandbox.sh); without it these tests must fail,
# not skip: a skipped escape test proves nothing.
assert sandbox_available(), "bubblewrap missing: run scripts/ensure_sandbox.sh"

FIXTURES = Path(__file__).resolve().parents[2] / "datasets" / "fixtures"
FAST = SandboxLimits(wall_s=2.0, cpu_s=2.0, memory_bytes=1024**3)

SUM_OF_EVENS = """\
n = int(input())
values = list(map(int, input().split()))
print(sum(v for v in values if v % 2 == 0))
"""
LONGEST_PLATEAU = """\
class Solution:
    def longestPlateau(self, nums: List[int]) -> int:
        best = run = 1
        for a, b in zip(nums, nums[1:]):
            run = run + 1 if a == b else 1
            best = max(best, run)
        return best
"""


def lcb_questions():
    return {q.native_id: q for q in LCB.load(FIXTURES / "livecodebench" / "test.jsonl")}


def scicode_questions():
    return {q.native_id: q for q in SCICODE.load(FIXTURES / "scicode" / "problems_all.jsonl")}


def reply(code: str) -> str:
    return f"Here is my program.\n\n```python\n{code}```\n"


def grade_lcb(native_id: str, answer: str | None, limits: SandboxLimits = FAST):
    q = lcb_questions()[native_id]
    return grade_livecodebench(answer=answer, payload=q.payload, secret=q.secret, limits=limits)


def test_extraction_takes_the_last_python_block():
    text = "```python\nprint(1)\n```\nthen\n```text\nnot code\n```\n```python\nprint(2)\n```"
    assert extract_python_code(text) == "print(2)\n"


def test_extraction_takes_an_untagged_block_only_when_it_is_the_only_one():
    assert extract_python_code("```\nprint(3)\n```") == "print(3)\n"
    assert extract_python_code("```\na\n```\n```\nb\n```") is None
    assert extract_python_code("print(4) with no fence") is None


def test_extraction_ignores_code_inside_reasoning():
    assert extract_python_code("<think>```python\nbad\n```</think>no code here") is None


def test_stdout_comparison_tolerates_whitespace_and_equal_decimals():
    assert lcb_stdout_matches("  6  \n\n", "6\n")
    assert lcb_stdout_matches("1 2\n3.50\n", "1  2\n3.5\n")
    assert not lcb_stdout_matches("6\n7\n", "6\n")
    assert not lcb_stdout_matches("Yes\n", "No\n")


def test_stdin_problem_known_good_answer_is_correct():
    grade = grade_lcb("fixture-lcb-001", reply(SUM_OF_EVENS))
    assert grade["correct"] and grade["status"] == "passed"
    assert [t["status"] for t in grade["tests"]] == ["passed"] * 3


def test_stdin_problem_wrong_answer_fails_on_a_hidden_test_without_leaking_it():
    wrong = "input()\nprint(sum(map(int, input().split())))\n"
    grade = grade_lcb("fixture-lcb-001", reply(wrong))
    assert not grade["correct"]
    assert [t["status"] for t in grade["tests"]] == ["wrong_answer", "not_run", "not_run"]
    # No test input or expected output in the grade.
    assert "1 3 5" not in repr(grade) and "-2 -4" not in repr(grade)


def test_functional_problem_known_good_answer_is_correct():
    grade = grade_lcb("fixture-lcb-002", reply(LONGEST_PLATEAU))
    assert grade["correct"], grade
    assert grade["tests_passed"] == grade["tests_total"] == 4


def test_functional_problem_prints_do_not_confuse_the_result():
    noisy = LONGEST_PLATEAU.replace("        return best", "        print(99)\n        return best")
    assert grade_lcb("fixture-lcb-002", reply(noisy))["correct"]


def test_functional_problem_off_by_one_is_incorrect():
    bad = LONGEST_PLATEAU.replace("best = run = 1", "best = run = 0")
    grade = grade_lcb("fixture-lcb-002", reply(bad))
    assert not grade["correct"]
    assert grade["tests"][1]["status"] == "wrong_answer"


def test_an_infinite_loop_is_a_timeout():
    grade = grade_lcb("fixture-lcb-001", reply("while True:\n    pass\n"), SandboxLimits(1, 1))
    assert not grade["correct"]
    assert grade["tests"][0]["status"] == "timeout"


def test_a_syntax_error_is_a_compile_error():
    grade = grade_lcb("fixture-lcb-003", reply("def broken(:\n"))
    assert grade["status"] == "compile_error" and not grade["correct"]


@pytest.mark.parametrize("text", ["\x00", "\ud800"], ids=["nul", "lone-surrogate"])
def test_code_holding_what_python_source_cannot_hold_is_a_compile_error(text):
    """R15: the program is a model's text. U+0000 and a lone surrogate cannot be Python source
    (the interpreter refuses the file, as it would refuse the official harness's exec); the
    program is written as it came and fails as a compile error. Before, writing the file raised
    out of the grader."""
    grade = grade_lcb("fixture-lcb-003", reply(f"print('{text}')\n"))
    assert grade["status"] == "compile_error" and not grade["correct"]


def test_a_scicode_step_holding_a_lone_surrogate_fails_that_step(targets_h5):
    grade = grade_901([reply(TIME_OF_FLIGHT + "# \ud800\n"), reply(RANGE)], targets_h5)
    assert [s["status"] for s in grade["steps"]][0] != "passed" and not grade["correct"]


def test_a_reply_without_code_is_unparsed_and_wrong():
    grade = grade_lcb("fixture-lcb-003", "I would use a stack.")
    assert (grade["status"], grade["correct"], grade["tests"]) == ("unparsed", False, [])


# ---------------------------------------------------------------------------------------------
# SciCode

TIME_OF_FLIGHT = """\
def time_of_flight(v0, theta, g):
    t = 2 * v0 * np.sin(theta) / g
    return t
"""
RANGE = """\
def projectile_range(v0, theta, g):
    R = v0 * np.cos(theta) * time_of_flight(v0, theta, g)
    return R
"""


@pytest.fixture
def targets_h5(tmp_path) -> Path:
    """A small test_data.h5 in upstream's layout for problem 901, computed from physics."""

    def tof(v0, theta, g):
        return 2 * v0 * np.sin(theta) / g

    path = tmp_path / "test_data.h5"
    with h5py.File(path, "w") as f:
        f["901.1/test1/var1"] = tof(10.0, np.pi / 4, 9.81)
        f["901.1/test2/var1"] = tof(3.0, np.pi / 2, 9.81)
        f["901.2/test1/var1"] = 10.0 * np.cos(np.pi / 4) * tof(10.0, np.pi / 4, 9.81)
        f["901.2/test2/var1"] = 20.0 * np.cos(np.pi / 6) * tof(20.0, np.pi / 6, 1.62)
    return path


def grade_901(replies, h5: Path | None, limits: SandboxLimits = FAST):
    q = scicode_questions()["901"]
    return grade_scicode(
        step_replies=replies, payload=q.payload, secret=q.secret, h5_path=h5, limits=limits
    )


def test_scicode_step_prompts_give_one_turn_per_step():
    q = scicode_questions()["902"]
    prompts = scicode_step_prompts(q.payload)
    assert len(prompts) == 3
    assert "parent_population" in prompts[0] and "time_of_max_daughter" in prompts[2]


def test_scicode_known_good_steps_solve_the_problem(targets_h5):
    grade = grade_901([reply(TIME_OF_FLIGHT), reply(RANGE)], targets_h5)
    assert grade["correct"], grade
    assert [s["status"] for s in grade["steps"]] == ["passed", "passed"]


def test_scicode_one_wrong_step_fails_the_main_problem(targets_h5):
    wrong_range = RANGE.replace("np.cos", "np.sin")
    grade = grade_901([reply(TIME_OF_FLIGHT), reply(wrong_range)], targets_h5)
    assert not grade["correct"]
    assert [s["status"] for s in grade["steps"]] == ["passed", "failed"]
    assert grade["steps_passed"] == 1


def test_scicode_later_steps_use_the_models_earlier_code(targets_h5):
    wrong_tof = TIME_OF_FLIGHT.replace("2 * v0", "v0")
    grade = grade_901([reply(wrong_tof), reply(RANGE)], targets_h5)
    assert [s["status"] for s in grade["steps"]] == ["failed", "failed"]


def test_scicode_step_that_hangs_times_out(targets_h5):
    hang = "def time_of_flight(v0, theta, g):\n    while True:\n        pass\n"
    grade = grade_901([reply(hang), reply(RANGE)], targets_h5, SandboxLimits(1.5, 1.5))
    assert grade["steps"][0]["status"] == "timeout" and not grade["correct"]


def test_scicode_missing_reply_fails_that_step(targets_h5):
    grade = grade_901([reply(TIME_OF_FLIGHT)], targets_h5)
    assert [s["status"] for s in grade["steps"]] == ["passed", "unparsed"]


def test_scicode_without_targets_refuses_to_grade(tmp_path):
    with pytest.raises(TargetsUnavailable):
        grade_901([reply(TIME_OF_FLIGHT), reply(RANGE)], tmp_path / "absent.h5")


def test_a_step_whose_test_cannot_keep_its_target_from_the_model_is_untestable(targets_h5):
    """The target given to a function the judge cannot run: the step is never passed, rather
    than run with the target beside the model's code."""
    q = scicode_questions()["901"]
    secret = copy.deepcopy(q.secret)
    secret["steps"][0]["test_cases"] = ["assert are_equivalent(time_of_flight(1, 1, 1), target)"]
    grade = grade_scicode(
        step_replies=[reply(TIME_OF_FLIGHT), reply(RANGE)],
        payload=q.payload,
        secret=secret,
        h5_path=targets_h5,
        limits=FAST,
    )
    assert [s["status"] for s in grade["steps"]] == ["untestable", "passed"]
    assert grade["correct"] is False
