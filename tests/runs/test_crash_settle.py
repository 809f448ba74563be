"""A cell whose worker died after every call it sent had completed is finished from the ledger
(issue 20 point 1, R15.3: cells that already have a complete answer are never run again).

Ledgers are written directly: a `running` cell with an expired lease and completed calls with
their stored answers (and verdicts). After the recovery pass (`ledger_reap`) a complete episode
is graded from what is stored — counted by the report, included by `regrade`, offered by no
recovery mode — and an episode whose next call was never sent ends `failed` as
`episode_interrupted`, excluded from both recovery modes with that reason. No call is sent.
"""

from __future__ import annotations

import zlib
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from runs.engine.finish import EPISODE_INTERRUPTED, LEGACY_SETTLED_ERROR
from runs.engine.reaper import GRADER, ledger_reap
from runs.models import Call, CallEvidence, Cell, Regrade, Run, RunEvent
from runs.planning.services import run_create
from runs.reporting.report import run_report
from runs.settlement.recovery import recovery_plan
from runs.settlement.recovery_rules import REASONS
from runs.settlement.regrade import run_regrade
from srbench.canonical import sha256_bytes
from tests import factories as f
from tests.runs import engine_support as es

# ledger_reap commits durable transactions of its own.
pytestmark = pytest.mark.django_db(transaction=True)

BENCHMARKS = ["mmlu-pro", "simpleqa", "scicode", "livecodebench"]
MODES = ("undispatched", "failed")


@pytest.fixture(autouse=True)
def every_question_runs_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """SciCode problems are planned as on a server holding their test data (plan-time
    exclusion is tests/runs/test_not_run.py's subject); grading here still reads the h5."""
    monkeypatch.setattr("runs.planning.runnable.not_runnable_reason", lambda *args: None)


def world() -> Run:
    """A running live run over two questions of each benchmark, every cell still pending."""
    f.target_create(
        slug="sim-strong", model="sim-strong", prices={"sim-strong": es.PRICES["sim-strong"]}
    )
    f.target_create(
        slug="sim-judge", model="sim-judge", prices={"sim-judge": es.PRICES["sim-judge"]}
    )
    dataset = es.fixture_dataset(BENCHMARKS, per_benchmark=2)
    run, created = run_create(
        owner=f.user_create(),
        plan={
            "name": "crash settle",
            "dataset": dataset.pk,
            "targets": ["sim-strong"],
            "judges": {"simpleqa": "sim-judge"},
        },
    )
    assert created
    Run.objects.filter(pk=run.pk).update(status="running", started_at=timezone.now())
    run.refresh_from_db()
    return run


def cells(run: Run, benchmark: str) -> list[Cell]:
    return list(Cell.objects.filter(run=run, benchmark=benchmark).order_by("pk"))


def call(cell: Cell, role: str, sequence: int, content: str, **fields: Any) -> Call:
    """A completed call with its evidence, as the driver closes one."""
    done = f.call_create(
        cell=cell,
        role=role,
        sequence=sequence,
        status="completed",
        stage="done",
        content=content,
        finish_reason=fields.pop("finish_reason", "stop"),
        input_tokens=10,
        output_tokens=5,
        cost_usd="0.0001",
        **fields,
    )
    raw = f'data: {{"content": {content!r}}}\n\ndata: [DONE]\n\n'.encode()
    CallEvidence.objects.create(
        call=done, body=zlib.compress(raw), raw_size=len(raw), sha256=sha256_bytes(raw)
    )
    return done


def crashed(cell: Cell, *calls: tuple[str, int, str]) -> Cell:
    """The cell as a dead worker left it: running under a lease that ran out, its calls done."""
    Cell.objects.filter(pk=cell.pk).update(
        status="running",
        claim_token=1,
        claimed_by="host:1:dead",
        started_at=timezone.now() - timedelta(seconds=30),
        lease_expires_at=timezone.now() - timedelta(seconds=1),
    )
    for role, sequence, content in calls:
        call(cell, role, sequence, content)
    return cell


