"""Every list of the API refuses a query parameter it does not read, and one given twice (DESIGN
§9; the rule of a run's lists, tests/api/test_ledger_query_params.py, now everywhere).

`GET /api/v1/datasets/?benchmrk=arc` listed every dataset: the misspelt filter was dropped and a
newcomer read the whole list as the filtered answer. So did sources, a dataset's questions,
recipes, the audit trail, targets, the Compare options and a run's recovery plan and lineage.
Each now answers 400 naming the parameter and the ones it reads (`srbench.api.query_params_check`,
one rule); what each reads — filters, its paging, DRF's `format` — answers as before."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from srbench.models import AuditEvent
from tests import factories as f
from tests.compare import builders as b
from tests.datasets.factories import source_with_questions
from tests.runs import engine_support as es

pytestmark = pytest.mark.django_db


@pytest.fixture
def world() -> dict[str, Any]:
    arc = source_with_questions(benchmark="arc", seed=3)
    mmlu = source_with_questions(benchmark="mmlu-pro", seed=3)
    dataset = es.fixture_dataset(["mmlu-pro", "arc"])
    qs = b.questions({"mmlu-pro": 3})
    base = b.target("lq-base")
    baseline = b.run(qs, {base: [True, False, True]})
    candidate = b.run(qs, {base: [True, True, None], b.target("lq-r", kind="mom"): [True] * 3})
    AuditEvent.objects.create(
        actor="alice", action="run-cancel", method="POST", path="/x/", status_code=200, via="api"
    )
    AuditEvent.objects.create(
        actor="bob", action="run-create", method="POST", path="/y/", status_code=201, via="api"
    )
    api = APIClient()
    api.force_authenticate(f.user_create(staff=True))
    return {
        "api": api,
        "arc": arc,
        "mmlu": mmlu,
        "dataset": dataset,
        "baseline": baseline,
        "candidate": candidate,
    }


def _lists(w: dict[str, Any]) -> list[tuple[str, set[str]]]:
    """Every list and what it reads, besides DRF's `format`."""
    dataset, baseline, candidate = w["dataset"].pk, w["baseline"].pk, w["candidate"].pk
    paged = {"page", "page_size", "before"}
    return [
        ("/api/v1/sources/", {"benchmark", "profile", "seed", "split", *paged}),
        ("/api/v1/datasets/", {"q", "profile", "benchmark", *paged}),
        (
            f"/api/v1/datasets/{dataset}/questions/",
            {"benchmark", "subject", "q", "page", "page_size"},
        ),
        ("/api/v1/datasets/totals/", set()),
        (f"/api/v1/datasets/{dataset}/export/", set()),
        ("/api/v1/recipes/", paged),
        ("/api/v1/audit/", {"actor", "action", "since", *paged}),
        ("/api/v1/targets/", set()),
        ("/api/v1/compare/baselines/", {"q", "page", "page_size"}),
        (
            f"/api/v1/compare/candidates/?baseline={baseline}",
            {"baseline", "q", "page", "page_size"},
        ),
        (
            f"/api/v1/runs/{candidate}/recovery-plan/?mode=failed",
            {"mode", "eligible_after", "excluded_after", "limit"},
        ),
        (f"/api/v1/runs/{candidate}/lineage/", {"children_after", "limit"}),
    ]


def _join(path: str, query: str) -> str:
    return f"{path}{'&' if '?' in path else '?'}{query}"


def test_each_list_refuses_an_unknown_parameter_naming_it_and_what_it_reads(world) -> None:
    api = world["api"]
    for path, reads in _lists(world):
        response = api.get(_join(path, "benchmrk=arc"))
        assert response.status_code == 400, (path, response.content)
        body = response.json()
        assert body["code"] == "invalid", body
        said = body["detail"]["benchmrk"][0]
        assert said.startswith("not a parameter of this address; it reads "), said
        assert set(said.removeprefix("not a parameter of this address; it reads ").split(", ")) == (
            reads | {"format"}
        ), (path, said)
        assert "benchmrk" in body["error"], body


