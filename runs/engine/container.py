"""Which container engine runs Terminal-Bench's official tasks, and the command lines it is
given (issue 37 item 5).

An official task (not ``local_compatible``) names its own image. Where ``docker`` or ``podman``
answers ``<engine> info`` (exit 0 within :data:`INFO_TIMEOUT_S`), such a task runs in that image
(:mod:`runs.engine.container_session`); where none answers it stays "not run" with the reason
(runs/engine/runnable_here.py), as before. ``SRBENCH_CONTAINER_ENGINE`` may name one engine (``docker`` or
``podman``) or switch them off (``none``).

Every container gets the host-side guarantees of the bubblewrap path
(runs/engine/sandbox_command.py): no network (``--network none``), no capabilities and no new
privileges, memory (swap included), process, file-size and CPU limits from the same
:class:`SandboxLimits`, a size-capped ``/tmp``, the hidden tests only in the verifier's container
and read-only there. Output is capped by the host reading it (container_session). The argv
builders here are pure so that what a container is allowed can be checked without an engine.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from runs.engine.sandbox_command import SandboxLimits, disk_budget_bytes

__all__ = [
    "ENGINES",
    "ENGINE_ENV",
    "Engine",
    "EngineChoice",
    "Mount",
    "choose_engine",
    "confinement_args",
    "container_engine",
    "exec_argv",
    "run_argv",
]

ENGINES = ("docker", "podman")
ENGINE_ENV = "SRBENCH_CONTAINER_ENGINE"
INFO_TIMEOUT_S = 20.0
# How long an answer (or a refusal) of `<engine> info` is believed: a plan freeze checks every
# Terminal-Bench task, and an engine started or stopped later is noticed within this.
CHOICE_TTL_S = 60.0
_REASON_CHARS = 200


@dataclass(frozen=True, slots=True)
class Engine:
    name: str  # "docker" or "podman"
    path: str  # the executable that answered


@dataclass(frozen=True, slots=True)
class EngineChoice:
    """The engine that answered, or None and why none did (each one tried, what it said)."""

    engine: Engine | None
    reason: str


@dataclass(frozen=True, slots=True)
class Mount:
    host: Path
    inside: str
    read_only: bool


def _last_line(data: bytes) -> str:
    lines = [line for line in data.decode("utf-8", "replace").splitlines() if line.strip()]
    return lines[-1].strip()[:_REASON_CHARS] if lines else "no output"


def _answers(name: str, path: str, timeout_s: float) -> str | None:
    """None when ``<engine> info`` exits 0 within the timeout, else what went wrong."""
    try:
        proc = subprocess.run(
            [path, "info"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"`{name} info` did not answer within {timeout_s:g} s"
    except OSError as exc:
        return f"`{name} info` could not start ({type(exc).__name__}: {exc.strerror or exc})"
    if proc.returncode == 0:
        return None
    return f"`{name} info` exited {proc.returncode}: {_last_line(proc.stderr or proc.stdout)}"


def choose_engine(
    *,
    search_path: str | None = None,
    environ: Mapping[str, str] | None = None,
    timeout_s: float = INFO_TIMEOUT_S,
) -> EngineChoice:
    """The first of docker, podman (or only the one ``SRBENCH_CONTAINER_ENGINE`` names) found on
    ``search_path`` (default: PATH) whose ``info`` succeeds. Never raises."""
    environ = os.environ if environ is None else environ
    wanted = environ.get(ENGINE_ENV, "").strip().lower()
    if wanted == "none":
        return EngineChoice(None, f"container engines are switched off ({ENGINE_ENV}=none)")
    if wanted and wanted not in ENGINES:
        return EngineChoice(None, f"{ENGINE_ENV}={wanted!r} is not one of docker, podman, none")
    if search_path is None:
        search_path = environ.get("PATH", os.defpath)
    tried = []
    for name in (wanted,) if wanted else ENGINES:
        path = shutil.which(name, path=search_path)
        if path is None:
            tried.append(f"{name}: not found")
            continue
        problem = _answers(name, path, timeout_s)
        if problem is None:
            return EngineChoice(Engine(name, path), f"`{name} info` answered")
        tried.append(f"{name}: {problem}")
    return EngineChoice(None, "; ".join(tried))


_cache_lock = threading.Lock()
_cached: tuple[float, tuple[str, str], EngineChoice] | None = None


def container_engine(*, fresh: bool = False) -> EngineChoice:
    """:func:`choose_engine` for this process's PATH and environment, believed for
    :data:`CHOICE_TTL_S` (a changed PATH or ``SRBENCH_CONTAINER_ENGINE`` asks again)."""
    global _cached
    key = (os.environ.get("PATH", ""), os.environ.get(ENGINE_ENV, ""))
    with _cache_lock:
        now = time.monotonic()
        if not fresh and _cached is not None:
            at, cached_key, choice = _cached
            if cached_key == key and now - at < CHOICE_TTL_S:
                return choice
        choice = choose_engine()
        _cached = (time.monotonic(), key, choice)
        return choice


# --------------------------------------------------------------------------------------------
# Command lines


def confinement_args(limits: SandboxLimits) -> list[str]:
    """What every container of a task is allowed: the bubblewrap path's guarantees in the
    engine's own words. CPU time is a hard ulimit (as prlimit sets it for the sandbox), one CPU
    at a time, memory with swap equal to memory (no swap on top), the process count, the
    largest file, no core dumps, a ``/tmp`` of the disk budget."""
    cpu = max(1, math.ceil(limits.cpu_s))
    return [
        "--network",
        "none",
        "--cap-drop",
        "ALL",
        "--security-opt",
        "no-new-privileges",
        "--memory",
        f"{limits.memory_bytes}b",
        "--memory-swap",
        f"{limits.memory_bytes}b",
        "--pids-limit",
        str(limits.max_processes),
        "--cpus",
        "1",
        "--ulimit",
        f"cpu={cpu}:{cpu}",
        "--ulimit",
        f"fsize={limits.file_size_bytes}:{limits.file_size_bytes}",
        "--ulimit",
        f"nofile={limits.open_files}:{limits.open_files}",
        "--ulimit",
        "core=0:0",
        "--tmpfs",
        f"/tmp:rw,nosuid,nodev,size={disk_budget_bytes(limits)}",
    ]


def _mount_args(mounts: Sequence[Mount]) -> list[str]:
    out = []
    for m in mounts:
        if "," in str(m.host) or "," in m.inside:
            raise ValueError(f"a mount path may not contain a comma: {m.host} -> {m.inside}")
        spec = f"type=bind,source={m.host},target={m.inside}"
        out += ["--mount", spec + (",readonly" if m.read_only else "")]
    return out


def run_argv(
    engine: Engine,
    image: str,
    argv: Sequence[str],
    *,
    name: str,
    limits: SandboxLimits,
    workdir: str = "/app",
    mounts: Sequence[Mount] = (),
    env: Mapping[str, str] | None = None,
    detach: bool = False,
) -> list[str]:
    """``<engine> run`` of ``argv`` in ``image``: never pulls (the session pulls first, outside
    any container), never keeps the container when it is not detached, confined by
    :func:`confinement_args`. ``--entrypoint`` is reset so the image's own cannot run first."""
    args = [engine.path, "run", "--name", name, "--pull", "never", "--entrypoint", ""]
    args += ["--detach"] if detach else ["--rm"]
    args += confinement_args(limits)
    args += ["--workdir", workdir]
    for key, value in sorted((env or {}).items()):
        args += ["--env", f"{key}={value}"]
    args += _mount_args(mounts)
    return [*args, image, *argv]


def exec_argv(
    engine: Engine, name: str, command: str, *, timeout_s: float, workdir: str = "/app"
) -> list[str]:
    """One agent command in the session's container: a fresh ``bash -c`` in ``workdir``, killed
    inside the container by coreutils ``timeout`` (the host also kills the client when the time
    is up, but a killed client does not stop what runs in the container)."""
    seconds = f"{max(timeout_s, 0.001):g}"
    return [
        engine.path,
        "exec",
        "--workdir",
        workdir,
        name,
        "timeout",
        "--kill-after=2",
        seconds,
        "bash",
        "-c",
        command,
    ]
