"""`run_followed(…, until=…)` (runs/interfaces/follow.py): a follower with a deadline, as the
re-judge command's `--wait` uses it, returns the run still going once the deadline has passed —
and not before; no database, a scripted API."""

from __future__ import annotations

import time
from typing import Any

from runs.interfaces.follow import run_followed


class ScriptedApi:
    """The two reads a follower makes: the events long poll (held `wait` seconds, as a server
    with the push does) and the run, always still running."""

    def __init__(self) -> None:
        self.requests: list[str] = []

    def json(self, method: str, path: str, params: dict[str, Any] | None = None) -> Any:
        self.requests.append(path)
        if path.endswith("/events/"):
            wait = float((params or {})["wait"])
            time.sleep(wait)
            return {"results": [], "next_after": None, "waited": wait}
        return {"id": 7, "status": "running"}


def test_a_deadline_already_passed_returns_the_run_without_a_request() -> None:
    api = ScriptedApi()
    run = run_followed(
        api,  # type: ignore[arg-type]
        {"id": 7, "status": "running"},
        poll=0.05,
        seen=lambda _r: None,
        say=lambda _l: None,
        until=time.monotonic() - 1,
    )
    assert run["status"] == "running" and api.requests == []


def test_the_follower_keeps_following_until_the_deadline_then_returns_the_run_going() -> None:
    api = ScriptedApi()
    said: list[str] = []
    started = time.monotonic()
    run = run_followed(
        api,  # type: ignore[arg-type]
        {"id": 7, "status": "running"},
        poll=0.05,
        seen=lambda _r: None,
        say=said.append,
        until=started + 0.3,
    )
    assert run["status"] == "running"
    assert time.monotonic() - started >= 0.3  # not before the deadline
    assert api.requests[0] == "runs/7/events/" and "runs/7/" in api.requests
    assert said == ["  following run 7: the server pushes its end"]
