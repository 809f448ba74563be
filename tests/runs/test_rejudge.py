"""Re-judging a finished run's judged answers (issue 22 point 4): only at a confirmed worst-case
judge cost, in a child run of judge calls only, zero subject calls.

The worker test runs a real parent run (SimpleQA, HLE and MMLU-Pro fixtures, two subject models,
the simulated judge) on a real worker against the simulator, then re-judges it through the API
and the CLI. The simulator's own per-model request counters prove that the subject models were
not called again and that the judge was called exactly once per judged answer; each re-judged
verdict is checked against the simulator's judge rule applied, in the test, to the answer the
parent stored and the question's reference.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from rest_framework.test import APIClient

from runs.models import Call, Cell, Run
from runs.planning.services import run_create
from runs.reporting.report import run_report
from srbench.simulator import oracle
from tests import factories as f
from tests.compare import builders as b
from tests.conftest import WorkerProcess, wait_until
from tests.runs import engine_support as es

JUDGED = ["simpleqa", "hle"]
BENCHMARKS = [*JUDGED, "mmlu-pro"]
SUBJECTS = ["sim-strong", "sim-weak"]
# Generous: a loaded 2-core machine starts a Celery worker slowly; a quiet one in seconds.
WAIT_S = 240


def _client(user: Any) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def _parent_run(owner: Any, url: str) -> Run:
    es.sim_targets(url)
    dataset = es.fixture_dataset(BENCHMARKS, per_benchmark=4)
    run, _ = run_create(
        owner=owner,
        plan={
            "name": "judged",
            "dataset": dataset.pk,
            "targets": SUBJECTS,
            "judges": {b: "sim-judge" for b in JUDGED},
            "limits": {"concurrency": 4},
        },
    )
    wait_until(lambda: es.terminal(run), timeout=WAIT_S)
    return run


def _expected_verdict(parent_cell: Cell) -> bool:
    """What the simulated judge says of the stored answer: the simulator's stated judge rule on
    (reference, answer), computed here without the engine or any grader of the project."""
    reference = str(parent_cell.question.secret.data["answer"])
    return oracle.judge_verdict(reference, parent_cell.final_answer) == "correct"


@pytest.mark.worker
def test_confirmed_rejudge_is_a_child_run_of_judge_calls_only_and_never_calls_the_subject(
    celery_worker: WorkerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 22 point 4: unconfirmed → nothing; confirmed → one child run, one judge call per
    judged answer, subject requests unchanged, verdicts as the judge rule implies, spend within
    the confirmed worst case; confirming again (API with the same key, CLI) → the same child."""
    from django.core.management import call_command

    owner = f.user_create()
    client = _client(owner)
    with es.simulator(BENCHMARKS) as url:
        parent = _parent_run(owner, url)
        assert parent.status == "completed", (parent.stop_reason, celery_worker.log()[-3000:])
        parent_calls = Call.objects.filter(cell__run=parent).count()
        judged = list(
            Cell.objects.filter(run=parent, benchmark__in=JUDGED, status="completed")
            .select_related("question__secret", "target")
            .order_by("pk")
        )
        assert len(judged) == 2 * 4 * len(SUBJECTS)
        before = es.sim_stats(url)
        regrade = f"/api/v1/runs/{parent.pk}/regrade/"

        refused = client.post(regrade, {"rejudge": True}, format="json")
        assert refused.status_code == 409 and refused.json()["code"] == "judge_cost_unconfirmed"
        quote = refused.json()["detail"]
        assert quote["judged_cells"] == len(judged)
        worst = Decimal(quote["worst_case_usd"])
        wrong = client.post(
            regrade, {"rejudge": True, "confirm_judge_cost": str(worst / 2)}, format="json"
        )
        assert wrong.status_code == 409 and wrong.json()["code"] == "judge_cost_unconfirmed"
        assert not Run.objects.filter(parent=parent).exists()
        assert es.sim_stats(url) == before  # unconfirmed: nothing was sent

        confirm = {"rejudge": True, "confirm_judge_cost": quote["worst_case_usd"]}
        started = client.post(regrade, confirm, format="json", HTTP_IDEMPOTENCY_KEY="rj-1")
        assert started.status_code == 202, started.json()
        doc = started.json()
        assert doc["created"] is True and doc["judge_calls"] == len(judged)
        assert Decimal(doc["max_cost_usd"]) == worst and doc["subject_requests"] == 0
        again = client.post(regrade, confirm, format="json", HTTP_IDEMPOTENCY_KEY="rj-1")
        assert again.status_code == 202 and again.json()["child_run"] == doc["child_run"]
        assert again.json()["created"] is False and again["Idempotent-Replayed"] == "true"

        # The CLI confirms once more (its own key): the same child, followed to its report.
        call_command(
            "benchmark",
            "regrade",
            str(parent.pk),
            "--rejudge",
            "--confirm-judge-cost",
            quote["worst_case_usd"],
            "--wait",
            str(WAIT_S),
        )
        after = es.sim_stats(url)

    child = Run.objects.get(pk=doc["child_run"])
    assert list(Run.objects.filter(parent=parent)) == [child]
    assert child.status == "completed", (child.stop_reason, celery_worker.log()[-3000:])
    assert child.manifest["rejudge"]["parent_run"] == parent.pk
    assert child.name == "judged · re-judge"

    # The simulator: no subject model saw a request; the judge saw one per judged answer.
    for model in SUBJECTS:
        assert after["by_model"].get(model) == before["by_model"].get(model), model
    assert after["by_model"]["sim-judge"] - before["by_model"]["sim-judge"] == len(judged)
    assert after["total_requests"] - before["total_requests"] == len(judged)

    # The ledger: the child's calls are judge calls only, one per cell, each sent once.
    calls = list(Call.objects.filter(cell__run=child).select_related("cell"))
    assert {c.role for c in calls} == {"judge"} and len(calls) == len(judged)
    assert sorted(c.cell_id for c in calls) == sorted(
        Cell.objects.filter(run=child).values_list("pk", flat=True)
    )
    new_ids = set(after["by_call_id"]) - set(before["by_call_id"])
    assert new_ids == {str(c.pk) for c in calls}
    assert all(after["by_call_id"][i] == 1 for i in new_ids)
    assert Call.objects.filter(cell__run=parent).count() == parent_calls

    # Each re-judged cell: the parent's attempt, its stored answer, the verdict the rule gives.
    children = {(c.question_id, c.target_id, c.slot): c for c in Cell.objects.filter(run=child)}
    assert len(children) == len(judged)
    expected: dict[tuple[str, str], int] = {}
    for p in judged:
        c = children[(p.question_id, p.target_id, p.slot)]
        verdict = _expected_verdict(p)
        assert c.status == "completed" and c.benchmark == p.benchmark
        assert c.final_answer == p.final_answer
        assert c.correct is verdict, (c.grade, p.final_answer)
        # The same deterministic judge on the same answer: the parent's verdict stands.
        assert p.correct is verdict
        key = (p.target.slug, p.benchmark)
        expected[key] = expected.get(key, 0) + int(verdict)
    assert 0 < sum(expected.values()) < len(judged)  # both verdicts occur

    # The child's report gives the re-judged scores.
    report = run_report(run=child)
    for t in report["targets"]:
        assert set(t["benchmarks"]) == set(JUDGED)
        for benchmark, v in t["benchmarks"].items():
            assert v["correct"] == expected[(t["slug"], benchmark)], (t["slug"], benchmark)
            assert v["planned"] == 4

    # Spend: every judge call priced, the total within the confirmed worst case.
    costs = [c.cost_usd for c in calls]
    assert None not in costs and 0 < sum(costs) <= worst
    assert child.budget_committed_usd <= worst

    out, err = capsys.readouterr()
    assert f"run {child.pk} 'judged · re-judge': completed" in out, out
    # Followed by the events push (issue 38 item 3), not a 0.5 s poll.
    assert f"following run {child.pk}: the server pushes its end" in err, err
    for (slug, benchmark), n in expected.items():
        assert any(
            line.strip().startswith(benchmark) and f"{n}/4" in line for line in out.splitlines()
        ), (slug, benchmark, out)