def finished(cell: Cell, correct: bool = True) -> None:
    """A cell its driver finished normally (the rest of the run)."""
    call(cell, "subject", 0, "done")
    Cell.objects.filter(pk=cell.pk).update(
        status="completed", correct=correct, scored=True, grade={"grader": "x"}, final_answer="x"
    )


def mcq_answer(cell: Cell, right: bool) -> str:
    letter = cell.question.secret.data["answer"]
    n = len(cell.question.payload["options"])
    other = next(chr(ord("A") + i) for i in range(n) if chr(ord("A") + i) != letter)
    return f"Answer: {letter if right else other}"


def reasons(run: Run, mode: str) -> dict[int, str]:
    plan = recovery_plan(run=run, mode=mode)
    out = {e["cell"]: e["reason"] for e in plan["excluded"]}
    for e in plan["excluded"]:
        assert e["detail"] == REASONS[e["reason"]]
    assert not {e["cell"] for e in plan["eligible_cells"]} & set(out)
    return out | {e["cell"]: "ELIGIBLE" for e in plan["eligible_cells"]}


def test_complete_episodes_are_graded_from_the_stored_answer_and_verdict():
    """R15.3: MCQ cells (right and wrong) and SimpleQA cells with a stored verdict (correct and
    incorrect) end `completed` with the engine's grade; the run ends, the report counts them,
    regrade includes the MCQ ones, and neither recovery mode offers any of them."""
    run = world()
    right, wrong = cells(run, "mmlu-pro")
    judged_right, judged_wrong = cells(run, "simpleqa")
    crashed(right, ("subject", 0, mcq_answer(right, True)))
    crashed(wrong, ("subject", 0, mcq_answer(wrong, False)))
    crashed(judged_right, ("subject", 0, "Paris"), ("judge", 0, '{"verdict": "correct"}'))
    crashed(judged_wrong, ("subject", 0, "Lyon"), ("judge", 0, '{"verdict": "incorrect"}'))
    for cell in cells(run, "scicode") + cells(run, "livecodebench"):
        finished(cell)
    calls_before = Call.objects.filter(cell__run=run).count()

    stats = ledger_reap()

    assert stats["completed_cells"] == 4 and stats["failed_cells"] == 0
    got = {
        c.pk: (
            c.status,
            c.correct,
            c.scored,
            (c.grade or {}).get("grader"),
            c.final_answer,
            c.error,
        )
        for c in Cell.objects.filter(pk__in=[right.pk, wrong.pk, judged_right.pk, judged_wrong.pk])
    }
    assert got == {
        right.pk: ("completed", True, True, "mcq", mcq_answer(right, True), ""),
        wrong.pk: ("completed", False, True, "mcq", mcq_answer(wrong, False), ""),
        judged_right.pk: ("completed", True, True, "judge", "Paris", ""),
        judged_wrong.pk: ("completed", False, True, "judge", "Lyon", ""),
    }
    # The MCQ grade is the one the manifest froze, with the grader's own detail.
    grade = Cell.objects.get(pk=right.pk).grade
    assert grade["version"] == run.manifest["benchmarks"]["mmlu-pro"]["grader_version"]
    assert Cell.objects.get(pk=judged_wrong.pk).grade == {"grader": "judge", "verdict": "incorrect"}
    assert Call.objects.filter(cell__run=run).count() == calls_before  # nothing sent
    settled = RunEvent.objects.filter(run=run, type="cell.completed")
    assert {e.payload["cell"] for e in settled} == {
        right.pk,
        wrong.pk,
        judged_right.pk,
        judged_wrong.pk,
    }
    assert all(e.payload["settled_by"] == "recovery_pass" for e in settled)

    # Those were the last cells: the run ends completed, and the report counts them.
    run.refresh_from_db()
    assert run.status == "completed" and run.finished_at is not None
    counts = run_report(run=run)["counts"]
    assert counts["completed"] == counts["planned"] == Cell.objects.filter(run=run).count()
    assert counts["failed"] == 0
    assert counts["correct"] == Cell.objects.filter(run=run, correct=True).count()

    regraded = run_regrade(run_id=run.pk).regrade
    by_cell = {r["cell"]: r for r in regraded.results["cells"]}
    assert by_cell[right.pk]["new_correct"] is True and by_cell[right.pk]["changed"] is False
    assert by_cell[wrong.pk]["new_correct"] is False and by_cell[wrong.pk]["changed"] is False
    assert Regrade.objects.filter(run=run).count() == 1

    for mode in MODES:
        excluded = reasons(run, mode)
        for cell in (right, wrong, judged_right, judged_wrong):
            assert excluded[cell.pk] == "completed_evidence_preserved", (mode, cell.pk)

    # A second pass changes nothing.
    assert ledger_reap()["completed_cells"] == 0


