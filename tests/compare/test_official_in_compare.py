"""Official scorers in comparisons (issue 35 item 4): the API, the comparison CSV, the page
and the CLI show each target's official metric per benchmark side by side — the official
summary's value, n and interval, no new statistic — named apart from the weighted quality, Δ
and the verdict, unknown as unknown. Values are worked out from the cells' chosen outcomes
(tests/runs/official_support.py)."""

from __future__ import annotations

import csv
import io
import re
from fractions import Fraction

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from compare.views import compare_url
from runs.reporting.report import run_report
from tests import factories as f
from tests.runs import official_support as o

pytestmark = pytest.mark.django_db


@pytest.fixture
def run():
    return o.official_run()


@pytest.fixture
def api():
    client = APIClient()
    client.force_authenticate(f.user_create())
    return client


def _by_metric(metrics: list[dict]) -> dict[tuple[str, str], dict]:
    return {(m["benchmark"], m["metric"]): m for m in metrics}


def test_compare_api_gives_each_side_official_metrics_apart_from_quality(run, api):
    """issue 35 item 4: POST /compare/ carries `official` for the baseline and each candidate;
    the quality, Δ and verdict are the sr-bench ones, unchanged by the official figures."""
    doc = api.post(
        "/api/v1/compare/", {"baseline": run.pk, "candidates": [run.pk]}, format="json"
    ).json()
    base, (cand,) = doc["baseline"], doc["comparisons"]
    assert (base["target"], cand["target"]) == ("strong", "cheap")

    b = _by_metric(base["official"])
    assert b[("arc", "pass_at_2")]["exact"] == str(o.expected_pass_at_2("strong"))
    assert b[("arc", "pass_at_2")]["n"] == 4
    lo, hi = o.wilson(2.5, 4)
    assert b[("arc", "pass_at_2")]["interval"]["lower"] == pytest.approx(lo)
    assert b[("arc", "pass_at_2")]["interval"]["upper"] == pytest.approx(hi)
    assert b[("simpleqa", "f_score")]["value"] == pytest.approx(o.expected_f_score("strong"))
    c = _by_metric(cand["official"])
    assert c[("simpleqa", "f_score")]["value"] == pytest.approx(o.expected_f_score("cheap"))
    accuracy, calibration = o.expected_hle("cheap")
    assert c[("hle", "accuracy")]["value"] == pytest.approx(accuracy)
    assert c[("hle", "calibration_error")]["value"] == pytest.approx(calibration)
    # The candidate's pass@2 is unknown (an attempt without per-output record), never 0.
    assert c[("arc", "pass_at_2")]["value"] is None
    assert "no per-output result" in c[("arc", "pass_at_2")]["unknown_reason"]
    # The intervals are the official summary's own: the report's, not a new statistic.
    report = {t["slug"]: t for t in run_report(run=run)["targets"]}
    boot = report["cheap"]["official"]["benchmarks"]["hle"]["calibration_error_interval"]
    interval = c[("hle", "calibration_error")]["interval"]
    assert [interval["lower"], interval["upper"]] == boot["bounds"]
    # Quality and Δ are the sr-bench score's, not mixed with the official figures.
    assert Fraction(base["quality_exact"]) == Fraction(report["strong"]["score"]["exact"])
    assert Fraction(cand["quality_exact"]) == Fraction(report["cheap"]["score"]["exact"])
    assert Fraction(cand["delta_exact"]) == Fraction(cand["quality_exact"]) - Fraction(
        base["quality_exact"]
    )
    assert "never part of it" in doc["statements"]["official"]


