"""A run's results, calls and events refuse a query parameter they do not read (outside probe
"ka", 2026-12-07). `GET /api/v1/runs/1/results/?target=router` answered the strong model's
results, the filter silently dropped: a script summing "the router's results" summed another
target's. The exports already refused an unknown parameter (`srbench.api.query_params_check`);
these three now do too, and a paging parameter given twice."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from tests import factories as f
from tests.compare import builders as b

pytestmark = pytest.mark.django_db


@pytest.fixture
def setup():
    qs = b.questions({"mmlu-pro": 3})
    run = b.run(
        qs, {b.target("qp-strong"): [True, False, True], b.target("qp-r", kind="mom"): [True] * 3}
    )
    api = APIClient()
    api.force_authenticate(f.user_create())
    return api, run


@pytest.mark.parametrize(
    ("path", "query", "named"),
    [
        ("results", "target=qp-r", "target"),
        ("results", "benchmark=gpqa", "benchmark"),
        ("calls", "target=qp-r", "target"),
        ("calls", "role=judge", "role"),
        ("events", "types=run.ended", "types"),
        ("results", "limit=2&limit=3", "limit"),
        ("calls", "after=0&after=5", "after"),
    ],
)
def test_an_unread_or_repeated_parameter_is_refused_by_name(setup, path, query, named):
    api, run = setup
    response = api.get(f"/api/v1/runs/{run.pk}/{path}/?{query}")
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["code"] == "invalid" and named in body["detail"]


@pytest.mark.parametrize(
    ("path", "query"),
    [
        ("results", "after=0&limit=2"),
        ("calls", "after=0&limit=2&active=true"),
        ("events", "after=0&limit=5&type=run.created&type=run.ended&wait=0"),
        ("results", "format=json"),
    ],
)
def test_what_they_read_still_works(setup, path, query):
    api, run = setup
    response = api.get(f"/api/v1/runs/{run.pk}/{path}/?{query}")
    assert response.status_code == 200, response.content
    assert "results" in response.json()


@pytest.mark.parametrize(
    ("query", "named"),
    [("search=router", "search"), ("ordering=-id", "ordering"), ("status=x&status=y", "status")],
)
def test_the_run_list_refuses_a_parameter_it_does_not_read(setup, query, named):
    """`GET /api/v1/runs/?search=router` listed every run, the unknown parameter dropped."""
    api, run = setup
    response = api.get(f"/api/v1/runs/?{query}")
    assert response.status_code == 400, response.content
    assert named in response.json()["detail"]
    listed = api.get("/api/v1/runs/?status=completed&limit=5&before=0&name=&mode=live")
    assert listed.status_code == 200 and listed.json()["results"][0]["id"] == run.pk
