"""The driver's database thread closes its own connection when the run is done (a worker
drives many runs; a connection left open per run would leak, and the close used to fail
Django's thread check after every run, marking each `run_drive` task as failed)."""

from __future__ import annotations

import asyncio
import threading

import pytest
from django.db import connection, connections

from runs.engine.group_commit import DbThread

pytestmark = pytest.mark.django_db


def test_the_db_thread_closes_its_own_connection_without_error() -> None:
    seen: dict[str, object] = {}

    def driver_thread() -> None:  # as in a worker: asyncio.run in a thread of its own
        async def main() -> None:
            db = DbThread()
            try:
                seen["wrapper"] = await db(
                    lambda: (connection.ensure_connection(), connections["default"])[1]
                )
                seen["open"] = await db(lambda: connection.connection is not None)
                connections["default"]  # the loop's thread has a wrapper of its own, too
            finally:
                db.close()

        try:
            asyncio.run(main())
        except BaseException as exc:  # handed back to the test
            seen["error"] = exc

    thread = threading.Thread(target=driver_thread)
    thread.start()
    thread.join()
    assert "error" not in seen, seen.get("error")
    assert seen["open"] is True
    assert seen["wrapper"].connection is None  # type: ignore[attr-defined]