def test_comparison_csv_has_official_columns_for_baseline_and_candidate(run, api):
    """issue 35 item 4: the comparison CSV names each official metric in its own columns
    (value, bounds, n, unknown reason); unknown is an empty value with its reason."""
    response = api.get(f"/api/v1/compare/export.csv?baseline={run.pk}&candidates={run.pk}")
    assert response.status_code == 200
    rows = {r["row"]: r for r in csv.DictReader(io.StringIO(response.content.decode()))}
    base, cand = rows["baseline"], rows["candidate"]
    assert float(base["official_arc_pass_at_2"]) == pytest.approx(0.625)
    lo, hi = o.wilson(2.5, 4)
    assert float(base["official_arc_pass_at_2_lower"]) == pytest.approx(lo)
    assert float(base["official_arc_pass_at_2_upper"]) == pytest.approx(hi)
    assert base["official_arc_pass_at_2_n"] == "4"
    assert base["official_arc_pass_at_2_unknown_reason"] == ""
    assert cand["official_arc_pass_at_2"] == "" and cand["official_arc_pass_at_2_lower"] == ""
    assert "no per-output result" in cand["official_arc_pass_at_2_unknown_reason"]
    assert float(cand["official_simpleqa_f_score"]) == pytest.approx(o.expected_f_score("cheap"))
    accuracy, calibration = o.expected_hle("strong")
    assert float(base["official_hle_accuracy"]) == pytest.approx(accuracy)
    assert float(base["official_hle_calibration_error"]) == pytest.approx(calibration)
    assert base["official_hle_calibration_error_n"] == "5"
    # The quality column is the sr-bench one.
    assert base["quality_exact"] == str(
        Fraction(run_report(run=run)["targets"][0]["score"]["exact"])
    )


def test_compare_page_shows_official_metrics_side_by_side(run, client):
    """issue 35 item 4: each result card has an "Official scorers" table, baseline beside
    candidate per benchmark metric, labelled apart from the quality; unknown says unknown."""
    client.force_login(f.user_create())
    html = client.get(compare_url(baseline=run.pk, candidates=[run.pk], compare=True))
    html = html.content.decode()
    card = html[html.index('id="card-') :]
    table = card[card.index('class="compact official-scoring"') :]
    table = table[: table.index("</table>")]
    assert "not part of the weighted quality, Δ or verdict" in table
    found = re.findall(
        r'data-benchmark="(\w+)" data-metric="(\w+)">.*?official-baseline">(.*?)</td>'
        r'<td class="num official-candidate">(.*?)</td>',
        table,
    )
    rows = {(b, m): (base, cand) for b, m, base, cand in found}
    assert list(rows) == [
        ("arc", "pass_at_2"),
        ("simpleqa", "f_score"),
        ("hle", "accuracy"),
        ("hle", "calibration_error"),
    ]
    lo, hi = o.wilson(2.5, 4)
    base_arc, cand_arc = rows[("arc", "pass_at_2")]
    assert base_arc == f"0.6250 [{lo:.4f}, {hi:.4f}], n = 4 tasks"
    assert cand_arc.startswith('<span class="unknown">unknown</span>')
    base_f, cand_f = rows[("simpleqa", "f_score")]
    assert base_f.startswith(f"{o.expected_f_score('strong'):.4f} [")
    assert cand_f.startswith(f"{o.expected_f_score('cheap'):.4f} [")
    assert cand_f.endswith("n = 5 graded questions")
    _, calibration = o.expected_hle("cheap")
    assert rows[("hle", "calibration_error")][1].startswith(f"{calibration:.4f} [")
    assert 'id="statement-official"' in html


def test_cli_compare_prints_official_metrics_side_by_side(run, capsys):
    """issue 35 item 4: `benchmark compare` prints, per candidate, each official metric with
    the baseline's beside it, named apart from Δ and the verdict."""
    call_command("benchmark", "compare", str(run.pk), str(run.pk))
    out = capsys.readouterr().out
    lo, hi = o.wilson(2.5, 4)
    assert (
        "    official arc pass@2 (not part of Δ or the verdict): "
        f"baseline 0.6250 [{lo:.4f}, {hi:.4f}], n = 4 tasks | candidate unknown: 1 attempts"
    ) in out
    accuracy_b, _ = o.expected_hle("strong")
    accuracy_c, _ = o.expected_hle("cheap")
    line = next(x for x in out.splitlines() if x.startswith("    official hle accuracy"))
    assert f"baseline {accuracy_b:.4f} [" in line and f"candidate {accuracy_c:.4f} [" in line
