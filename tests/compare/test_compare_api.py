"""The Compare API (issue 9): the two steps, POST /api/v1/compare/ with refusals inside the
result (409 only when every candidate run is refused), and the CSV/JSON exports."""

from __future__ import annotations

import csv
import io
import json
from decimal import Decimal
from fractions import Fraction

import pytest
from rest_framework.test import APIClient

from compare.results import STATEMENTS
from tests import factories as f
from tests.compare import builders as b

pytestmark = pytest.mark.django_db

OUT = [True, False, True, False]
SAVINGS_INTERVAL_KEYS = ("lower", "upper", "alpha", "draws", "seed", "label")


@pytest.fixture
def api():
    client = APIClient()
    client.force_authenticate(f.user_create())
    return client


@pytest.fixture
def qs():
    return b.questions({"mmlu-pro": 2, "gpqa": 2})


@pytest.fixture
def setup(qs):
    base = b.target("base")
    baseline = b.run(qs, {base: OUT}, costs={base: Decimal("0.01")})
    router = b.target("router", kind="mom")
    cands = [
        b.run(qs, {router: [True, True, True, False]}, costs={router: Decimal("0.004")}),
        b.run(qs, {router: [True, False, False, False]}, costs={router: [None] * 4}),
    ]
    refused = b.run(qs, {router: OUT}, limits={"concurrency": 8, "max_output_tokens": 99})
    return baseline, cands, refused


def test_baselines_and_candidates(api, setup):
    baseline, cands, refused = setup
    doc = api.get("/api/v1/compare/baselines/").json()
    assert [r["id"] for r in doc["results"]] == [baseline.pk]
    assert doc["results"][0]["baseline_targets"] == ["base"]
    # The offer reads timestamps as seconds since the epoch (compare.selectors.RunOption): the
    # time it shows is still the run's, to the microsecond.
    assert doc["results"][0]["created_at"] == baseline.created_at.isoformat()
    assert api.get("/api/v1/compare/baselines/?q=nothing-like-this").json()["count"] == 0
    # A search for "#²" ("²" is a digit to str.isdigit, int() refuses it): no match, no error.
    assert api.get("/api/v1/compare/baselines/?q=%23%C2%B2").json()["count"] == 0
    assert api.get(f"/api/v1/compare/baselines/?q=%23{baseline.pk}").json()["count"] == 1

    doc = api.get(f"/api/v1/compare/candidates/?baseline={baseline.pk}&page_size=1").json()
    assert doc["count"] == 2 and len(doc["results"]) == 1
    assert doc["matching_ids"] == [c.pk for c in cands]  # every page: what Select all takes
    assert refused.pk not in doc["matching_ids"]
    assert api.get("/api/v1/compare/candidates/?baseline=999999999").status_code == 404


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/compare/candidates/",
        "/api/v1/compare/candidates/?baseline=",
        "/api/v1/compare/candidates/?q=x",
        "/api/v1/compare/export.json?candidates=1",
        "/api/v1/compare/export.csv?baseline=&candidates=1",
    ],
)
def test_no_baseline_is_a_400_saying_it_is_required_not_unknown_run_0(api, path):
    """R11.1–R11.2: without a baseline the candidates (and the exports) answered 404 "unknown
    run: 0" — a run the client never named. The baseline is required: 400, in words."""
    response = api.get(path, HTTP_ACCEPT="application/json")
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["code"] == "invalid"
    assert body["error"] == "Query string refused: baseline is required: give the baseline run id."
    assert body["detail"] == {"baseline": ["required: give the baseline run id"]}


@pytest.mark.parametrize("baseline", ["x", "1.5", "-3", "0", "99999999999999999999"])
def test_a_baseline_that_is_no_run_id_is_a_400(api, baseline):
    response = api.get(f"/api/v1/compare/candidates/?baseline={baseline}")
    assert response.status_code == 400, response.content
    assert "baseline" in response.json()["detail"]


def test_post_compare_reports_refused_pairs_inside_the_result(api, setup):
    baseline, cands, refused = setup
    response = api.post(
        "/api/v1/compare/",
        {"baseline": baseline.pk, "candidates": [c.pk for c in cands] + [refused.pk]},
        format="json",
    )
    assert response.status_code == 200
    doc = response.json()
    assert doc["model_requests"] == 0
    assert [c["run"] for c in doc["comparisons"]] == [c.pk for c in cands]
    (r,) = doc["refused"]
    assert r["run"] == refused.pk
    assert [d["text"] for d in r["differences"]] == [
        "limits.max_output_tokens: 4096 in the baseline, 99 in the candidate"
    ]
    first, second = doc["comparisons"]
    # Independent arithmetic: mmlu-pro differences [0, +1], gpqa [0, 0]; weights 10:15.
    assert Fraction(first["delta_exact"]) == Fraction(10, 25) * Fraction(1, 2)
    assert first["savings"]["subject_cost_pct"] == "60"
    assert second["savings"]["subject_cost_pct"] is None


