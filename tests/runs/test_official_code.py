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


def _stored(contents: list[str]):
    from runs.engine.finish import StoredCall

    return [
        StoredCall("subject", k, "completed", text, "stop", "", "")
        for k, text in enumerate(contents)
    ]


def test_a_cell_settled_from_the_ledger_keeps_its_official_outcome():
    """A worker died after the subject call: the recovery pass grades the stored answer with
    the engine's rules, the official grader included (never a new model call)."""
    from runs.engine.finish import cell_settlement

    q = _questions()["fixture-lcb-001"]
    answer = code_answer(KeyEntry("livecodebench", "code", q.secret, q.payload), True)
    entry = op.load_prompting("livecodebench").manifest_entry()
    manifest = {"benchmarks": {"livecodebench": {"official_prompting": entry}}}
    settled = cell_settlement(
        benchmark="livecodebench",
        manifest=manifest,
        payload=q.payload,
        secret=q.secret,
        calls=_stored([answer]),
        sandbox=True,
    )
    assert settled is not None and settled.correct is True
    assert settled.grade["official"]["status"] == "graded"
    assert settled.grade["official"]["correct"] is True
    plain = cell_settlement(
        benchmark="livecodebench",
        manifest={"benchmarks": {"livecodebench": {}}},
        payload=q.payload,
        secret=q.secret,
        calls=_stored([answer]),
        sandbox=True,
    )
    assert plain is not None and "official" not in plain.grade


def test_a_scicode_problem_with_a_package_filled_step_settles_on_its_steps(settings):
    """Problem 13's step 6 is never asked in the official prompts: 14 stored replies are the
    whole problem, step 6 taking the package's file as gold code (not interrupted)."""
    import json
    from importlib import metadata
    from pathlib import Path

    from runs.engine.finish import cell_settlement
    from runs.engine.official_code import scicode_stored_replies

    dist = metadata.distribution("nvidia-scicode")
    path = Path(str(dist.locate_file("scicode/data/problems_all.jsonl")))
    row = next(
        r for r in map(json.loads, path.read_text().splitlines()) if str(r["problem_id"]) == "13"
    )
    question = get_adapter("scicode")._question(row, file=path, rownum=1)
    entry = op.load_prompting("scicode").manifest_entry()
    manifest = {"benchmarks": {"scicode": {"official_prompting": entry}}}
    contents = [f"reply {k}" for k in range(len(row["sub_steps"]) - 1)]
    aligned = scicode_stored_replies(manifest, question.payload, question.secret, contents)
    assert aligned is not None
    replies, secret = aligned
    assert len(replies) == 15 and replies[5] is None
    assert replies[:5] == contents[:5] and replies[6:] == contents[5:]
    gold = op.load_prompting("scicode").read("scicode/data/13.6.txt").decode()
    assert secret["steps"][5]["ground_truth_code"] == gold
    assert "ground_truth_code" not in question.secret["steps"][5]  # the stored secret unchanged
    settings.SRBENCH_SCICODE_H5 = None
    settled = cell_settlement(
        benchmark="scicode",
        manifest=manifest,
        payload=question.payload,
        secret=question.secret,
        calls=_stored(contents),
        sandbox=True,
    )
    # Every step answered: graded, here "cannot be graded" for want of the targets file.
    assert settled is not None and settled.status == "failed"
    assert "test_data.h5" in settled.error


@pytest.mark.parametrize("text", ["\x00", "\ud800"], ids=["nul", "lone-surrogate"])
def test_a_program_holding_what_python_source_cannot_hold_fails_in_the_official_grader(text):
    """R15: the official harness gets the program as it came (JSON escapes on its stdin) and
    fails it as upstream fails a program that does not compile; no grader error."""
    q = _questions()["fixture-lcb-003"]
    outcome = _official(f"```python\nprint('{text}')\n```", q)
    assert outcome["status"] == "graded" and outcome["correct"] is False, outcome
