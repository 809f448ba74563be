"""Regrade everything offline (issue 22 point 4): code answers run again in the sandbox from
what the ledger saved, judged answers only at a confirmed worst-case judge cost; no model call.

The first test is a real run against the simulator on a worker that has no sandbox tools
(`SRBENCH_SANDBOX_TOOLS_DIR` at an empty directory, as on a machine without bubblewrap): every
LiveCodeBench cell fails with the driver's "internal error: SandboxUnavailable". The regrade,
asked through the API, is queued (202) to a worker that has the sandbox and followed to its
result. Each cell's regraded result is checked against the truth computed without any grader:
the simulator wrote the reference program (`oracle.code_answer(entry, correct=True)`) or not.
The simulator's per-call counters prove that no request reached it while regrading.
"""

from __future__ import annotations

import json
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

from datasets.benchmarks import get_adapter
from datasets.grading import judge_messages
from datasets.scicode_fixture_data import write_fixture_test_data
from runs.engine.sandbox_command import TOOLS_DIR_ENV
from runs.models import Call, Cell, Regrade, Run
from runs.planning.services import run_create
from runs.settlement.regrade import run_regrade
from srbench.simulator import oracle
from tests import factories as f
from tests.compare import builders as b
from tests.conftest import WorkerProcess, purge_broker, wait_until
from tests.runs import engine_support as es

BENCHMARKS = ["livecodebench", "scicode", "terminal-bench", "mmlu-pro"]
# Generous: a loaded 2-core machine starts a Celery worker slowly; a quiet one in seconds.
WAIT_S = 240
# The strong model writes the reference program every time, the weak one never: both truths
# occur, and each is still checked per cell against the answer the simulator actually wrote.
ACCURACY = {
    "sim-strong": {"benchmark_accuracy": {"livecodebench": 1.0, "scicode": 1.0}},
    "sim-weak": {"benchmark_accuracy": {"livecodebench": 0.0, "scicode": 0.0}},
}
CODE = ("livecodebench", "scicode")


def worker(tmp_path: Path, name: str, env: dict[str, str] | None = None) -> WorkerProcess:
    w = WorkerProcess(tmp_path / f"{name}.log", ["--pool=solo", "-n", f"{name}@%h"], extra_env=env)
    w.start()
    return w


def truth(cell: Cell) -> bool:
    """Whether every saved answer of the cell is the simulator's reference program for its
    question (each SciCode step's for SciCode), read from the ledger, never from a grader."""
    from runs.engine.code_grading import SCICODE_GOLD_STEPS

    replies = list(
        Call.objects.filter(cell=cell, role="subject")
        .order_by("sequence")
        .values_list("content", flat=True)
    )
    payload, secret = cell.question.payload, cell.question.secret.data
    if cell.benchmark == "livecodebench":
        entries = [oracle.KeyEntry("livecodebench", "code", secret, payload)]
    else:
        key = es.answer_key(["scicode"])
        adapter = get_adapter("scicode")
        entries = [key.lookup(adapter.step_prompt(payload, i)) for i in range(len(replies))]
    assert len(entries) == len(replies) and all(e is not None for e in entries)
    scored = [
        (reply, entry)
        for i, (reply, entry) in enumerate(zip(replies, entries, strict=True))
        if cell.benchmark != "scicode"
        or str(secret["steps"][i]["step_number"]) not in SCICODE_GOLD_STEPS
    ]
    return all(reply == oracle.code_answer(entry, True) for reply, entry in scored)