@pytest.mark.parametrize(
    ("path", "query", "named"),
    [
        ("/api/v1/sources/", "benchmark=arc&benchmark=mmlu-pro", "benchmark"),
        ("/api/v1/datasets/", "page_size=2&page_size=5", "page_size"),
        ("/api/v1/datasets/", "format=json&format=json", "format"),
        ("/api/v1/recipes/", "before=0&before=9", "before"),
        ("/api/v1/audit/", "actor=alice&actor=bob", "actor"),
        ("/api/v1/compare/baselines/", "q=a&q=b", "q"),
    ],
)
def test_a_parameter_given_twice_is_refused(world, path, query, named) -> None:
    response = world["api"].get(_join(path, query))
    assert response.status_code == 400, response.content
    assert "given more than once (2 times)" in response.json()["detail"][named][0]


def test_repeated_parameters_of_the_detail_lists(world) -> None:
    api, dataset, run = world["api"], world["dataset"].pk, world["candidate"].pk
    for url, named in (
        (f"/api/v1/datasets/{dataset}/questions/?subject=a&subject=b", "subject"),
        (f"/api/v1/runs/{run}/recovery-plan/?mode=failed&mode=undispatched", "mode"),
        (f"/api/v1/runs/{run}/lineage/?limit=1&limit=2", "limit"),
        ("/api/v1/compare/candidates/?baseline=1&baseline=2", "baseline"),
    ):
        response = api.get(url)
        assert response.status_code == 400, (url, response.content)
        assert named in response.json()["detail"], response.json()


def test_a_page_number_beside_the_keyset_cursor_is_refused(world) -> None:
    """`?before=0&page=3` answered the first page: the page number was dropped."""
    response = world["api"].get("/api/v1/datasets/?before=0&page=3")
    assert response.status_code == 400, response.content
    assert "page" in response.json()["detail"]


def test_what_each_list_reads_still_filters_and_pages(world) -> None:
    api, w = world["api"], world

    def get(url: str) -> Any:
        response = api.get(url)
        assert response.status_code == 200, (url, response.content)
        return response.json()

    arc = get(
        "/api/v1/sources/?benchmark=arc&profile=smoke&seed=3&split=dev&page_size=5&format=json"
    )
    assert [s["id"] for s in arc["results"]] == [w["arc"].pk]
    assert get("/api/v1/sources/?before=0&page_size=1")["next_before"] is not None
    assert get("/api/v1/sources/?page=1&page_size=1")["count"] >= 2
    named = get(f"/api/v1/datasets/?q={w['dataset'].name[:6]}&profile=smoke&page_size=100")
    assert w["dataset"].pk in [d["id"] for d in named["results"]]
    questions = get(
        f"/api/v1/datasets/{w['dataset'].pk}/questions/?benchmark=arc&page=1&page_size=2"
    )
    assert questions["results"] and {q["benchmark"] for q in questions["results"]} == {"arc"}
    assert get("/api/v1/datasets/totals/?format=json")
    export = api.get(f"/api/v1/datasets/{w['dataset'].pk}/export/")
    assert export.status_code == 200
    assert get("/api/v1/recipes/?before=0&page_size=5")["results"] == []
    audit = get("/api/v1/audit/?actor=alice&action=run-cancel&since=2000-01-01T00:00:00Z")
    assert [e["actor"] for e in audit["results"]] == ["alice"]
    assert [t["slug"] for t in get("/api/v1/targets/?format=json")] == ["lq-base", "lq-r"]
    assert get("/api/v1/compare/baselines/?q=&page=1&page_size=5")["page_size"] == 5
    candidates = get(f"/api/v1/compare/candidates/?baseline={w['baseline'].pk}&page_size=5")
    assert w["candidate"].pk in candidates["matching_ids"]
    plan = get(
        f"/api/v1/runs/{w['candidate'].pk}/recovery-plan/"
        "?mode=failed&limit=1&eligible_after=0&excluded_after=0"
    )
    assert plan["mode"] == "failed" and len(plan["eligible_cells"]) == 1
    lineage = get(f"/api/v1/runs/{w['candidate'].pk}/lineage/?children_after=0&limit=5")
    assert lineage["children"] == []
