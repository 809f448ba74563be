"""Judge-only completion (issue 34): a judged cell whose answer is stored and whose judge call was
never sent — its worker died between the two — or failed at no cost (an HTTP error before any
stream byte at a judge that does not bill error responses, or no connection made) is completed
by one judge call over the stored answer and no subject call, in a recovery child that reuses
the re-judge machinery (runs/settlement/rejudge.py), at a worst case quoted in the plan and
confirmed on submission.

Ledgers are written as a dead worker leaves them (a `running` cell under an expired lease with
its completed calls) and settled by the recovery pass (`ledger_reap`), as in
tests/runs/test_crash_settle.py. The end-to-end test then submits the judge-only plan to a real
Celery worker against the simulator, whose own per-call-id and per-model counters prove that
exactly one request — the judge's — left for each such cell, and that a repeated submission
(API and CLI, same key) sends nothing.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from runs.engine.finish import EPISODE_INTERRUPTED, LEGACY_SETTLED_ERROR
from runs.engine.reaper import ledger_reap
from runs.engine.scoring import judge_request_messages
from runs.ledger.accounting import NOT_SENT_USAGE, worst_case_call_cost
from runs.models import Call, Cell, RecoveryClaim, RecoveryRequest, Run, Target
from runs.planning.services import run_create
from runs.reporting.report import run_report
from runs.settlement.recovery import recovery_plan, recovery_submit
from runs.settlement.recovery_rules import (
    JUDGE_FAILED_FREE_TEXT,
    JUDGE_ONLY_CLASS_TEXT,
    JUDGE_ONLY_TEXT,
    REASONS,
)
from srbench.refusals import Refusal
from srbench.simulator import oracle
from tests import factories as f
from tests.cli_support import bench
from tests.conftest import WorkerProcess, purge_broker, wait_until
from tests.runs import engine_support as es
from tests.runs.test_crash_settle import call, crashed
from tests.runs.test_recovery import ledger_checksum

# ledger_reap commits durable transactions of its own.
pytestmark = pytest.mark.django_db(transaction=True)

# Generous: a loaded 2-core machine starts a Celery worker slowly; a quiet one in seconds.
WAIT_S = 240
WRONG = "I believe it is Zanzibar"


@pytest.fixture
def start_worker(transactional_db: None, tmp_path: Any) -> Any:
    """A real worker, started when the test says: the parent's ledger is written first, as a
    dead worker left it, so no live worker drives the parent meanwhile."""
    started: list[WorkerProcess] = []

    def start() -> WorkerProcess:
        purge_broker()  # the parent's own doorbell: it has ended, nothing to drive
        worker = WorkerProcess(tmp_path / "worker.log", ["--pool=solo"])
        worker.start()
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()
    purge_broker()


@pytest.fixture(autouse=True)
def _clean_broker():
    # A child created without a worker is dispatched to the broker; drop the message.
    yield
    purge_broker()


def judged_run(owner: Any) -> Run:
    """A running SimpleQA run (four cells on sim-strong, judged by sim-judge); every cell still
    pending. The targets exist already (the simulator's, or `targets` below)."""
    run, created = run_create(
        owner=owner,
        plan={
            "name": "judged",
            "dataset": es.fixture_dataset(["simpleqa"], per_benchmark=4).pk,
            "targets": ["sim-strong"],
            "judges": {"simpleqa": "sim-judge"},
        },
    )
    assert created
    Run.objects.filter(pk=run.pk).update(status="running", started_at=timezone.now())
    run.refresh_from_db()
    return run


def targets() -> None:
    f.target_create(
        slug="sim-strong", model="sim-strong", prices={"sim-strong": es.PRICES["sim-strong"]}
    )
    f.target_create(
        slug="sim-judge", model="sim-judge", prices={"sim-judge": es.PRICES["sim-judge"]}
    )


def reference(cell: Cell) -> str:
    return str(cell.question.secret.data["answer"])


def worker_died(run: Run) -> dict[str, Cell]:
    """The ledger of a worker that died with four SimpleQA cells in hand, settled by the
    recovery pass: two cut between their answer and their judge call (one answer right, one
    wrong), one whose judge call was in flight (→ `sent_unknown`) and one whose judge call
    failed with a complete HTTP 500 before any stream byte (sim-judge does not bill error
    responses: a known $0). Returns them by name."""
    right, wrong, unknown, judge_failed = Cell.objects.filter(run=run).order_by("pk")
    judge = Target.objects.get(slug="sim-judge")
    crashed(right, ("subject", 0, f"The answer is {reference(right)}."))
    crashed(wrong, ("subject", 0, WRONG))
    crashed(unknown, ("subject", 0, f"The answer is {reference(unknown)}."))
    f.call_create(cell=unknown, role="judge", sequence=0, status="sent", target=judge)
    crashed(judge_failed, ("subject", 0, f"The answer is {reference(judge_failed)}."))
    f.call_create(
        cell=judge_failed,
        role="judge",
        sequence=0,
        target=judge,
        status="failed",
        stage="done",
        http_status=500,
        error_code="http_500",
        error="HTTP 500 Internal Server Error: boom",
    )
    ledger_reap(sandbox=False)
    cells = {
        "right": right,
        "wrong": wrong,
        "unknown": unknown,
        "judge_failed": judge_failed,
    }
    for cell in cells.values():
        cell.refresh_from_db()
    run.refresh_from_db()
    assert run.is_terminal, run.status
    for name in ("right", "wrong"):  # how the pass leaves a cut cell
        assert cells[name].status == "failed", name
        assert cells[name].error.startswith(f"{EPISODE_INTERRUPTED}: "), cells[name].error
        assert "its judge call" in cells[name].error
    assert cells["unknown"].status == "sent_unknown"
    assert cells["judge_failed"].error.startswith("judge call 1: http_500")
    return cells


def expected_worst(run: Run, cell: Cell, answer: str) -> Decimal:
    """One judge call's worst case, assembled here from the frozen judge, its price and the
    judge request the engine sends (`judge_request_messages`), by the accounting's rule."""
    judge = run.manifest["judges"]["simpleqa"]
    worst = worst_case_call_cost(
        run.manifest["prices"][judge["slug"]],
        kind=judge["kind"],
        model=judge["model"],
        messages=judge_request_messages(
            payload=cell.question.payload, secret=cell.question.secret.data, answer=answer
        ),
        max_tokens=int(
            judge["fixed_params"].get("max_tokens") or run.manifest["limits"]["max_output_tokens"]
        ),
        max_inference_calls=judge.get("max_inference_calls"),
    )
    assert worst is not None and worst > 0
    return worst


def by_cell(entries: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {e["cell"]: e for e in entries}


# --- the plan ------------------------------------------------------------------------------------


def test_the_plan_offers_cells_whose_judge_call_was_never_sent_or_failed_at_no_cost():
    """Issue 34: judge_only mode offers the cells cut between answer and judge call, each with
    "answer stored, judge call never sent: judge only", and — the extended rule — the cell
    whose judge call failed with an HTTP 500 before any stream byte at a judge that does not
    bill errors ("answer stored, judge call failed at no cost: judge only", the assumption
    said), each with its judge call's worst case; a judge call whose outcome is unknown
    (sent_unknown) keeps its cell out. Undispatched mode keeps excluding those cells, failed
    mode keeps offering the one that failed as a new attempt; both point at the judge-only
    plan: its hash and quote."""
    targets()
    run = judged_run(f.user_create())
    cells = worker_died(run)
    right, wrong, judge_failed = cells["right"], cells["wrong"], cells["judge_failed"]

    plan = recovery_plan(run=run, mode="judge_only")
    assert plan["model_requests"] == 0 and plan["subject_requests"] == 0
    assert plan["requires_judge_cost_confirmation"] and not plan["requires_acknowledgement"]
    eligible = by_cell(plan["eligible_cells"])
    assert set(eligible) == {right.pk, wrong.pk, judge_failed.pk}
    assert plan["selected_cells"] == sorted(eligible)
    worst = {
        right.pk: expected_worst(run, right, f"The answer is {reference(right)}."),
        wrong.pk: expected_worst(run, wrong, WRONG),
        judge_failed.pk: expected_worst(
            run, judge_failed, f"The answer is {reference(judge_failed)}."
        ),
    }
    for pk in (right.pk, wrong.pk):
        assert eligible[pk]["why"] == JUDGE_ONLY_TEXT
        assert "judge_failure_cost_assumes" not in eligible[pk]
    assert JUDGE_ONLY_TEXT == "answer stored, judge call never sent: judge only"
    assert eligible[judge_failed.pk]["why"] == JUDGE_FAILED_FREE_TEXT
    assert JUDGE_FAILED_FREE_TEXT == "answer stored, judge call failed at no cost: judge only"
    assert eligible[judge_failed.pk]["judge_failure_cost_assumes"] == (
        "assumes sim-judge does not bill error responses (errors_billed = false)"
    )
    for pk, entry in eligible.items():
        assert Decimal(entry["judge_call_worst_case_usd"]) == worst[pk]
    assert plan["judge_cost_quote"] == {
        "judged_cells": 3,
        "judge_calls": 3,
        "worst_case_usd": str(sum(worst.values())),
    }
    excluded = {e["cell"]: e["reason"] for e in plan["excluded"]}
    assert excluded == {cells["unknown"].pk: "ambiguous_dispatch_requires_reconciliation"}
    assert all(e["detail"] == REASONS[e["reason"]] for e in plan["excluded"])

    # A subset is quoted by itself.
    one = recovery_plan(run=run, mode="judge_only", selected_cells=[wrong.pk])
    assert Decimal(one["judge_cost_quote"]["worst_case_usd"]) == worst[wrong.pk]
    assert one["plan_sha256"] == plan["plan_sha256"]

    for mode in ("undispatched", "failed"):
        other = recovery_plan(run=run, mode=mode)
        out = by_cell(other["excluded"])
        for cell in (right, wrong):
            assert out[cell.pk]["reason"] == EPISODE_INTERRUPTED, mode
            assert out[cell.pk]["judge_only"].startswith(JUDGE_ONLY_TEXT), mode
        everything = by_cell(other["excluded"] + other["eligible_cells"])
        assert everything[judge_failed.pk]["judge_only"].startswith(JUDGE_FAILED_FREE_TEXT)
        assert "judge_only" not in everything[cells["unknown"].pk]
        assert other["judge_only"] == {
            "mode": "judge_only",
            "reason": JUDGE_ONLY_CLASS_TEXT,
            "cells": 3,
            "plan_sha256": plan["plan_sha256"],
            "judge_cost_quote": plan["judge_cost_quote"],
        }
    # Failed mode still offers the failed cell as a new attempt (which buys its answer again).
    failed = recovery_plan(run=run, mode="failed")
    assert judge_failed.pk in by_cell(failed["eligible_cells"])
    undispatched = recovery_plan(run=run, mode="undispatched")
    assert by_cell(undispatched["excluded"])[judge_failed.pk]["reason"] == (
        "already_dispatched_requires_new_attempt"
    )
    assert plan["judge_only"] is None


def test_a_judge_call_that_may_have_been_billed_keeps_its_cell_out_of_judge_only():
    """Only a judge failure known to have cost nothing makes a cell judge-only: a judge call
    whose stream broke mid-way, that timed out after it was sent, or that failed with an HTTP
    error at a judge whose frozen registry entry bills error responses may have been billed,
    so its cell is not offered (judging again would be a second paid judge call of one
    attempt). A judge call for which no connection was made is a known 0 (NOT_SENT_USAGE): its
    cell is offered, with no billing assumption to state."""
    targets()
    # The run's plan freezes sim-judge as billing error responses.
    Target.objects.filter(slug="sim-judge").update(errors_billed=True)
    run = judged_run(f.user_create())
    assert run.manifest["judges"]["simpleqa"]["errors_billed"] is True
    cut, timed_out, billed, refused = Cell.objects.filter(run=run).order_by("pk")
    judge = Target.objects.get(slug="sim-judge")
    judge_calls = {
        cut: {"http_status": 200, "error_code": "stream_disconnected", "bytes_received": 400},
        timed_out: {"http_status": 200, "error_code": "idle_timeout", "bytes_received": 0},
        billed: {"http_status": 500, "error_code": "http_500", "bytes_received": 20},
        refused: {"http_status": None, "error_code": "connect_error", **NOT_SENT_USAGE},
    }
    for cell, fields in judge_calls.items():
        crashed(cell, ("subject", 0, f"The answer is {reference(cell)}."))
        f.call_create(
            cell=cell,
            role="judge",
            sequence=0,
            target=judge,
            status="failed",
            stage="done",
            error="the judge call failed",
            **fields,
        )
    ledger_reap(sandbox=False)
    run.refresh_from_db()
    assert run.is_terminal

    plan = recovery_plan(run=run, mode="judge_only")
    assert [e["cell"] for e in plan["eligible_cells"]] == [refused.pk]
    assert plan["eligible_cells"][0]["why"] == JUDGE_FAILED_FREE_TEXT
    assert plan["eligible_cells"][0]["judge_failure_cost_assumes"] is None
    assert {e["cell"]: e["reason"] for e in plan["excluded"]} == dict.fromkeys(
        (cut.pk, timed_out.pk, billed.pk), "not_awaiting_judge"
    )
    failed = recovery_plan(run=run, mode="failed")
    assert {e["cell"]: e["reason"] for e in failed["excluded"]} == {
        cut.pk: "ambiguous_saved_result_requires_reconciliation",
        timed_out.pk: "ambiguous_saved_result_requires_reconciliation",
        billed.pk: "error_responses_billed",
    }
    assert failed["judge_only"]["cells"] == 1


def test_old_rule_cells_are_offered_and_a_cut_off_answer_is_not():
    """A judged cell settled by the rule before episode_interrupted ("worker lost after its
    calls finished") with only its answer stored is the same class; a truncated answer is wrong
    without a judge (the engine never judges it), so it is not; nor is a cell with no call."""
    targets()
    run = judged_run(f.user_create())
    legacy, truncated, never, done = Cell.objects.filter(run=run).order_by("pk")
    call(legacy, "subject", 0, "Paris")
    call(truncated, "subject", 0, "Par", finish_reason="length")
    Cell.objects.filter(pk__in=[legacy.pk, truncated.pk]).update(
        status="failed", error=LEGACY_SETTLED_ERROR
    )
    Cell.objects.filter(pk=never.pk).update(status="cancelled")
    call(done, "subject", 0, "Paris")
    call(done, "judge", 0, '{"verdict": "correct"}')
    Cell.objects.filter(pk=done.pk).update(status="completed", correct=True, scored=True)
    Run.objects.filter(pk=run.pk).update(status="failed", finished_at=timezone.now())
    run.refresh_from_db()

    plan = recovery_plan(run=run, mode="judge_only")
    assert [e["cell"] for e in plan["eligible_cells"]] == [legacy.pk]
    assert {e["cell"]: e["reason"] for e in plan["excluded"]} == {
        truncated.pk: "complete_answer_stored",
        never.pk: "not_awaiting_judge",
        done.pk: "completed_evidence_preserved",
    }


def test_a_judge_only_submission_is_refused_unless_the_quote_is_confirmed_exactly():
    """Nothing is created, claimed or sent without the quoted worst case confirmed exactly; a
    quote with no judge price cannot be confirmed at all (null, never $0)."""
    targets()
    owner = f.user_create()
    run = judged_run(owner)
    worker_died(run)
    api = APIClient()
    api.force_authenticate(owner)
    plan = api.get(f"/api/v1/runs/{run.pk}/recovery-plan/", {"mode": "judge_only"}).json()
    worst = plan["judge_cost_quote"]["worst_case_usd"]
    url = f"/api/v1/runs/{run.pk}/recover/"
    body = {"plan_sha256": plan["plan_sha256"], "mode": "judge_only"}

    def post(extra: dict[str, Any], key: str) -> Any:
        return api.post(url, {**body, **extra}, format="json", HTTP_IDEMPOTENCY_KEY=key)

    missing = post({}, "k1")
    assert missing.status_code == 422 and missing.json()["code"] == "judge_cost_unconfirmed"
    half = post({"confirm_judge_cost": str(Decimal(worst) / 2)}, "k2")
    assert half.status_code == 422 and half.json()["code"] == "judge_cost_unconfirmed"
    assert half.json()["detail"]["worst_case_usd"] == worst
    assert worst in half.json()["error"]
    assert post({"confirm_judge_cost": "a lot"}, "k3").status_code == 400
    assert post({"confirm_judge_cost": True}, "k4").status_code == 400
    assert not Run.objects.filter(parent=run).exists()
    assert not RecoveryClaim.objects.exists() and not RecoveryRequest.objects.exists()


def test_a_judge_only_quote_without_a_judge_price_cannot_be_confirmed():
    """Null for unknown (R1.2): the judge's price is missing from the frozen plan, so there is
    no worst case — the quote is null, never $0 — and no amount confirms it."""
    targets()
    Target.objects.filter(slug="sim-judge").update(prices={})
    owner = f.user_create()
    run = judged_run(owner)
    worker_died(run)
    unpriced = recovery_plan(run=run, mode="judge_only")
    assert unpriced["judge_cost_quote"]["worst_case_usd"] is None
    assert {e["judge_call_worst_case_usd"] for e in unpriced["eligible_cells"]} == {None}
    with pytest.raises(Refusal) as refused:
        recovery_submit(
            run=run,
            plan=unpriced,
            idempotency_key="k5",
            confirm_judge_cost=Decimal(0),
            user=owner,
        )
    assert refused.value.code == "judge_cost_unconfirmed" and refused.value.http_status == 422
    assert "price is missing" in refused.value.message
    assert not Run.objects.filter(parent=run).exists()


def test_the_recovery_page_shows_the_class_with_its_quote_and_submits_what_it_shows(client):
    """The page (either mode) shows the judge-only class, its reason, the quote and the plan it
    would submit; a member reviews it without a form; the owner's submission — the body the
    page's script sends — creates the child, and the page then lists it and no longer offers
    the cells."""
    targets()
    owner = f.user_create()
    run = judged_run(owner)
    cells = worker_died(run)
    quote = recovery_plan(run=run, mode="judge_only")

    client.force_login(f.user_create())  # a member
    html = client.get(f"/runs/{run.pk}/recovery/", {"mode": "undispatched"}).content.decode()
    section = html[html.index('id="judge-only"') : html.index('id="recovery-pending"')]
    assert "Answer stored, judge call never sent or failed at no cost: judge only." in section
    worst = quote["judge_cost_quote"]["worst_case_usd"]
    assert f"3 judge call(s), 0 subject calls; worst case ${worst}" in section
    assert 'id="judge-only-form"' not in section and "judge-only-not-allowed" in section
    assert html.count('class="judge-only-note"') == 3

    client.force_login(owner)
    html = client.get(f"/runs/{run.pk}/recovery/", {"mode": "failed"}).content.decode()
    form = re.search(r'<form action="#judge-only" id="judge-only-form"[^>]*>', html).group(0)
    assert f'data-plan-sha256="{quote["plan_sha256"]}"' in form
    assert f'data-worst="{worst}"' in form
    # What the page's script posts (templates/runs/recovery.html), with the CSRF token.
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html).group(1)
    made = client.post(
        f"/api/v1/runs/{run.pk}/recover/",
        {
            "plan_sha256": quote["plan_sha256"],
            "mode": "judge_only",
            "selected_cells": None,
            "acknowledge_new_attempt": False,
            "confirm_judge_cost": worst,
        },
        content_type="application/json",
        headers={"Idempotency-Key": "page-1", "X-CSRFToken": token},
    )
    assert made.status_code == 201, made.json()
    child = made.json()
    assert child["recovery"]["mode"] == "judge_only"
    assert child["progress"]["denominator"] == 3

    html = client.get(f"/runs/{run.pk}/recovery/", {"mode": "undispatched"}).content.decode()
    assert 'id="judge-only"' not in html
    children = html[html.index('id="recovery-children"') :]
    assert f"run #{child['id']}" in children and "judge_only" in children
    claimed = recovery_plan(run=run, mode="judge_only")
    assert claimed["eligible_cells"] == []
    assert {e["cell"]: e["reason"] for e in claimed["excluded"]}[cells["right"].pk] == (
        "already_claimed_by_another_recovery"
    )


# --- end to end ----------------------------------------------------------------------------------


@pytest.mark.worker
def test_a_cell_cut_between_answer_and_judge_is_completed_by_its_one_judge_call(
    start_worker: Any, capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    """Issue 34 end to end: plan (CLI and API) → confirmed submission → exactly one request per
    cut cell reaches the simulator, the judge's (per x-srbench-call-id and per model), none the
    subject's; each cell ends completed with the judge's verdict on the stored answer, in the
    child's report; the parent is unchanged; the same key again (API, CLI) returns the same
    child and sends nothing."""
    ops = f.user_create(username="ops", staff=True)
    api = APIClient()
    api.force_authenticate(ops)
    with es.simulator(["simpleqa"]) as url:
        es.sim_targets(url)
        parent = judged_run(ops)
        cells = worker_died(parent)
        cut = [cells["right"], cells["wrong"], cells["judge_failed"]]
        before_parent = ledger_checksum(parent)
        before = es.sim_stats(url)

        path = tmp_path / "judge.json"
        code, out, err = bench(
            capsys,
            "recover-plan",
            str(parent.pk),
            "--mode",
            "judge_only",
            "--output",
            str(path),
            "--user",
            "ops",
        )
        assert code == 0, err
        reviewed = json.loads(path.read_text())
        worst = reviewed["judge_cost_quote"]["worst_case_usd"]
        assert "    2  answer stored, judge call never sent: judge only" in out
        assert "    1  answer stored, judge call failed at no cost: judge only" in out
        assert "(assumes sim-judge does not bill error responses (errors_billed = false))" in out
        assert f"judge calls: 3 (one per selected cell), subject calls: 0, worst case ${worst}" in (
            out
        )
        assert f"`recover` needs --confirm-judge-cost {worst}" in out
        assert reviewed["selected_cells"] == sorted(c.pk for c in cut)

        plan = api.get(f"/api/v1/runs/{parent.pk}/recovery-plan/", {"mode": "judge_only"}).json()
        assert plan["plan_sha256"] == reviewed["plan_sha256"]

        start_worker()
        recover = f"/api/v1/runs/{parent.pk}/recover/"
        body = {
            "plan_sha256": plan["plan_sha256"],
            "mode": "judge_only",
            "confirm_judge_cost": worst,
        }
        made = api.post(recover, body, format="json", HTTP_IDEMPOTENCY_KEY="judge-only-1")
        assert made.status_code == 201, made.json()
        child = Run.objects.get(pk=made.json()["id"])
        wait_until(lambda: es.terminal(child), timeout=WAIT_S)
        after = es.sim_stats(url)

        # The same key again: the API and the CLI answer with the same child, nothing sent.
        again = api.post(recover, body, format="json", HTTP_IDEMPOTENCY_KEY="judge-only-1")
        assert again.status_code == 200 and again.json()["id"] == child.pk
        assert again["Idempotent-Replayed"] == "true"
        code, out, err = bench(
            capsys,
            "recover",
            str(parent.pk),
            "--plan",
            str(path),
            "--idempotency-key",
            "judge-only-1",
            "--confirm-judge-cost",
            worst,
            "--user",
            "ops",
            "--json",
        )
        assert code == 0, err
        assert json.loads(out)["id"] == child.pk and "already existed" in err
        assert es.sim_stats(url) == after

    assert child.status == "completed", (child.stop_reason, child.status)
    assert list(Run.objects.filter(parent=parent)) == [child]
    assert child.manifest["recovery"]["mode"] == "judge_only"
    assert child.manifest["rejudge"]["judge_only"] is True
    assert child.manifest["limits"]["max_cost_usd"] == worst
    assert "official_scoring" not in child.manifest["benchmarks"]["simpleqa"]

    # The simulator: one new request per cut cell, the judge's; the subject saw none.
    assert after["by_model"].get("sim-strong") == before["by_model"].get("sim-strong")
    assert after["by_model"]["sim-judge"] - before["by_model"].get("sim-judge", 0) == 3
    assert after["total_requests"] - before["total_requests"] == 3
    calls = list(Call.objects.filter(cell__run=child))
    assert sorted((c.role, c.sequence) for c in calls) == [("judge", 0)] * 3
    new_ids = set(after["by_call_id"]) - set(before["by_call_id"])
    assert new_ids == {str(c.pk) for c in calls}
    assert all(after["by_call_id"][i] == 1 for i in new_ids)
    assert len({c.cell_id for c in calls}) == 3
    costs = [c.cost_usd for c in calls]
    assert None not in costs and 0 < sum(costs) <= Decimal(worst)

    # Each cut cell: the same attempt, its stored answer, the judge's verdict on it.
    children = {(c.question_id, c.target_id, c.slot): c for c in Cell.objects.filter(run=child)}
    for p in cut:
        c = children[(p.question_id, p.target_id, p.slot)]
        stored = Call.objects.get(cell=p, role="subject").content
        verdict = oracle.judge_verdict(reference(p), stored)
        assert c.status == "completed" and c.final_answer == stored
        assert c.grade["verdict"] == verdict and c.correct is (verdict == "correct")
    assert children_verdicts(children, cells) == {
        "right": True,
        "wrong": False,
        "judge_failed": True,
    }

    report = run_report(run=child)
    assert report["counts"]["completed"] == report["counts"]["planned"] == 3
    assert report["counts"]["correct"] == 2
    api_report = api.get(f"/api/v1/runs/{child.pk}/report/").json()
    assert api_report["counts"] == report["counts"]
    lineage = api.get(f"/api/v1/runs/{child.pk}/lineage/").json()
    assert lineage["run"]["mode"] == "judge_only" and lineage["parent"]["id"] == parent.pk
    # The request row records the mode as it is (migration 0023), as the lineage says it.
    assert lineage["recovered_from"]["mode"] == "judge_only"
    assert RecoveryRequest.objects.get(child=child).mode == "judge_only"

    # The parent is never modified; its cut cells are claimed by this child only.
    assert ledger_checksum(parent) == before_parent
    assert set(
        RecoveryClaim.objects.filter(request__child=child).values_list("cell_id", flat=True)
    ) == {c.pk for c in cut}


def children_verdicts(children: dict[Any, Cell], cells: dict[str, Cell]) -> dict[str, bool]:
    return {
        name: children[(cells[name].question_id, cells[name].target_id, cells[name].slot)].correct
        for name in ("right", "wrong", "judge_failed")
    }


# --- the recovery pass settles a judge-only child as its episode would ----------------------------


def test_a_judge_only_child_whose_worker_died_after_its_judge_call_is_graded_from_the_verdict():
    """The recovery pass settles a judge-only child's cell whose judge call completed as the
    live episode would have: the stored answer with the stored verdict (runs/engine/finish.py
    `rejudge_answers` reads it through runs/engine/judge_only.py, as the episode does)."""
    targets()
    owner = f.user_create()
    run = judged_run(owner)
    cells = worker_died(run)
    plan = recovery_plan(run=run, mode="judge_only")
    child, _ = recovery_submit(
        run=run,
        plan=plan,
        idempotency_key="gap",
        confirm_judge_cost=Decimal(plan["judge_cost_quote"]["worst_case_usd"]),
        user=owner,
    )
    purge_broker()
    Run.objects.filter(pk=child.pk).update(status="running", started_at=timezone.now())
    parent_right = cells["right"]
    cell = Cell.objects.get(
        run=child, question_id=parent_right.question_id, target_id=parent_right.target_id
    )
    crashed(cell, ("judge", 0, '{"verdict": "correct"}'))
    ledger_reap(sandbox=False)
    cell.refresh_from_db()
    assert (cell.status, cell.correct) == ("completed", True), cell.error
