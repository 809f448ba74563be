"""LiveCodeBench's official grader (the package's testing_util) in the real sandbox (issue 37
item 3): it agrees with sr-bench's grader on right and wrong programs, and hostile programs
cannot forge its outcome line, escape the global limit, or get hidden outputs into the grade."""

from __future__ import annotations

import pytest

from datasets import official_prompts as op
from datasets.benchmarks import get_adapter
from runs.engine.code_grading import grade_livecodebench
from runs.engine.official_code import LCB_RESULT_CODES, grade_livecodebench_official
from runs.engine.sandbox_command import sandbox_available
from srbench.simulator.oracle import KeyEntry, code_answer

assert sandbox_available(), "bubblewrap missing: run scripts/ensure_sandbox.sh"

ADAPTER = get_adapter("livecodebench")
KEYS = {"scorer", "grader_sha256", "status", "correct", "results", "error_code", "note"}


def _questions():
    return {q.native_id: q for q in ADAPTER.load(ADAPTER.fixture_path())}


def _official(answer: str, q) -> dict:
    frozen = op.load_prompting("livecodebench").manifest_entry()
    return grade_livecodebench_official(
        answer=answer, payload=q.payload, secret=q.secret, frozen=frozen
    )


@pytest.mark.parametrize("correct", [True, False])
def test_the_official_grader_agrees_with_ours_on_every_fixture_problem(correct):
    for q in _questions().values():
        answer = code_answer(KeyEntry("livecodebench", "code", q.secret, q.payload), correct)
        assert answer is not None
        ours = grade_livecodebench(answer=answer, payload=q.payload, secret=q.secret)
        official = _official(answer, q)
        assert official["status"] == "graded", official
        assert ours["correct"] is official["correct"] is correct, (q.native_id, official)
        if correct:
            assert official["results"] == ["passed"] * len(q.secret["tests"])
        # No hidden input or expected output in what is stored: fixed fields, fixed words.
        assert set(official) <= KEYS, official
        assert set(official["results"]) <= set(LCB_RESULT_CODES.values())


def test_a_forged_outcome_line_is_not_taken_and_an_exit_leaves_no_result():
    q = _questions()["fixture-lcb-001"]
    forged = 'print("0" * 32 + \' {"results": [1, 1, 1], "error_code": null}\')'
    outcome = _official(f"```python\n{forged}\n```", q)
    assert outcome["correct"] is False and outcome["results"][0] == "wrong_answer"
    # A program that ends the interpreter itself: no result line, every test counts failed,
    # as upstream counts a run that returned nothing.
    exited = _official("```python\nimport os\nos._exit(0)\n```", q)
    assert exited["correct"] is False
    assert exited["results"] == ["runtime_error"] * len(q.secret["tests"])
    assert "no result from run_test" in exited["note"]


def test_a_changed_grader_file_is_not_run():
    q = _questions()["fixture-lcb-001"]
    frozen = op.load_prompting("livecodebench").manifest_entry()
    changed = frozen | {"code_sha256": frozen["code_sha256"] | {op.LCB_TESTING_UTIL: "0" * 64}}
    outcome = grade_livecodebench_official(
        answer="```python\nprint(6)\n```", payload=q.payload, secret=q.secret, frozen=changed
    )
    assert outcome["status"] == "not_run"
    assert op.LCB_TESTING_UTIL in outcome["reason"]
