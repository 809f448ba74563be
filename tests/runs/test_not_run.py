"""Not run is not wrong (issue 22 point 3, R4, R5): a question that cannot run on this server is
left out of the plan before any model call, listed under the manifest's `not_run` with its
reason, and never becomes a failed cell or a 0."""

from __future__ import annotations

import copy
import re
from html import escape
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.utils import timezone

from datasets.models import DatasetQuestion, Question
from runs.engine.container import ENGINE_ENV
from runs.engine.runnable_here import not_runnable_reason
from runs.interfaces.cli import report_text
from runs.models import Cell, Run
from runs.planning.plans import PlanError, plan_freeze
from runs.planning.services import run_create
from runs.reporting.report import run_report
from tests import factories as f
from tests.runs.engine_support import fixture_dataset

pytestmark = pytest.mark.django_db

TERMINAL_REASON = (
    "needs a container engine (Docker or Podman): the task is not marked local_compatible, and "
    "no engine answers on this server"
)


@pytest.fixture(autouse=True)
def no_container_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever this machine has, no engine answers here (tests/runs/test_container_engine.py
    covers the machines where one does)."""
    monkeypatch.setenv(ENGINE_ENV, "none")


def add_copy(dataset: Any, benchmark: str, mutate: Any) -> Question:
    """A copy of the dataset's first question of `benchmark`, changed by `mutate(payload,
    secret)`, added to the dataset (its own content address)."""
    link = DatasetQuestion.objects.filter(dataset=dataset, question__benchmark=benchmark)
    base = link.order_by("position").first().question
    payload, secret = copy.deepcopy(base.payload), copy.deepcopy(base.secret.data)
    mutate(payload, secret)
    q = f.question_create(
        benchmark=benchmark, payload=payload, secret=secret, native_id=base.native_id + "-copy"
    )
    position = DatasetQuestion.objects.filter(dataset=dataset).count()
    DatasetQuestion.objects.create(dataset=dataset, question=q, position=position)
    return q


def plan(dataset: Any, benchmarks: list[str] | None = None) -> dict[str, Any]:
    target = f.target_create()
    user = f.target_create()
    out: dict[str, Any] = {"name": "not run", "dataset": dataset.pk, "targets": [target.slug]}
    if benchmarks:
        out["benchmarks"] = benchmarks
    if "tau3" in (benchmarks or []):
        out["simulators"] = {"tau3": user.slug}
    return out


def test_an_official_terminal_bench_task_that_needs_docker_is_left_out_with_its_reason():
    dataset = fixture_dataset(["terminal-bench"], per_benchmark=2)
    docker = add_copy(
        dataset,
        "terminal-bench",
        lambda p, s: p["environment"].update(local_compatible=False, docker_image="tb/x"),
    )
    frozen = plan_freeze(data=plan(dataset))
    ids = [c[0] for c in frozen.manifest["cases"]]
    assert docker.pk not in ids and len(ids) == 2
    assert frozen.manifest["benchmarks"]["terminal-bench"]["cases"] == 2
    [entry] = frozen.manifest["not_run"]
    assert entry["benchmark"] == "terminal-bench" and entry["questions"] == 1
    assert TERMINAL_REASON in entry["reason"]


def test_scicode_without_test_data_is_not_run_and_with_it_is_planned(settings, tmp_path: Path):
    from datasets.scicode_fixture_data import write_fixture_test_data

    dataset = fixture_dataset(["scicode", "mmlu-pro"], per_benchmark=2)
    settings.SRBENCH_SCICODE_H5 = None
    frozen = plan_freeze(data=plan(dataset))
    assert set(frozen.manifest["benchmarks"]) == {"mmlu-pro"}  # nothing of SciCode can run
    assert frozen.manifest["not_run"] == [
        {
            "benchmark": "scicode",
            "reason": "scicode: SciCode's test data (test_data.h5) is not configured on this "
            "server",
            "questions": 2,
        }
    ]

    settings.SRBENCH_SCICODE_H5 = str(write_fixture_test_data(tmp_path / "test_data.h5"))
    unknown = add_copy(
        dataset,
        "scicode",
        lambda p, s: [
            step.update(step_number="999." + str(i)) for i, step in enumerate(s["steps"])
        ],
    )
    frozen = plan_freeze(data=plan(dataset))
    assert frozen.manifest["benchmarks"]["scicode"]["cases"] == 2
    [entry] = frozen.manifest["not_run"]
    assert entry["questions"] == 1 and "holds no targets for this problem" in entry["reason"]
    assert unknown.pk not in [c[0] for c in frozen.manifest["cases"]]


def test_a_tau3_domain_without_local_tools_is_left_out_not_failed():
    dataset = fixture_dataset(["tau3"], per_benchmark=1)
    add_copy(dataset, "tau3", lambda p, s: p.update(domain="retail"))
    frozen = plan_freeze(data=plan(dataset, ["tau3"]))
    assert frozen.manifest["benchmarks"]["tau3"]["cases"] == 1
    [entry] = frozen.manifest["not_run"]
    assert "τ³ domain 'retail' is not available here" in entry["reason"]


def test_a_selection_where_nothing_can_run_is_refused_with_every_reason(settings):
    settings.SRBENCH_SCICODE_H5 = None
    dataset = fixture_dataset(["scicode"], per_benchmark=2)
    with pytest.raises(PlanError) as caught:
        plan_freeze(data=plan(dataset))
    text = str(caught.value.errors["benchmarks"])
    assert "no question that can run here: 2 × scicode: SciCode's test data" in text


def test_plans_without_exclusions_keep_their_manifest_shape():
    dataset = fixture_dataset(["mmlu-pro"], per_benchmark=2)
    assert "not_run" not in plan_freeze(data=plan(dataset)).manifest


def test_the_run_report_and_cli_name_what_was_not_run_and_no_cell_exists_for_it():
    dataset = fixture_dataset(["terminal-bench"], per_benchmark=1)
    docker = add_copy(
        dataset, "terminal-bench", lambda p, s: p["environment"].update(local_compatible=False)
    )
    run, _ = run_create(owner=f.user_create(), plan=plan(dataset))
    assert not Cell.objects.filter(run=run, question=docker).exists()
    assert Cell.objects.filter(run=run).count() == 1
    report = run_report(run=run)
    assert report["not_run"][0]["questions"] == 1
    assert report["denominator"] == 1  # never counted as planned, failed or wrong
    text = report_text(report)
    assert "not run here: 1 terminal-bench question(s)" in text
    assert "not counted as failed or wrong" in text


def test_the_rule_is_one_function_for_every_checked_benchmark():
    assert not_runnable_reason("mmlu-pro", {}, {}) is None
    official = {"environment": {"docker_image": "tb/x:1"}}
    assert TERMINAL_REASON in not_runnable_reason("terminal-bench", official, {})
    assert "names no prebuilt image" in not_runnable_reason(
        "terminal-bench", {"environment": {}}, {}
    )
    assert (
        not_runnable_reason("terminal-bench", {"environment": {"local_compatible": True}}, {})
        is None
    )


def test_the_run_page_says_complete_over_the_plan_and_names_what_the_suite_left_out(client):
    """Issue 35 item 3: the page says what the API says — `complete` over the plan, `not_run`
    over the suite, each left-out benchmark with its reason."""
    dataset = fixture_dataset(["terminal-bench"], per_benchmark=1)
    add_copy(
        dataset, "terminal-bench", lambda p, s: p["environment"].update(local_compatible=False)
    )
    run, _ = run_create(owner=f.user_create(), plan=plan(dataset))
    (cell,) = Cell.objects.filter(run=run)
    Cell.objects.filter(pk=cell.pk).update(status="completed", correct=True, scored=True)
    Run.objects.filter(pk=run.pk).update(
        status="completed", started_at=timezone.now(), finished_at=timezone.now()
    )
    report = run_report(run=run)
    assert report["complete"] is True and report["not_run"]
    client.force_login(f.user_create())
    html = client.get(f"/runs/{run.pk}/").content.decode()
    assert "Complete over the plan: every planned case has a result." in html
    assert "every planned case" in html and "The plan left part of the suite out" in html
    block = re.search(r'<div class="notice" id="not-run">(.*?)</div>', html, re.S).group(1)
    (entry,) = report["not_run"]
    # The benchmark named once: the plan's reason starts with it, the line does already.
    assert entry["reason"].startswith("terminal-bench: ")
    reason = entry["reason"].removeprefix("terminal-bench: ")
    assert f"terminal-bench: 1 question — {escape(reason)}" in block
    assert "— terminal-bench:" not in block
    assert "not counted as failed or wrong" in block


def test_a_plan_without_exclusions_shows_no_not_run_block(client):
    dataset = fixture_dataset(["mmlu-pro"], per_benchmark=1)
    run, _ = run_create(owner=f.user_create(), plan=plan(dataset))
    client.force_login(f.user_create())
    assert 'id="not-run"' not in client.get(f"/runs/{run.pk}/").content.decode()


def test_the_cli_plan_text_names_what_the_plan_leaves_out(capsys):
    dataset = fixture_dataset(["terminal-bench"], per_benchmark=1)
    add_copy(
        dataset, "terminal-bench", lambda p, s: p["environment"].update(local_compatible=False)
    )
    f.user_create(username="ops", staff=True)
    f.target_create(slug="t-plan")
    (entry,) = plan_freeze(data=plan(dataset)).manifest["not_run"]
    call_command(
        "benchmark", "plan", "--dataset", str(dataset.pk), "--target", "t-plan", "--user", "ops"
    )
    out = capsys.readouterr().out
    reason = entry["reason"].removeprefix("terminal-bench: ")
    assert (
        f"not run here: 1 terminal-bench question(s) — {reason} "
        "(left out of the plan; not counted as failed or wrong)"
    ) in out
    assert "— terminal-bench:" not in out
    assert out.rstrip().endswith("no model was called (model_requests: 0)")
