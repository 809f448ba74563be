"""Run creation with an idempotency key, Stripe semantics over real HTTP (issue 7,
reference Pattern 1): replay, 422 on a different body, concurrent duplicates → one run."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest
from rest_framework.authtoken.models import Token

from runs.models import Run
from tests import factories as f
from tests.conftest import purge_broker
from tests.runs import engine_support as es

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def api(live_server):  # type: ignore[no-untyped-def]
    token, _ = Token.objects.get_or_create(user=f.user_create(username="idem"))
    f.target_create(slug="sim-strong", prices={"sim-strong": es.PRICES["sim-strong"]})
    dataset = es.fixture_dataset(["arc"])
    plan = {"name": "idem", "dataset": dataset.pk, "targets": ["sim-strong"]}
    purge_broker()  # created runs ring the doorbell; no worker listens here
    with httpx.Client(
        base_url=f"{live_server.url}/api/v1/",
        headers={"Authorization": f"Token {token.key}"},
        timeout=30,
    ) as client:
        yield client, plan
    purge_broker()


def post(client: httpx.Client, plan: dict[str, Any], key: str) -> httpx.Response:
    return client.post("runs/", json=plan, headers={"Idempotency-Key": key})


def test_same_key_same_body_replays_the_run(api) -> None:  # type: ignore[no-untyped-def]
    client, plan = api
    first = post(client, plan, "k-replay")
    again = post(client, plan, "k-replay")
    assert first.status_code == 201 and "Idempotent-Replayed" not in first.headers
    assert again.status_code == 200 and again.headers["Idempotent-Replayed"] == "true"
    assert again.json()["id"] == first.json()["id"]
    assert again.json()["plan_sha256"] == first.json()["plan_sha256"]
    # The key may also travel in the body (for clients that cannot set headers).
    body_key = client.post("runs/", json={**plan, "idempotency_key": "k-replay"})
    assert body_key.status_code == 200 and body_key.json()["id"] == first.json()["id"]
    assert Run.objects.count() == 1


def test_same_key_different_body_is_422_and_writes_nothing(api) -> None:  # type: ignore[no-untyped-def]
    client, plan = api
    first = post(client, plan, "k-other")
    other = post(client, {**plan, "name": "something else"}, "k-other")
    assert other.status_code == 422
    body = other.json()
    assert body["code"] == "idempotency_key_reused"
    assert body["detail"]["run"] == first.json()["id"]
    assert set(body) == {"error", "code", "detail"}
    assert Run.objects.count() == 1


def test_a_key_is_per_user(api, live_server) -> None:  # type: ignore[no-untyped-def]
    client, plan = api
    mine = post(client, plan, "k-shared")
    token, _ = Token.objects.get_or_create(user=f.user_create(username="someone-else"))
    theirs = httpx.post(
        f"{live_server.url}/api/v1/runs/",
        json=plan,
        headers={"Authorization": f"Token {token.key}", "Idempotency-Key": "k-shared"},
    )
    assert (mine.status_code, theirs.status_code) == (201, 201)
    assert mine.json()["id"] != theirs.json()["id"]


def test_an_overlong_key_is_a_400_not_a_database_error(api) -> None:  # type: ignore[no-untyped-def]
    client, plan = api
    response = post(client, plan, "k" * 256)
    assert response.status_code == 400 and response.json()["code"] == "invalid_idempotency_key"
    assert not Run.objects.exists()


@pytest.mark.parametrize("attempt", range(4))
def test_concurrent_duplicates_create_exactly_one_run(api, attempt: int) -> None:  # type: ignore[no-untyped-def]
    client, plan = api
    key = f"k-race-{attempt}"
    barrier = threading.Barrier(2)
    answers: list[httpx.Response] = []

    def submit() -> None:
        with httpx.Client(base_url=client.base_url, headers=client.headers, timeout=30) as c:
            barrier.wait()  # both requests leave together
            answers.append(post(c, plan, key))

    threads = [threading.Thread(target=submit) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)

    assert sorted(r.status_code for r in answers) in ([200, 201], [201, 409])
    assert Run.objects.filter(idempotency_key=key).count() == 1
    created = next(r for r in answers if r.status_code == 201).json()
    other = next(r for r in answers if r.status_code != 201)
    if other.status_code == 200:  # the loser is answered as a replay of the winner
        assert other.headers["Idempotent-Replayed"] == "true"
        assert other.json()["id"] == created["id"]
