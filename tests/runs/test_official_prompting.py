"""Official prompting through the real engine, worker, sandbox and simulator (issue 37 item 3):
the plan freezes the package's name, version and hashes; every LiveCodeBench subject call
carries the package's own prompt, byte for byte; the package's grader runs in the sandbox
beside sr-bench's and never changes `correct`; the report and the export name the prompts."""

from __future__ import annotations

import pytest

from datasets import official_prompts as op
from datasets.benchmarks import get_adapter
from runs.models import Call, Cell
from runs.planning.services import run_create
from runs.reporting.export import export_matrix
from runs.reporting.report import run_report
from tests import factories as f
from tests.conftest import wait_until
from tests.datasets.test_official_prompts import (  # noqa: F401 - fixtures
    lcb_package,
    scicode_gencode,
)
from tests.runs import engine_support as es

BENCHMARKS = ["livecodebench"]


@pytest.mark.worker
def test_livecodebench_in_its_official_prompt_and_grader_through_the_engine(
    celery_worker,
    lcb_package,  # noqa: F811
):
    from srbench.simulator import oracle
    from srbench.simulator.config import load_config

    with es.simulator(BENCHMARKS) as url:
        es.sim_targets(url)
        dataset = es.fixture_dataset(BENCHMARKS)
        run, _ = run_create(
            owner=f.user_create(),
            plan={
                "name": "official-prompts",
                "dataset": dataset.pk,
                "targets": ["sim-strong", "sim-weak"],
                "official_prompting": ["livecodebench"],
            },
        )
        wait_until(lambda: es.terminal(run), timeout=240)
    assert run.status == "completed", (run.stop_reason, celery_worker.log()[-3000:])

    prompting = op.load_prompting("livecodebench")
    frozen = run.manifest["benchmarks"]["livecodebench"]["official_prompting"]
    assert frozen == prompting.manifest_entry()
    assert frozen["package"] == "nvidia-livecodebench" and frozen["template_sha256"]

    # Every subject call sent the package's own rendering (computed from the imported package).
    adapter = get_adapter("livecodebench")
    rows = {q.native_id: q for q in adapter.load(adapter.fixture_path())}
    module, style = lcb_package.module, lcb_package.LMStyle.OpenAIChat
    fields = module.CodeGenerationProblem.__dataclass_fields__
    import json

    raw = {
        r["question_id"]: r
        for r in map(json.loads, adapter.fixture_path().read_text().splitlines())
        if r
    }
    cells = list(Cell.objects.filter(run=run).select_related("question", "target"))
    assert cells and all(c.status == "completed" for c in cells)
    config = load_config(None)
    disagreements = []
    for c in cells:
        calls = list(Call.objects.filter(cell=c, role="subject"))
        assert len(calls) == 1
        problem = module.CodeGenerationProblem(**{k: raw[c.question.native_id][k] for k in fields})
        want = module.format_prompt_generation(problem, style)
        assert calls[0].request["messages"] == want
        # The simulator rolled correctness on the official prompt it was sent.
        sha = oracle.prompt_sha256(want[-1]["content"])
        accuracy = config.models[c.target.slug].accuracy_for("livecodebench")
        assert c.correct is oracle.is_correct(20260918, c.target.slug, sha, accuracy)
        # The official grader beside sr-bench's: graded, never changing `correct`.
        official = c.grade["official"]
        assert official["status"] == "graded", official
        assert official["grader_sha256"] == frozen["grader"]["sha256"]
        assert set(official["results"]) <= set(op_codes())
        assert c.grade["grader"] == "livecodebench"
        if official["correct"] is not c.correct:
            disagreements.append((c.question.native_id, c.target.slug, official["results"]))
    assert disagreements == []
    # Both outcomes occur, so the comparisons above could fail either way.
    assert {c.correct for c in cells} == {True, False}

    # The report: the prompts named, the official pass@1 over first attempts beside the score.
    report = run_report(run=run)
    for t in report["targets"]:
        entry = t["official"]["benchmarks"]["livecodebench"]
        mine = [c for c in cells if c.target.slug == t["slug"]]
        passed = sum(1 for c in mine if c.grade["official"]["correct"])
        assert entry["graded"] == len(mine) and entry["passed"] == passed
        assert entry["pass_at_1"] == pytest.approx(passed / len(mine))
        assert entry["prompting"]["template_sha256"] == prompting.sha256
        assert entry["prompting"]["package"] == "nvidia-livecodebench"
    # The export names them too, and each case's official outcome apart from `correct`.
    matrix = export_matrix(run_id=run.pk)
    assert matrix["prompting"]["livecodebench"]["template_sha256"] == prompting.sha256
    assert matrix["official_benchmarks"] == ["livecodebench"]
    metrics = {m["metric"]: m for m in matrix["official"]["sim-strong"]}
    assert metrics["pass_at_1"]["n"] == len(rows)


