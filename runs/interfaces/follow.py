"""How a command follows a run to its end (issue 38 item 3): pushed by the server, else polled.

A server with the events long poll (runs/interfaces/events_wait.py) holds `GET runs/ID/events/?type=
run.finished&wait=S` until the run's end commits, so the command learns of it at once instead
of at its next poll. Each answer — the end, or `wait` seconds without it — is followed by one
read of the run (its status and progress line), so progress still prints every `--poll`
seconds. A server that answers without `waited` predates the long poll: the command polls the
run as before (`RunFollower`), and asks no more. Imports nothing of Django (the console
script's remote path runs it).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from runs.vocabulary.run_states import TERMINAL_RUN_STATES
from srbench.api_client import ApiClient, RunFollower

# A run's end, as the run's events say it (runs.engine.finish appends it when the run ends).
RUN_END_EVENT = "run.finished"


class EndWaiter:
    """Waits for a run's end event by the long poll; `pushed` turns False against a server
    without it (then `wait` returns at once and the caller polls)."""

    def __init__(self, client: ApiClient, run_id: int, seconds: float) -> None:
        self.client, self.run_id, self.seconds = client, run_id, seconds
        self.after = 0
        self.pushed = True

    def wait(self) -> bool:
        """Hold until the run's end event is committed or `seconds` pass. True when the server
        pushed (whether the end came or not), False when it cannot."""
        if not self.pushed:
            return False
        page = self.client.json(
            "GET",
            f"runs/{self.run_id}/events/",
            params={
                "after": self.after,
                "type": RUN_END_EVENT,
                "limit": 1,
                "wait": f"{self.seconds:g}",
            },
        )
        if not isinstance(page, dict) or "waited" not in page:
            self.pushed = False  # an older server: it answered at once, without holding
            return False
        if page.get("next_after") is not None:
            self.after = page["next_after"]
        return True


def run_followed(
    client: ApiClient,
    run: dict[str, Any],
    *,
    poll: float,
    seen: Callable[[dict[str, Any]], None],
    say: Callable[[str], None],
    sleep: Callable[[float], None] = time.sleep,
    until: float | None = None,
) -> dict[str, Any]:
    """Follow `run` (the API's run document) until its status is terminal, or until the
    monotonic time `until` has passed (then the run returned is still going: the caller says
    so); `seen` is given every run document read, `say` one line on how the run is followed.
    Returns the last run document."""
    waiter = EndWaiter(client, run["id"], poll)
    follower = RunFollower(poll)
    told = False
    while run["status"] not in TERMINAL_RUN_STATES:
        if until is not None and time.monotonic() > until:
            return run
        pushed = waiter.wait()
        if not told:
            say(
                f"  following run {run['id']}: the server pushes its end"
                if pushed
                else f"  following run {run['id']} by polling (the server has no events push)"
            )
            told = True
        if not pushed:
            sleep(follower.wait(run))
        run = client.json("GET", f"runs/{run['id']}/")
        seen(run)
    return run
