"""The heartbeat renews a worker's leases every third of a lease, on time (R15, fencing): a
renewal that waited for the next whole-second tick after its due time left a 4 s lease only
1.7 s of slack for a loop lag or a queued write, and a busy CI machine's worker lost its cells
to its own reaper. Driven on a fake clock, so the figures are exact at any load."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from runs.engine import calls


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class Enough(Exception):
    pass


def heartbeat_times(monkeypatch: pytest.MonkeyPatch, lease_seconds: float) -> list[float]:
    """The fake-clock times of the first four renewals, counted from the heartbeat's start."""
    clock = Clock()
    monkeypatch.setattr(calls, "time", SimpleNamespace(monotonic=clock.monotonic))
    monkeypatch.setattr(calls.asyncio, "sleep", clock.sleep)
    start = clock.now
    renewed: list[float] = []

    async def leases_renew(seconds: float) -> None:
        assert seconds == lease_seconds
        renewed.append(round(clock.now - start, 6))
        if len(renewed) == 4:
            raise Enough

    async def dispatch_stopped() -> str:  # the run still dispatches (read each second)
        return ""

    holder = SimpleNamespace(
        side_db=None,
        activity={},
        leases_renew=leases_renew,
        stopping="",
        dispatch_stopped=dispatch_stopped,
    )
    with pytest.raises(Enough):
        asyncio.run(calls.Caller.checkpoints(holder, lease_seconds))  # type: ignore[arg-type]
    return renewed


def test_a_four_second_lease_is_renewed_every_third_of_it_not_at_the_next_whole_second(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    third = 4.0 / 3
    assert heartbeat_times(monkeypatch, 4.0) == [round(third * k, 6) for k in (1, 2, 3, 4)]


def test_a_sixty_second_lease_is_renewed_every_twenty_seconds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert heartbeat_times(monkeypatch, 60.0) == [20.0, 40.0, 60.0, 80.0]
