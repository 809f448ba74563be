"""Official scorers wherever the sr-bench score appears (issue 35 item 4): the CLI report and
the run export (CSV and JSON) name ARC pass@2, SimpleQA F-score and HLE accuracy and
calibration error apart from the sr-bench score, with their n and the official summary's own
interval, and unknown as unknown — checked against values worked out from the cells' chosen
outcomes (tests/runs/official_support.py)."""

from __future__ import annotations

import csv
import io
import json
from fractions import Fraction

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from runs.reporting.official_metrics import metric_value_text, official_metrics
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
    client.force_authenticate(f.user_create(username="ops", staff=True))
    return client


def _section(text: str, slug: str) -> str:
    """The CLI report's block of one target: from its line to the next target's."""
    start = text.index(f"  {slug} (single)")
    rest = text[start + 1 :]
    nxt = [i for i in (rest.find("  strong (single)"), rest.find("  cheap (single)")) if i > 0]
    return text[start : start + 1 + min(nxt)] if nxt else text[start:]


def test_cli_report_names_the_official_scorers_apart_from_the_score(run, capsys):
    """issue 35 item 4: `benchmark report` prints each target's official metrics under their
    own heading, after its sr-bench lines, each with n and interval; unknown says why."""
    f.user_create(username="ops", staff=True)
    report = run_report(run=run)
    call_command("benchmark", "report", str(run.pk), "--user", "ops")
    text = capsys.readouterr().out

    strong = _section(text, "strong")
    # The score line carries the report's score, untouched by the official figures.
    score = next(t["score"] for t in report["targets"] if t["slug"] == "strong")
    assert f"weighted subset average {score['value']}" in strong.splitlines()[0]
    heading = "official scorers (each benchmark's own metric, not part of the sr-bench score):"
    assert heading in strong
    assert strong.index(heading) > strong.index("tokens:")

    pass2 = o.expected_pass_at_2("strong")
    assert pass2 == Fraction(5, 8)
    lo, hi = o.wilson(float(pass2) * 4, 4)
    assert (
        f"arc pass@2 (official scorer) {float(pass2):.4f} [{lo:.4f}, {hi:.4f}], n = 4 tasks"
    ) in strong
    official = next(t["official"] for t in report["targets"] if t["slug"] == "strong")
    boot = official["benchmarks"]["simpleqa"]["f_score_interval"]["bounds"]
    assert (
        f"simpleqa F-score (official scorer) {o.expected_f_score('strong'):.4f} "
        f"[{boot[0]:.4f}, {boot[1]:.4f}], n = 5 graded questions"
    ) in strong
    accuracy, calibration = o.expected_hle("strong")
    a_lo, a_hi = o.wilson(accuracy * 5, 5)
    assert (
        f"hle accuracy (official scorer) {accuracy:.4f} [{a_lo:.4f}, {a_hi:.4f}], n = 5 questions"
    ) in strong
    assert f"hle RMS calibration error (official scorer) {calibration:.4f} [" in strong

    cheap = _section(text, "cheap")
    # One ARC attempt has no per-output record: pass@2 is unknown, with why, never 0.
    assert "arc pass@2 (official scorer) unknown: 1 attempts or tasks have no per-output" in cheap
    assert "arc pass@2 (official scorer) 0" not in cheap
    assert f"simpleqa F-score (official scorer) {o.expected_f_score('cheap'):.4f} [" in cheap


