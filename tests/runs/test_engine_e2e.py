"""End to end on PostgreSQL + Redis + a real worker process against the simulator (issue 5)."""

from __future__ import annotations

import pytest

from runs.models import Call, CallEvidence, Cell, Run, RunEvent
from runs.planning.services import run_create
from tests import factories as f
from tests.conftest import wait_until
from tests.runs import engine_support as es

pytestmark = pytest.mark.worker

BENCHMARKS = ["mmlu-pro", "gpqa", "simpleqa", "arc"]


def test_a_run_completes_against_the_simulator(celery_worker):
    with es.simulator(BENCHMARKS) as url:
        es.sim_targets(url)
        dataset = es.fixture_dataset(BENCHMARKS)
        owner = f.user_create()
        run, created = run_create(
            owner=owner,
            plan={
                "name": "e2e",
                "dataset": dataset.pk,
                "targets": ["sim-strong", "sim-weak", "sim-router"],
                "judges": {"simpleqa": "sim-judge"},
                "limits": {"concurrency": 8},
            },
        )
        assert created
        wait_until(lambda: es.terminal(run), timeout=120)
        stats = es.sim_stats(url)

    assert run.status == "completed", (run.stop_reason, celery_worker.log()[-3000:])
    cells = Cell.objects.filter(run=run)
    assert cells.count() == dataset.entries.count() * 3
    assert not cells.exclude(status="completed").exists()
    calls = Call.objects.filter(cell__run=run)
    assert calls.filter(status="completed").count() == calls.count()
    assert CallEvidence.objects.filter(call__cell__run=run).count() == calls.count()
    # Every call reached the simulator exactly once.
    assert stats["by_call_id"] == {str(c.pk): 1 for c in calls}
    events = list(RunEvent.objects.filter(run=run).values_list("seq", flat=True))
    assert events == list(range(1, len(events) + 1))


def test_report_counts_costs_and_intervals_match_an_independent_computation(celery_worker):
    import math
    from decimal import Decimal
    from fractions import Fraction

    from datasets.benchmarks import get_adapter
    from runs.reporting.report import run_report
    from srbench.simulator import oracle, tokens
    from srbench.simulator.config import load_config

    benchmarks = ["mmlu-pro", "arc"]
    seed = 20260918
    with es.simulator(benchmarks, models={"sim-strong": {"prefix_cache": False}}) as url:
        es.sim_targets(url)
        dataset = es.fixture_dataset(benchmarks)
        run, _ = run_create(
            owner=f.user_create(),
            plan={
                "name": "exact",
                "dataset": dataset.pk,
                "targets": ["sim-strong"],
                "limits": {"concurrency": 4},
            },
        )
        wait_until(lambda: es.terminal(run), timeout=120)
    assert run.status == "completed", run.stop_reason
    report = run_report(run=run)
    t = report["targets"][0]

    # Independently: which questions the simulator answers correctly, from its stated oracle.
    expected_correct: dict[str, int] = {}
    n: dict[str, int] = {}
    prompt_tokens = completion_tokens = 0
    for b in benchmarks:
        adapter = get_adapter(b)
        for q in adapter.load(adapter.fixture_path()):
            messages = adapter.messages(q.payload)
            sha = oracle.prompt_sha256(oracle.prompt_text_of(messages))
            accuracy_b = load_config(None).models["sim-strong"].accuracy_for(b)
            expected_correct[b] = expected_correct.get(b, 0) + oracle.is_correct(
                seed, "sim-strong", sha, accuracy_b
            )
            n[b] = n.get(b, 0) + 1
            prompt_tokens += sum(4 + tokens.count_tokens(m["content"]) for m in messages) + 2
    for c in Call.objects.filter(cell__run=run):
        completion_tokens += tokens.count_tokens(c.reasoning) + tokens.count_tokens(c.content)

    for b in benchmarks:
        got = t["benchmarks"][b]
        assert got["planned"] == n[b]
        assert got["correct"] == expected_correct[b], b
        p = expected_correct[b] / n[b]
        z = 1.959963984540054
        centre = (p + z * z / (2 * n[b])) / (1 + z * z / n[b])
        half = z * math.sqrt(p * (1 - p) / n[b] + z * z / (4 * n[b] ** 2)) / (1 + z * z / n[b])
        assert got["wilson_95"] == pytest.approx([centre - half, centre + half])
    assert t["tokens"]["input"] + t["tokens"]["cached_input"] == prompt_tokens
    assert t["tokens"]["cached_input"] == 0
    assert t["tokens"]["output"] == completion_tokens
    expected_cost = (Decimal(prompt_tokens) * 3 + Decimal(completion_tokens) * 15) / Decimal(10**6)
    assert Decimal(t["subject_cost_usd"]) == expected_cost
    assert Decimal(t["cache_neutral_cost_usd"]) == expected_cost
    assert t["evaluation_cost_usd"] == "0"
    assert t["score"]["kind"] == "subset"
    weights = {"mmlu-pro": Fraction(1, 10), "arc": Fraction(1, 10)}
    expected_score = sum(
        weights[b] / Fraction(2, 10) * Fraction(expected_correct[b], n[b]) for b in benchmarks
    )
    assert Fraction(t["score"]["exact"]) == expected_score
    assert report["complete"] is True and report["denominator"] == sum(n.values())


