"""A run's events as a long poll (issue 38 item 3): `GET /api/v1/runs/ID/events/?wait=S`.

The events cursor (`after`, `type`, `limit`, the Keyset page) is read by the one DRF action,
`RunViewSet.events`; this module only decides when to answer. With `wait`, a page that would
be empty is held until an event of the run commits or `wait` seconds pass (at most
MAX_WAIT_SECONDS), then read again: a client following a run learns of its end as it commits,
not at its next poll. The page carries `waited`, the seconds it was held; a server without this
module ignores `wait` and answers at once without `waited`, which tells a client to poll.

Waking: PostgreSQL's LISTEN/NOTIFY, the one service every installation has (the broker may be
the filesystem transport). `events_append` notifies the run's channel in the transaction that
appends its events, so a notification arrives only after they are visible. The waiting request
listens on a connection of its own in autocommit — never idle in a transaction — opened only
when the first read found nothing, and closed when it answers. The wait is async: under ASGI no
thread is held while it waits; the reads run in Django's sync context, as every view's.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from typing import Any

from asgiref.sync import sync_to_async
from django.db import connections
from django.http import HttpRequest, HttpResponse
from rest_framework.exceptions import ValidationError

from runs.ledger.events import events_channel

MAX_WAIT_SECONDS = 25.0  # below the usual 30 s idle timeout of a proxy in front of the web
WAIT_PARAM = "wait"
FALLBACK_READ_SECONDS = 0.5  # the wait's reads when no connection can LISTEN


def wait_param(query_params: Any) -> float | None:
    """`wait`: seconds to hold an empty page, 0..MAX_WAIT_SECONDS (more is held for the
    maximum); None when not asked. Not a number, or negative: 400 in the refusal shape."""
    raw = query_params.get(WAIT_PARAM)
    if raw in (None, ""):
        return None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise ValidationError({WAIT_PARAM: "must be a number of seconds, 0 or more"})
    return min(value, MAX_WAIT_SECONDS)


def _empty_page(response: Any) -> bool:
    data = getattr(response, "data", None)
    return response.status_code == 200 and isinstance(data, dict) and not data.get("results")


def _listen_params() -> dict[str, Any]:
    """The web's own database settings, for a connection of psycopg's own (no Django
    wrapper: it lives only while one request waits)."""
    params = connections["default"].get_connection_params()
    return {k: v for k, v in params.items() if isinstance(v, str | int) and not isinstance(v, bool)}


async def _notified(run_id: int, first_read: Callable[[], Any], seconds: float) -> Any:
    """LISTEN on the run's channel, read again (an event committed between the first read and
    LISTEN is seen here), then wait for a notification and read once more per notification
    until the page has rows or `seconds` pass. Returns the last response read."""
    import psycopg
    from psycopg import sql

    deadline = time.monotonic() + seconds
    try:
        conn = await psycopg.AsyncConnection.connect(autocommit=True, **_listen_params())
    except psycopg.OperationalError:
        # No connection to listen on (max_connections reached, say): the wait is kept by
        # reading every FALLBACK_READ_SECONDS instead, so a client never spins on empty pages.
        return await _polled(first_read, deadline)
    try:
        await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(events_channel(run_id))))
        response = await first_read()
        while _empty_page(response) and (left := deadline - time.monotonic()) > 0:
            woke = False
            async for _ in conn.notifies(timeout=left, stop_after=1):
                woke = True
            if not woke:
                break
            response = await first_read()
        return response
    finally:
        await conn.close()


async def _polled(read: Callable[[], Any], deadline: float) -> Any:
    response = await read()
    while _empty_page(response) and (left := deadline - time.monotonic()) > 0:
        await asyncio.sleep(min(left, FALLBACK_READ_SECONDS))
        response = await read()
    return response


def events_long_poll(view: Any) -> Callable[..., Any]:
    """`view` (the router's events view) behind the long poll. Without a valid `wait > 0` the
    view answers as it is (an invalid `wait` is its 400). The route walk of the schema test
    sees the view's methods; drf-spectacular documents the view once, through the router."""

    async def events(request: HttpRequest, pk: int) -> HttpResponse:
        read = sync_to_async(view)
        started = time.monotonic()
        try:
            wait = wait_param(request.GET)
        except ValidationError:
            wait = None  # the view refuses it, in the refusal shape
        response = await read(request, pk=str(pk))
        if wait and _empty_page(response):
            response = await _notified(pk, lambda: read(request, pk=str(pk)), wait)
        if wait is not None and response.status_code == 200 and isinstance(response.data, dict):
            response.data["waited"] = round(time.monotonic() - started, 3)
        return response

    events.cls = view.cls  # type: ignore[attr-defined]
    events.actions = view.actions  # type: ignore[attr-defined]
    events.initkwargs = {**view.initkwargs, "schema": None}  # type: ignore[attr-defined]
    events.csrf_exempt = True  # type: ignore[attr-defined]
    return events
