"""A run's events as a long poll (issue 38 item 3): `?wait=S` answers at once when an event is
there, holds an empty page until an event commits on another connection (woken by PostgreSQL's
NOTIFY, the waiting connection idle outside any transaction), answers an empty page when `wait`
runs out, and keeps the refusal shape and the Keyset page."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest
from django.db import connection, transaction
from rest_framework.authtoken.models import Token

from runs.interfaces.events_wait import MAX_WAIT_SECONDS
from runs.ledger.events import events_append, events_channel
from tests import factories as f
from tests.conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def api(live_server):  # type: ignore[no-untyped-def]
    token, _ = Token.objects.get_or_create(user=f.user_create(username="poller", staff=True))
    with httpx.Client(
        base_url=f"{live_server.url}/api/v1/",
        headers={"Authorization": f"Token {token.key}"},
        timeout=60,
    ) as client:
        yield client


def append(run_id: int, kind: str = "test.tick") -> None:
    with transaction.atomic():
        events_append(run_id=run_id, events=[(kind, {})])


def listeners(run_id: int) -> list[tuple[str, str]]:
    """(state, query) of every backend whose last statement was LISTEN on the run's channel."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT state, query FROM pg_stat_activity WHERE query LIKE %s",
            [f'LISTEN "{events_channel(run_id)}"%'],
        )
        return cur.fetchall()


def test_an_event_already_there_is_answered_at_once(api) -> None:  # type: ignore[no-untyped-def]
    run = f.run_create()
    append(run.pk)
    response = api.get(f"runs/{run.pk}/events/", params={"after": 0, "wait": MAX_WAIT_SECONDS})
    assert response.status_code == 200
    page = response.json()
    assert [e["seq"] for e in page["results"]] == [1]
    assert page["next_after"] == 1 and page["loaded"] == 1
    # Answered from the first read: not held for the wait it was allowed.
    assert page["waited"] < MAX_WAIT_SECONDS
    assert listeners(run.pk) == []  # no LISTEN connection was opened for it


def test_an_empty_page_waits_for_an_event_committed_elsewhere(api) -> None:  # type: ignore[no-untyped-def]
    run = f.run_create()
    append(run.pk, "run.started")
    answer: dict[str, Any] = {}

    def long_poll() -> None:
        answer["response"] = api.get(
            f"runs/{run.pk}/events/",
            params={"after": 1, "wait": MAX_WAIT_SECONDS, "type": "run.finished"},
        )

    poller = threading.Thread(target=long_poll)
    poller.start()
    try:
        # The request is holding: its connection listens on the run's channel, idle and outside
        # any transaction; no backend of the database is idle in a transaction meanwhile.
        wait_until(lambda: bool(listeners(run.pk)), timeout=30)
        assert [state for state, _ in listeners(run.pk)] == ["idle"]
        with connection.cursor() as cur:
            cur.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND state LIKE 'idle in transaction%%'"
            )
            assert cur.fetchone() == (0,)
        # An event of another type wakes it, but the page stays empty: it keeps waiting.
        append(run.pk, "cell.completed")
        assert poller.is_alive()
        append(run.pk, "run.finished")  # another connection (this test's), committed
        poller.join(timeout=MAX_WAIT_SECONDS + 10)
        assert not poller.is_alive()
    finally:
        poller.join()
    response = answer["response"]
    assert response.status_code == 200
    page = response.json()
    assert [(e["seq"], e["type"]) for e in page["results"]] == [(3, "run.finished")]
    assert page["next_after"] == 3
    assert 0 < page["waited"] < MAX_WAIT_SECONDS
    wait_until(lambda: listeners(run.pk) == [], timeout=10)  # its connection is closed


def test_no_event_until_the_wait_ends_is_an_empty_page(api) -> None:  # type: ignore[no-untyped-def]
    run = f.run_create()
    append(run.pk)
    response = api.get(f"runs/{run.pk}/events/", params={"after": 1, "wait": "0.5"})
    assert response.status_code == 200
    page = response.json()
    assert page["results"] == [] and page["next_after"] is None and page["loaded"] == 0
    assert page["waited"] >= 0.5


def test_wait_keeps_the_refusal_shape_and_an_old_read_is_unchanged(api) -> None:  # type: ignore[no-untyped-def]
    run = f.run_create()
    for bad in ("soon", "-1", "nan", "inf"):
        response = api.get(f"runs/{run.pk}/events/", params={"wait": bad})
        assert response.status_code == 400, bad
        body = response.json()
        assert set(body) == {"error", "code", "detail"} and "wait" in body["detail"], body
    missing = api.get("runs/999999/events/", params={"wait": "1"})
    assert missing.status_code == 404 and set(missing.json()) == {"error", "code", "detail"}
    # Without `wait`, the page is what it always was: no `waited`.
    plain = api.get(f"runs/{run.pk}/events/").json()
    assert "waited" not in plain and plain["results"] == []
    # More than the maximum is held for the maximum, never refused.
    append(run.pk)
    assert api.get(f"runs/{run.pk}/events/", params={"wait": "3600"}).status_code == 200


def test_without_a_connection_to_listen_on_the_wait_reads_on_its_own(api, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # The listener's connection is refused (a port nothing listens on, as when PostgreSQL's
    # max_connections is reached): the request still holds for its wait, reading periodically,
    # and answers the event appended meanwhile — never an error, never an instant empty page.
    from runs.interfaces import events_wait

    real = events_wait._listen_params
    monkeypatch.setattr(events_wait, "_listen_params", lambda: {**real(), "port": 1})
    run = f.run_create()
    empty = api.get(f"runs/{run.pk}/events/", params={"wait": "1"}).json()
    assert empty["results"] == [] and empty["waited"] >= 1

    def append_elsewhere() -> None:
        try:
            append(run.pk)
        finally:
            connection.close()  # this thread's own connection

    appender = threading.Timer(0.3, append_elsewhere)
    appender.start()
    try:
        page = api.get(f"runs/{run.pk}/events/", params={"wait": MAX_WAIT_SECONDS}).json()
    finally:
        appender.join()
    assert [e["seq"] for e in page["results"]] == [1] and page["waited"] < MAX_WAIT_SECONDS
    assert listeners(run.pk) == []
