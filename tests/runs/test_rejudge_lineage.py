"""A re-judge child run (issue 22 point 4, runs/settlement/rejudge.py) everywhere a child run is read:
the recovery pass, lineage (R15.4), comparison (R11.2) and recovery (R15.2, R15.3).

Ledgers are written directly (a parent with stored answers, its confirmed re-judge child, judge
calls as a dead worker left them); the expected grades are computed in the test from the stored
verdicts and the parent's stored answers. No model call is made anywhere here.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from compare.compatibility import run_comparison_problems, runs_differences
from datasets.grading import MalformedVerdict
from runs.engine import scoring
from runs.engine.episodes import parent_answer
from runs.engine.finish import EPISODE_INTERRUPTED, cell_settlement
from runs.engine.reaper import ledger_reap
from runs.interfaces.cli import report_text
from runs.models import Call, Cell, RecoveryRequest, Run, Target
from runs.reporting.report import run_report
from runs.settlement.lineage import run_lineage
from runs.settlement.recovery import recovery_plan, recovery_submit
from runs.settlement.recovery_rules import REJUDGE_NEW_ATTEMPT
from runs.settlement.regrade import judge_cost_quote
from runs.settlement.rejudge import rejudge_submit
from srbench.refusals import Refusal
from tests import factories as f
from tests.compare import builders as b
from tests.conftest import purge_broker

pytestmark = pytest.mark.django_db

JUDGE_PRICES = {"m-judge": {"input": "1", "output": "2"}}
# The parent's subject outcomes, one per SimpleQA question (builders: True → "The answer is B").
OUTCOMES = [True, False, True, False, True]


@pytest.fixture(autouse=True)
def _clean_broker():
    # A created child is dispatched to the broker; no worker runs here, so drop the message.
    yield
    purge_broker()


def judged_parent() -> Run:
    """A finished live run: one MMLU-Pro question and five SimpleQA answers judged by `judge`."""
    qs = b.questions({"mmlu-pro": 1, "simpleqa": len(OUTCOMES)})
    subject = b.target("subject")
    b.target("judge", model="m-judge", prices=JUDGE_PRICES)
    snapshot = {
        "slug": "judge",
        "kind": "single",
        "model": "m-judge",
        "fixed_params": {"max_tokens": 256},
        "max_inference_calls": None,
    }
    return b.run(
        qs,
        {subject: [True, *OUTCOMES]},
        judges={"simpleqa": snapshot},
        prices={"subject": subject.prices, "judge": JUDGE_PRICES},
    )


def rejudge_child(parent: Run) -> Run:
    worst = judge_cost_quote(parent)["worst_case_usd"]
    child, created = rejudge_submit(
        run=parent, confirm_judge_cost=Decimal(worst), user=f.user_create()
    )
    assert created and child.manifest["rejudge"]["parent_run"] == parent.pk
    return child


def child_cells(child: Run) -> list[Cell]:
    return list(Cell.objects.filter(run=child).order_by("pk"))


def answer_of(parent: Run, cell: Cell) -> str:
    """The parent's stored answer of the same attempt (question, target, slot)."""
    return Cell.objects.get(
        run=parent, question_id=cell.question_id, target_id=cell.target_id, slot=cell.slot
    ).final_answer


def crashed(cell: Cell) -> None:
    """The cell as a dead worker left it: running under a lease that ran out."""
    Cell.objects.filter(pk=cell.pk).update(
        status="running",
        claim_token=1,
        claimed_by="host:1:dead",
        started_at=timezone.now() - timedelta(seconds=30),
        lease_expires_at=timezone.now() - timedelta(seconds=1),
    )


def judge_call(cell: Cell, content: str = "", **fields: Any) -> Call:
    """The cell's judge call as the driver left it (completed unless `fields` say otherwise)."""
    if fields.get("status", "completed") == "completed":
        fields = {
            "status": "completed",
            "stage": "done",
            "content": content,
            "finish_reason": "stop",
            "input_tokens": 50,
            "output_tokens": 5,
            "cost_usd": "0.00006",
            **fields,
        }
    return f.call_create(
        cell=cell, role="judge", sequence=0, target=Target.objects.get(slug="judge"), **fields
    )


