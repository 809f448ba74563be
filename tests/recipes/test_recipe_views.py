"""What members see of recipes: the secret scan of stored and downloaded recipes, run
availability (R12.5), the Frozen recipes pages and the API."""

from __future__ import annotations

import json

import pytest

from recipes.selectors import ARTEFACT_LABEL
from recipes.services import recipe_capture, run_recipes_capture
from srbench.simulator.testing import running_simulator
from tests import factories as f
from tests.recipes.support import mom_target, run_of

pytestmark = pytest.mark.django_db

PLANTED_ROUTER = {
    "endpoint": "http://10.20.30.40:8801/v1",
    "api_key": "sk-live-planted0123456789abcdef",
    "password": "hunter2-planted",
    "headers": {"X-Tenant": "tenant-planted-77"},
    "port": 48213,
    "cache_dir": "/srv/router/planted-cache",
    "notes": "failover to [fd00::beef]:9443 via router-7.corp.internal",
    "mirror": "192.168.77.14",
    "backends": ["https://gpu-a.planted.example.com/v1", "plain-value"],
    "upstream_token": "ZmFrZVNlY3JldFBsYW50ZWQ5OTg4Nzc2NjU1",
}
PLANTED_SECTION = {"listen": "0.0.0.0:18080", "admin_token": "adm-planted-secret"}
PLANTED_STRINGS = [
    "10.20.30.40",
    "8801",
    "sk-live-planted",
    "hunter2-planted",
    "tenant-planted-77",
    "48213",
    "/srv/router",
    "fd00::beef",
    "9443",
    "router-7.corp.internal",
    "192.168.77.14",
    "gpu-a.planted.example.com",
    "ZmFrZVNlY3JldFBsYW50ZWQ5OTg4Nzc2NjU1",
    "18080",
    "adm-planted-secret",
]
EXPECTED_REDACTIONS = {
    "$.routers.auto.endpoint": "endpoint",
    "$.routers.auto.api_key": "secret",
    "$.routers.auto.password": "secret",
    "$.routers.auto.headers": "headers",
    "$.routers.auto.port": "port",
    "$.routers.auto.cache_dir": "path",
    "$.routers.auto.notes": "ip",
    "$.routers.auto.mirror": "ip",
    "$.routers.auto.backends[0]": "url",
    "$.routers.auto.upstream_token": "secret",
    "$.deployment": "non_routing_section",
}


@pytest.fixture
def member(client):
    client.force_login(f.user_create())
    return client


def test_stored_and_downloaded_recipe_hold_no_planted_secret_and_name_each_redaction(member):
    with running_simulator(routers={"auto": PLANTED_ROUTER}, deployment=PLANTED_SECTION) as url:
        target = mom_target(url)
        run = run_of(target)
        recipe = recipe_capture(run=run, target=target)
        assert recipe is not None

    stored = json.dumps([recipe.body, recipe.redactions, recipe.etag])
    page_download = member.get(f"/recipes/{recipe.pk}/download/")
    api_download = member.get(f"/api/v1/recipes/{recipe.pk}/download/")
    detail_page = member.get(f"/recipes/{recipe.pk}/")
    api_detail = member.get(f"/api/v1/recipes/{recipe.pk}/")
    for document in (
        stored,
        page_download.content.decode(),
        api_download.content.decode(),
        detail_page.content.decode(),
        api_detail.content.decode(),
    ):
        for planted in PLANTED_STRINGS:
            assert planted not in document, planted

    named = {r["path"]: r["kind"] for r in recipe.redactions}
    assert named.items() >= EXPECTED_REDACTIONS.items()
    # Routing survives the redaction.
    router = recipe.body["routers"]["auto"]
    assert [d["name"] for d in router["decisions"]] == ["reasoning", "review", "session-canary"]
    assert router["backends"] == ["[redacted]", "plain-value"]


def test_download_is_a_json_file_marked_as_a_non_deployable_recipe_artefact(member):
    with running_simulator() as url:
        target = mom_target(url)
        run = run_of(target)
        recipe = recipe_capture(run=run, target=target)

    response = member.get(f"/recipes/{recipe.pk}/download/")

    assert response["Content-Type"].startswith("application/json")
    assert "attachment" in response["Content-Disposition"]
    document = json.loads(response.content)
    assert next(iter(document)) == "artefact"
    assert document["artefact"] == "recipe artefact, not a deployable configuration"
    assert document["projection_sha256"] == recipe.projection_sha256
    assert document["config_hashes"]["active"] == target.config_hash
    assert document["recipe"] == recipe.body
    assert url not in response.content.decode()  # not even the router's own address