def test_a_truncated_answer_a_malformed_verdict_and_a_failed_judge_end_as_the_engine_would():
    """R15.3: the pass applies the driver's rules, not new ones: a cut-off answer is a wrong
    answer, a malformed verdict or a failed judge call fails the cell with the driver's words."""
    run = world()
    truncated, other = cells(run, "mmlu-pro")
    malformed, judge_failed = cells(run, "simpleqa")
    crashed(truncated)
    call(truncated, "subject", 0, mcq_answer(truncated, True)[:4], finish_reason="length")
    crashed(malformed, ("subject", 0, "Paris"), ("judge", 0, "I think it is right"))
    crashed(judge_failed, ("subject", 0, "Paris"))
    f.call_create(
        cell=judge_failed,
        role="judge",
        sequence=0,
        status="failed",
        stage="done",
        http_status=500,
        error_code="http_500",
        error="HTTP 500 Internal Server Error: boom",
    )
    crashed(other, ("subject", 0, mcq_answer(other, True)))

    ledger_reap()

    t = Cell.objects.get(pk=truncated.pk)
    assert (t.status, t.correct, t.grade) == (
        "completed",
        False,
        {"grader": "truncated", "finish_reason": "length"},
    )
    m = Cell.objects.get(pk=malformed.pk)
    assert (m.status, m.correct, m.final_answer) == ("failed", None, "Paris")
    assert m.error.startswith("malformed judge verdict:")
    j = Cell.objects.get(pk=judge_failed.pk)
    assert (j.status, j.error) == (
        "failed",
        "judge call 1: http_500: HTTP 500 Internal Server Error: boom",
    )
    assert Cell.objects.get(pk=other.pk).correct is True


def test_an_episode_whose_next_call_was_never_sent_is_excluded_as_interrupted():
    """R15.3 with R15.2: a SciCode cell with step 1 of several answered and a SimpleQA cell whose
    judge was never sent end `failed` as `episode_interrupted` (no call sent by the pass); both
    recovery modes exclude them with that reason, so the completed calls are never re-sent."""
    run = world()
    step_one = cells(run, "scicode")[0]
    no_judge = cells(run, "simpleqa")[0]
    steps = len(step_one.question.payload["sub_steps"])
    assert steps > 1
    crashed(step_one, ("subject", 0, "def f(x):\n    return x\n"))
    crashed(no_judge, ("subject", 0, "Paris"))
    others = Cell.objects.filter(run=run).exclude(pk__in=[step_one.pk, no_judge.pk])
    for cell in others:
        finished(cell)
    calls_before = set(Call.objects.filter(cell__run=run).values_list("pk", flat=True))

    stats = ledger_reap()

    assert stats["failed_cells"] == 2
    for cell, what in ((step_one, f"step 2 of {steps}"), (no_judge, "its judge call")):
        cell.refresh_from_db()
        assert (cell.status, cell.correct, cell.scored) == ("failed", None, False)
        assert cell.error.startswith(f"{EPISODE_INTERRUPTED}: ") and what in cell.error
        assert cell.lease_expires_at is None and cell.finished_at is not None
    assert Cell.objects.get(pk=no_judge.pk).final_answer == "Paris"  # the answer is kept
    assert set(Call.objects.filter(cell__run=run).values_list("pk", flat=True)) == calls_before
    run.refresh_from_db()
    assert run.status == "failed"  # ended: nothing left to run, not every cell completed

    for mode in MODES:
        excluded = reasons(run, mode)
        assert excluded[step_one.pk] == EPISODE_INTERRUPTED, mode
        assert excluded[no_judge.pk] == EPISODE_INTERRUPTED, mode
    assert "never sent automatically" in REASONS[EPISODE_INTERRUPTED]