def live_grade(verdict: str, answer: str) -> tuple[str, bool | None, dict[str, Any] | None, str]:
    """What `episodes.judge_answer` writes for this verdict of `answer` (the re-judge child
    has no official scorer): (status, correct, grade, final answer)."""
    try:
        grade = scoring.grade_from_verdict(verdict)
    except MalformedVerdict:
        return "failed", None, None, answer
    return "completed", grade.correct, grade.detail, answer


def test_a_rejudge_cell_whose_worker_died_after_its_judge_call_is_graded_like_the_live_path():
    """Issue 22 point 4 with R15.3: a re-judge cell has no subject call; when its worker died
    after its judge call closed, the recovery pass grades the parent's stored answer by the
    stored verdict, exactly as the live episode would have (not `episode_interrupted`); a
    malformed verdict and a failed judge call fail the cell with the answer kept; an open judge
    call becomes sent_unknown. Nothing is sent: no call row is added."""
    parent = judged_parent()
    child = rejudge_child(parent)
    Run.objects.filter(pk=child.pk).update(status="running", started_at=timezone.now())
    right, wrong, malformed, failed, in_flight = child_cells(child)
    verdicts = {
        right.pk: '{"verdict": "correct"}',
        wrong.pk: '```json\n{"verdict": "incorrect"}\n```',
        malformed.pk: "I think it is right",
    }
    for cell in (right, wrong, malformed, failed, in_flight):
        crashed(cell)
    for pk, verdict in verdicts.items():
        judge_call(Cell.objects.get(pk=pk), verdict)
    judge_call(
        failed,
        status="failed",
        stage="done",
        http_status=500,
        error_code="http_500",
        error="HTTP 500 Internal Server Error: boom",
    )
    judge_call(in_flight, status="sent")
    calls_before = Call.objects.filter(cell__run=child).count()
    parent_cells = list(Cell.objects.filter(run=parent).values_list("pk", "status", "correct"))

    stats = ledger_reap(sandbox=False)

    assert stats["completed_cells"] == 2 and stats["failed_cells"] == 2
    assert stats["sent_unknown_cells"] == 1
    for cell in (right, wrong):
        got = Cell.objects.get(pk=cell.pk)
        expected = live_grade(verdicts[cell.pk], answer_of(parent, cell))
        assert (got.status, got.correct, got.grade, got.final_answer) == expected
        assert got.scored is True and got.error == "" and got.lease_expires_at is None
    # Stated independently of the grader: a correct and an incorrect verdict.
    assert Cell.objects.get(pk=right.pk).correct is True
    assert Cell.objects.get(pk=wrong.pk).correct is False
    m = Cell.objects.get(pk=malformed.pk)
    assert (m.status, m.correct, m.final_answer) == ("failed", None, answer_of(parent, malformed))
    assert m.error.startswith("malformed judge verdict:")
    j = Cell.objects.get(pk=failed.pk)
    assert (j.status, j.final_answer) == ("failed", answer_of(parent, failed))
    assert j.error == "judge call 1: http_500: HTTP 500 Internal Server Error: boom"
    assert not any(EPISODE_INTERRUPTED in c.error for c in Cell.objects.filter(run=child))
    assert Cell.objects.get(pk=in_flight.pk).status == "sent_unknown"
    assert Call.objects.get(cell=in_flight).status == "sent_unknown"
    # Nothing sent, nothing of the parent changed; the run is interrupted (a call may have
    # reached the judge).
    assert Call.objects.filter(cell__run=child).count() == calls_before
    after = list(Cell.objects.filter(run=parent).values_list("pk", "status", "correct"))
    assert after == parent_cells
    assert Run.objects.get(pk=child.pk).status == "interrupted"


