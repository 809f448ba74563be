"""Every write to the API refuses a query parameter it does not read (session 9, helper rc;
the GETs' rule, tests/api/test_detail_query_params.py).

A POST read its body and dropped its query string: `runs/N/cancel/?dry_run=1` cancelled the
run, `runs/N/recover/?dry_run=1` created a child run that spends money — for a client who
believed it had asked for a dry run. Now every POST, PUT, PATCH and DELETE of an API view
answers 400 naming the parameter, before the view runs: nothing is written. The routes are
read from the URL patterns, so a new write is held to the rule without a line here.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.apps import apps
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.test import APIClient

from runs.models import Run
from tests import factories as f
from tests.compare import builders as b

pytestmark = pytest.mark.django_db

UNSAFE = ("post", "put", "patch", "delete")


def _routes(patterns: list[Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for p in patterns:
        if isinstance(p, URLResolver):
            yield from _routes(p.url_patterns, prefix + str(p.pattern))
        elif isinstance(p, URLPattern):
            yield prefix + str(p.pattern), p.callback


def unsafe_api_routes() -> list[tuple[str, str]]:
    """(route, method) of every write of a DRF view under /api/, from the URL patterns."""
    out = []
    for route, callback in _routes(get_resolver().url_patterns):
        view_class = getattr(callback, "cls", None)
        if not route.startswith("api/") or view_class is None:
            continue
        actions = getattr(callback, "actions", None)
        methods = list(actions) if actions else [m for m in UNSAFE if hasattr(view_class, m)]
        out += [(route, m) for m in methods if m in UNSAFE]
    return out


def _address(route: str, values: dict[str, str]) -> str:
    """The route with its parameters filled, both forms (`<int:pk>`, `(?P<pk>[^/.]+)`)."""
    route = re.sub(r"\(\?P<(\w+)>[^)]*\)", lambda m: values.get(m.group(1), "999999"), route)
    route = re.sub(r"<(?:\w+:)?(\w+)>", lambda m: values.get(m.group(1), "999999"), route)
    return "/" + route.replace("^", "").replace("$", "")


def _state() -> dict[str, Any]:
    """Every row count of the project, and every run's status: what a write would change."""
    counts = {m._meta.label: m._default_manager.count() for m in apps.get_models()}
    return {**counts, "runs": list(Run.objects.order_by("pk").values_list("pk", "status"))}


def test_every_write_route_is_found():
    values = {"pk": "{pk}", "slug": "{slug}"}
    routes = {(_address(route, values), m) for route, m in unsafe_api_routes()}
    for known in (
        ("/api/v1/runs/", "post"),
        ("/api/v1/runs/{pk}/cancel/", "post"),
        ("/api/v1/runs/{pk}/recover/", "post"),
        ("/api/v1/targets/{slug}/preflight/", "post"),
        ("/api/v1/compare/", "post"),
    ):
        assert known in routes, routes


def test_every_write_refuses_a_query_parameter_it_does_not_read_and_does_nothing():
    operator = f.user_create(username="op", staff=True)
    qs = b.questions({"mmlu-pro": 2})
    target = b.target("wq-target")
    running = b.run(qs, {target: [True, True]}, status="running")
    api = APIClient()
    api.force_authenticate(operator)
    values = {"pk": str(running.pk), "slug": target.slug}
    routes = unsafe_api_routes()
    assert len(routes) >= 10
    before = _state()
    for route, method in routes:
        address = _address(route, values)
        response = getattr(api, method)(f"{address}?dry_run=1", {}, format="json")
        assert response.status_code == 400, (method, address, response.content)
        body = response.json()
        assert body["code"] == "invalid", body
        assert "dry_run" in body["error"] and "nothing was done" in body["error"], body
        assert list(body["detail"]) == ["dry_run"], body
        # Given twice, a parameter it reads is refused too (`format`, DRF's own).
        twice = getattr(api, method)(f"{address}?format=json&format=json", {}, format="json")
        assert twice.status_code == 400 and "format" in twice.json()["detail"], address
    assert _state() == before  # nothing created, nothing changed

    # The same write without the parameter acts: the refusal was the parameter's.
    cancel = api.post(f"/api/v1/runs/{running.pk}/cancel/", {}, format="json")
    assert cancel.status_code < 300, cancel.content
    assert Run.objects.get(pk=running.pk).status != "running"


def test_a_write_with_no_query_string_or_format_alone_is_unchanged():
    operator = f.user_create(username="op2", staff=True)
    qs = b.questions({"mmlu-pro": 1})
    running = b.run(qs, {b.target("wq-two"): [True]}, status="running")
    api = APIClient()
    api.force_authenticate(operator)
    response = api.post(f"/api/v1/runs/{running.pk}/cancel/?format=json", {}, format="json")
    assert response.status_code < 300, response.content
