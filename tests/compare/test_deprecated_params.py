"""The fourth outside probe: the deprecated GET /api/v1/comparisons/ reads `candidate`, while
its successor POST /api/v1/compare/ and the exports read `candidates`. A client that wrote
`candidates=` beside `candidate=` got a 200 comparing only the latter, any other unknown
parameter was dropped without a word, a missing baseline answered 404 "unknown run(s): 0" and a
repeated baseline silently took the last. Each is now a 400 that says what the route reads, with
the deprecation headers every answer carries (SPEC R11; issue 24)."""

from __future__ import annotations

import pytest

from tests.compare.test_one_endpoint import api, assert_deprecated, setup  # noqa: F401

pytestmark = pytest.mark.django_db

URL = "/api/v1/comparisons/"


def test_candidates_beside_candidate_is_refused_and_names_the_right_parameter(api, setup):  # noqa: F811
    baseline, cands, _ = setup
    for query in (
        f"baseline={baseline.pk}&candidate={cands[0].pk}&candidates={cands[1].pk}",
        f"baseline={baseline.pk}&candidates={cands[0].pk}",
    ):
        response = api.get(f"{URL}?{query}")
        assert response.status_code == 400, (query, response.content)
        detail = response.json()["detail"]
        assert list(detail) == ["candidates"], detail
        assert "`candidate`" in str(detail["candidates"]), detail
        assert "POST /api/v1/compare/" in str(detail["candidates"]), detail
        assert_deprecated(response)


def test_an_unknown_parameter_is_refused_not_dropped(api, setup):  # noqa: F811
    baseline, cands, _ = setup
    response = api.get(f"{URL}?baseline={baseline.pk}&candidate={cands[0].pk}&margin=0.05")
    assert response.status_code == 400, response.content
    assert "margin" in response.json()["detail"], response.json()
    assert_deprecated(response)
    # What the route reads still answers.
    ok = api.get(
        f"{URL}?baseline={baseline.pk}&candidate={cands[0].pk}&baseline_target=base&format=json"
    )
    assert ok.status_code == 200, ok.content


def test_a_missing_or_repeated_baseline_is_a_400_that_says_so(api, setup):  # noqa: F811
    baseline, cands, _ = setup
    for query in (f"candidate={cands[0].pk}", f"baseline=&candidate={cands[0].pk}"):
        response = api.get(f"{URL}?{query}")
        assert response.status_code == 400, (query, response.content)
        assert "required" in str(response.json()["detail"]["baseline"]), response.json()
    response = api.get(
        f"{URL}?baseline={baseline.pk}&baseline={cands[0].pk}&candidate={cands[0].pk}"
    )
    assert response.status_code == 400, response.content
    assert "once" in str(response.json()["detail"]["baseline"]), response.json()
    assert_deprecated(response)


def test_the_readme_says_what_the_deprecated_route_reads_and_sends() -> None:
    """The README's REST API section is where a newcomer learns of the route (it was silent on
    `candidate=`): its parameters, its headers' value and its successor, as the code has them."""
    from pathlib import Path

    from django.conf import settings

    from compare.api_deprecated import PARAMS, deprecation_headers

    readme = (Path(settings.BASE_DIR) / "README.md").read_text()
    section = readme.split("## REST API", 1)[1].split("\n## ", 1)[0]
    assert "GET /api/v1/comparisons/" in section and "POST /api/v1/compare/" in section
    for name in PARAMS - {"format"}:
        assert f"`{name}`" in section, name
    assert f"Deprecation: {deprecation_headers()['Deprecation']}" in " ".join(section.split())
