"""A Terminal-Bench official task in its own image (issue 37 item 5): the same session interface
as the bubblewrap path (runs/engine/terminal.py: ``run_command``, ``verify``, ``close``), run by
the container engine :func:`runs.engine.container.container_engine` chose.

- Start: the task's image is pulled if missing (by the engine, outside any container), then one
  detached container per attempt, confined (runs/engine/container.py) and idle (``sleep``).
- Each command: ``<engine> exec`` of a fresh ``bash -c`` in ``/app``, killed by ``timeout`` inside
  and by the host at the deadline; stdout and stderr read by the host together, capped at
  ``output_bytes`` (the sandbox's own pipe reader, runs/engine/sandbox_pipes.py).
- Verify: the agent's container is committed to a throwaway image and removed (nothing it
  started survives), and the task's test command runs in a new container from that image with
  the hidden tests bind-mounted read-only at ``/tests`` — a host directory written only now,
  never visible to the agent — and ``/logs`` a fresh host directory. The reward file is read
  from there without following a link, regular files only, at most 4 KiB.
- Close: both containers and the throwaway image are removed.
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from runs.engine.container import Engine, Mount, container_engine, exec_argv, run_argv
from runs.engine.sandbox_command import SandboxLimits
from runs.engine.sandbox_files import fresh_directory, write_sandbox_files
from runs.engine.sandbox_pipes import OutputPipes
from runs.engine.terminal import (
    DEFAULT_VERIFIER_TIMEOUT_S,
    LOGS_INSIDE,
    REWARD_FILE,
    REWARD_MAX_BYTES,
    TESTS_INSIDE,
    UNRUNNABLE_EXIT,
    TerminalTaskError,
    hidden_test_files,
    limit_note,
    output_tail,
    reward_grade,
    unrunnable,
)

__all__ = ["ContainerRun", "ContainerSession", "container_session_start", "run_capped"]

PULL_TIMEOUT_S = 1800.0
CONTROL_TIMEOUT_S = 120.0  # commit, rm, rmi, image inspect
# The host's margin over the in-container timeout before it kills the client itself.
HOST_GRACE_S = 10.0


class ContainerError(RuntimeError):
    """The engine refused a step the session needs (pull, start, commit)."""


@dataclass(frozen=True, slots=True)
class ContainerRun:
    exit_code: int | None  # None: killed by the host
    stdout: bytes
    stderr: bytes
    reason: str  # "ok", "timeout", "output_cap"


def run_capped(argv: Sequence[str], *, timeout_s: float, output_bytes: int) -> ContainerRun:
    """Run an engine client with stdout and stderr read together, capped at ``output_bytes``
    (what is kept never exceeds it); killed at the deadline or when the cap is passed."""
    proc = subprocess.Popen(
        list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stderr is not None
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    pipes = OutputPipes(output_bytes)
    pipes.add(out_fd)
    pipes.add(err_fd)
    capped = False

    def on_cap() -> None:
        nonlocal capped
        capped = True
        proc.kill()

    try:
        stopped = pipes.read(time.monotonic() + timeout_s, (out_fd, err_fd), on_cap)
        if stopped is not None:
            proc.kill()
        code = proc.wait()
    finally:
        pipes.close()
        proc.stdout.close()
        proc.stderr.close()
    reason = "output_cap" if capped else ("timeout" if stopped else "ok")
    return ContainerRun(
        None if reason != "ok" else code, pipes.data(out_fd), pipes.data(err_fd), reason
    )


def _control(argv: Sequence[str], what: str, *, timeout_s: float = CONTROL_TIMEOUT_S) -> bytes:
    result = run_capped(argv, timeout_s=timeout_s, output_bytes=64 * 1024)
    if result.exit_code != 0:
        tail = (result.stderr or result.stdout).decode("utf-8", "replace").strip()[-300:]
        raise ContainerError(f"{what} failed ({result.reason}, exit {result.exit_code}): {tail}")
    return result.stdout


def read_reward(logs_dir: Path, relative: str, max_bytes: int) -> bytes | None:
    """The reward file under ``logs_dir`` (written by the verifier's container): every path
    component opened without following a link, a regular file only, at most ``max_bytes``."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    parts = [p for p in relative.split("/") if p]
    fds: list[int] = []
    try:
        fds.append(os.open(logs_dir, flags | os.O_DIRECTORY))
        for part in parts[:-1]:
            fds.append(os.open(part, flags | os.O_DIRECTORY, dir_fd=fds[-1]))
        fds.append(os.open(parts[-1], flags | os.O_NONBLOCK, dir_fd=fds[-1]))
        if not stat.S_ISREG(os.fstat(fds[-1]).st_mode):
            return None
        return os.read(fds[-1], max_bytes)
    except OSError:
        return None
    finally:
        for fd in fds:
            os.close(fd)


@dataclass
class ContainerSession:
    """One task attempt in its own image. Not thread-safe; `close()` removes what it made."""

    task_id: str
    engine: Engine
    image: str
    name: str
    secret: dict[str, Any]
    verifier_timeout_s: float
    limits: SandboxLimits
    commands_run: int = field(default=0)
    # The container path has no disk budget of its own beyond /tmp (docs/decisions.md): never set.
    disk_quota_exceeded: bool = field(default=False)
    _verify_image: str | None = field(default=None)

    def __enter__(self) -> ContainerSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for argv in (
            [self.engine.path, "rm", "--force", self.name],
            [self.engine.path, "rm", "--force", f"{self.name}-verify"],
        ):
            subprocess.run(argv, capture_output=True, timeout=CONTROL_TIMEOUT_S, check=False)
        if self._verify_image is not None:
            subprocess.run(
                [self.engine.path, "rmi", "--force", self._verify_image],
                capture_output=True,
                timeout=CONTROL_TIMEOUT_S,
                check=False,
            )
            self._verify_image = None

    def run_command(self, cmd: str, timeout: float) -> tuple[int, str, str]:
        """(exit code, stdout tail, stderr tail), as TerminalSession.run_command says them."""
        self.commands_run += 1
        if (refused := unrunnable(cmd)) is not None:
            return UNRUNNABLE_EXIT, "", refused
        argv = exec_argv(self.engine, self.name, cmd, timeout_s=timeout)
        result = run_capped(
            argv, timeout_s=timeout + HOST_GRACE_S, output_bytes=self.limits.output_bytes
        )
        exit_code = result.exit_code
        if exit_code is None:
            exit_code = 124 if result.reason == "timeout" else 137
        elif exit_code == 124:
            result = replace(result, reason="timeout")  # coreutils timeout inside
        note = limit_note(result.reason, timeout)
        return exit_code, output_tail(result.stdout), output_tail(result.stderr) + note

    def verify(self) -> tuple[int, dict[str, Any]]:
        """The task's tests in a fresh container from the agent's final state (see the module
        docstring); the reward as TerminalSession.verify reads it."""
        self._verify_image = f"srbench-verify/{self.name}:latest"
        _control([self.engine.path, "commit", self.name, self._verify_image], "commit")
        _control([self.engine.path, "rm", "--force", self.name], "removing the agent's container")
        tests_dir = fresh_directory("srbench-container-tests-")
        logs_dir = fresh_directory("srbench-container-logs-")
        try:
            write_sandbox_files(tests_dir, hidden_test_files(self.secret), uid=None)
            (logs_dir / "verifier").mkdir()
            limits = replace(
                self.limits, wall_s=self.verifier_timeout_s, cpu_s=self.verifier_timeout_s
            )
            argv = run_argv(
                self.engine,
                self._verify_image,
                ["timeout", "--kill-after=2", f"{self.verifier_timeout_s:g}"]
                + ["bash", "-c", self.secret["test_command"]],
                name=f"{self.name}-verify",
                limits=limits,
                mounts=[
                    Mount(tests_dir, TESTS_INSIDE, read_only=True),
                    Mount(logs_dir, LOGS_INSIDE, read_only=False),
                ],
                env={"TEST_DIR": TESTS_INSIDE},
            )
            result = run_capped(
                argv,
                timeout_s=self.verifier_timeout_s + HOST_GRACE_S,
                output_bytes=limits.output_bytes,
            )
            reward = read_reward(logs_dir, REWARD_FILE, REWARD_MAX_BYTES)
        finally:
            shutil.rmtree(tests_dir, ignore_errors=True)
            shutil.rmtree(logs_dir, ignore_errors=True)
        return reward_grade(
            self.secret["test_command"],
            reward,
            reason=result.reason,
            exit_code=result.exit_code,
            output=result.stdout + result.stderr,
            commands_run=self.commands_run,
            runner=f"container ({self.engine.name})",
        )


def container_session_start(
    task_payload: dict[str, Any], secret: dict[str, Any], *, limits: SandboxLimits
) -> ContainerSession:
    """Pull the task's image if missing and start its idle, confined container. Raises
    TerminalTaskError when the task names no image or no engine answers on this worker, and
    ContainerError when the engine refuses a step."""
    image = (task_payload.get("environment") or {}).get("docker_image")
    if not isinstance(image, str) or not image:
        raise TerminalTaskError("the task names no image (only prebuilt images are run)")
    choice = container_engine()
    if choice.engine is None:
        raise TerminalTaskError(f"no container engine answers on this worker: {choice.reason}")
    engine = choice.engine
    inspect = [engine.path, "image", "inspect", image]
    if subprocess.run(inspect, capture_output=True, timeout=60, check=False).returncode != 0:
        _control([engine.path, "pull", image], f"pulling {image}", timeout_s=PULL_TIMEOUT_S)
    name = f"srbench-tb-{secrets.token_hex(8)}"
    _control(
        run_argv(engine, image, ["sleep", "infinity"], name=name, limits=limits, detach=True),
        f"starting {image}",
    )
    return ContainerSession(
        task_id=str(task_payload["task_id"]),
        engine=engine,
        image=image,
        name=name,
        secret=secret,
        verifier_timeout_s=float(task_payload.get("verifier_timeout_sec") or 0)
        or DEFAULT_VERIFIER_TIMEOUT_S,
        limits=limits,
    )
