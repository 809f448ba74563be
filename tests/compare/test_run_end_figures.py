"""A run's per-cell figures are stored when it ends (issue 25): the run finish calls the
run-end hooks (`runs.ledger.hooks`), compare's stores the figures under the run's fingerprint, and the
first comparison of ended runs reads them instead of computing them. A failing hook is
logged and never changes the run."""

from __future__ import annotations

import logging
import re
from decimal import Decimal as D

import numpy as np
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from compare.figures import CELL_RECORD, FIGURES_VERSION, case_figures_keep, cells_pack
from compare.models import CaseFigures, PlanCases, ResampledCostSums
from compare.services import comparison_build, savings_sums_keep
from runs.engine import finish
from runs.engine.finish import run_finish_if_done, runs_report_backfill
from runs.ledger import hooks
from runs.ledger.selectors import run_settled_fingerprint
from runs.models import Call, Cell, Run, RunReport
from runs.planning.services import run_create
from runs.reporting.report import report_key
from srbench.canonical import sha256_hex
from tests import factories as f
from tests.compare import builders as b
from tests.conftest import wait_until
from tests.runs import engine_support as es

FIGURES_TABLE = CaseFigures._meta.db_table
REPORTS_TABLE = RunReport._meta.db_table
CELLS_TABLE = Cell._meta.db_table
CALLS_TABLE = Call._meta.db_table
# A read of a run's whole manifest (its case list is megabytes at 100,000 cases); a key of it
# (`-> 'targets'`) or the manifest without its case list (`- 'cases'`) is not one.
WHOLE_MANIFEST = re.compile(rf'"{Run._meta.db_table}"\."manifest"(?!\s*-)')


def _expected_key(run: Run) -> str:
    """The key a comparison looks the run's figures up under, from the run as it is now."""
    fingerprint = run_settled_fingerprint(Run.objects.get(pk=run.pk))
    assert fingerprint is not None, "the run should be settled"
    return sha256_hex([FIGURES_VERSION, report_key(fingerprint)])


def _assert_stored_as_computed(run: Run) -> None:
    row = CaseFigures.objects.get(run=run)
    assert row.fingerprint == _expected_key(run)
    stored = np.frombuffer(bytes(row.cells), dtype=CELL_RECORD)
    assert stored.tobytes() == cells_pack([run.pk])[run.pk].tobytes()
    # And independently of the packing code: one record per cell, the same outcomes.
    cells = Cell.objects.filter(run=run)
    assert stored.size == cells.count() > 0
    assert int(stored["correct"].sum()) == cells.filter(correct=True).count()
    assert sorted(stored["question"].tolist()) == sorted(cells.values_list("question", flat=True))


def _writes(queries: list[dict[str, str]], table: str) -> list[str]:
    verbs = ("INSERT", "UPDATE", "DELETE")
    return [
        q["sql"] for q in queries if q["sql"].startswith(verbs) and f'"{table}"' in q["sql"][:120]
    ]


def test_compare_registers_its_run_end_hooks_once_in_order() -> None:
    assert hooks.run_end_hooks.count(case_figures_keep) == 1
    assert hooks.run_end_hooks.count(savings_sums_keep) == 1
    # The sums are computed from the stored figures, so after them.
    order = hooks.run_end_hooks.index
    assert order(case_figures_keep) < order(savings_sums_keep)


@pytest.mark.worker
def test_runs_ended_by_a_worker_have_their_figures_stored_and_the_first_comparison_reads_them(
    celery_worker,
):
    benchmarks = ["mmlu-pro", "arc"]
    with es.simulator(benchmarks) as url:
        es.sim_targets(url)
        dataset = es.fixture_dataset(benchmarks)
        owner = f.user_create()
        runs = [
            run_create(
                owner=owner,
                plan={
                    "name": name,
                    "dataset": dataset.pk,
                    "targets": targets,
                    "limits": {"concurrency": 4},
                },
            )[0]
            for name, targets in (
                ("baselines", ["sim-strong", "sim-weak"]),
                ("router", ["sim-router"]),
            )
        ]
        for run in runs:
            wait_until(lambda r=run: es.terminal(r), timeout=180)
    baseline, candidate = runs
    for run in runs:
        assert run.status == "completed", (run.stop_reason, celery_worker.log()[-3000:])
    # The hooks run after the transaction that made the run terminal: the figures, the packed
    # cases, and the savings bootstrap's sums of every target (three, all costs known).
    wait_until(lambda: CaseFigures.objects.filter(run__in=runs).count() == 2, timeout=60)
    wait_until(lambda: ResampledCostSums.objects.count() == 3, timeout=60)
    assert PlanCases.objects.filter(run__in=runs).count() == 2
    for run in runs:
        _assert_stored_as_computed(run)
        assert RunReport.objects.get(run=run).fingerprint == report_key(
            run_settled_fingerprint(Run.objects.get(pk=run.pk))
        )
    stamped = dict(CaseFigures.objects.values_list("run_id", "computed_at"))
    kept_sums = dict(ResampledCostSums.objects.values_list("key", "computed_at"))

    with CaptureQueriesContext(connection) as first:
        doc = comparison_build(baseline_run_id=baseline.pk, candidate_run_ids=[candidate.pk])
    assert doc["baseline"]["run"] == baseline.pk
    assert [c["target"] for c in doc["comparisons"]] == ["sim-router"]
    # The first comparison computed nothing: it wrote no figures or report, and read no
    # cell's outcome or call's cost (only whether a cell or call is still open, which is how
    # it knows the stored figures hold).
    assert _writes(first.captured_queries, FIGURES_TABLE) == []
    assert _writes(first.captured_queries, REPORTS_TABLE) == []
    # Nor did it draw the savings bootstrap or pack a case list, and it read no whole manifest.
    for table in (ResampledCostSums._meta.db_table, PlanCases._meta.db_table):
        assert _writes(first.captured_queries, table) == []
    assert dict(ResampledCostSums.objects.values_list("key", "computed_at")) == kept_sums
    assert [q["sql"] for q in first.captured_queries if WHOLE_MANIFEST.search(q["sql"])] == []
    outcome_reads = [
        q["sql"]
        for q in first.captured_queries
        if f'"{CELLS_TABLE}"."correct"' in q["sql"] or f'"{CALLS_TABLE}"."cost_usd"' in q["sql"]
    ]
    assert outcome_reads == []
    assert dict(CaseFigures.objects.values_list("run_id", "computed_at")) == stamped

    # What it read gives the comparison computed afresh from the ledger.
    CaseFigures.objects.all().delete()
    RunReport.objects.all().delete()
    ResampledCostSums.objects.all().delete()
    PlanCases.objects.all().delete()
    assert comparison_build(baseline_run_id=baseline.pk, candidate_run_ids=[candidate.pk]) == doc