def test_a_rejudge_settlement_follows_the_episode_when_the_parent_has_no_answer():
    """The pure rule (runs/engine/finish.py) for the cases the ledger cannot reach through
    the pass: no parent answer and a benchmark that is not judged end as the episode's
    refusals, never `episode_interrupted`; without the `rejudge` marker the same ledger is
    an interrupted judged episode (its subject call is missing)."""
    manifest = {"rejudge": {"parent_run": 7}, "benchmarks": {"simpleqa": {}}}
    verdict = [
        _stored("judge", '{"verdict": "correct"}'),
    ]
    none = cell_settlement(
        benchmark="simpleqa", manifest=manifest, payload={}, secret={}, calls=verdict,
        sandbox=False, rejudge_answer=None,
    )  # fmt: skip
    assert none is not None and none.status == "failed"
    assert none.error == "re-judge: run 7 holds no completed answer for this cell"
    not_judged = cell_settlement(
        benchmark="mmlu-pro", manifest=manifest, payload={}, secret={}, calls=[],
        sandbox=False, rejudge_answer="B",
    )  # fmt: skip
    assert not_judged is not None and not_judged.status == "failed"
    assert "not judged; nothing was sent" in not_judged.error
    graded = cell_settlement(
        benchmark="simpleqa", manifest=manifest, payload={}, secret={}, calls=verdict,
        sandbox=False, rejudge_answer="Paris",
    )  # fmt: skip
    assert graded is not None
    assert (graded.status, graded.correct, graded.answer) == ("completed", True, "Paris")
    plain = cell_settlement(
        benchmark="simpleqa", manifest={"benchmarks": {"simpleqa": {}}}, payload={}, secret={},
        calls=verdict, sandbox=False, rejudge_answer="Paris",
    )  # fmt: skip
    assert plain is not None and plain.error.startswith(EPISODE_INTERRUPTED)


def _stored(role: str, content: str) -> Any:
    from runs.engine.finish import StoredCall

    return StoredCall(role, 0, "completed", content, "stop", "", "")


def test_lineage_names_a_rejudge_child_by_its_mode_in_the_api_and_on_the_pages():
    """R15.4: the lineage of a re-judge child says "rejudge" (not None) and what it re-judged;
    the parent lists it with that mode; the pages call it a re-judge, not a recovery. A
    recovery of the re-judge child is a recovery (its own mode)."""
    parent = judged_parent()
    child = rejudge_child(parent)
    Run.objects.filter(pk=child.pk).update(status="completed", finished_at=timezone.now())
    Cell.objects.filter(run=child).update(status="completed", correct=True, scored=True)
    marker = child.manifest["rejudge"]

    lineage = run_lineage(run=child)
    assert lineage["run"]["mode"] == "rejudge"
    assert lineage["parent"]["id"] == parent.pk and lineage["parent"]["mode"] is None
    assert lineage["recovered_from"] is None
    assert lineage["rejudged_from"] == {
        "parent": parent.pk,
        "judge_calls": len(OUTCOMES),
        "confirmed_judge_cost_usd": marker["confirmed_judge_cost_usd"],
        "rejudge_sha256": marker["rejudge_sha256"],
    }
    of_parent = run_lineage(run=parent)
    assert [(c["id"], c["mode"]) for c in of_parent["children"]] == [(child.pk, "rejudge")]
    assert of_parent["rejudged_from"] is None

    staff = f.user_create(staff=True)
    api = APIClient()
    api.force_authenticate(staff)
    doc = api.get(f"/api/v1/runs/{child.pk}/lineage/").json()
    assert doc["run"]["mode"] == "rejudge" and doc["rejudged_from"]["parent"] == parent.pk
    listed = api.get(f"/api/v1/runs/{parent.pk}/lineage/").json()["children"]
    assert [c["mode"] for c in listed] == ["rejudge"]

    client = _web(staff)
    child_html = client.get(f"/runs/{child.pk}/").content.decode()
    assert 'id="lineage-rejudge"' in child_html and "Re-judge of" in child_html
    assert "re-judge of <a" in child_html and "recovery of <a" not in child_html
    assert "Recovery child of" not in child_html
    review = client.get(f"/runs/{parent.pk}/recovery/", {"mode": "undispatched"})
    assert review.status_code == 200
    row = _row_of(review.content.decode(), child.pk)
    assert "<td>rejudge</td>" in row, row


def _web(user: Any) -> Any:
    from django.test import Client

    client = Client()
    client.force_login(user)
    return client


def _row_of(html: str, run_id: int) -> str:
    start = html.index(f"run #{run_id} ")
    return html[start : html.index("</tr>", start)]


