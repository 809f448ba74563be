"""One `make demo` per var dir.

Two demos in one checkout share its var dir: the embedded database, the filesystem broker and
the demo targets (`srbench.demo.demo_targets` points them at *its* simulator). A second demo
would re-point the first one's targets at its own simulator and leave them on a dead one when it
stops, and both workers would take tasks from one broker. So a demo holds an exclusive `flock`
on `var/demo.lock` for its whole life; a second one in the same var dir is refused at once,
before it touches anything, naming the demo that runs (its PID and URL). The kernel releases
the lock when the process ends, however it ends: no stale lock to clean up. The file's content
(PID, then URL once the portal answers) is for that message only; the lock is the flock.
A demo in another checkout (another var dir) has its own lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from pathlib import Path

LOCK_NAME = "demo.lock"


class DemoAlreadyRunning(RuntimeError):
    """Another demo holds this var dir; the message names it and what to do."""


class DemoLock:
    """The held lock of this demo (`acquire`); `release` or process exit frees it."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd
        self._holder: dict[str, object] = {"pid": os.getpid()}
        self._write()

    @classmethod
    def acquire(cls, var_dir: Path) -> DemoLock:
        """The lock of `var_dir`, at once, or DemoAlreadyRunning (nothing else is touched)."""
        var_dir.mkdir(parents=True, exist_ok=True)
        path = var_dir / LOCK_NAME
        # Not inherited by the demo's children (PEP 446): the lock dies with this process only.
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read(fd)
            os.close(fd)
            raise DemoAlreadyRunning(refusal(var_dir, holder)) from None
        return cls(path, fd)

    def announce(self, url: str) -> None:
        """Name the portal's URL for a second demo's refusal."""
        self._holder["url"] = url
        self._write()

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, 0)
            os.close(self._fd)  # closing the only descriptor releases the flock
            self._fd = None

    def _write(self) -> None:
        if self._fd is None:
            return
        data = (json.dumps(self._holder) + "\n").encode()
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, data, 0)


def _read(fd: int) -> dict[str, object]:
    try:
        holder = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        return {}
    return holder if isinstance(holder, dict) else {}


def refusal(var_dir: Path, holder: dict[str, object]) -> str:
    pid = holder.get("pid")
    url = holder.get("url")
    who = f"pid {pid}" if pid else "pid not yet recorded"
    where = f", portal {url}" if url else " (its portal is not up yet)"
    return (
        f"a demo is already running in this checkout ({who}{where}; var dir {var_dir}): "
        "use that one, or stop it (Ctrl-C in its terminal) and run make demo again. "
        "Two demos in one var dir would share its database, broker and demo targets."
    )
