"""Every `benchmark` verb, over HTTP against a live server and in-process (issue 7): output,
`--json` and exit codes. The verbs that need a worker are in test_worker_verbs.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from datasets.models import QuestionSecret
from runs.models import Run
from tests import factories as f
from tests.compare import builders as b
from tests.conftest import purge_broker

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _no_stray_doorbells():  # type: ignore[no-untyped-def]
    purge_broker()  # created runs ring the doorbell; no worker listens in these tests
    yield
    purge_broker()


def test_dataset_verbs(bench) -> None:  # type: ignore[no-untyped-def]
    r = bench("prepare", "--benchmark", "mmlu-pro", "--profile", "smoke")
    assert r.code == 0 and r.out.startswith("prepared  mmlu-pro/smoke/"), r.err
    assert bench("prepare", "--benchmark", "mmlu-pro", "--profile", "smoke").out.startswith(
        "unchanged"
    )
    r = bench("prepare", "--benchmark", "mmlu-pro", "--profile", "smoke", "--json")
    [receipt] = json.loads(r.out)
    source_id = receipt["source"]["id"]
    assert receipt["created"] is False and receipt["model_requests"] == 0

    r = bench("datasets")
    assert r.code == 0 and "Prepared sources" in r.out and f"source #{source_id}" in r.out
    assert "(none: run `benchmark compose`)" in r.out

    r = bench("compose", "--source", str(source_id), "--name", "cli set", "--json")
    assert r.code == 0, r.err
    dataset = json.loads(r.out)["dataset"]
    assert dataset["name"] == "cli set" and json.loads(r.out)["model_requests"] == 0
    assert bench("compose", "--source", str(source_id)).out.startswith("reused")

    doc = json.loads(bench("datasets", "--json").out)
    assert [d["id"] for d in doc["datasets"]] == [dataset["id"]]
    assert doc["profile_totals"][0]["profile"] == "smoke"

    r = bench("questions", str(dataset["id"]), "--page-size", "5")
    lines = r.out.strip().splitlines()
    assert r.code == 0 and len(lines) == 6 and "mmlu-pro" in lines[0]
    assert lines[-1].startswith(f"questions 1–5 of {dataset['question_count']}; next: --page 2")
    page2 = json.loads(
        bench("questions", str(dataset["id"]), "--page-size", "5", "--page", "2", "--json").out
    )
    assert [q["position"] for q in page2["results"]] == [5, 6, 7, 8, 9]
    assert all(
        set(q) == {"id", "benchmark", "kind", "native_id", "subject", "position", "payload"}
        for q in page2["results"]
    )
    # Public payload only: the fields above, never the secret answer (R9.3).
    secret = QuestionSecret.objects.get(question_id=page2["results"][0]["id"]).data["answer"]
    assert f'"answer": "{secret}"' not in json.dumps(page2["results"][0])

    r = bench("questions", "999999")
    assert r.code == 2 and r.err.startswith("error:") and r.err.count("\n") == 1
    r = bench("compose", "--source", "999999")
    assert r.code == 2 and "unknown source" in r.err


def _plan_args(dataset_id: int) -> list[str]:
    return ["--dataset", str(dataset_id), "--target", "cli-t"]


@pytest.fixture
def dataset_and_target():  # type: ignore[no-untyped-def]
    from tests.runs import engine_support as es

    f.target_create(
        slug="cli-t", model="sim-strong", prices={"sim-strong": es.PRICES["sim-strong"]}
    )
    return es.fixture_dataset(["arc"])


def test_run_lifecycle_verbs(bench, dataset_and_target, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    args = _plan_args(dataset_and_target.pk)
    r = bench("targets")
    assert r.code == 0 and "cli-t" in r.out and "sim-strong" in r.out
    assert json.loads(bench("targets", "--json").out)[0]["slug"] == "cli-t"

    r = bench("plan", *args)
    assert r.code == 0 and "no model was called (model_requests: 0)" in r.out
    assert not Run.objects.exists()

    r = bench("run", *args, "--detach", "--idempotency-key", "cli-k", "--json")
    assert r.code == 0, r.err
    run_id = json.loads(r.out)["id"]
    assert "created (idempotency key cli-k)" in r.err
    r = bench("run", *args, "--detach", "--idempotency-key", "cli-k")
    assert r.code == 0 and "already existed for this idempotency key" in r.err
    assert Run.objects.count() == 1

    r = bench("runs")
    assert r.code == 0 and str(run_id) in r.out and "queued" in r.out
    assert (
        json.loads(bench("runs", "--json", "--status", "queued").out)["results"][0]["id"] == run_id
    )
    assert json.loads(bench("runs", "--json", "--status", "failed").out)["results"] == []

    r = bench("show", str(run_id))
    assert r.code == 0 and f"run {run_id}" in r.out and "0/" in r.out
    page = json.loads(bench("show", str(run_id), "--results", "--limit", "2", "--json").out)
    assert len(page["results"]) == 2 and page["next_after"] == page["results"][-1]["id"]
    rest = json.loads(
        bench("show", str(run_id), "--results", "--after", str(page["next_after"]), "--json").out
    )
    assert page["results"][-1]["id"] < rest["results"][0]["id"]
    assert bench("show", str(run_id), "--calls").out.startswith("no calls")
    r = bench("show", str(run_id), "--events")
    assert "run.created" in r.out and "1 loaded" in r.out

    r = bench("cancel", str(run_id))
    assert r.code == 0 and "cancel requested" in r.out and "cancelled" in r.out
    assert "nothing to cancel" in bench("cancel", str(run_id)).out

    r = bench("report", str(run_id))
    assert r.code == 0 and "not a complete evaluation" in r.out

    plan_file = tmp_path / "recovery.json"
    r = bench("recover-plan", str(run_id), "--mode", "undispatched", "--output", str(plan_file))
    assert r.code == 0 and "cells to run:" in r.out and "model_requests: 0" in r.out
    plan = json.loads(plan_file.read_text())
    assert plan["selected_cells"]
    r = bench("recover", str(run_id), "--plan", str(plan_file), "--idempotency-key", "rec-1")
    assert r.code == 0 and "created" in r.err, r.err
    r = bench("recover", str(run_id), "--plan", str(plan_file), "--idempotency-key", "rec-1")
    assert r.code == 0 and "already existed" in r.err
    assert Run.objects.filter(parent_id=run_id).count() == 1

    r = bench("report", "999999")
    assert r.code == 2 and r.err == "error: run 999999 does not exist (not_found)\n"
    r = bench("show", str(run_id), "--events", "--limit", "5000")
    assert r.code == 2 and "limit" in r.err


def test_plan_review_says_what_a_comparison_of_the_run_can_claim(bench, dataset_and_target) -> None:  # type: ignore[no-untyped-def]
    # Before anything is spent (R5.5): no margin or dev cases → never non-inferior, said so.
    r = bench("plan", *_plan_args(dataset_and_target.pk))
    assert r.code == 0, r.err
    assert "split dev (smoke profile, seed 1); no non-inferiority margin is frozen" in r.out
    assert "the cases are not the holdout split" in r.out and "never non-inferior" in r.out
    type(dataset_and_target).objects.filter(pk=dataset_and_target.pk).update(split="holdout")
    r = bench("plan", *_plan_args(dataset_and_target.pk), "--non-inferiority-margin", "0.05")
    assert r.code == 0, r.err
    assert "split holdout (smoke profile, seed 1); non-inferiority margin 0.05 frozen" in r.out
    assert "never non-inferior" not in r.out


def test_run_refuses_the_manifest_plan_output_wrote_with_what_to_do(
    bench, dataset_and_target, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    manifest = tmp_path / "plan.json"
    r = bench("plan", *_plan_args(dataset_and_target.pk), "--output", str(manifest))
    assert r.code == 0 and manifest.exists(), r.err
    r = bench("run", "--plan-file", str(manifest), "--detach")
    assert r.code == 2 and r.err.count("\n") == 1, r.err
    assert f"{manifest} is a frozen manifest (what `plan --output` writes), not a plan" in r.err
    assert "give `run` the same options" in r.err and "Unknown field" not in r.err
    assert not Run.objects.exists()


def test_evidence_verbs(bench, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    qs = b.questions({"mmlu-pro": 3})
    run = b.run(qs, {b.target("base"): [True, True, False], b.target("cand"): [True, False, False]})

    r = bench("compare", str(run.pk), str(run.pk), "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["baseline"]["target"] == "base" and doc["model_requests"] == 0
    r = bench("compare", str(run.pk), str(run.pk))
    assert "Baseline: run" in r.out and "cand" in r.out
    assert bench("compare", "999999", str(run.pk)).code == 2

    r = bench("reconcile-usage", str(run.pk), "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["model_requests"] == 0
    assert bench("reconcile-usage", str(run.pk)).out.startswith("unchanged (same evidence)")

    r = bench("regrade", str(run.pk))
    assert r.code == 0 and r.out.startswith("appended  regrade v1  regraded 6")
    assert json.loads(bench("regrade", str(run.pk), "--json").out)["created"] is False

    r = bench("export", str(run.pk))
    assert r.code == 0 and r.out.splitlines()[0].startswith("question_id,native_id")
    assert len(r.out.splitlines()) == 4
    out = tmp_path / "m.json"
    r = bench("export", str(run.pk), "--format", "json", "--output", str(out))
    assert r.code == 0 and "wrote 3 rows" in r.err
    assert json.loads(out.read_text())["targets"] == ["base", "cand"]

    holdout = b.run(qs, {b.target("h"): [True, True, True]}, split="holdout")
    r = bench("export", str(holdout.pk))
    assert r.code == 2 and "holdout" in r.err and r.err.count("\n") == 1


def test_export_counts_records_not_lines(bench, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Issue 35 item 7: an answer with line breaks spans several CSV lines of one record; the
    count `export` reports is the records written (here 3), however many lines they take."""
    from runs.models import Cell

    qs = b.questions({"mmlu-pro": 3})
    run = b.run(qs, {b.target("base"): [True, False, True]})
    Cell.objects.filter(run=run).update(final_answer="first line\nsecond line\nthird line")
    out = tmp_path / "m.csv"
    r = bench("export", str(run.pk), "--output", str(out))
    assert r.code == 0, r.err
    text = out.read_text()
    assert len(text.splitlines()) > 4  # the line breaks are really in the file
    assert "wrote 3 rows" in r.err
