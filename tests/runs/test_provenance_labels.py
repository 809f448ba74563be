"""Data provenance beside every score (issue 35 item 3, "What to build" 3): a run whose dataset
mixes a synthetic source and a self-written fixture source names each benchmark's data on the
run page, in the report JSON, in the CLI report text, on the runs list, and on a comparison's
page and CSV export. The expected labels are worked out here from the source rows themselves,
not through `datasets.provenance`."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

import datasets
from compare.views import compare_url
from datasets.models import Source
from datasets.provenance import (
    FIXTURE,
    OFFICIAL,
    PACKAGED,
    SYNTHETIC,
    UNKNOWN,
    provenance_label,
)
from datasets.services import source_prepare
from datasets.synthetic import write_synthetic
from runs.interfaces.cli import report_text
from runs.models import Run
from tests import factories as f
from tests.compare import builders as b

pytestmark = pytest.mark.django_db

BUNDLED = Path(datasets.__file__).resolve().parent / "fixtures"


def expected_label(source: Source) -> str:
    """What a newcomer should read for this source, from its row: a generated file carries
    the synthetic marker; the bundled files live under datasets/fixtures/<benchmark>."""
    if source.synthetic:
        return "synthetic (official format)"
    recorded = Path(source.provenance["source_path"]).resolve()
    if recorded.is_relative_to(BUNDLED / source.benchmark):
        return "self-written fixture"
    raise AssertionError(f"this test prepares only synthetic and fixture sources: {source}")


@pytest.fixture
def sources(tmp_path: Path) -> dict[str, Source]:
    synthetic = source_prepare(
        benchmark="mmlu-pro",
        profile="smoke",
        source_path=write_synthetic("mmlu-pro", tmp_path / "mmlu-pro", 20, 7),
    )
    fixture = source_prepare(benchmark="simpleqa", profile="smoke")  # the bundled fixture
    return {"mmlu-pro": synthetic, "simpleqa": fixture}


@pytest.fixture
def labels(sources: dict[str, Source]) -> dict[str, str]:
    found = {benchmark: expected_label(source) for benchmark, source in sources.items()}
    assert found == {"mmlu-pro": SYNTHETIC, "simpleqa": FIXTURE}  # both kinds are exercised
    return found


@pytest.fixture
def member(client):
    client.force_login(f.user_create(username="reader"))
    return client


def mixed_run(qs: list[Any], sources: dict[str, Source], target: Any, outcomes: list[bool]) -> Run:
    """A completed run over 2 mmlu-pro and 2 simpleqa questions whose dataset holds the
    synthetic and the fixture source."""
    run = b.run(qs, {target: outcomes})
    run.dataset.sources.add(*sources.values())
    Run.objects.filter(pk=run.pk).update(finished_at=timezone.now())
    return run


@pytest.fixture
def qs():
    return b.questions({"mmlu-pro": 2, "simpleqa": 2})


def cell(html: str, benchmark: str) -> str:
    found = re.findall(
        rf'<td class="provenance" data-benchmark="{benchmark}"[^>]*>(.*?)</td>', html
    )
    assert found, benchmark
    return found[0]


def test_run_page_report_json_and_cli_text_name_each_benchmarks_data(member, sources, labels, qs):
    run = mixed_run(qs, sources, b.target("base"), [True, False, True, False])
    html = member.get(f"/runs/{run.pk}/").content.decode()
    for benchmark, label in labels.items():
        assert cell(html, benchmark) == label
    assert "data: 2 of 2 benchmarks synthetic or fixture data" in html

    api = APIClient()
    api.force_authenticate(f.user_create(username="api-reader"))
    report = api.get(f"/api/v1/runs/{run.pk}/report/").json()
    (target,) = report["targets"]
    assert {b: row["provenance"] for b, row in target["benchmarks"].items()} == labels

    text = report_text(report)
    for benchmark, label in labels.items():
        (line,) = [ln for ln in text.splitlines() if ln.strip().startswith(benchmark + " ")]
        assert line.endswith(f"data: {label}"), line


def test_runs_list_names_the_data_beside_the_score(member, sources, labels, qs):
    run = mixed_run(qs, sources, b.target("base"), [True, False, True, False])
    member.get(f"/runs/{run.pk}/")  # the first read stores the report the list's score reads
    html = member.get("/").content.decode()
    row = re.search(rf'<tr data-run-id="{run.pk}">(.*?)</tr>', html, re.S).group(1)
    score = re.search(r'<td class="num run-score"[^>]*>(.*?)</td>', row, re.S).group(1)
    assert "0.5000" in score or "subset" in score
    assert "data: 2 of 2 benchmarks synthetic or fixture data" in score
    for benchmark, label in labels.items():
        assert f'<li data-benchmark="{benchmark}">{benchmark}: {label}</li>' in score


def test_comparison_page_and_csv_name_each_benchmarks_data(member, sources, labels, qs):
    baseline = mixed_run(qs, sources, b.target("base"), [True, False, True, False])
    candidate = mixed_run(qs, sources, b.target("router", kind="mom"), [True, True, True, False])
    query = f"baseline={baseline.pk}&candidates={candidate.pk}"
    html = member.get(
        compare_url(baseline=baseline.pk, candidates=[candidate.pk], compare=True)
    ).content.decode()
    for benchmark, label in labels.items():
        assert cell(html, benchmark) == label
    assert html.count("2 of 2 benchmarks synthetic or fixture data") >= 2  # baseline and card

    export = member.get(f"/api/v1/compare/export.csv?{query}").content.decode()
    table = list(csv.DictReader(io.StringIO(export)))
    want = "; ".join(f"{b}: {labels[b]}" for b in ("mmlu-pro", "simpleqa"))
    assert [r["provenance"] for r in table] == [want, want]  # baseline and candidate rows


@pytest.mark.parametrize(
    ("provenance", "synthetic", "label"),
    [
        ({"source_path": "/data/mmlu", "origin_files": [{"path": "x"}]}, False, OFFICIAL),
        ({"source_path": "/x", "origin_files": [], "package": {"name": "p"}}, False, PACKAGED),
        ({"source_path": "/x", "origin_files": [], "synthetic": True}, False, SYNTHETIC),
        ({"source_path": "/x"}, True, SYNTHETIC),
        ({"source_path": str(BUNDLED / "mmlu-pro"), "origin_files": []}, False, FIXTURE),
        ({"source_path": "/old/checkout/datasets/fixtures/mmlu-pro"}, False, FIXTURE),
        ({"source_path": "/data/mmlu"}, False, UNKNOWN),  # no file hash recorded
        ({}, False, UNKNOWN),
        (None, False, UNKNOWN),
    ],
)
def test_the_rule_never_guesses(provenance, synthetic, label):
    assert (
        provenance_label(benchmark="mmlu-pro", provenance=provenance, synthetic=synthetic) == label
    )


def test_a_run_whose_dataset_has_no_source_rows_says_unknown(member, qs):
    run = b.run(qs, {b.target("base"): [True, False, True, False]})
    Run.objects.filter(pk=run.pk).update(finished_at=timezone.now())
    html = member.get(f"/runs/{run.pk}/").content.decode()
    assert cell(html, "mmlu-pro") == '<span class="unknown">unknown</span>'