def test_cells_settled_by_the_old_rule_are_excluded_as_complete_answers():
    """R15.3: cells an earlier recovery pass failed as "worker lost after its calls finished"
    (the 87 cells of the issue) are not offered by either mode: a single-call answer that
    completed is a complete answer; a multi-call one is an interrupted episode."""
    run = world()
    mcq = cells(run, "mmlu-pro")[0]
    judged = cells(run, "simpleqa")[0]
    episode = cells(run, "scicode")[0]
    call(mcq, "subject", 0, mcq_answer(mcq, True))
    call(judged, "subject", 0, "Paris")
    call(judged, "judge", 0, '{"verdict": "correct"}')
    call(episode, "subject", 0, "def f(): pass")
    legacy = [mcq.pk, judged.pk, episode.pk]
    Cell.objects.filter(pk__in=legacy).update(status="failed", error=LEGACY_SETTLED_ERROR)
    Cell.objects.filter(run=run).exclude(pk__in=legacy).update(status="cancelled")
    Run.objects.filter(pk=run.pk).update(status="failed", finished_at=timezone.now())
    run.refresh_from_db()

    for mode in MODES:
        excluded = reasons(run, mode)
        assert excluded[mcq.pk] == "complete_answer_stored", mode
        assert excluded[judged.pk] == "complete_answer_stored", mode
        assert excluded[episode.pk] == EPISODE_INTERRUPTED, mode
    assert REASONS["complete_answer_stored"].startswith("complete answer stored")


def test_a_code_answer_is_graded_in_the_sandbox_by_a_worker_pass_only():
    """R15.3: a LiveCodeBench cell with its answer stored is left alone by a pass that may not
    run the sandbox (a web request), and a worker's pass takes it over and grades it."""
    run = world()
    code = cells(run, "livecodebench")[0]
    crashed(code, ("subject", 0, "```python\nprint('not a solution')\n```"))

    stats = ledger_reap(sandbox=False)
    code.refresh_from_db()
    assert stats["graded_in_sandbox"] == 0
    assert (code.status, code.claimed_by) == ("running", "host:1:dead")

    stats = ledger_reap()
    code.refresh_from_db()
    assert stats["graded_in_sandbox"] == 1
    assert code.claimed_by == GRADER and code.claim_token == 2
    assert (code.status, code.correct, code.scored) == ("completed", False, True)
    assert code.grade["correct"] is False
    assert code.final_answer.startswith("```python")


def test_a_cell_whose_grading_raises_fails_alone_and_the_pass_goes_on(monkeypatch):
    """R15.3: a grader crash on one stored answer fails that cell as the driver would ("internal
    error"), while the other cells of the pass are settled."""
    from runs.engine import scoring

    real = scoring.grade_direct

    def grade_direct(**kwargs: Any) -> scoring.Grade:
        if kwargs["answer"] == "BOOM":
            raise KeyError("answer")
        return real(**kwargs)

    monkeypatch.setattr(scoring, "grade_direct", grade_direct)
    run = world()
    broken, fine = cells(run, "mmlu-pro")
    crashed(broken, ("subject", 0, "BOOM"))
    crashed(fine, ("subject", 0, mcq_answer(fine, True)))

    stats = ledger_reap()

    broken.refresh_from_db()
    assert (broken.status, broken.final_answer) == ("failed", "BOOM")
    assert broken.error.startswith("internal error: KeyError")
    assert Cell.objects.get(pk=fine.pk).status == "completed"
    assert stats["completed_cells"] == 1 and stats["failed_cells"] == 1
