"""One `make demo` per var dir, and how a demo stops on Ctrl-C (srbench/demo_lock.py,
srbench/cli/local.py demo).

A second demo in the same var dir would re-point the shared demo targets at its own simulator
(and leave them on a dead one when it stops) and share the first one's broker: it is refused at
once, naming the demo that runs, touching nothing. Ctrl-C stops what was started, in order, with
one line and exit 130; the run it interrupts is left to recovery, never failed by calls sent to
a simulator stopped before the worker.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from srbench import embedded_pg
from srbench.demo_lock import LOCK_NAME, DemoLock
from tests.srbench.test_embedded_pg import ROOT, embedded_env

DEMO = [sys.executable, "manage.py", "benchmark", "demo", "--port", "0", "--simulator-port", "0"]
HOLDER = (
    "import sys, time; from pathlib import Path; from srbench.demo_lock import DemoLock; "
    "lock = DemoLock.acquire(Path(sys.argv[1])); lock.announce(sys.argv[2]); "
    "print('held', flush=True); time.sleep(600)"
)


@pytest.fixture
def var_dir(shared_dir: Path) -> Path:
    return shared_dir


def demo_env(var_dir: Path) -> dict[str, str]:
    return embedded_env(var_dir) | {"SRBENCH_VAR_DIR": str(var_dir)}


def second_demo(var_dir: Path) -> subprocess.CompletedProcess[str]:
    """Another `benchmark demo` in the same var dir, told to exit once ready."""
    return subprocess.run(
        [*DEMO, "--exit-after-ready"],
        cwd=ROOT,
        env=demo_env(var_dir),
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.mark.timeout(1200)
def test_a_second_demo_in_the_same_var_dir_is_refused_at_once_and_touches_nothing(
    var_dir: Path, tmp_path: Path
) -> None:
    url = "http://127.0.0.1:8123/"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(var_dir), url],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        second = second_demo(var_dir)
        assert second.returncode == 2, second.stdout + second.stderr
        assert "Traceback" not in second.stderr
        error = second.stderr.strip()
        assert error.startswith("error: a demo is already running in this checkout"), error
        assert f"pid {holder.pid}" in error and url in error, error
        assert second.stdout == ""
        # Nothing of the first demo's was touched: no database, no login, no logs, no data,
        # and the lock still names the first demo.
        for made in ("pg", ".pg.users", "demo-login.txt", "logs", "demo-data", "simulator.toml"):
            assert not (var_dir / made).exists(), made
        assert json.loads((var_dir / LOCK_NAME).read_text()) == {"pid": holder.pid, "url": url}
        # A demo of another checkout (another var dir) is not affected.
        other = DemoLock.acquire(tmp_path / "other-var")
        other.release()
    finally:
        holder.kill()
        holder.wait()
    # The kernel released the lock of the killed demo: no stale lock.
    again = DemoLock.acquire(var_dir)
    again.release()


class Demo:
    """`manage.py benchmark demo` on a var dir of its own, its output read on a thread."""

    def __init__(self, var_dir: Path) -> None:
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self.process = subprocess.Popen(
            DEMO,
            cwd=ROOT,
            env=demo_env(var_dir),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._queue.put(line)
        self._queue.put(None)

    def wait_for(self, pattern: str, timeout: float) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self._queue.get(timeout=1.0)
            except queue.Empty:
                continue
            assert line is not None, f"demo exited before {pattern!r}:\n{''.join(self.lines)}"
            self.lines.append(line)
            if match := re.search(pattern, line):
                return match
        raise AssertionError(f"no {pattern!r} in {timeout:.0f}s:\n{''.join(self.lines)}")

    def interrupt(self, timeout: float = 300) -> str:
        """Ctrl-C; the whole output once the demo has exited."""
        self.process.send_signal(signal.SIGINT)
        self.process.wait(timeout=timeout)
        while (line := self._queue.get(timeout=30)) is not None:
            self.lines.append(line)
        return "".join(self.lines)

    def kill(self) -> None:
        """After a failure: the demo and its children (each in a session of its own)."""
        if self.process.poll() is None:
            for child in children_of(self.process.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child, signal.SIGKILL)
            self.process.kill()
            self.process.wait()


def children_of(pid: int) -> list[int]:
    """The processes whose parent is `pid` (the demo's simulator, worker and web)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                stat = (entry / "stat").read_text()
                if int(stat[stat.rfind(")") + 2 :].split()[1]) == pid:
                    found.append(int(entry.name))
    return found


@pytest.mark.timeout(1500)
def test_ctrl_c_while_the_demo_prepares_its_data_says_so_in_one_line(var_dir: Path) -> None:
    demo = Demo(var_dir)
    try:
        demo.wait_for(r"^preparing the demo datasets", 900)
        # The demo holds its var dir's lock from its start.
        with open(var_dir / LOCK_NAME) as lock, pytest.raises(BlockingIOError):
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        printed = demo.interrupt()
    finally:
        demo.kill()
    assert demo.process.returncode == 130, printed
    assert "Traceback" not in printed and "KeyboardInterrupt" not in printed, printed
    assert printed.rstrip().splitlines()[-1] == "demo stopped", printed
    assert not embedded_pg.is_running(var_dir / "pg")


CALLS = (
    "import django, json; django.setup(); from runs.models import Call, Run; print(json.dumps({"
    "'runs': sorted(Run.objects.values_list('status', flat=True)), "
    "'transport': Call.objects.filter(error_code='connect_error').count(), "
    "'calls': Call.objects.count()}))"
)


@pytest.mark.timeout(2400)
def test_ctrl_c_during_the_evaluation_fails_no_run_and_blames_no_target(var_dir: Path) -> None:
    """The worker is stopped first, so none of its calls meets a stopped simulator: no call
    ends as a transport failure and no run as failed; what was running is left to recovery."""
    demo = Demo(var_dir)
    try:
        demo.wait_for(r"^headline run started: run \d+", 1200)
        # A second demo while this one runs is refused, naming it and its portal.
        url = re.search(r"srbench is running at (\S+)", "".join(demo.lines)).group(1)
        second = second_demo(var_dir)
        assert second.returncode == 2, second.stdout + second.stderr
        assert f"pid {demo.process.pid}" in second.stderr and url in second.stderr
        time.sleep(2)  # calls in flight
        children = children_of(demo.process.pid)
        assert len(children) == 3, children
        printed = demo.interrupt()
    finally:
        demo.kill()
    assert demo.process.returncode == 130, printed
    assert printed.rstrip().splitlines()[-1] == "demo stopped", printed
    assert "Traceback" not in printed
    deadline = time.monotonic() + 120
    while any(Path(f"/proc/{pid}").exists() for pid in children) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not any(Path(f"/proc/{pid}").exists() for pid in children)
    assert not embedded_pg.is_running(var_dir / "pg")
    result = subprocess.run(
        [sys.executable, "-c", CALLS],
        cwd=ROOT,
        env=demo_env(var_dir),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout)
    assert found["calls"] > 0, found
    assert found["transport"] == 0, found
    assert "failed" not in found["runs"], found