@pytest.mark.worker
def test_a_code_cell_failed_by_a_missing_sandbox_is_regraded_to_its_true_result_with_no_call(
    transactional_db: None, tmp_path: Path, settings: Any
) -> None:
    purge_broker()
    no_tools = tmp_path / "no-sandbox-tools"
    no_tools.mkdir()
    # SciCode's fixture targets, for the plan here and for both workers' graders.
    h5 = str(write_fixture_test_data(tmp_path / "test_data.h5"))
    settings.SRBENCH_SCICODE_H5 = h5
    owner = f.user_create()
    client = APIClient()
    client.force_authenticate(owner)
    started: list[WorkerProcess] = []
    try:
        with es.simulator(BENCHMARKS, models=ACCURACY) as url:
            es.sim_targets(url)
            dataset = es.fixture_dataset(BENCHMARKS)
            started.append(
                worker(tmp_path, "blind", {TOOLS_DIR_ENV: str(no_tools), "SRBENCH_SCICODE_H5": h5})
            )
            run, _ = run_create(
                owner=owner,
                plan={
                    "name": "no sandbox",
                    "dataset": dataset.pk,
                    "targets": ["sim-strong", "sim-weak"],
                    "limits": {"concurrency": 4},
                },
            )
            wait_until(lambda: es.terminal(run), timeout=WAIT_S)
            started[0].stop()
            code_cells = list(
                Cell.objects.filter(run=run, benchmark__in=CODE).select_related("question")
            )
            assert len(code_cells) == 12, started[0].log()[-3000:]
            for cell in code_cells:
                assert cell.status == "failed" and cell.correct is None, (cell.status, cell.error)
                assert "SandboxUnavailable" in cell.error, cell.error
            # A Terminal-Bench task cannot even be set up without the sandbox: it fails before
            # any call, so there is no saved answer to re-grade (it needs a new attempt).
            never_started = list(Cell.objects.filter(run=run, benchmark="terminal-bench"))
            assert never_started and all(
                c.status == "failed" and "task set-up failed" in c.error for c in never_started
            )
            assert not Call.objects.filter(cell__in=never_started).exists()
            before = es.sim_stats(url)
            calls_before = Call.objects.filter(cell__run=run).count()

            queued = client.post(f"/api/v1/runs/{run.pk}/regrade/", {}, format="json")
            assert queued.status_code == 202, queued.json()
            follow = queued.json()["follow"]
            assert queued.json()["model_requests"] == 0
            pending = client.get(follow)
            assert pending.status_code == 202 and pending.json()["status"] == "pending"
            # An id nobody issued is not a task pending for ever (Celery's PENDING for any id).
            unknown = client.get(f"/api/v1/runs/{run.pk}/regrade/?task={uuid.uuid4()}")
            assert unknown.status_code == 404, unknown.json()

            started.append(worker(tmp_path, "sighted", {"SRBENCH_SCICODE_H5": h5}))
            done = wait_until(
                lambda: (r := client.get(follow)).status_code != 202 and r, timeout=WAIT_S
            )
            assert done.status_code == 200, (done.json(), started[-1].log()[-3000:])
            again = client.post(f"/api/v1/runs/{run.pk}/regrade/", {}, format="json")
            after = es.sim_stats(url)
    finally:
        for w in started:
            w.stop()
        purge_broker()

    # Zero calls of any kind: the simulator saw nothing, the ledger gained nothing.
    assert after == before
    assert Call.objects.filter(cell__run=run).count() == calls_before

    doc = done.json()
    assert doc["created"] is True and doc["model_requests"] == 0
    regrade = Regrade.objects.get(run=run)
    assert regrade.version == doc["version"] == 1
    rows = {r["cell"]: r for r in regrade.results["cells"]}
    truths = {c.pk: truth(c) for c in code_cells}
    assert sorted(truths.values()) == [False] * 6 + [True] * 6
    for cell in code_cells:
        row = rows[cell.pk]
        assert row["new_correct"] is truths[cell.pk], row
        assert row["old_correct"] is None and row["changed"] is True
        assert row["sandbox_was_missing"] is True and row["old_status"] == "failed"
        assert row["detail"]["grader"] == cell.benchmark
    # The regraded figures per target, as the API and CLI show them.
    for benchmark in CODE:
        assert doc["by_target"]["sim-strong"][benchmark] == {
            "regraded": 3,
            "old_correct": 0,
            "new_correct": 3,
        }
        assert doc["by_target"]["sim-weak"][benchmark]["new_correct"] == 0
    # The mcq cells are in the same regrade, graded as today.
    mcq = Cell.objects.filter(run=run, benchmark="mmlu-pro", status="completed")
    assert {rows[c.pk]["new_correct"] for c in mcq} <= {True, False} and mcq.exists()
    assert not {c.pk for c in never_started} & set(rows)
    # Cells keep their grade; the same inputs answer the stored regrade at once.
    assert not Cell.objects.filter(run=run, benchmark__in=CODE, correct__isnull=False)
    assert again.status_code == 200 and again.json()["created"] is False
    assert again.json()["version"] == 1 and Regrade.objects.filter(run=run).count() == 1


def judged_run() -> tuple[Run, dict[str, Any]]:
    """A completed run with two mcq and three judged cells, and its judge frozen in the plan."""
    qs = b.questions({"mmlu-pro": 2, "simpleqa": 3})
    subject = b.target("subject")
    judge = b.target("judge", model="m-judge", prices={"m-judge": {"input": "1", "output": "2"}})
    snapshot = {
        "slug": "judge",
        "kind": "single",
        "model": "m-judge",
        "fixed_params": {"max_tokens": 512},
        "max_inference_calls": None,
    }
    r = b.run(
        qs,
        {subject: [True, False, True, False, True]},
        judges={"simpleqa": snapshot},
        prices={"subject": subject.prices, "judge": judge.prices},
    )
    return r, snapshot