def test_run_export_csv_carries_each_case_official_outcome(run, api):
    """issue 35 item 4: the export CSV puts the official outcome beside `correct`; pass@2
    recomputed from its columns equals the hand-worked value; unknown is an empty field."""
    response = api.get(f"/api/v1/runs/{run.pk}/export/?as=csv")
    assert response.status_code == 200, response.content
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert len(rows) == (4 + 5 + 5) * 2  # one row per case (question × attempt)

    arc: dict[str, dict[int, list[bool] | None]] = {}
    for r in rows:
        if r["benchmark"] == "arc":
            cell = r["strong.official_outputs_correct"]
            arc.setdefault(r["question_id"], {})[int(r["slot"])] = json.loads(cell)
            # sr-bench's `correct` stays its own (every output right in this one attempt).
            assert r["strong.correct"] == str(all(json.loads(cell)))
    scores = [
        Fraction(sum(a or b for a, b in zip(s[0], s[1], strict=True)), len(s[0]))
        for _, s in sorted(arc.items(), key=lambda kv: int(kv[0]))
    ]
    assert sum(scores, Fraction(0)) / len(scores) == o.expected_pass_at_2("strong")
    missing = [
        r for r in rows if r["benchmark"] == "arc" and not r["cheap.official_outputs_correct"]
    ]
    assert len(missing) == 1 and missing[0]["slot"] == "1"

    first = sorted(
        (r for r in rows if r["benchmark"] == "simpleqa" and r["slot"] == "0"),
        key=lambda r: int(r["question_id"]),
    )
    assert [r["strong.official_verdict"] for r in first] == o.SIMPLEQA["strong"]
    hle = sorted(
        (r for r in rows if r["benchmark"] == "hle" and r["slot"] == "0"),
        key=lambda r: int(r["question_id"]),
    )
    assert [(r["cheap.official_verdict"], int(r["cheap.official_confidence"])) for r in hle] == [
        ("correct" if ok else "incorrect", c) for ok, c in o.HLE["cheap"]
    ]
    # Outside its benchmark an official field is empty (not 0, not "incorrect").
    assert all(r["strong.official_confidence"] == "" for r in rows if r["benchmark"] != "hle")


def test_run_export_json_names_each_target_official_metrics(run, api):
    """issue 35 item 4: the export JSON gives per target the official metrics (value, n,
    the official summary's interval), unknown as null with its reason."""
    matrix = api.get(f"/api/v1/runs/{run.pk}/export/?as=json").json()
    assert matrix["official_benchmarks"] == ["arc", "hle", "simpleqa"]
    assert "never part of it" in matrix["official_note"]
    strong = {(m["benchmark"], m["metric"]): m for m in matrix["official"]["strong"]}
    arc = strong[("arc", "pass_at_2")]
    assert arc["label"] == "official scorer" and arc["exact"] == "5/8"
    assert arc["value"] == pytest.approx(0.625) and (arc["n"], arc["n_unit"]) == (4, "tasks")
    assert (arc["interval"]["lower"], arc["interval"]["upper"]) == pytest.approx(o.wilson(2.5, 4))
    assert strong[("simpleqa", "f_score")]["value"] == pytest.approx(o.expected_f_score("strong"))
    accuracy, calibration = o.expected_hle("strong")
    assert strong[("hle", "accuracy")]["value"] == pytest.approx(accuracy)
    assert strong[("hle", "calibration_error")]["value"] == pytest.approx(calibration)
    assert strong[("hle", "calibration_error")]["n"] == 5

    cheap = {(m["benchmark"], m["metric"]): m for m in matrix["official"]["cheap"]}
    unknown = cheap[("arc", "pass_at_2")]
    assert unknown["value"] is None and unknown["interval"] is None
    assert "no per-output result" in unknown["unknown_reason"]
    # Per case, the official outcome sits beside the sr-bench `correct`, apart from it.
    case = next(r for r in matrix["rows"] if r["benchmark"] == "simpleqa" and r["slot"] == 1)
    assert case["targets"]["strong"]["official"]["verdict"] == "incorrect"
    assert case["targets"]["strong"]["correct"] is False


def test_unknown_official_metric_is_never_zero():
    """issue 35 item 4: an official summary without a value reads "unknown: why"."""
    section = {"note": "n", "benchmarks": {"arc": {"label": "ARC", "value": None, "tasks": 3,
                                                   "reason": "one attempt per question"}}}  # fmt: skip
    (m,) = official_metrics(section)
    # A summary kept before `tasks_measured`: how many tasks were measured is not known, so n
    # is null beside the null value, not its task count (session 6; test_official_arc_n.py).
    assert m["value"] is None and m["n"] is None
    assert metric_value_text(m) == "unknown: one attempt per question"
    section["benchmarks"]["arc"]["tasks_measured"] = 3
    (m,) = official_metrics(section)
    assert m["value"] is None and m["n"] == 3
    assert official_metrics(None) == []
