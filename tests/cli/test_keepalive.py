"""The CLI's remote client never writes a request on a connection the API server may be closing
(srbench.keepalive): a POST that is not repeatable, sent after the connection sat idle longer
than the server's idle timeout seen late, goes on a new connection and is answered — before, a
client reusing connections for httpx's default 5 s lost it ("the request may or may not have
been handled", exit 3) against uvicorn's 5 s or gunicorn's 2 s."""

from __future__ import annotations

import time

from srbench import api_client as c
from tests.runs.async_support import crossing_server, serving_in_thread


def test_a_write_after_an_idle_pause_is_not_lost_to_the_servers_idle_close() -> None:
    # gunicorn's 2 s keep-alive, its close seen half a second late.
    with serving_in_thread(crossing_server(1.5)) as url:
        client = c.ApiClient(url=url, token="t", retry_for=0)
        assert client.request("get", "runs/").text == "1"
        assert client.request("get", "runs/").text == "1"  # kept alive when fresh
        time.sleep(1.6)
        # Not repeatable (no Idempotency-Key): a lost connection would not be retried.
        assert not c.is_repeatable("POST", None)
        response = client.request("post", "runs/1/cancel/", json={})
        assert response.status_code == 200 and response.text == "2"
