"""One comparison endpoint (issue 24 point 2, SPEC R11): POST /api/v1/compare/ is THE
comparison; the deprecated GET /api/v1/comparisons/ answers the same document for the same
selection through the same computation, keeps its old all-or-nothing 422 for one release and
says on every answer that it is deprecated and what replaces it. The CLI uses the one endpoint."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from fractions import Fraction

import pytest
from rest_framework.test import APIClient

from tests import factories as f
from tests.cli.conftest import bench  # noqa: F401  (the CLI over HTTP and in-process)
from tests.cli.test_client_retry import api as retrying_client
from tests.cli.test_client_retry import flaky
from tests.compare import builders as b

pytestmark = pytest.mark.django_db

OUT = [True, False, True, False]  # mmlu-pro q1 q2, gpqa q3 q4
SUCCESSOR = '</api/v1/compare/>; rel="successor-version"'


@pytest.fixture
def api():
    client = APIClient()
    client.force_authenticate(f.user_create())
    return client


@pytest.fixture
def setup():
    qs = b.questions({"mmlu-pro": 2, "gpqa": 2})
    base = b.target("base")
    baseline = b.run(qs, {base: OUT}, costs={base: Decimal("0.01")})
    router = b.target("router", kind="mom")
    cands = [
        b.run(qs, {router: [True, True, True, False]}, costs={router: Decimal("0.004")}),
        b.run(qs, {router: [True, False, False, False]}, costs={router: [None] * 4}),
    ]
    refused = b.run(qs, {router: OUT}, limits={"concurrency": 8, "max_output_tokens": 99})
    return baseline, cands, refused


def _get(api, baseline, candidates):  # type: ignore[no-untyped-def]
    ids = ",".join(str(c.pk) for c in candidates)
    return api.get(f"/api/v1/comparisons/?baseline={baseline.pk}&candidate={ids}")


def _post(api, baseline, candidates):  # type: ignore[no-untyped-def]
    body = {"baseline": baseline.pk, "candidates": [c.pk for c in candidates]}
    return api.post("/api/v1/compare/", body, format="json")


def assert_deprecated(response) -> None:  # type: ignore[no-untyped-def]
    assert re.fullmatch(r"@\d+", response["Deprecation"]), response["Deprecation"]
    assert SUCCESSOR in response["Link"]
    assert 'rel="deprecation"' in response["Link"]


def test_both_paths_give_the_same_numbers_and_only_the_old_one_is_deprecated(api, setup):
    baseline, cands, _ = setup
    got, posted = _get(api, baseline, cands), _post(api, baseline, cands)
    assert got.status_code == posted.status_code == 200

    assert got.json() == posted.json()
    assert_deprecated(got)
    assert "Deprecation" not in posted and "Link" not in posted

    # The numbers themselves, computed here: weights 10 (mmlu-pro) : 15 (gpqa); the first
    # candidate differs by [0, +1] on mmlu-pro, the second by [-1, 0] on gpqa.
    first, second = got.json()["comparisons"]
    assert Fraction(first["delta_exact"]) == Fraction(10, 25) * Fraction(1, 2)
    assert Fraction(second["delta_exact"]) == Fraction(15, 25) * Fraction(-1, 2)
    assert (first["wins"], first["losses"], second["wins"], second["losses"]) == (1, 0, 0, 1)
    assert first["savings"]["subject_cost_pct"] == "60"  # 1 - 0.016 / 0.040
    assert second["savings"]["subject_cost_pct"] is None  # unknown, never 0


def test_deprecated_get_keeps_its_all_or_nothing_422_where_post_compares_the_rest(api, setup):
    """The deliberate difference between the two, kept for one release: one refused candidate
    run refuses the whole GET (422, the first refused run named), while POST lists it under
    `refused` and compares the others (409 only when every one is refused)."""
    baseline, cands, refused = setup
    selection = [cands[0], refused, cands[1]]

    got = _get(api, baseline, selection)
    assert got.status_code == 422
    assert_deprecated(got)
    body = got.json()
    assert body["code"] == "incomparable"
    assert body["error"] == (
        f"run {refused.pk} is not comparable with run {baseline.pk}: "
        "limits.max_output_tokens: 4096 in the baseline, 99 in the candidate"
    )
    assert (body["detail"]["baseline_run"], body["detail"]["candidate_run"]) == (
        baseline.pk,
        refused.pk,
    )
    assert [d["field"] for d in body["detail"]["differences"]] == ["limits.max_output_tokens"]

    posted = _post(api, baseline, selection)
    assert posted.status_code == 200
    assert [c["run"] for c in posted.json()["comparisons"]] == [cands[0].pk, cands[1].pk]
    assert [r["run"] for r in posted.json()["refused"]] == [refused.pk]

    # Every candidate run refused: still 422 on the old route, 409 on the one endpoint.
    got = _get(api, baseline, [refused])
    assert got.status_code == 422 and got.json()["code"] == "incomparable"
    assert got.json()["detail"]["candidate_run"] == refused.pk
    assert _post(api, baseline, [refused]).status_code == 409


def test_every_answer_of_the_deprecated_route_names_its_successor(api, setup):
    baseline, cands, _ = setup
    for response, status in (
        (api.get(f"/api/v1/comparisons/?baseline={baseline.pk}"), 400),  # no candidate
        (api.get(f"/api/v1/comparisons/?baseline={baseline.pk}&candidate=999999999"), 404),
        (_get(APIClient(), baseline, cands), 401),
        (
            api.get(
                f"/api/v1/comparisons/?baseline={baseline.pk}&candidate={cands[0].pk}"
                "&baseline_target=router"
            ),
            422,
        ),
    ):
        assert response.status_code == status, response.content
        assert_deprecated(response)


def test_the_schema_marks_the_old_route_deprecated_and_not_the_one_endpoint(client):
    client.force_login(f.user_create())
    paths = client.get("/api/schema/", {"format": "json"}).json()["paths"]
    old = paths["/api/v1/comparisons/"]["get"]
    assert old["deprecated"] is True
    assert {"Deprecation", "Link"} <= set(old["responses"]["200"]["headers"])
    assert "deprecated" not in paths["/api/v1/compare/"]["post"]


@pytest.mark.django_db(transaction=True)
def test_the_cli_compares_through_the_one_endpoint(bench, setup):  # noqa: F811
    """`benchmark compare` answers like POST /compare/: a refused candidate run is listed
    and the rest compared (exit 0); only when every one is refused is it exit 2, the error
    line naming each refused run and why."""
    baseline, cands, refused = setup
    ids = [str(baseline.pk), str(cands[0].pk), str(refused.pk)]

    r = bench("compare", *ids, "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert [c["run"] for c in doc["comparisons"]] == [cands[0].pk]
    assert [x["run"] for x in doc["refused"]] == [refused.pk]

    r = bench("compare", *ids)
    assert r.code == 0, r.err
    assert f"run {cands[0].pk} / router" in r.out
    assert f"refused: run {refused.pk}: limits.max_output_tokens: 4096 in the baseline" in r.out

    r = bench("compare", str(baseline.pk), str(refused.pk))
    assert r.code == 2
    assert r.err.count("\n") == 1 and r.err.startswith("error: every candidate run was refused")
    assert f"run {refused.pk}: limits.max_output_tokens" in r.err


@pytest.mark.parametrize("reads_only, sent", [(True, 3), (False, 1)])
def test_the_cli_repeats_the_comparison_post_like_a_read(reads_only: bool, sent: int) -> None:
    """POST /compare/ changes nothing, so the CLI's client repeats it through a web restart
    (two 503s, then the answer) as it would a GET; any other POST without an
    Idempotency-Key is still sent once (issue 13)."""
    requests: list = []
    client, _clock, _notices = retrying_client(flaky([503, 503], requests))
    body = {"baseline": 1, "candidates": [2]}
    response = client.request("POST", "compare/", json=body, reads_only=reads_only)
    assert len(requests) == sent
    assert response.status_code == (200 if reads_only else 503)
