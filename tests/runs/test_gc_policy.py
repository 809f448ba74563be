"""The worker's garbage-collector policy (issue 38 item 2; runs/engine/gc_policy.py), checked in a
fresh interpreter so this suite's own process is left as it was."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import gc, json, os
from runs.engine import gc_policy
before = gc.get_threshold()
first = gc_policy.worker_gc_policy()
frozen = gc.get_freeze_count()
second = gc_policy.worker_gc_policy()
cycle = []
cycle.append(cycle)
del cycle
collected = gc.collect()
pid = os.fork()
if pid == 0:
    os._exit(0 if gc_policy.worker_gc_policy() else 3)
_, status = os.waitpid(pid, 0)
print(json.dumps({
    "before": before, "after": gc.get_threshold(), "first": first, "second": second,
    "frozen": frozen, "frozen_after": gc.get_freeze_count(), "collected": collected,
    "child_status": status,
}))
"""


def test_the_policy_freezes_what_the_process_holds_once_and_sets_the_thresholds() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, check=True
    )
    seen = json.loads(out.stdout)
    assert seen["before"] == [700, 10, 10]  # CPython's default: the probe starts from it
    assert seen["after"] == [20_000, 10, 10]
    assert seen["first"] is True and seen["second"] is False  # once per process
    assert seen["frozen"] > 1_000  # the interpreter's and the imports' objects
    assert seen["frozen_after"] == seen["frozen"]  # the second call froze nothing more
    assert seen["collected"] >= 1  # cyclic garbage made after the freeze is still collected
    assert seen["child_status"] == 0  # a forked child (a prefork worker) applies its own


def test_the_drive_task_applies_the_policy_before_the_run() -> None:
    import inspect

    from runs import tasks

    source = inspect.getsource(tasks.run_drive)
    assert source.index("worker_gc_policy()") < source.index("asyncio.run(drive(run_id))")
