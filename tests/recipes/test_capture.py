"""Recipe capture against the simulator's router (R12.2): a recipe only for a config proven
stable and pinned across every read; otherwise a readable `recipe.not_captured` event."""

from __future__ import annotations

import copy
import json

import httpx
import pytest

from recipes import services
from recipes.models import Recipe
from recipes.services import recipe_capture, run_recipes_capture
from runs.models import RunEvent
from srbench.simulator.testing import running_simulator
from tests.recipes.support import (
    ActAfter,
    mom_target,
    put_config,
    router_config,
    router_hashes,
    run_of,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def sim_url():
    with running_simulator() as url:
        yield url


def refusals(run):
    return list(RunEvent.objects.filter(run=run, type="recipe.not_captured").order_by("seq"))


def test_stable_pinned_config_is_captured_with_hashes_etag_and_projection(sim_url):
    target = mom_target(sim_url)
    run = run_of(target)
    hashes = router_hashes(sim_url)

    recipe = recipe_capture(run=run, target=target)

    assert recipe is not None
    assert recipe.active_config_hash == recipe.generated_config_hash == target.config_hash
    assert recipe.source_config_hash == hashes["source_config_hash"]
    assert recipe.etag == f'"{hashes["source_config_hash"]}"'
    decisions = [d["name"] for d in recipe.body["routers"]["auto"]["decisions"]]
    assert decisions == ["reasoning", "review", "session-canary"]
    assert len(recipe.projection_sha256) == 64
    assert RunEvent.objects.filter(run=run, type="recipe.captured").count() == 1
    assert refusals(run) == []


def test_second_capture_returns_the_stored_recipe_without_reading_the_router(sim_url):
    target = mom_target(sim_url)
    run = run_of(target)
    first = recipe_capture(run=run, target=target)
    transport = ActAfter("/never", 1, lambda: None)

    with httpx.Client(transport=transport) as client:
        second = recipe_capture(run=run, target=target, client=client)

    assert second == first
    assert transport.paths == []
    assert Recipe.objects.filter(run=run).count() == 1


def test_config_change_between_the_two_hash_reads_stores_no_recipe(sim_url):
    target = mom_target(sim_url)
    run = run_of(target)
    changed = copy.deepcopy(router_config(sim_url))
    changed["routers"]["auto"]["default_model"] = "sim-strong"
    transport = ActAfter("/api/v1/config/hash", 1, lambda: put_config(sim_url, changed))

    with httpx.Client(transport=transport) as client:
        recipe = recipe_capture(run=run, target=target, client=client)

    assert recipe is None
    assert not Recipe.objects.filter(run=run).exists()
    (event,) = refusals(run)
    assert event.payload["reason"] == "hash_changed"
    assert event.payload["target"] == target.slug
    assert "changed while it was being read" in event.payload["message"]


def test_etag_change_after_the_config_read_stores_no_recipe(sim_url):
    """The source document changes without changing what the router runs (a comment): both
    hash reads agree on the runtime hashes, only the ETag re-check can tell."""
    target = mom_target(sim_url)
    run = run_of(target)
    edited = {**router_config(sim_url), "comment": "edited by an operator"}
    # After the second hash read: only the conditional re-read of the config sees it.
    transport = ActAfter("/api/v1/config/hash", 2, lambda: put_config(sim_url, edited))

    with httpx.Client(transport=transport) as client:
        recipe = recipe_capture(run=run, target=target, client=client)

    assert recipe is None
    assert transport.paths[-1] == "/api/v1/config"  # the If-None-Match re-read
    assert router_hashes(sim_url)["active_runtime_hash"] == target.config_hash
    (event,) = refusals(run)
    assert event.payload["reason"] == "etag_changed"
    assert "ETag changed" in event.payload["message"]


def test_source_change_between_config_read_and_second_hash_read_stores_no_recipe(sim_url):
    target = mom_target(sim_url)
    run = run_of(target)
    edited = {**router_config(sim_url), "comment": "edited by an operator"}
    transport = ActAfter("/api/v1/config", 1, lambda: put_config(sim_url, edited))

    with httpx.Client(transport=transport) as client:
        assert recipe_capture(run=run, target=target, client=client) is None

    (event,) = refusals(run)
    assert event.payload["reason"] == "etag_changed"
    assert "source config changed" in event.payload["message"]


def test_router_running_another_config_than_the_pin_stores_no_recipe(sim_url):
    target = mom_target(sim_url, config_hash="b" * 64)
    run = run_of(target)

    assert recipe_capture(run=run, target=target) is None

    (event,) = refusals(run)
    assert event.payload["reason"] == "hash_mismatch"
    assert event.payload["pinned_config_hash"] == "b" * 64
    assert "does not run the pinned config" in event.payload["message"]


def test_staged_but_unactivated_config_is_not_captured(sim_url):
    """After an edit the generated hash moves before the active one (until reload)."""
    target = mom_target(sim_url)
    run = run_of(target)
    staged = copy.deepcopy(router_config(sim_url))
    staged["routers"]["auto"]["default_model"] = "sim-strong"
    assert httpx.put(f"{sim_url}/api/v1/config?activate=false", json=staged).status_code == 200

    assert recipe_capture(run=run, target=target) is None
    (event,) = refusals(run)
    assert event.payload["reason"] == "hash_mismatch"
    assert "staged but not active" in event.payload["message"]


def test_capture_compares_with_the_runs_frozen_pin_not_a_later_edit_of_the_target(sim_url):
    target = mom_target(sim_url)
    run = run_of(target)
    target.config_hash = "c" * 64  # the operator re-pinned the target after the run froze
    target.save()

    assert recipe_capture(run=run, target=target) is not None


def test_unreachable_router_is_an_endpoint_error(sim_url):
    target = mom_target(sim_url, preview_url="http://127.0.0.1:9/api/v1/routing/preview")
    run = run_of(target)

    assert recipe_capture(run=run, target=target) is None
    (event,) = refusals(run)
    assert event.payload["reason"] == "endpoint_error"
    assert "127.0.0.1" not in event.payload["message"]


def test_a_router_that_stalls_is_cut_off_and_reported_as_a_timeout(sim_url):
    target = mom_target(sim_url)
    run = run_of(target)

    def stall(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    with httpx.Client(transport=httpx.MockTransport(stall)) as client:
        assert recipe_capture(run=run, target=target, client=client) is None
    assert refusals(run)[0].payload["reason"] == "timeout"


def test_a_config_over_the_size_cap_is_refused(sim_url, monkeypatch):
    monkeypatch.setattr(services, "MAX_CONFIG_BYTES", 512)
    target = mom_target(sim_url)
    run = run_of(target)

    assert recipe_capture(run=run, target=target) is None
    (event,) = refusals(run)
    assert event.payload["reason"] == "config_too_large"
    assert "larger than" in event.payload["message"]


def test_run_capture_takes_only_the_runs_mom_targets_that_enable_capture(sim_url):
    capturing = mom_target(sim_url)
    other = mom_target(sim_url, capture=False)
    run = run_of(capturing, other)

    results = run_recipes_capture(run_id=run.pk)

    assert [r.target for r in results if r] == [capturing]
    assert not Recipe.objects.filter(target=other).exists()


@pytest.mark.parametrize("text", ["a\u0000b", "a\ud800b"], ids=["nul", "lone-surrogate"])
@pytest.mark.parametrize("where", ["value", "key"])
def test_a_config_holding_text_the_ledger_cannot_store_is_refused_and_says_where(
    sim_url, text, where
):
    """R12.2, R15: JSON from a router may hold `\\u0000` or a lone `\\ud800`, which PostgreSQL's
    jsonb and UTF-8 cannot hold. A recipe altered to fit would no longer be the router's
    config, so none is stored; the refusal names the place (escaped) and the run goes on.
    Before, the insert raised out of the capture."""
    config = copy.deepcopy(router_config(sim_url))
    decision = config["routers"]["auto"]["decisions"][0]
    if where == "value":
        decision["keywords"] = [*decision["keywords"], text]
    else:
        decision[text] = "x"
    raw = json.dumps(config).encode("ascii")  # the escapes as a router would send them
    put = httpx.put(
        f"{sim_url}/api/v1/config", content=raw, headers={"content-type": "application/json"}
    )
    assert put.status_code == 200, put.text
    target = mom_target(sim_url)
    run = run_of(target)

    assert recipe_capture(run=run, target=target) is None

    assert not Recipe.objects.filter(run=run).exists()
    (event,) = refusals(run)
    assert event.payload["reason"] == "unstorable_text"
    message = event.payload["message"]
    assert "routers.auto.decisions[0]" in message and "cannot store" in message
    if where == "key":  # the key shown as JSON escapes, never the raw characters
        escaped = "\\u0000" if "\x00" in text else "\\ud800"
        assert escaped in event.payload["path"] and text not in event.payload["path"]
    else:
        assert event.payload["path"] == "$.routers.auto.decisions[0].keywords[5]"
