"""Moving a run graded by `mcq-strict/1` to `mcq-final/2` (issue 21): `benchmark regrade` re-reads
the saved answers with the current grader, counts the verdicts that change, makes no model call
and leaves the old grades readable."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from datasets.benchmarks import get_adapter
from datasets.grading import MCQ_GRADER_VERSION
from runs.engine import scoring
from runs.engine.scoring import GradingUnavailable, grade_direct
from runs.interfaces.public import public_grade
from runs.models import Call, Cell
from runs.settlement.regrade import run_regrade
from tests.compare import builders as b

# (saved reply, correct under mcq-strict/1, correct under mcq-final/2); the key is "B".
REPLIES = [
    ("B\nC", True, False),  # v1 read only the first line; v2 sees two standalone lines
    ("(B)\n(C)", True, False),
    ("A. 3\nB. 4\nThe answer is B.", False, True),  # v1 took the restated option A as an answer
    ("`B`", False, True),  # v1 did not read a code span
    ("A\nB", False, False),  # v1: A (wrong); v2: ambiguous (wrong)
    ("The answer is B", True, True),
    ("Answer: A", False, False),
]


def old_run():  # type: ignore[no-untyped-def]
    """A run frozen at mcq-strict/1 whose cells hold that grader's grades."""
    qs = b.questions({"mmlu-pro": len(REPLIES)})
    t = b.target("single")
    benchmarks = b.manifest(qs, [t])["benchmarks"]
    benchmarks["mmlu-pro"]["grader_version"] = "mcq-strict/1"
    run = b.run(qs, {t: [v1 for _, v1, _ in REPLIES]}, benchmarks=benchmarks)
    for q, (reply, _, _) in zip(qs, REPLIES, strict=True):
        cell = Cell.objects.get(run=run, question=q)
        graded = grade_direct(
            benchmark="mmlu-pro",
            payload=q.payload,
            secret={"answer": "B"},
            answer=reply,
            grader_version="mcq-strict/1",
        )
        Cell.objects.filter(pk=cell.pk).update(
            final_answer=reply, correct=graded.correct, grade=graded.detail
        )
    return run


@pytest.mark.django_db
def test_regrade_moves_an_old_run_to_the_new_mcq_grader_with_zero_model_calls():
    run = old_run()
    stored = {c.final_answer: c.correct for c in Cell.objects.filter(run=run)}
    assert stored == {reply: v1 for reply, v1, _ in REPLIES}  # the old grader's verdicts
    calls_before = Call.objects.count()

    result = run_regrade(run_id=run.pk)

    g = result.regrade
    assert Call.objects.count() == calls_before  # no model call: nothing was sent or recorded
    assert get_adapter("mmlu-pro").grader_version == MCQ_GRADER_VERSION == "mcq-final/2"
    assert g.grader_versions == {"mmlu-pro": "mcq-final/2"}
    assert g.results["graded_with"] == {"mmlu-pro": "mcq-strict/1"}
    assert g.changed_count == sum(1 for _, v1, v2 in REPLIES if v1 != v2) == 4
    by_answer = {Cell.objects.get(pk=c["cell"]).final_answer: c for c in g.results["cells"]}
    for reply, v1, v2 in REPLIES:
        row = by_answer[reply]
        assert (row["old_correct"], row["new_correct"], row["changed"]) == (v1, v2, v1 != v2)
        assert row["detail"]["version"] == "mcq-final/2"
    assert by_answer["B\nC"]["detail"]["status"] == "ambiguous"
    totals = g.results["by_target"]["single"]["mmlu-pro"]
    assert (totals["old_correct"], totals["new_correct"]) == (3, 3)
    # The cells keep the old grader's grade, still readable on the public view.
    assert {c.final_answer: c.correct for c in Cell.objects.filter(run=run)} == stored
    cell = Cell.objects.get(run=run, final_answer="B\nC")
    assert public_grade(cell.grade)["version"] == "mcq-strict/1"  # type: ignore[index]


@pytest.mark.django_db
def test_cli_regrade_of_an_old_run_prints_the_changed_count(capsys):
    run = old_run()
    call_command("benchmark", "regrade", str(run.pk))
    out = capsys.readouterr().out
    assert out.startswith(
        "appended  regrade v1  regraded 7  changed 4  skipped 0  model requests: 0"
    )
    assert "correct 3 → 3 of 7" in out


def test_a_run_is_graded_by_the_mcq_version_its_manifest_froze():
    payload, secret = {"options": ["w", "x", "y", "z"]}, {"answer": "B"}
    old = grade_direct(
        benchmark="gpqa",
        payload=payload,
        secret=secret,
        answer="B\nC",
        grader_version="mcq-strict/1",
    )
    new = grade_direct(benchmark="gpqa", payload=payload, secret=secret, answer="B\nC")
    assert (old.correct, old.detail["version"]) == (True, "mcq-strict/1")
    assert (new.correct, new.detail["status"], new.detail["version"]) == (
        False,
        "ambiguous",
        "mcq-final/2",
    )
    assert set(scoring.MCQ_GRADERS) == {"mcq-strict/1", "mcq-final/2"}


def test_an_mcq_version_this_build_lacks_fails_the_cell_rather_than_guess():
    with pytest.raises(GradingUnavailable, match="mcq-strict/9"):
        grade_direct(
            benchmark="mmlu-pro",
            payload={"options": ["w", "x"]},
            secret={"answer": "B"},
            answer="B",
            grader_version="mcq-strict/9",
        )
