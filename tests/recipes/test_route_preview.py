"""Route preview (R8.7): the router's choice for a prompt in a session, from the API and the
CLI, with no model call and errors shown plainly."""

from __future__ import annotations

import json
import re

import httpx
import pytest
from django.core.management import call_command

from runs.engine.router_client import PreviewError, PreviewNotPossible, route_preview
from srbench.simulator.router import session_bucket
from srbench.simulator.testing import running_simulator
from tests import factories as f
from tests.recipes.support import mom_target

pytestmark = pytest.mark.django_db

PROMPT = "Tell me about the weather in spring."  # no keyword: only the session can route it


def session_ids() -> tuple[str, str]:
    """A session inside the `session-canary` decision's 33 % and one outside it, found from
    the simulator's own rule so the test does not depend on hash luck."""
    ids = [f"session-{i}" for i in range(100)]
    inside = next(s for s in ids if session_bucket("auto", "session-canary", s) < 33)
    outside = next(s for s in ids if session_bucket("auto", "session-canary", s) >= 33)
    return inside, outside


@pytest.fixture
def sim_url():
    with running_simulator() as url:
        yield url


@pytest.fixture
def member(client):
    client.force_login(f.user_create())
    return client


def stats(url: str) -> dict:
    return httpx.get(f"{url}/_sim/stats").json()


def test_two_sessions_route_differently_and_no_model_is_called(sim_url, member):
    target = mom_target(sim_url, capture=False)
    inside, outside = session_ids()

    answers = [
        member.post(
            f"/api/v1/targets/{target.slug}/route-preview/",
            {"prompt": PROMPT, "session_id": sid, "conversation_id": "conv-1", "sampling_seed": 7},
            content_type="application/json",
        )
        for sid in (inside, outside)
    ]

    canary, default = (a.json() for a in answers)
    assert all(a.status_code == 200 for a in answers)
    assert (canary["decision"], canary["selected_model"]) == ("session-canary", "sim-strong")
    assert (default["decision"], default["selected_model"]) == ("simple", "sim-weak")
    assert canary["preview_context"] == {
        "session_id": inside,
        "conversation_id": "conv-1",
        "sampling_seed": 7,
    }
    assert canary["config_hash"] == target.config_hash
    assert canary["config_hash_matches"] is True
    assert canary["model_requests"] == 0
    counters = stats(sim_url)
    assert counters["preview_requests"] == 2
    assert counters["model_calls"] == 0
    assert counters["chat_requests"] == 0


def test_messages_are_previewed_like_a_prompt(sim_url, member):
    target = mom_target(sim_url, capture=False)

    response = member.post(
        f"/api/v1/targets/{target.slug}/route-preview/",
        {"messages": [{"role": "user", "content": "Prove the theorem step by step."}]},
        content_type="application/json",
    )

    assert response.json()["decision"] == "reasoning"
    assert stats(sim_url)["model_calls"] == 0


def test_a_router_on_another_config_is_shown_as_not_matching_the_pin(sim_url):
    target = mom_target(sim_url, capture=False, config_hash="f" * 64)

    result = route_preview(target=target, prompt=PROMPT)

    assert result["config_hash_matches"] is False
    assert result["pinned_config_hash"] == "f" * 64


def test_single_model_target_or_missing_preview_url_is_a_400(member):
    single = f.target_create()
    no_preview = f.target_create(kind="mom", config_hash="a" * 64, model="auto")

    for target in (single, no_preview):
        response = member.post(
            f"/api/v1/targets/{target.slug}/route-preview/",
            {"prompt": "hi"},
            content_type="application/json",
        )
        assert response.status_code == 400
        assert response.json()["code"] == "preview_not_possible"
    with pytest.raises(PreviewNotPossible, match="single-model target"):
        route_preview(target=single, prompt="hi")


def test_bad_request_bodies_are_refused_before_reaching_the_router(sim_url, member):
    target = mom_target(sim_url, capture=False)
    url = f"/api/v1/targets/{target.slug}/route-preview/"

    for body in (
        {},
        {"prompt": "a", "messages": [{"role": "user", "content": "b"}]},
        {"prompt": "a", "temperature": 0},
        {"prompt": "a", "sampling_seed": 2**64},
    ):
        assert member.post(url, body, content_type="application/json").status_code == 400
    assert stats(sim_url)["preview_requests"] == 0


def test_router_errors_are_shown_plainly(member):
    target = f.target_create(
        kind="mom",
        model="auto",
        config_hash="a" * 64,
        preview_url="http://127.0.0.1:9/api/v1/routing/preview",
    )

    response = member.post(
        f"/api/v1/targets/{target.slug}/route-preview/",
        {"prompt": "hi"},
        content_type="application/json",
    )

    assert response.status_code == 502
    assert response.json()["code"] == "preview_failed"
    assert response.json()["error"].startswith("Could not reach the router's preview endpoint")


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (httpx.Response(400, json={"error": "unknown fields ['x']"}), "HTTP 400): unknown fields"),
        (httpx.Response(200, text="<html>"), "not JSON"),
        (None, "did not answer within"),
    ],
)
def test_preview_failures_become_readable_preview_errors(reply, message):
    target = f.target_create(
        kind="mom",
        model="auto",
        config_hash="a" * 64,
        preview_url="http://router.test/api/v1/routing/preview",
    )

    def handler(request: httpx.Request) -> httpx.Response:
        if reply is None:
            raise httpx.ReadTimeout("timed out", request=request)
        return reply

    with (
        httpx.Client(transport=httpx.MockTransport(handler)) as client,
        pytest.raises(PreviewError, match=re.escape(message)),
    ):
        route_preview(target=target, prompt="hi", client=client)


def test_preview_needs_a_login(client):
    target = f.target_create()
    response = client.post(
        f"/api/v1/targets/{target.slug}/route-preview/",
        {"prompt": "hi"},
        content_type="application/json",
    )
    assert response.status_code == 401


# The CLI goes through the API in-process (WSGI), whose request cycle closes the database
# connection: these tests commit instead of running inside one test transaction.
@pytest.mark.django_db(transaction=True)
def test_cli_route_preview_prints_the_choice_and_zero_model_requests(sim_url, capsys):
    user = f.user_create()
    target = mom_target(sim_url, capture=False)
    inside, _ = session_ids()

    call_command(
        "benchmark",
        "route-preview",
        target.slug,
        "--prompt",
        PROMPT,
        "--session-id",
        inside,
        "--user",
        user.username,
    )
    text = capsys.readouterr().out
    call_command(
        "benchmark",
        "route-preview",
        target.slug,
        "--prompt",
        PROMPT,
        "--json",
        "--user",
        user.username,
    )
    document = json.loads(capsys.readouterr().out)

    assert "selected model:  sim-strong" in text
    assert "decision:        session-canary" in text
    assert "matches the target's pin" in text
    assert "model requests:  0" in text
    assert document["decision"] == "simple"
    assert stats(sim_url)["model_calls"] == 0


@pytest.mark.django_db(transaction=True)
def test_cli_route_preview_of_a_single_model_target_fails_in_one_line(capsys):
    user = f.user_create()
    target = f.target_create()

    with pytest.raises(SystemExit) as exit_info:
        call_command(
            "benchmark", "route-preview", target.slug, "--prompt", "hi", "--user", user.username
        )

    assert exit_info.value.code == 2
    # The last line is the CLI's; Django's request log may precede it in-process.
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("error: ") and "single-model target" in line