def test_livecodebench_answers_are_graded_in_the_sandbox(celery_worker):
    from datasets.benchmarks import get_adapter
    from srbench.simulator import oracle
    from srbench.simulator.config import load_config

    benchmarks = ["livecodebench"]
    with es.simulator(benchmarks) as url:
        es.sim_targets(url)
        dataset = es.fixture_dataset(benchmarks)
        run, _ = run_create(
            owner=f.user_create(),
            plan={"name": "code", "dataset": dataset.pk, "targets": ["sim-strong", "sim-weak"]},
        )
        wait_until(lambda: es.terminal(run), timeout=180)
    assert run.status == "completed", run.stop_reason
    adapter = get_adapter("livecodebench")
    config = load_config(None)
    for slug in ("sim-strong", "sim-weak"):
        expected = {}
        for q in adapter.load(adapter.fixture_path()):
            sha = oracle.prompt_sha256(oracle.prompt_text_of(adapter.messages(q.payload)))
            expected[q.native_id] = oracle.is_correct(
                20260918, slug, sha, config.models[slug].accuracy_for("livecodebench")
            )
        got = {
            c.question.native_id: c.correct
            for c in Cell.objects.filter(run=run, target__slug=slug).select_related("question")
        }
        assert got == expected, slug
        for c in Cell.objects.filter(run=run, target__slug=slug):
            assert c.grade["grader"] == "livecodebench"
            assert all(set(t) <= {"index", "status", "wall_s"} for t in c.grade["tests"])


@pytest.mark.django_db
def test_scicode_without_its_test_data_is_not_run_and_sends_nothing(settings):
    """Issue 22 point 3 (R4): without SciCode's test data on this server its problems are not
    run — refused at plan time with the reason, before any model call — never failed or 0."""
    from runs.planning.plans import PlanError

    settings.SRBENCH_SCICODE_H5 = None
    benchmarks = ["scicode"]
    with es.simulator(benchmarks) as url:
        es.sim_targets(url)
        dataset = es.fixture_dataset(benchmarks)
        with pytest.raises(PlanError) as caught:
            run_create(
                owner=f.user_create(),
                plan={"name": "scicode", "dataset": dataset.pk, "targets": ["sim-strong"]},
            )
        stats = es.sim_stats(url)
    assert "SciCode's test data (test_data.h5) is not configured" in str(caught.value.errors)
    assert stats["chat_requests"] == 0
    assert not Run.objects.filter(name="scicode").exists()


def test_agent_benchmarks_run_their_tool_loops_through_the_ledger(celery_worker):
    """Terminal-Bench drives the task's sandboxed terminal; τ³ uses the domain tools while the
    simulator target plays the user; every call is a ledger row, none sent twice."""
    from datasets.benchmarks import get_adapter
    from srbench.simulator import oracle
    from srbench.simulator.config import load_config

    benchmarks = ["terminal-bench", "tau3"]
    with es.simulator(benchmarks) as url:
        run = es.agents_run(url, benchmarks)
        stats = es.sim_stats(url)
    calls = Call.objects.filter(cell__run=run)
    assert stats["by_call_id"] == {str(c.pk): 1 for c in calls}
    assert calls.filter(role="simulator").exists()
    assert calls.filter(role="subject", tool_calls__isnull=False).exists()
    config = load_config(None)
    for cell in Cell.objects.filter(run=run).select_related("question"):
        adapter = get_adapter(cell.benchmark)
        sha = oracle.prompt_sha256(oracle.prompt_text_of(adapter.messages(cell.question.payload)))
        expected = oracle.is_correct(
            20260918, "sim-strong", sha, config.models["sim-strong"].accuracy_for(cell.benchmark)
        )
        if cell.status == "failed":
            # only τ³ tasks whose assertions need a judge may end unscored, and they say so
            assert cell.benchmark == "tau3" and "not evaluate" in cell.error, cell.error
            continue
        assert cell.status == "completed", (cell.benchmark, cell.error)
        assert cell.correct == expected, (cell.benchmark, cell.question.native_id, cell.grade)