def test_a_rejudge_child_is_refused_in_a_comparison_with_a_reason_that_names_it():
    """R11.2: a re-judge child holds no answer of its own and covers only the judged
    benchmarks, so it is never a comparison member; the reason says it is a re-judge (not "a
    recovery child") and points to the parent to compare. A recovery child keeps its reason."""
    parent = judged_parent()
    child = rejudge_child(parent)
    Run.objects.filter(pk=child.pk).update(status="completed", finished_at=timezone.now())
    child.refresh_from_db()
    problems = run_comparison_problems(child)
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"run {child.pk} is a re-judge of run {parent.pk}:")
    assert f"compare run {parent.pk}" in problems[0] and "recovery child" not in problems[0]
    assert run_comparison_problems(parent) == []
    texts = [d.text for d in runs_differences(parent, child)]
    assert problems[0] in texts

    recovered = f.run_create(
        manifest={**parent.manifest, "recovery": {"mode": "failed"}},
        parent=parent,
        status="completed",
        dataset=parent.dataset,
    )
    assert run_comparison_problems(recovered) == [
        f"run {recovered.pk} is a recovery child of run {parent.pk}: it covers only its "
        "selection of cells"
    ]


def stopped_child() -> tuple[Run, Run, list[Cell]]:
    """A re-judge child that stopped: two cells judged, one failed by its judge call, two
    never sent."""
    parent = judged_parent()
    child = rejudge_child(parent)
    judged_a, judged_b, failed, *unsent = child_cells(child)
    for cell, verdict in ((judged_a, "correct"), (judged_b, "incorrect")):
        judge_call(cell, f'{{"verdict": "{verdict}"}}', cost_usd="0.00006")
        Cell.objects.filter(pk=cell.pk).update(
            status="completed", correct=verdict == "correct", scored=True
        )
    judge_call(failed, status="failed", stage="done", error_code="timeout", error="no reply")
    Cell.objects.filter(pk=failed.pk).update(status="failed", error="judge call 1: timeout")
    Run.objects.filter(pk=child.pk).update(
        status="failed", started_at=timezone.now(), finished_at=timezone.now()
    )
    child.refresh_from_db()
    return parent, child, unsent


def test_failed_mode_recovery_of_a_rejudge_child_is_refused_and_undispatched_keeps_the_slot():
    """R15.2/R15.3 with issue 22 point 4: a new attempt of a re-judge cell would get a new
    slot, for which the parent holds no answer — refused at plan time and at submission, with
    its own code, nothing created (API: 422). Undispatched recovery still works: the cells
    never sent keep their slot, the recovery child keeps the re-judge marker, so its episode
    judges the parent's answer, and the recovery pass grades it from that answer too."""
    parent, child, unsent = stopped_child()
    with pytest.raises(Refusal) as refused:
        recovery_plan(run=child, mode="failed")
    assert refused.value.code == REJUDGE_NEW_ATTEMPT and refused.value.http_status == 422
    assert f"re-judges the answers of run {parent.pk}" in refused.value.message
    assert "'undispatched'" in refused.value.message
    staff = f.user_create(staff=True)
    with pytest.raises(Refusal) as submitted:
        recovery_submit(
            run=child,
            plan={"plan_sha256": "0" * 64, "mode": "failed", "selected_cells": [unsent[0].pk]},
            idempotency_key="k-failed",
            acknowledge_new_attempt=True,
            user=staff,
        )
    assert submitted.value.code == REJUDGE_NEW_ATTEMPT
    api = APIClient()
    api.force_authenticate(staff)
    r = api.get(f"/api/v1/runs/{child.pk}/recovery-plan/", {"mode": "failed"})
    assert r.status_code == 422 and r.json()["code"] == REJUDGE_NEW_ATTEMPT, r.json()
    page = _web(staff).get(f"/runs/{child.pk}/recovery/", {"mode": "failed"}).content.decode()
    assert "a new attempt (failed mode) would have no answer to judge" in page
    assert not Run.objects.filter(parent=child).exists()

    plan = recovery_plan(run=child, mode="undispatched")
    assert sorted(e["cell"] for e in plan["eligible_cells"]) == sorted(c.pk for c in unsent)
    grandchild, created = recovery_submit(
        run=child, plan=plan, idempotency_key="k-undispatched", user=staff
    )
    assert created and RecoveryRequest.objects.get(child=grandchild).mode == "undispatched"
    assert grandchild.manifest["rejudge"]["parent_run"] == parent.pk
    assert run_lineage(run=grandchild)["run"]["mode"] == "undispatched"
    cells = child_cells(grandchild)
    assert sorted((c.question_id, c.target_id, c.slot) for c in cells) == sorted(
        (c.question_id, c.target_id, c.slot) for c in unsent
    )
    # What the episode judges: the original parent's answer of the same attempt.
    for cell in cells:
        got = parent_answer(cell_id=cell.pk, parent_run_id=parent.pk)
        assert got == answer_of(parent, cell) and got
    # Its worker dies after a judge call: graded from that answer, as in the child.
    Run.objects.filter(pk=grandchild.pk).update(status="running", started_at=timezone.now())
    first = cells[0]
    crashed(first)
    judge_call(first, '{"verdict": "correct"}')
    ledger_reap(sandbox=False)
    got = Cell.objects.get(pk=first.pk)
    assert (got.status, got.correct, got.final_answer) == (
        "completed",
        True,
        answer_of(parent, first),
    )


