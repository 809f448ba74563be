"""CSRF on every state-changing form and endpoint under session auth, and members cannot
create or edit targets through the admin or the API (issue 13 point 3)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from datasets.models import FrozenDataset, Source
from runs.models import Call, Cell, RecoveryRequest, Run, RunEvent, Target, TargetSecret
from tests import factories as f
from tests.security.test_secret_scan import concrete_urls, registered_patterns

pytestmark = pytest.mark.django_db

TABLES = (Run, Cell, Call, RunEvent, RecoveryRequest, Target, TargetSecret, FrozenDataset, Source)
UNSAFE = ("post", "put", "patch", "delete")


def counts() -> dict[str, int]:
    return {m.__name__: m.objects.count() for m in TABLES}


@pytest.fixture
def data() -> dict[str, Any]:
    target = f.target_create(slug="t-1")
    run = f.run_create(status="interrupted")
    cell = f.cell_create(run=run, target=target, status="sent_unknown")
    call = f.call_create(cell=cell, status="sent_unknown")
    return {
        "runs": [str(run.pk)],
        "calls": [str(call.pk)],
        "cells": [str(cell.pk)],
        "datasets": [str(run.dataset_id)],
        "questions": [str(cell.question_id)],
        "targets": [target.slug],
        "sources": ["1"],
        "recipes": ["1"],
    }


def test_no_unsafe_request_without_a_csrf_token_changes_anything(data: dict[str, Any]) -> None:
    member = f.user_create(username="member")
    client = Client(enforce_csrf_checks=True)
    client.force_login(member)
    before = counts()
    tried: dict[str, int] = {}
    accepted = []
    for route, _ in registered_patterns():
        url = concrete_urls(route, data)[0]
        for method in UNSAFE:
            response = getattr(client, method)(
                url, data="{}", content_type="application/json", follow=False
            )
            tried[f"{method.upper()} {url}"] = response.status_code
            redirected_to_login = response.status_code == 302 and "login" in response.get(
                "Location", ""
            )
            # The API's catch-all answers unknown paths with a JSON 404: no view, no state.
            catch_all = route.startswith("api/(?P<path>") and response.status_code == 404
            if response.status_code not in (403, 405) and not (redirected_to_login or catch_all):
                accepted.append((method.upper(), url, response.status_code))
    assert not accepted, accepted
    assert counts() == before
    print(f"CSRF: {len(tried)} unsafe requests without a token, all refused")
    # Most refusals are the CSRF check itself, not a missing method.
    assert sum(1 for s in tried.values() if s == 403) >= 40


def test_the_same_requests_with_a_token_get_past_the_csrf_check(data: dict[str, Any]) -> None:
    """Not vacuous: with the token, session-authenticated writes reach their views."""
    run = data["runs"][0]
    # The run's owner: a member acting on someone else's run is refused (test_permissions.py).
    member = Run.objects.get(pk=run).owner
    client = Client(enforce_csrf_checks=True)
    client.force_login(member)
    client.get("/")
    token = client.cookies["csrftoken"].value
    review = client.post(
        "/api/v1/plans/review/", data="{}", content_type="application/json", HTTP_X_CSRFTOKEN=token
    )
    assert review.status_code == 400  # the empty plan, judged by the view
    cancel = client.post(f"/runs/{run}/cancel/", {"csrfmiddlewaretoken": token})
    assert cancel.status_code in (200, 302, 303)
    logout = client.post("/logout/", {"csrfmiddlewaretoken": token})
    assert logout.status_code == 302


@pytest.mark.parametrize("staff", [False, True])
def test_members_cannot_create_or_edit_targets(data: dict[str, Any], staff: bool) -> None:
    """Members (and, through the API, even operators: targets are admin-managed) cannot
    create, edit or delete a target or its key."""
    user = f.user_create(username="someone", staff=False)
    client = Client()
    client.force_login(user)
    target = Target.objects.get(slug="t-1")
    snapshot = list(Target.objects.values())
    if staff:  # operators use the admin; the API stays read-only for everyone
        user.is_staff = user.is_superuser = True
        user.save()
    api_payload = {"slug": "evil", "name": "evil", "base_url": "http://evil/v1", "model": "m"}
    for method, url in [
        ("post", "/api/v1/targets/"),
        ("put", f"/api/v1/targets/{target.slug}/"),
        ("patch", f"/api/v1/targets/{target.slug}/"),
        ("delete", f"/api/v1/targets/{target.slug}/"),
    ]:
        response = getattr(client, method)(url, data=api_payload, content_type="application/json")
        assert response.status_code in (403, 405), (method, url, response.status_code)
    if not staff:
        for url in (
            "/admin/runs/target/add/",
            f"/admin/runs/target/{target.pk}/change/",
            f"/admin/runs/target/{target.pk}/delete/",
        ):
            page = client.get(url)
            assert page.status_code == 302 and "/admin/login/" in page["Location"], url
            response = client.post(url, {**api_payload, "post": "yes", "api_key": "sk-evil"})
            assert response.status_code == 302 and "/admin/login/" in response["Location"], url
    assert list(Target.objects.values()) == snapshot
    assert not TargetSecret.objects.exists()