def op_codes() -> list[str]:
    from runs.engine.official_code import LCB_RESULT_CODES

    return list(LCB_RESULT_CODES.values())


@pytest.mark.django_db
def test_the_plan_freezes_official_prompting_or_refuses_with_the_reason(monkeypatch):
    from runs.planning.plans import PlanError, plan_freeze

    dataset = es.fixture_dataset(["livecodebench", "mmlu-pro"])
    f.target_create(slug="subject")
    base = {"name": "p", "dataset": dataset.pk, "targets": ["subject"]}
    plain = plan_freeze(data=base)
    # Without the option nothing is added: existing plans keep their hash.
    assert "official_prompting" not in plain.manifest["benchmarks"]["livecodebench"]
    frozen = plan_freeze(data={**base, "official_prompting": ["livecodebench"]})
    entry = frozen.manifest["benchmarks"]["livecodebench"]["official_prompting"]
    assert entry == op.load_prompting("livecodebench").manifest_entry()
    assert frozen.plan_sha256 != plain.plan_sha256
    with pytest.raises(PlanError) as refused:
        plan_freeze(data={**base, "benchmarks": ["mmlu-pro"], "official_prompting": ["scicode"]})
    assert "not among the selected benchmarks" in str(refused.value.errors["official_prompting"])

    def missing(distribution: str):
        raise op.PromptingUnavailable(f"the {distribution} package is not installed here")

    monkeypatch.setattr(op, "_root", missing)
    with pytest.raises(PlanError) as absent:
        plan_freeze(data={**base, "official_prompting": ["livecodebench"]})
    assert absent.value.errors["official_prompting"] == {
        "livecodebench": "not available here: the nvidia-livecodebench package is not "
        "installed here"
    }


@pytest.mark.worker
def test_scicode_in_its_official_multistep_prompts_through_the_engine(
    transactional_db,
    tmp_path,
    settings,
    scicode_gencode,  # noqa: F811
):
    """Each step one single-turn prompt, the package's rendering (its own `Gencode`, imported)
    of the problem with the code it keeps of each earlier stored reply; graded by sr-bench's
    sandboxed grader as always."""
    from importlib import resources

    from datasets.scicode_fixture_data import write_fixture_test_data
    from tests.conftest import WorkerProcess, purge_broker

    h5 = str(write_fixture_test_data(tmp_path / "test_data.h5"))
    settings.SRBENCH_SCICODE_H5 = h5
    purge_broker()
    worker = WorkerProcess(
        tmp_path / "worker.log", ["--pool=solo"], extra_env={"SRBENCH_SCICODE_H5": h5}
    )
    worker.start()
    try:
        with es.simulator(["scicode"]) as url:
            es.sim_targets(url)
            dataset = es.fixture_dataset(["scicode"])
            run, _ = run_create(
                owner=f.user_create(),
                plan={
                    "name": "official-scicode",
                    "dataset": dataset.pk,
                    "targets": ["sim-strong"],
                    "official_prompting": ["scicode"],
                },
            )
            wait_until(lambda: es.terminal(run), timeout=240)
    finally:
        worker.stop()
        purge_broker()
    assert run.status == "completed", (run.stop_reason, worker.log()[-3000:])
    prompting = op.load_prompting("scicode")
    assert run.manifest["benchmarks"]["scicode"]["official_prompting"] == (
        prompting.manifest_entry()
    )
    template = resources.files("scicode.data").joinpath("multistep_template.txt").read_text()
    cells = list(Cell.objects.filter(run=run).select_related("question"))
    assert cells and all(c.status == "completed" for c in cells)
    for c in cells:
        payload = c.question.payload
        calls = list(Call.objects.filter(cell=c, role="subject").order_by("sequence"))
        assert len(calls) == len(payload["sub_steps"])
        gencode = scicode_gencode.Gencode(
            model="m", output_dir=tmp_path, prompt_dir=tmp_path, with_background=False
        )
        gencode.previous_llm_code = [None] * len(calls)
        for k, call in enumerate(calls, start=1):
            want, _ = gencode.generate_prompt_with_steps(
                {**payload, "required_dependencies": payload["required_dependencies"] or ""},
                k,
                template,
            )
            assert call.request["messages"] == [{"role": "user", "content": want}]
            gencode.previous_llm_code[k - 1] = op.scicode_reply_code(prompting, call.content)
        assert c.grade["grader"] == "scicode"
    served = export_matrix(run_id=run.pk)
    assert served["prompting"]["scicode"]["template_sha256"] == prompting.sha256
    assert served["prompting"]["scicode"]["file"] == "scicode/data/multistep_template.txt"
