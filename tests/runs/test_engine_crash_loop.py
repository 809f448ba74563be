"""A run whose driver raises on every start ends instead of being started for ever (an outside
probe: a run deadline of 1e20 s crashed the driver ten times, the run `running` with nothing
happening; runs/engine/driver.py CRASH_LIMIT). Each crash is an event naming the error; at the
third the run stops dispatching with the error and ends failed, its pending cells recoverable
as undispatched. The driver runs here as the worker runs it, on its own database threads."""

from __future__ import annotations

import asyncio

import pytest

from runs.engine.driver import CRASH_EVENT, CRASH_LIMIT, drive
from runs.models import Cell, Run, RunEvent
from tests import factories as f

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_driver_that_crashes_on_every_start_ends_its_run_at_the_limit():
    # A manifest without targets: run_begin raises KeyError on every start.
    run = f.run_create(manifest={"plan": "broken"}, status="queued")
    f.cell_create(run=run)
    for attempt in range(1, CRASH_LIMIT + 1):
        with pytest.raises(KeyError):
            asyncio.run(drive(run.pk))
        run.refresh_from_db()
        crashes = RunEvent.objects.filter(run=run, type=CRASH_EVENT)
        assert crashes.count() == attempt
        assert "KeyError" in crashes.last().payload["error"]
        if attempt < CRASH_LIMIT:
            assert run.status == "running" and run.stop_reason == ""
    assert run.status == "failed", run.status
    assert f"crashed {CRASH_LIMIT} times" in run.stop_reason and "KeyError" in run.stop_reason
    assert Cell.objects.get(run=run).status == "pending"  # never sent: recoverable
    # A later start finds the run ended and does nothing, records nothing.
    assert asyncio.run(drive(run.pk)) is None
    assert RunEvent.objects.filter(run=run, type=CRASH_EVENT).count() == CRASH_LIMIT
    assert Run.objects.get(pk=run.pk).status == "failed"