def test_post_compare_409_when_every_candidate_is_refused(api, setup):
    baseline, _cands, refused = setup
    response = api.post(
        "/api/v1/compare/", {"baseline": baseline.pk, "candidates": [refused.pk]}, format="json"
    )
    assert response.status_code == 409
    body = response.json()
    assert body["code"] == "incomparable"
    assert body["detail"]["refused"][0]["run"] == refused.pk
    assert body["detail"]["refused"][0]["differences"][0]["field"] == "limits.max_output_tokens"


def test_post_compare_input_errors(api, setup):
    baseline, cands, _ = setup
    assert api.post("/api/v1/compare/", {"baseline": baseline.pk}, format="json").status_code == 400
    assert (
        api.post(
            "/api/v1/compare/", {"baseline": baseline.pk, "candidates": [999999999]}, format="json"
        ).status_code
        == 404
    )
    assert APIClient().post("/api/v1/compare/", {}, format="json").status_code == 401
    response = api.post(
        "/api/v1/compare/",
        {"baseline": baseline.pk, "candidates": [cands[0].pk], "baseline_target": "router"},
        format="json",
    )
    assert response.status_code == 422 and response.json()["code"] == "no_comparison"


@pytest.mark.parametrize("candidates", ["-1", "+5", "5-", "a", "\u0665", "9-3", "0"])
def test_an_export_selection_that_names_no_run_is_refused_in_our_words(api, setup, candidates):
    """An outside probe: `candidates=-1` answered Python's own "invalid literal for int()"."""
    baseline, _, _ = setup
    response = api.get(
        "/api/v1/compare/export.json", {"baseline": baseline.pk, "candidates": candidates}
    )
    assert response.status_code == 400
    said = response.json()["detail"]["candidates"]
    assert "is not a run id or an ascending range of run ids" in str(said), said


def test_a_selection_is_read_with_spaces_around_its_ids():
    from compare.forms import ids_parse

    assert ids_parse(" 5 - 7 , 9") == [5, 6, 7, 9]


def test_exports_hold_every_comparison_with_the_api_numbers(api, qs):
    base = b.target("base")
    D = Decimal
    baseline = b.run(
        qs, {base: OUT}, costs={base: [D("0.003"), D("0.001"), D("0.002"), D("0.004")]}
    )
    router = b.target("router", kind="mom")

    def router_costs(i):
        if i % 9 == 4:
            return [D("0.002"), None, D("0.003"), D("0.001")]  # one unknown case
        return [D("0.001") * (1 + i % 3), D("0.002"), D("0.0005"), D("0.004")]

    runs = [
        b.run(qs, {router: [i % 2 == 0, True, i % 3 == 0, False]}, costs={router: router_costs(i)})
        for i in range(27)
    ]
    ids = [r.pk for r in runs]
    posted = api.post(
        "/api/v1/compare/", {"baseline": baseline.pk, "candidates": ids}, format="json"
    ).json()

    selection = f"baseline={baseline.pk}&candidates={ids[0]}-{ids[-1]}"
    response = api.get(f"/api/v1/compare/export.csv?{selection}")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    assert "attachment" in response["Content-Disposition"]
    table = list(csv.DictReader(io.StringIO(response.content.decode())))
    cand_rows = [r for r in table if r["row"] == "candidate"]
    assert len(cand_rows) == 27 and table[0]["row"] == "baseline"
    for row, c in zip(cand_rows, posted["comparisons"], strict=True):
        assert int(row["run"]) == c["run"]
        assert Fraction(row["delta_exact"]) == Fraction(c["delta_exact"])
        assert float(row["interval_lower"]) == pytest.approx(c["interval"]["lower"])
        assert float(row["family_upper"]) == pytest.approx(c["family_interval"]["upper"])
        assert (int(row["wins"]), int(row["losses"]), int(row["ties"])) == (
            c["wins"],
            c["losses"],
            c["ties"],
        )
        assert row["subject_savings_pct"] == (c["savings"]["subject_cost_pct"] or "")
        # The savings interval's columns carry the API's numbers; unknown is empty, never 0.
        si = c["savings_interval"]
        interval = {k: row[f"savings_interval_{k}"] for k in SAVINGS_INTERVAL_KEYS}
        if si is None:
            assert set(interval.values()) == {""}
        else:
            assert (float(interval["lower"]), float(interval["upper"])) == (
                si["lower"],
                si["upper"],
            )
            assert float(interval["alpha"]) == si["alpha"]
            assert (int(interval["draws"]), int(interval["seed"])) == (si["draws"], si["seed"])
            assert interval["label"] == si["label"]
    intervals = [c["savings_interval"] for c in posted["comparisons"]]
    assert any(si is None for si in intervals)
    assert any(si is not None and si["lower"] < si["upper"] for si in intervals)

    response = api.get(f"/api/v1/compare/export.json?{selection}")
    doc = json.loads(response.content)
    assert doc["comparisons"] == posted["comparisons"]
    assert doc["statements"] == STATEMENTS and doc["model_requests"] == 0
    assert doc["selection"]["candidates"] == ids

    assert api.get("/api/v1/compare/export.csv?baseline=1&candidates=x").status_code == 400
