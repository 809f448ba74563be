"""The API client's retry rule (issue 13, web restart): reads and POSTs carrying an
Idempotency-Key are repeated with bounded backoff when the connection is lost or a proxy says
the web process is down; every other write is sent once. The transport is httpx's
MockTransport (no server, no database); the clock is fake so the budget is exact."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from srbench import api_client as c


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def __call__(self) -> float:
        return self.now


def api(
    handler: Callable[[httpx.Request], httpx.Response], retry_for: float = 30.0
) -> tuple[c.ApiClient, Clock, list[str]]:
    clock, notices = Clock(), []
    client = c.ApiClient(
        url="http://srbench.test",
        token="t",
        retry_for=retry_for,
        notice=notices.append,
        sleep=clock.sleep,
        clock=clock,
    )
    client.http = httpx.Client(
        transport=httpx.MockTransport(handler), base_url="http://srbench.test/api/v1/"
    )
    return client, clock, notices


def flaky(failures: list[Exception | int], requests: list[httpx.Request]) -> Callable:
    """Fails (raises, or answers a status) as listed, then answers 200 {"ok": true}."""

    def handler(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        if failures:
            failure = failures.pop(0)
            if isinstance(failure, int):
                return httpx.Response(failure, text="bad gateway")
            raise failure
        return httpx.Response(200, json={"ok": True})

    return handler


def lost() -> Exception:
    return httpx.RemoteProtocolError("Server disconnected without sending a response.")


def refused() -> Exception:
    return httpx.ConnectError("[Errno 111] Connection refused")


def test_a_read_rides_through_a_web_restart() -> None:
    requests: list[httpx.Request] = []
    client, clock, notices = api(
        flaky([lost(), refused(), refused(), 502, httpx.ReadTimeout("timed out")], requests)
    )
    assert client.json("GET", "runs/1/") == {"ok": True}
    assert len(requests) == 6 and {r.method for r in requests} == {"GET"}
    assert clock.sleeps == [0.25, 0.5, 1.0, 2.0, 4.0]  # exponential, capped
    assert len(notices) == 2 and "retrying GET runs/1/ for up to 30s" in notices[0]
    assert notices[1] == "  the srbench API answers again"


def test_a_post_with_an_idempotency_key_is_repeated_with_the_same_key_and_body() -> None:
    requests: list[httpx.Request] = []
    client, _, _ = api(flaky([lost(), refused()], requests))
    response = client.request(
        "POST", "runs/", json={"name": "x"}, headers={"Idempotency-Key": "k-1"}
    )
    assert response.status_code == 200 and len(requests) == 3
    assert {r.headers["Idempotency-Key"] for r in requests} == {"k-1"}
    assert {r.content for r in requests} == {b'{"name":"x"}'}


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
def test_a_write_without_a_key_is_never_repeated(method: str) -> None:
    requests: list[httpx.Request] = []
    client, clock, notices = api(flaky([lost()], requests))
    with pytest.raises(c.ApiUnreachable) as info:
        client.request(method, "runs/1/cancel/", json={})
    assert len(requests) == 1 and clock.sleeps == [] and notices == []
    assert info.value.exit_code == c.EXIT_UNREACHABLE == 3
    assert "not retried: the request may or may not have been handled" in str(info.value)


def test_a_write_without_a_key_is_not_repeated_after_a_502_either() -> None:
    requests: list[httpx.Request] = []
    client, _, _ = api(flaky([502], requests))
    assert client.request("POST", "runs/1/cancel/").status_code == 502
    assert len(requests) == 1


def test_a_refused_write_after_the_server_was_reached_says_it_was_not_sent() -> None:
    requests: list[httpx.Request] = []
    client, _, _ = api(flaky([refused()], requests))
    client.reached = True
    with pytest.raises(c.ApiUnreachable, match="not retried: the request was not sent"):
        client.request("POST", "runs/1/cancel/")


def test_the_retry_budget_is_bounded_and_ends_in_one_line() -> None:
    requests: list[httpx.Request] = []
    client, clock, notices = api(flaky([lost()] + [refused()] * 1000, requests), retry_for=10)
    with pytest.raises(c.ApiUnreachable) as info:
        client.json("GET", "runs/7/")
    message = str(info.value)
    assert "\n" not in message and "gave up after retrying GET runs/7/ for 10s" in message
    assert clock.now <= 10 and sum(clock.sleeps) <= 10 and len(requests) == len(clock.sleeps) + 1
    assert len(notices) == 1


def test_a_server_that_never_answered_is_not_waited_for() -> None:
    requests: list[httpx.Request] = []
    client, clock, _ = api(flaky([refused()] * 5, requests))
    with pytest.raises(c.CliError) as info:
        client.json("GET", "runs/")
    assert not isinstance(info.value, c.ApiUnreachable) and info.value.exit_code == 2
    assert str(info.value).startswith("cannot reach the srbench API")
    assert len(requests) == 1 and clock.sleeps == []


def test_in_process_and_zero_budget_never_retry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SRBENCH_RETRY_SECONDS", "0")
    assert c.ApiClient(url="http://x", token="t").retry_for == 0
    monkeypatch.setenv("SRBENCH_RETRY_SECONDS", "soon")
    with pytest.raises(c.CliError, match="SRBENCH_RETRY_SECONDS must be a number"):
        c.ApiClient(url="http://x", token="t")
    monkeypatch.delenv("SRBENCH_RETRY_SECONDS")
    assert c.ApiClient(url="http://x", token="t").retry_for == c.RETRY_SECONDS
    requests: list[httpx.Request] = []
    client, _, _ = api(flaky([lost()], requests), retry_for=0)
    with pytest.raises(c.ApiUnreachable):
        client.json("GET", "runs/")
    assert len(requests) == 1


@pytest.mark.parametrize(
    ("method", "headers", "expected"),
    [
        ("GET", None, True),
        ("get", {}, True),
        ("HEAD", None, True),
        ("POST", {"Idempotency-Key": "k"}, True),
        ("POST", {"idempotency-key": "k"}, True),
        ("POST", {"Idempotency-Key": ""}, False),
        ("POST", None, False),
        ("PUT", {"Idempotency-Key": "k"}, False),
        ("PATCH", {"Idempotency-Key": "k"}, False),
        ("DELETE", {"Idempotency-Key": "k"}, False),
    ],
)
def test_what_is_repeatable(method: str, headers: dict | None, expected: bool) -> None:
    assert c.is_repeatable(method, headers) is expected