def _lineage_cli(capsys: Any, run_id: int) -> list[str]:
    capsys.readouterr()
    call_command("benchmark", "lineage", str(run_id), "--user", "ops")
    return capsys.readouterr().out.splitlines()


def test_the_cli_lineage_prints_each_runs_mode_and_what_a_rejudge_child_judged_again(capsys):
    """`benchmark lineage` says what the API's lineage says of each run: a re-judge child is
    a re-judge (with the judge calls and the cost confirmed for it), a recovery child a
    recovery in its mode, a run that is neither has no mode."""
    parent, child, _ = stopped_child()
    ops = f.user_create(username="ops", staff=True)
    plan = recovery_plan(run=child, mode="undispatched")
    grandchild, _ = recovery_submit(run=child, plan=plan, idempotency_key="k-cli", user=ops)
    cost = child.manifest["rejudge"]["confirmed_judge_cost_usd"]
    assert Decimal(cost) > 0

    run_line, rejudged, parent_line, child_line = _lineage_cli(capsys, child.pk)
    assert run_line.startswith(f"run {child.pk} failed ") and run_line.endswith("  (re-judge)")
    assert rejudged == (
        f"re-judge of run {parent.pk}: {len(OUTCOMES)} judge calls, confirmed judge cost ${cost}"
    )
    assert parent_line.startswith(f"parent:   run {parent.pk} ")
    assert parent_line.endswith(f"  {parent.name}")  # neither a recovery nor a re-judge
    assert child_line.startswith(f"child:    run {grandchild.pk} ")
    assert child_line.endswith("  (undispatched recovery)")

    run_line, recovered, parent_line = _lineage_cli(capsys, grandchild.pk)
    assert run_line.endswith("  (undispatched recovery)")
    assert recovered == f"recovery of run {child.pk} (undispatched mode)"
    assert parent_line.startswith(f"parent:   run {child.pk} ")
    assert parent_line.endswith("  (re-judge)")