def _judged_parent(judge_prices: dict[str, Any]) -> Run:
    qs = b.questions({"mmlu-pro": 1, "simpleqa": 2})
    subject = b.target("subject")
    b.target("judge", model="m-judge", prices=judge_prices)
    snapshot = {
        "slug": "judge",
        "kind": "single",
        "model": "m-judge",
        "fixed_params": {"max_tokens": 256},
        "max_inference_calls": None,
    }
    return b.run(
        qs,
        {subject: [True, False, True]},
        judges={"simpleqa": snapshot},
        prices={"subject": subject.prices, "judge": judge_prices},
    )


@pytest.mark.django_db
def test_a_rejudge_whose_judge_price_is_unknown_is_refused_and_creates_nothing() -> None:
    """Null for unknown (R1.2): with no judge price there is no worst case, so no budget could
    bound the re-judge; it is refused whatever amount is confirmed."""
    parent = _judged_parent({})
    client = _client(f.user_create(staff=True))
    url = f"/api/v1/runs/{parent.pk}/regrade/"
    for amount in (None, "0", "1"):
        body: dict[str, Any] = {"rejudge": True}
        if amount is not None:
            body["confirm_judge_cost"] = amount
        r = client.post(url, body, format="json")
        assert r.status_code == 409 and r.json()["code"] == "judge_cost_unconfirmed", r.json()
        assert r.json()["detail"]["worst_case_usd"] is None
        assert "price is missing" in r.json()["error"]
    assert not Run.objects.filter(parent=parent).exists()


