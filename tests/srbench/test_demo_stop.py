"""How `make demo` stops on Ctrl-C (srbench.cli.local.stop_children): the worker first, and
waited for, so that its calls in flight never meet a simulator already gone (a false transport
failure of the target, and a run failed by its fail-closed policy); a worker that does not stop
within its bound is killed; then the web and the simulator; the database last, with this
process. Real processes: each child below notes, with the machine's monotonic clock, when a
stop signal reached it and when it exited."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from srbench.cli.local import stop_children

ROOT = Path(__file__).resolve().parents[2]

# A child of the demo as far as stopping goes. "warm": a Celery worker's warm shutdown, which
# goes on for seconds after SIGTERM; "quick": exits at the signal; "hang": ignores it.
CHILD = r"""
import signal, sys, time
log, name, mode = sys.argv[1], sys.argv[2], sys.argv[3]

def note(what):
    with open(log, "a") as f:
        f.write(f"{time.monotonic()} {name} {what}\n")

def on_signal(signum, frame):
    note("signalled")
    if mode == "hang":
        return
    if mode == "warm":
        time.sleep(3)
    note("exited")
    sys.exit(0)

signal.signal(signal.SIGTERM, on_signal)
signal.signal(signal.SIGINT, on_signal)
note("ready")
while True:
    time.sleep(0.1)
"""


def start(log: Path, modes: dict[str, str]) -> dict[str, subprocess.Popen[bytes]]:
    children = {
        name: subprocess.Popen(
            [sys.executable, "-c", CHILD, str(log), name, mode], start_new_session=True
        )
        for name, mode in modes.items()
    }
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(notes(log, "ready")) < len(children):
        time.sleep(0.1)
    assert len(notes(log, "ready")) == len(children), log.read_text()
    return children


def notes(log: Path, what: str) -> dict[str, float]:
    out = {}
    for line in log.read_text().splitlines() if log.exists() else []:
        at, name, event = line.split()
        if event == what:
            out[name] = float(at)
    return out


def test_the_worker_stops_before_the_simulator_and_the_web(tmp_path: Path) -> None:
    log = tmp_path / "events"
    children = start(log, {"simulator": "quick", "worker": "warm", "web": "quick"})
    stop_children(children)
    assert all(p.returncode == 0 for p in children.values()), log.read_text()
    signalled, exited = notes(log, "signalled"), notes(log, "exited")
    # The simulator and the web are told to stop only once the worker has exited.
    assert signalled["simulator"] >= exited["worker"], log.read_text()
    assert signalled["web"] >= exited["worker"], log.read_text()


def test_a_worker_that_does_not_stop_is_killed_after_its_bound_and_the_rest_stop(
    tmp_path: Path,
) -> None:
    log = tmp_path / "events"
    children = start(log, {"simulator": "quick", "worker": "hang", "web": "quick"})
    try:
        stop_children(children, worker_grace=2.0)
    finally:
        for process in children.values():
            if process.poll() is None:
                os.killpg(process.pid, 9)
                process.wait()
    assert children["worker"].returncode == -9, log.read_text()
    assert children["simulator"].returncode == 0 and children["web"].returncode == 0
    signalled = notes(log, "signalled")
    # The simulator outlived the worker's bound: told to stop only after it.
    assert signalled["simulator"] - signalled["worker"] >= 1.0, log.read_text()
