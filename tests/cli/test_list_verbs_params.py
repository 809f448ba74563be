"""Every CLI verb that lists things, with every filter and paging option it has, against the API
that now refuses a query parameter it does not read (tests/api/test_list_query_params.py): over
HTTP and in-process, each answers (exit 0) with the filtered rows — nothing the CLI sends is a
parameter its endpoint does not read, and nothing it sends is dropped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runs.models import Run, RunStatus
from tests.compare import builders as b
from tests.conftest import purge_broker
from tests.datasets.factories import source_with_questions
from tests.runs import engine_support as es

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _no_stray_doorbells():  # type: ignore[no-untyped-def]
    purge_broker()
    yield
    purge_broker()


def _ok(r):  # type: ignore[no-untyped-def]
    assert r.code == 0, r.err
    return r


def test_the_dataset_listing_verbs_send_only_what_their_lists_read(bench) -> None:  # type: ignore[no-untyped-def]
    arc = source_with_questions(benchmark="arc", profile="smoke", seed=5)
    source_with_questions(benchmark="mmlu-pro", profile="smoke", seed=5)
    source_with_questions(benchmark="arc", profile="quick", seed=5)
    dataset = es.fixture_dataset(["mmlu-pro", "arc"])

    # `datasets` sends its filters to sources/ and datasets/ (both read them) and pages both.
    doc = json.loads(
        _ok(bench("datasets", "--profile", "smoke", "--benchmark", "arc", "--json")).out
    )
    assert [s["id"] for s in doc["sources"]] == [arc.pk]
    assert {d["profile"] for d in doc["datasets"]} <= {"smoke"}
    assert "Prepared sources" in _ok(bench("datasets", "--profile", "quick")).out

    page = json.loads(
        _ok(
            bench(
                "questions",
                str(dataset.pk),
                "--benchmark",
                "arc",
                "--page",
                "1",
                "--page-size",
                "3",
                "--json",
            )
        ).out
    )
    assert len(page["results"]) == 3 and {q["benchmark"] for q in page["results"]} == {"arc"}
    first = page["results"][0]
    args = ("--subject", first["subject"], "--search", first["native_id"], "--json")
    narrowed = json.loads(_ok(bench("questions", str(dataset.pk), *args)).out)
    assert [q["id"] for q in narrowed["results"]] == [first["id"]]


def test_the_run_listing_verbs_send_only_what_their_lists_read(bench, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    qs = b.questions({"mmlu-pro": 3})
    target = b.target("lv-t")
    run = b.run(qs, {target: [True, None, False]})
    other = b.run(qs, {target: [True, True, True]})
    Run.objects.filter(pk=run.pk).update(name="listed")
    Run.objects.filter(pk=other.pk).update(name="listed too", status=RunStatus.FAILED)

    assert "lv-t" in _ok(bench("targets")).out
    listed = json.loads(
        _ok(
            bench(
                "runs",
                "--name",
                "listed",
                "--model",
                "lv-t",
                "--status",
                RunStatus.COMPLETED,
                "--mode",
                Run.Mode.LIVE,
                "--profile",
                "smoke",
                "--limit",
                "5",
                "--json",
            )
        ).out
    )
    assert [r["id"] for r in listed["results"]] == [run.pk]

    results = json.loads(
        _ok(bench("show", str(run.pk), "--results", "--after", "0", "--limit", "2", "--json")).out
    )
    assert len(results["results"]) == 2
    calls = _ok(bench("show", str(run.pk), "--calls", "--active", "--after", "0", "--limit", "2"))
    assert calls.out.startswith("no calls")  # none in flight
    _ok(bench("show", str(run.pk), "--events", "--after", "0", "--limit", "5"))

    plan_file = tmp_path / "plan.json"
    _ok(bench("recover-plan", str(run.pk), "--mode", "failed", "--output", str(plan_file)))
    plan = json.loads(plan_file.read_text())
    assert plan["mode"] == "failed" and len(plan["eligible_cells"]) == 1
    assert f"run {run.pk}" in _ok(bench("lineage", str(run.pk))).out