@pytest.mark.django_db
def test_a_run_with_nothing_to_rejudge_says_so_before_asking_for_a_confirmation() -> None:
    """An outside probe: a run without a judged answer answered "send confirm_judge_cost=0 to
    proceed", then refused that confirmation as nothing_to_rejudge. It says so at once."""
    qs = b.questions({"mmlu-pro": 2})
    parent = b.run(qs, {b.target("subject"): [True, False]})
    client = _client(f.user_create(staff=True))
    url = f"/api/v1/runs/{parent.pk}/regrade/"
    for body in ({"rejudge": True}, {"rejudge": True, "confirm_judge_cost": "0"}):
        r = client.post(url, body, format="json")
        assert r.status_code == 422 and r.json()["code"] == "nothing_to_rejudge", r.json()
        assert "confirm_judge_cost" not in r.json()["error"]
    assert not Run.objects.filter(parent=parent).exists()


@pytest.mark.django_db
def test_an_idempotency_key_of_another_run_is_refused_for_a_rejudge() -> None:
    """A key already used (for another run of this owner) cannot name a re-judge: 422, and no
    child; the child a confirmed re-judge creates copies the parent's judged cells only, with
    the confirmed worst case as its budget and no official second judge call."""
    parent = _judged_parent({"m-judge": {"input": "1", "output": "2"}})
    owner = f.user_create(staff=True)
    client = _client(owner)
    other = Run.objects.create(
        name="other",
        manifest=parent.manifest,
        plan_sha256="0" * 64,
        dataset=parent.dataset,
        owner=owner,
        idempotency_key="taken",
    )
    url = f"/api/v1/runs/{parent.pk}/regrade/"
    worst = client.post(url, {"rejudge": True}, format="json").json()["detail"]["worst_case_usd"]
    confirm = {"rejudge": True, "confirm_judge_cost": worst}
    reused = client.post(url, confirm, format="json", HTTP_IDEMPOTENCY_KEY="taken")
    assert reused.status_code == 422 and reused.json()["code"] == "idempotency_key_reused"
    assert reused.json()["detail"] == {"run": other.pk}
    assert not Run.objects.filter(parent=parent).exists()

    made = client.post(url, confirm, format="json")
    assert made.status_code == 202, made.json()
    child = Run.objects.get(pk=made.json()["child_run"], parent=parent)
    cells = Cell.objects.filter(run=child)
    parents = Cell.objects.filter(run=parent, benchmark="simpleqa")
    assert sorted(cells.values_list("question_id", "target_id", "slot")) == sorted(
        parents.values_list("question_id", "target_id", "slot")
    )
    assert set(child.manifest["benchmarks"]) == {"simpleqa"}
    assert "official_scoring" not in child.manifest["benchmarks"]["simpleqa"]
    assert child.manifest["limits"]["max_cost_usd"] == worst
    assert not Call.objects.filter(cell__run=child).exists()
    # Without a key, the same confirmation is the same child.
    same = client.post(url, confirm, format="json")
    assert same.status_code == 202 and same.json()["child_run"] == child.pk
    assert same.json()["created"] is False