def test_run_created_before_capture_was_enabled_stays_unavailable_after_later_captures(member):
    with running_simulator() as url:
        target = mom_target(url, capture=False)
        old_run = run_of(target, status="completed")
        assert run_recipes_capture(run_id=old_run.pk) == []

        target.capture_recipe = True
        target.save()
        new_run = run_of(target)
        (new_recipe,) = run_recipes_capture(run_id=new_run.pk)
        assert new_recipe is not None

    old_api = member.get(f"/api/v1/runs/{old_run.pk}/recipe/")
    old_page = member.get(f"/recipes/runs/{old_run.pk}/")
    new_api = member.get(f"/api/v1/runs/{new_run.pk}/recipe/")

    assert old_api.status_code == 200
    assert old_api.json()["available"] is False
    assert old_api.json()["recipes"] == []
    assert "not enabled" in old_api.json()["reason"]
    assert "Recipe unavailable" in old_page.content.decode()
    for response in (old_api, old_page):
        assert new_recipe.projection_sha256 not in response.content.decode()
        assert "session-canary" not in response.content.decode()
    assert new_api.json()["available"] is True
    assert new_api.json()["recipes"][0]["projection_sha256"] == new_recipe.projection_sha256


def test_run_whose_capture_was_refused_shows_the_reason(member):
    with running_simulator() as url:
        target = mom_target(url, config_hash="d" * 64)
        run = run_of(target)
        run_recipes_capture(run_id=run.pk)

    body = member.get(f"/api/v1/runs/{run.pk}/recipe/").json()

    assert body["available"] is False
    assert body["not_captured"][0]["reason"] == "hash_mismatch"
    assert "does not run the pinned config" in body["reason"]
    assert (
        "does not run the pinned config" in member.get(f"/recipes/runs/{run.pk}/").content.decode()
    )


def test_run_without_a_mom_target_says_it_has_no_router_recipe(member):
    run = f.run_create(status="completed")

    body = member.get(f"/api/v1/runs/{run.pk}/recipe/").json()

    assert body == {
        "run": run.pk,
        "available": False,
        "recipes": [],
        "not_captured": [],
        "reason": "This run has no MoM target, so there is no router recipe.",
    }


def test_frozen_recipes_list_and_detail_show_capture_time_hashes_and_redactions(member):
    with running_simulator(routers={"auto": {"api_key": "sk-live-planted0123456789abcdef"}}) as url:
        target = mom_target(url)
        run = run_of(target)
        recipe = recipe_capture(run=run, target=target)

    listing = member.get("/recipes/").content.decode()
    detail = member.get(f"/recipes/{recipe.pk}/").content.decode()
    api_list = member.get("/api/v1/recipes/").json()

    assert f"/recipes/{recipe.pk}/" in listing and target.slug in listing
    for value in (
        recipe.projection_sha256,
        recipe.source_config_hash,
        recipe.generated_config_hash,
        recipe.active_config_hash,
        "$.routers.auto.api_key",
        ARTEFACT_LABEL,
        "session-canary",
    ):
        assert value in detail
    assert "0 of 0 calls acknowledged" in detail
    assert api_list["count"] == 1
    assert api_list["results"][0]["projection_sha256"] == recipe.projection_sha256
    assert api_list["results"][0]["redaction_count"] == 3  # seed, stall_seconds, api_key
    # The API's one keyset rule pages this list too (srbench.api.Keyset): newest first, and
    # no next cursor once the last row is read.
    top = member.get("/api/v1/recipes/", {"before": 0, "page_size": 1}).json()
    assert [r["id"] for r in top["results"]] == [recipe.pk] and top["next_before"] is None
    below = member.get("/api/v1/recipes/", {"before": recipe.pk}).json()
    assert below["results"] == [] and below["next_before"] is None


def test_recipe_pages_and_api_need_a_login(client):
    run = f.run_create()
    assert client.get("/recipes/").status_code == 302
    assert client.get(f"/recipes/runs/{run.pk}/").status_code == 302
    assert client.get("/api/v1/recipes/").status_code == 401
    assert client.get(f"/api/v1/runs/{run.pk}/recipe/").status_code == 401