@pytest.mark.django_db
def test_rejudging_is_refused_until_the_worst_case_judge_cost_is_confirmed() -> None:
    run, _ = judged_run()
    owner = f.user_create(staff=True)
    client = APIClient()
    client.force_authenticate(owner)
    url = f"/api/v1/runs/{run.pk}/regrade/"
    # Independently: each judged answer is one judge request; every request byte an input
    # token plus 64 for the envelope, 512 output tokens (the judge's max_tokens), $1 / $2 per
    # million tokens.
    expected = Decimal(0)
    for cell in Cell.objects.filter(run=run, benchmark="simpleqa").select_related("question"):
        messages = judge_messages(cell.question.payload["question"], "B", cell.final_answer)
        request_bytes = len(json.dumps(messages).encode()) + 64
        expected += (Decimal(1) * request_bytes + Decimal(2) * 512) / Decimal(1_000_000)
    calls_before = Call.objects.count()

    refused = client.post(url, {"rejudge": True}, format="json")
    assert refused.status_code == 409, refused.json()
    body = refused.json()
    assert body["code"] == "judge_cost_unconfirmed"
    assert Decimal(body["detail"]["worst_case_usd"]) == expected
    assert body["detail"]["judged_cells"] == 3
    assert str(expected.normalize()) in body["error"]

    wrong = client.post(url, {"rejudge": True, "confirm_judge_cost": "0.000001"}, format="json")
    assert wrong.status_code == 409 and wrong.json()["code"] == "judge_cost_unconfirmed"

    confirmed = client.post(
        url, {"rejudge": True, "confirm_judge_cost": str(expected)}, format="json"
    )
    # Confirmed: a re-judge child run (tests/runs/test_rejudge.py runs one), not a regrade.
    assert confirmed.status_code == 202, confirmed.json()
    assert Run.objects.get(pk=confirmed.json()["child_run"]).parent_id == run.pk
    assert not Regrade.objects.filter(run=run).exists()

    # Without `rejudge`: the mcq answers are re-graded here (200) and the quote is shown.
    plain = client.post(url, {}, format="json")
    assert plain.status_code == 200, plain.json()
    assert plain.json()["regraded"] == 2 and plain.json()["skipped"] == 3
    assert Decimal(plain.json()["judge_cost_quote"]["worst_case_usd"]) == expected
    assert Call.objects.count() == calls_before


@pytest.mark.django_db
def test_without_the_sandbox_flag_code_cells_are_left_to_a_worker() -> None:
    """The web process never runs code: `run_regrade` without `sandbox` skips code cells, and
    the API sees that the run needs a worker's regrade."""
    from runs.settlement.regrade import sandbox_regrade_needed

    qs = b.questions({"mmlu-pro": 1, "livecodebench": 1})
    r = b.run(qs, {b.target("single"): [True, False]})
    assert sandbox_regrade_needed(r)
    result = run_regrade(run_id=r.pk)
    assert result.regrade.results["sandbox"] is False
    assert [c["benchmark"] for c in result.regrade.results["cells"]] == ["mmlu-pro"]
    assert (result.regrade.regraded_count, result.regrade.skipped_count) == (1, 1)


@pytest.mark.worker
def test_terminal_bench_and_code_regraded_through_the_cli_replay_to_the_runs_own_results(
    transactional_db: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run graded normally, then `benchmark regrade` (in-process API, a worker does the
    sandbox work, the CLI waits): Terminal-Bench episodes replay their stored commands in a
    fresh session and LiveCodeBench answers run again — each to the result the run itself
    gave, and to the simulator's truth; no request reaches the simulator."""
    from django.core.management import call_command

    benchmarks = ["terminal-bench", "livecodebench"]
    accuracy = {
        "sim-strong": {"benchmark_accuracy": {b: 1.0 for b in benchmarks}},
        "sim-weak": {"benchmark_accuracy": {b: 0.0 for b in benchmarks}},
    }
    purge_broker()
    started = [worker(tmp_path, "sighted")]
    try:
        with es.simulator(benchmarks, models=accuracy) as url:
            es.sim_targets(url)
            dataset = es.fixture_dataset(benchmarks)
            run, _ = run_create(
                owner=f.user_create(),
                plan={
                    "name": "graded",
                    "dataset": dataset.pk,
                    "targets": ["sim-strong", "sim-weak"],
                    "limits": {"concurrency": 4},
                },
            )
            wait_until(lambda: es.terminal(run), timeout=WAIT_S)
            assert run.status == "completed", (run.stop_reason, started[0].log()[-3000:])
            before = es.sim_stats(url)
            call_command("benchmark", "regrade", str(run.pk), "--wait", str(WAIT_S))
            after = es.sim_stats(url)
    finally:
        for w in started:
            w.stop()
        purge_broker()

    assert after == before
    out = capsys.readouterr().out
    assert out.startswith("appended  regrade v1"), out
    rows = {r["cell"]: r for r in Regrade.objects.get(run=run).results["cells"]}
    cells = list(Cell.objects.filter(run=run).select_related("target"))
    terminal = [c for c in cells if c.benchmark == "terminal-bench"]
    assert terminal and len(rows) == len(cells)
    for cell in cells:
        row = rows[cell.pk]
        # The truth: the strong model always followed the reference, the weak one never.
        assert cell.correct is (cell.target.slug == "sim-strong"), cell.grade
        assert row["new_correct"] is cell.correct and row["changed"] is False, row
    for cell in terminal:
        detail = rows[cell.pk]["detail"]
        assert detail["replayed"] is True and detail["steps"] == cell.grade["steps"]
        assert detail["detail"]["commands_run"] == cell.grade["detail"]["commands_run"]