def test_the_lineage_lists_the_whole_tree_below_a_run_with_each_runs_parent_and_depth(capsys):
    """R15.4: the lineage of a run lists every run below it — its re-judge child and that
    child's own recovery —, not only its direct children: in id order, each with the run it
    came from and its depth, paged by id (API, CLI, recovery page). A recovered grandchild is
    found from the original run as well as from its parent."""
    parent, child, _ = stopped_child()
    ops = f.user_create(username="ops", staff=True)
    plan = recovery_plan(run=child, mode="undispatched")
    grandchild, _ = recovery_submit(run=child, plan=plan, idempotency_key="k-tree", user=ops)

    tree = run_lineage(run=parent)["children"]
    assert [(c["id"], c["parent"], c["depth"], c["mode"]) for c in tree] == [
        (child.pk, parent.pk, 1, "rejudge"),
        (grandchild.pk, child.pk, 2, "undispatched"),
    ]
    assert tree[1]["progress"]["denominator"] == grandchild.cells.count()
    first = run_lineage(run=parent, limit=1)
    assert [c["id"] for c in first["children"]] == [child.pk]
    assert first["next_children_after"] == child.pk
    rest = run_lineage(run=parent, children_after=child.pk, limit=1)
    assert [c["id"] for c in rest["children"]] == [grandchild.pk]
    assert rest["next_children_after"] is None
    # From the middle of the tree: its own child only, at depth 1.
    assert [(c["id"], c["depth"]) for c in run_lineage(run=child)["children"]] == [
        (grandchild.pk, 1)
    ]

    api = APIClient()
    api.force_authenticate(ops)
    doc = api.get(f"/api/v1/runs/{parent.pk}/lineage/").json()
    assert [(c["id"], c["parent"], c["depth"]) for c in doc["children"]] == [
        (child.pk, parent.pk, 1),
        (grandchild.pk, child.pk, 2),
    ]

    lines = _lineage_cli(capsys, parent.pk)
    children = [line for line in lines if line.startswith("child:")]
    assert len(children) == 2
    assert children[0].startswith(f"child:    run {child.pk} ")
    assert children[1].startswith(f"child:      run {grandchild.pk} ")
    assert children[1].endswith(f"(undispatched recovery)  (from run {child.pk})")

    page = _web(ops).get(f"/runs/{parent.pk}/recovery/", {"mode": "undispatched"})
    section = page.content.decode().split('id="recovery-children"', 1)[1]
    assert f"run #{grandchild.pk}" in section
    assert f"from run #{child.pk} (depth 2)" in section


def test_a_rejudge_childs_report_states_its_own_subject_spend_as_a_known_zero_and_whose_answers():
    """A re-judge child sends no subject call — its engine never calls the subject; the answers
    it judges were bought by its parent —, so its own subject spend is known: $0, tokens 0 (not
    unknown, R1.2: nothing about it is unknown), its total spend the judge calls' known cost,
    and the report says whose answers they are (`run.answers_of`: the parent, whose report
    holds what they cost). The parent's report is unchanged by it."""
    parent = judged_parent()
    child = rejudge_child(parent)
    for cell in child_cells(child):
        judge_call(cell, '{"verdict": "correct"}')
        Cell.objects.filter(pk=cell.pk).update(status="completed", correct=True, scored=True)
    Run.objects.filter(pk=child.pk).update(
        status="completed", started_at=timezone.now(), finished_at=timezone.now()
    )
    child.refresh_from_db()

    report = run_report(run=child)
    (target,) = report["targets"]
    judged = len(OUTCOMES)
    assert report["run"]["answers_of"] == parent.pk
    assert report["counts"]["completed"] == report["counts"]["planned"] == judged
    assert target["subject_cost_usd"] == "0" and target["known_cost_usd"] == "0"
    assert target["tokens"] == {"input": 0, "cached_input": 0, "cache_write": 0, "output": 0}
    assert target["cache_neutral_cost_usd"] == "0"
    # Whether its answers were empty is the parent's to say: unknown here, not 0.
    assert target["empty_answers"] is None and target["empty_answers_note"] is None
    judge_cost = Decimal("0.00006") * judged
    assert Decimal(target["evaluation_cost_usd"]) == judge_cost
    assert Decimal(target["total_spend_usd"]) == judge_cost
    # The API serves the same report (the stored one, settled).
    api = APIClient()
    api.force_authenticate(f.user_create(staff=True))
    served = api.get(f"/api/v1/runs/{child.pk}/report/").json()
    assert served["run"]["answers_of"] == parent.pk
    assert served["targets"][0]["subject_cost_usd"] == "0"
    # The CLI's report text and the run page say it beside the spend.
    said = f"judge calls only: the answers judged are run {parent.pk}'s, bought and counted there"
    assert said in report_text(served)
    page = Client()
    page.force_login(f.user_create(staff=True))
    html = page.get(f"/runs/{child.pk}/").content.decode()
    assert f"the answers judged are run #{parent.pk}'s, bought and counted there" in html
    # A run that is no re-judge names no one else's answers.
    assert run_report(run=parent)["run"]["answers_of"] is None
    assert "answers judged" not in report_text(run_report(run=parent))
