"""Every GET of the API refuses a query parameter it does not read, and one given twice: the
details too (DESIGN §9, R9, R13; the lists' rule, tests/api/test_list_query_params.py).

`GET /api/v1/sources/5/?benchmark=arc` answered 404 for an existing mmlu-pro source: the detail
applied the list's filters. `datasets/N/?page=2`, `runs/N/?status=failed`, `targets/S/?kind=mom`
answered the object as if nothing had been asked. A detail is found by its id alone; what it
reads besides (`format`; a regrade's `task`, an export's `as`) is what its schema documents, and
everything else is refused by name (srbench.api.detail_params_check, the one rule)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from rest_framework.test import APIClient

from datasets.models import Question
from tests import factories as f
from tests.compare import builders as b
from tests.datasets.factories import source_with_questions
from tests.runs import engine_support as es

pytestmark = pytest.mark.django_db

UNREAD = "benchmrk"


@pytest.fixture
def world() -> dict[str, Any]:
    arc = source_with_questions(benchmark="arc", seed=3)
    mmlu = source_with_questions(benchmark="mmlu-pro", seed=3)
    dataset = es.fixture_dataset(["mmlu-pro", "arc"])
    qs = b.questions({"mmlu-pro": 3})
    base = b.target("dq-base")
    run = b.run(qs, {base: [True, False, True]})
    api = APIClient()
    api.force_authenticate(f.user_create(staff=True))
    return {"api": api, "arc": arc, "mmlu": mmlu, "dataset": dataset, "run": run, "target": base}


@pytest.fixture
def schema(world) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    response = world["api"].get("/api/schema/", {"format": "json"})
    assert response.status_code == 200
    return response.json()


def _path_values(w: dict[str, Any]) -> dict[str, str]:
    """A value for each path parameter the API has: real objects where the walk reads one."""
    return {
        "id": str(w["run"].pk),
        "pk": str(w["run"].pk),
        "run_id": str(w["run"].pk),
        "slug": w["target"].slug,
        "call_id": "999999",  # refused before any lookup: no call needed
    }


def _object_path(path: str, w: dict[str, Any]) -> str:
    """The schema's path with its parameters filled: each resource's own object."""
    objects = {
        "/api/v1/sources/{id}/": w["mmlu"].pk,
        "/api/v1/datasets/{id}/": w["dataset"].pk,
        "/api/v1/datasets/{id}/questions/": w["dataset"].pk,
        "/api/v1/datasets/{id}/export/": w["dataset"].pk,
        "/api/v1/questions/{id}/": Question.objects.order_by("pk").first().pk,  # type: ignore[union-attr]
    }
    if path in objects:
        return path.replace("{id}", str(objects[path]))
    values = _path_values(w)
    return re.sub(r"\{(\w+)\}", lambda m: values.get(m.group(1), "999999"), path)


def _gets(schema: dict[str, Any]) -> list[tuple[str, set[str]]]:
    """Every GET operation of the API with the query parameters its schema documents."""
    out = []
    for path, ops in schema["paths"].items():
        if "get" in ops and path.startswith("/api/v1/"):
            documented = {
                p["name"] for p in ops["get"].get("parameters", []) if p.get("in") == "query"
            }
            out.append((path, documented))
    return out


def _required(path: str) -> str:
    """The query a GET cannot answer without (besides the parameter under test)."""
    return {
        "/api/v1/compare/candidates/": "baseline=1",
        "/api/v1/runs/{id}/recovery-plan/": "mode=failed",
        "/api/v1/compare/export.csv": "baseline=1&candidates=2",
        "/api/v1/compare/export.json": "baseline=1&candidates=2",
        "/api/v1/comparisons/": "baseline=1&candidate=2",
    }.get(path, "")


def test_every_get_refuses_a_parameter_it_does_not_read_naming_what_it_reads(world, schema):
    """Walks the schema: a GET added later is held to the rule without a line here. What each
    says it reads is what its schema documents, and `format`."""
    gets = _gets(schema)
    assert len(gets) > 25  # the walk found the API
    for path, documented in gets:
        query = "&".join(q for q in (_required(path), f"{UNREAD}=arc") if q)
        url = f"{_object_path(path, world)}?{query}"
        response = world["api"].get(url, HTTP_ACCEPT="application/json")
        assert response.status_code == 400, (path, response.status_code, response.content)
        body = response.json()
        assert body["code"] == "invalid", (path, body)
        assert UNREAD in body["error"], (path, body)
        said = body["detail"][UNREAD][0]
        prefix = "not a parameter of this address; it reads "
        assert said.startswith(prefix), (path, said)
        assert set(said.removeprefix(prefix).split(", ")) == documented | {"format"}, (path, said)


@pytest.mark.parametrize(
    "query", ["benchmark=arc", "profile=standard", "seed=9", "split=holdout", "page=2"]
)
def test_a_source_is_found_by_its_id_a_list_filter_is_refused_not_applied(world, query) -> None:
    """`sources/5/?benchmark=arc` answered 404 for an existing mmlu-pro source."""
    api, mmlu = world["api"], world["mmlu"]
    response = api.get(f"/api/v1/sources/{mmlu.pk}/?{query}")
    assert response.status_code == 400, response.content
    name = query.split("=")[0]
    assert "not a parameter of this address" in response.json()["detail"][name][0]
    found = api.get(f"/api/v1/sources/{mmlu.pk}/?format=json")
    assert found.status_code == 200, found.content
    assert (found.json()["id"], found.json()["benchmark"]) == (mmlu.pk, "mmlu-pro")


def test_each_detail_still_answers_with_what_it_reads(world) -> None:
    api, w = world["api"], world
    question = Question.objects.order_by("pk").first()
    assert question is not None
    for url in (
        f"/api/v1/sources/{w['arc'].pk}/",
        f"/api/v1/datasets/{w['dataset'].pk}/?format=json",
        f"/api/v1/questions/{question.pk}/?format=json",
        f"/api/v1/runs/{w['run'].pk}/?format=json",
        f"/api/v1/targets/{w['target'].slug}/?format=json",
        f"/api/v1/targets/{w['target'].slug}/preflight/",
        f"/api/v1/runs/{w['run'].pk}/recipe/?format=json",
    ):
        response = api.get(url)
        assert response.status_code == 200, (url, response.content)
    assert api.get(f"/api/v1/runs/{w['run'].pk}/").json()["id"] == w["run"].pk


@pytest.mark.parametrize(
    ("path", "query", "named"),
    [
        ("/api/v1/runs/{run}/", "format=json&format=json", "format"),
        ("/api/v1/runs/{run}/export/", "as=csv&as=json", "as"),
        ("/api/v1/runs/{run}/regrade/", "task=a&task=b", "task"),
    ],
)
def test_a_detail_parameter_given_twice_is_refused(world, path, query, named) -> None:
    response = world["api"].get(f"{path.format(run=world['run'].pk)}?{query}")
    assert response.status_code == 400, response.content
    assert "given more than once (2 times)" in response.json()["detail"][named][0]