def _running_run(mode: str = "live", slug: str = "end-s") -> Run:
    """A constructed run whose cells have all ended but which is still `running`: the next
    `run_finish_if_done` ends it."""
    qs = b.questions({"mmlu-pro": 4})
    target = b.target(slug)
    costs = {target: [D("0.0012"), D("0.0007"), D("0.0021"), D("0.0009")]}
    return b.run(qs, {target: [True, False, True, True]}, costs=costs, status="running", mode=mode)


@pytest.mark.django_db
def test_the_recovery_pass_gives_runs_that_ended_before_compares_hooks_their_kept_parts_once(
    monkeypatch: pytest.MonkeyPatch,
):
    """issue 38 item 1: a run that ended before compare's run-end hooks packed its cases and
    kept its savings sums (its report kept, nothing of compare's) gets them from the workers'
    recovery pass, as its run end would have kept them, and only once; a run no comparison may
    read (a preview) gets its packed cases alone."""
    monkeypatch.setattr(finish, "_BACKFILL_TRIED", set())
    monkeypatch.setattr(finish, "_RUN_END_TRIED", set())
    live, preview = _running_run(), _running_run("preview", "end-preview")
    for run in (live, preview):
        assert run_finish_if_done(run_id=run.pk) == "completed"
    plans = {p.run_id: (p.digest, bytes(p.cases), p.head) for p in PlanCases.objects.all()}
    sums = dict(ResampledCostSums.objects.values_list("key", "sums"))
    assert set(plans) == {live.pk, preview.pk}  # every ended run's cases are packed
    assert len(sums) == 1  # the live run's one target; the preview's none
    assert runs_report_backfill(limit=5) == 0  # nothing is missing

    # As runs that ended before the hooks: the report kept, nothing of compare's.
    PlanCases.objects.all().delete()
    ResampledCostSums.objects.all().delete()
    CaseFigures.objects.all().delete()
    still_running = _running_run(slug="end-later")
    assert runs_report_backfill(limit=5) == 2
    again = {p.run_id: (p.digest, bytes(p.cases), p.head) for p in PlanCases.objects.all()}
    assert again == plans
    assert {k: bytes(v) for k, v in ResampledCostSums.objects.values_list("key", "sums")} == {
        k: bytes(v) for k, v in sums.items()
    }
    _assert_stored_as_computed(live)
    assert not PlanCases.objects.filter(run=still_running).exists()
    assert runs_report_backfill(limit=5) == 0  # each once

    # A run whose hooks failed is named again by a new process only, not by every pass.
    PlanCases.objects.filter(run=live).delete()
    assert runs_report_backfill(limit=5) == 0
    monkeypatch.setattr(finish, "_RUN_END_TRIED", set())
    assert runs_report_backfill(limit=5) == 1
    assert PlanCases.objects.filter(run=live).exists()


@pytest.mark.django_db(transaction=True)
def test_a_failing_run_end_hook_is_logged_and_changes_neither_the_run_nor_the_other_hooks(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    calls: list[int] = []

    def boom(*, run_id: int) -> None:
        calls.append(run_id)
        # A write the failure must roll back, not leave half done.
        Run.objects.filter(pk=run_id).update(name="changed by a failing hook")
        raise RuntimeError("hook exploded")

    monkeypatch.setattr(hooks, "run_end_hooks", [])
    hooks.register_run_end_hook(boom)
    hooks.register_run_end_hook(case_figures_keep)
    run = _running_run()
    name = run.name

    with caplog.at_level(logging.ERROR, logger="runs.ledger.hooks"):
        assert run_finish_if_done(run_id=run.pk) == "completed"

    assert calls == [run.pk]
    run.refresh_from_db()
    assert (run.status, run.name) == ("completed", name)
    assert run.finished_at is not None
    assert any("hook exploded" in r.exc_text for r in caplog.records if r.exc_text)
    # The report was stored and the next hook still ran.
    assert RunReport.objects.filter(run=run).exists()
    _assert_stored_as_computed(run)


@pytest.mark.django_db
def test_the_hook_stores_nothing_for_a_run_that_is_not_settled_and_is_idempotent():
    run = _running_run()
    case_figures_keep(run_id=run.pk)
    assert not CaseFigures.objects.filter(run=run).exists()

    Run.objects.filter(pk=run.pk).update(status="completed", finished_at=run.started_at)
    case_figures_keep(run_id=run.pk)
    first = CaseFigures.objects.get(run=run)
    case_figures_keep(run_id=run.pk)  # stored under the current key already: not rewritten
    assert CaseFigures.objects.get(run=run).computed_at == first.computed_at
    _assert_stored_as_computed(run)
