"""Re-grading saved answers and the training-matrix export (R14.4): saved evidence only."""

from __future__ import annotations

import csv
import hashlib
import io
import json

import pytest
from django.core.management import call_command
from django.db import IntegrityError, connection, transaction

from datasets.grading import grade_mcq
from runs.models import Cell, Regrade
from runs.planning.services import run_create
from runs.reporting.export import ExportRefused, export_csv, export_matrix
from runs.settlement.regrade import run_regrade
from tests import factories as f
from tests.compare import builders as b
from tests.conftest import wait_until
from tests.runs import engine_support as es


def cells_checksum(run) -> str:  # type: ignore[no-untyped-def]
    rows = list(Cell.objects.filter(run=run).order_by("pk").values())
    return hashlib.sha256(json.dumps(rows, default=str, sort_keys=True).encode()).hexdigest()


@pytest.mark.worker
def test_regrade_and_export_of_a_real_run_make_no_model_call(celery_worker, tmp_path):
    benchmarks = ["mmlu-pro", "arc", "simpleqa"]
    with es.simulator(benchmarks) as url:
        es.sim_targets(url)
        dataset = es.fixture_dataset(benchmarks)
        run, _ = run_create(
            owner=f.user_create(),
            plan={
                "name": "matrix",
                "dataset": dataset.pk,
                "targets": ["sim-strong", "sim-weak"],
                "judges": {"simpleqa": "sim-judge"},
                "limits": {"concurrency": 8},
            },
        )
        wait_until(lambda: es.terminal(run), timeout=120)
        assert run.status == "completed", (run.stop_reason, celery_worker.log()[-2000:])
        before_cells = cells_checksum(run)
        sim_before = es.sim_stats(url)["total_requests"]

        first = run_regrade(run_id=run.pk)
        again = run_regrade(run_id=run.pk)
        matrix = export_matrix(run_id=run.pk)
        call_command("benchmark", "export", str(run.pk), "--output", str(tmp_path / "m.csv"))

        assert es.sim_stats(url)["total_requests"] == sim_before  # zero model calls
    assert cells_checksum(run) == before_cells  # cells keep their grades

    graded = Cell.objects.filter(run=run, benchmark__in=["mmlu-pro", "arc"], status="completed")
    r = first.regrade
    assert r.regraded_count == graded.count() > 0
    assert r.changed_count == 0  # same graders, same answers
    assert r.skipped_count == Cell.objects.filter(run=run).count() - graded.count()
    assert again.created is False and again.regrade.pk == r.pk
    assert Regrade.objects.filter(run=run).count() == 1
    by_cell = {c["cell"]: c for c in r.results["cells"]}
    for pk, correct in graded.values_list("pk", "correct"):
        assert by_cell[pk]["new_correct"] is correct

    cases = len(run.manifest["cases"])
    assert len(matrix["rows"]) == cases and matrix["split"] == "dev"
    truth = {
        (q, t): (c, a)
        for q, t, c, a in Cell.objects.filter(run=run).values_list(
            "question_id", "target__slug", "correct", "final_answer"
        )
    }
    for row in matrix["rows"]:
        for slug, cell in row["targets"].items():
            assert (cell["correct"], cell["answer"]) == truth[(row["question_id"], slug)]
            assert cell["subject_cost_usd"] is not None
    written = list(csv.DictReader(io.StringIO((tmp_path / "m.csv").read_text())))
    assert len(written) == cases
    assert {"sim-strong.correct", "sim-weak.answer"} <= set(written[0])
    # The subject's answer only: no reference answer or other secret (R9.3).
    assert set(matrix["rows"][0]["targets"]["sim-strong"]) == {
        "correct",
        "answer",
        "subject_cost_usd",
        "output_tokens",
    }


@pytest.mark.django_db
def test_regrade_records_where_todays_grader_disagrees_without_touching_the_cell():
    qs = b.questions({"mmlu-pro": 2, "simpleqa": 1})
    t = b.target("single")
    r = b.run(qs, {t: [True, False, True]})
    # The second cell was marked wrong although its saved answer is the reference letter B.
    cell = Cell.objects.get(run=r, question=qs[1])
    Cell.objects.filter(pk=cell.pk).update(final_answer="The answer is B")
    assert grade_mcq("The answer is B", "B", 4).correct  # what the current grader says

    result = run_regrade(run_id=r.pk)

    g = result.regrade
    assert (g.regraded_count, g.changed_count, g.skipped_count) == (2, 1, 1)
    changed = [c for c in g.results["cells"] if c["changed"]]
    assert changed == [
        {
            "cell": cell.pk,
            "question": qs[1].pk,
            "target": "single",
            "benchmark": "mmlu-pro",
            "old_correct": False,
            "new_correct": True,
            "changed": True,
            "detail": changed[0]["detail"],
        }
    ]
    assert Cell.objects.get(pk=cell.pk).correct is False
    assert g.grader_versions == {"mmlu-pro": "mcq-final/2"}
    with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("DELETE FROM compare_regrade WHERE id = %s", [g.pk])


@pytest.mark.django_db
def test_export_refuses_holdout_runs():
    qs = b.questions({"mmlu-pro": 2})
    r = b.run(qs, {b.target("single"): [True, False]}, split="holdout")
    with pytest.raises(ExportRefused, match="must not be used for tuning"):
        export_matrix(run_id=r.pk)


@pytest.mark.django_db
def test_cli_export_refuses_a_holdout_run_with_one_line(capsys):
    qs = b.questions({"mmlu-pro": 2})
    r = b.run(qs, {b.target("single"): [True, False]}, split="holdout")
    with pytest.raises(SystemExit) as exited:
        call_command("benchmark", "export", str(r.pk), "--format", "json")
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "holdout split" in err


@pytest.mark.django_db
def test_export_writes_unknown_cost_as_an_empty_field_never_zero():
    qs = b.questions({"arc": 2})
    t = b.target("single")
    r = b.run(qs, {t: [True, None]}, costs={t: [None, None]}, status="completed")
    text = export_csv(export_matrix(run_id=r.pk))
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [row["single.subject_cost_usd"] for row in rows] == ["", ""]
    assert [row["single.correct"] for row in rows] == ["True", ""]


@pytest.mark.django_db
def test_cli_regrade_prints_the_counts(capsys):
    qs = b.questions({"mmlu-pro": 2})
    r = b.run(qs, {b.target("single"): [True, False]})
    call_command("benchmark", "regrade", str(r.pk))
    out = capsys.readouterr().out
    assert out.startswith("appended  regrade v1  regraded 2  changed 0  skipped 0")
