"""Run untrusted code (model-written programs, agent commands, task test scripts) in a sandbox
built from what Linux offers without a container engine: bubblewrap namespaces plus rlimits.

What one `sandbox_run` gives:

- **Filesystem**: a fresh mount namespace whose root is an empty tmpfs. Visible read-only: `/usr`
  (with the merged-usr `/bin`, `/lib*` symlinks), `/etc/ld.so.cache` and `/etc/alternatives`
  (the dynamic loader and Debian's `awk` etc. need them), the Python installation that runs this
  process and its virtualenv (mounted at `/opt/venv`, so the repository path never appears),
  plus any `ro_binds` the caller names (e.g. SciCode's HDF5 targets). Read-write: the working
  directory at `/app` (a fresh temp dir, or the caller's for a Terminal-Bench session) and a
  private size-limited tmpfs at `/tmp`. Nothing else of the host exists inside: not the repo,
  `/work`, `/root` (beyond the Python prefix, when Python lives there), the host `/tmp`, `/etc`
  or `/home`. Fresh `/proc` (own pid namespace) and a minimal `/dev`.
- **Network**: a new network namespace with only its own loopback; host loopback services and
  abstract unix sockets are unreachable.
- **Identity**: when the worker is root, the code runs as a fresh unprivileged uid (random per
  sandbox, or the owner of a session's directory) with no capabilities and no supplementary
  groups, via `setpriv` inside bubblewrap. A distinct uid matters because RLIMIT_NPROC is
  counted per uid and is not enforced for root at all. When the worker is not root, bubblewrap
  uses an unprivileged user namespace and the process budget is added to the user's current
  process count (the kernel counts all of that user's processes against the limit).
- **Limits**: CPU seconds (RLIMIT_CPU), address space (RLIMIT_AS), processes/threads
  (RLIMIT_NPROC), file size (RLIMIT_FSIZE), no core files, open files; wall time and combined
  stdout+stderr bytes are enforced here by reading the pipes with a deadline and a cap. On any
  limit the outer bubblewrap process group is SIGKILLed; bubblewrap's init in the pid namespace
  dies with its parent (`--die-with-parent`) and the kernel then kills every process left in that
  namespace, including ones that called setsid() or daemonised.
- **Host-side files**: the host writes only into directories no sandboxed code has seen
  (`fresh_directory`), opens every path component beneath a directory descriptor with
  `O_NOFOLLOW` (`write_sandbox_files`, `read_file_beneath`), never mounts anything under `/app`,
  and deletes with `shutil.rmtree`'s descriptor-based walk, which does not follow links. A
  symlink planted anywhere in the working directory can therefore not redirect a host write,
  read or delete (issue 19; docs/decisions.md "Sandbox host paths"). Those helpers live in
  `runs.engine.sandbox_files` and are re-exported here.
- **Environment**: cleared; only PATH, HOME, LANG, TMPDIR, single-thread BLAS settings and what
  the caller passes explicitly. No secret, DATABASE_URL or broker URL is inherited.

What it does **not** give:

- No seccomp filter and a shared kernel: a kernel exploit escapes. Nested user namespaces are not
  blocked when the worker is root.
- Memory is capped by address space, not resident memory; programs that map large sparse regions
  (some JITs, sanitizers) fail early. There is no cgroup memory or I/O accounting.
- Disk use in the working directory is bounded per file (RLIMIT_FSIZE), not in total.
- CPU time is per process; a multi-process program is bounded by wall time and the process cap.
- `/proc` still shows host-wide facts (CPU, memory, kernel version) and bubblewrap's own command
  line (host paths of the bind mounts, not their contents).
- The read-only runtime exposes the virtualenv's installed packages (code, no secrets).

A container backend (gVisor `runsc`, or Docker/Podman with `--network none` and a read-only
root) is the production option on hosts that have one; it would implement the same
`sandbox_run` contract.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal

from runs.engine.sandbox_files import (
    write_sandbox_files,
)

__all__ = [
    "SANDBOX_WORKDIR",
    "SandboxError",
    "SandboxLimits",
    "SandboxResult",
    "SandboxUnavailable",
    "sandbox_available",
    "sandbox_python",
    "sandbox_run",
]

Reason = Literal["ok", "timeout", "memory", "output_cap", "file_size", "crash", "signal"]

SANDBOX_WORKDIR = "/app"
SANDBOX_VENV = "/opt/venv"
# Random uids for sandboxed code come from a range no real account uses, so a sandbox can never
# signal or share the process budget of a host user (or of another sandbox).
UID_LOW, UID_HIGH = 1_000_000_000, 1_999_999_999
CRASH_SIGNALS = {signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE, signal.SIGABRT}
_MEMORY_ERROR = re.compile(rb"\bMemoryError\b|Cannot allocate memory|std::bad_alloc|out of memory")
_FILE_TOO_LARGE = re.compile(rb"File too large")
_TIMES_FIELD = re.compile(r"(?P<m>\d+)m(?P<s>\d+(?:\.\d+)?)s")
_READ_CHUNK = 65536


class SandboxUnavailable(RuntimeError):
    """bubblewrap (or setpriv/prlimit) is missing; run scripts/ensure_sandbox.sh."""


class SandboxError(RuntimeError):
    """The sandbox itself failed to start (a host problem, never the sandboxed code's fault)."""


@dataclass(frozen=True)
class SandboxLimits:
    wall_s: float = 10.0
    cpu_s: float = 10.0
    memory_bytes: int = 1024 * 1024 * 1024
    max_processes: int = 64
    file_size_bytes: int = 16 * 1024 * 1024
    # stdout and stderr together; the captured output never exceeds it.
    output_bytes: int = 1024 * 1024
    tmp_bytes: int = 64 * 1024 * 1024
    open_files: int = 256


@dataclass(frozen=True)
class SandboxResult:
    """`reason` says what ended the run: "ok" means the program exited on its own (whatever its
    exit code), the others name the limit or fault. `exit_code` is the program's status, or
    128+signal when a signal killed it, or None when the sandbox killed it from outside."""

    exit_code: int | None
    stdout: bytes
    stderr: bytes
    timed_out: bool
    reason: Reason
    wall_s: float
    # None when unknown: a run killed from outside never reports its CPU time.
    cpu_s: float | None


# Where to look for the tools instead of PATH and the system directories: a test points it at
# an empty directory to run a worker as on a machine without bubblewrap.
TOOLS_DIR_ENV = "SRBENCH_SANDBOX_TOOLS_DIR"


@functools.cache
def _tools() -> dict[str, str]:
    found = {}
    only = os.environ.get(TOOLS_DIR_ENV)
    for name in ("bwrap", "prlimit", "setpriv"):
        if only is not None:
            path = shutil.which(name, path=only)
        else:
            path = shutil.which(name) or shutil.which(name, path="/usr/bin:/bin:/usr/sbin:/sbin")
        if path is None:
            raise SandboxUnavailable(f"{name} not found; run scripts/ensure_sandbox.sh")
        found[name] = path
    return found


def sandbox_available() -> bool:
    try:
        _tools()
    except SandboxUnavailable:
        return False
    return True


def _python_layout() -> tuple[Path, Path | None]:
    """(base Python prefix, virtualenv prefix or None) of the interpreter running us."""
    base = Path(sys.base_prefix).resolve()
    venv = Path(sys.prefix).resolve()
    return base, (venv if venv != base else None)


def sandbox_python() -> str:
    """The interpreter path inside the sandbox: the same Python and packages as this process."""
    base, venv = _python_layout()
    if venv is not None:
        return f"{SANDBOX_VENV}/bin/python3"
    return str(base / "bin" / "python3")


def _dir_with_parents(path: PurePosixPath) -> list[str]:
    # bubblewrap creates missing parents of a mount point as 0700 root-owned directories, which
    # the unprivileged sandbox uid could not traverse; create them 0755 explicitly first.
    args: list[str] = []
    for parent in reversed(path.parents):
        if str(parent) != "/":
            args += ["--perms", "0755", "--dir", str(parent)]
    return args


def _ro_bind(host: Path | str, inside: str) -> list[str]:
    return [*_dir_with_parents(PurePosixPath(inside)), "--ro-bind", str(host), inside]


@functools.cache
def _runtime_args() -> tuple[str, ...]:
    args = ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        top = Path("/") / name
        if top.is_symlink():
            args += ["--symlink", os.readlink(top), str(top)]
        elif top.is_dir():
            args += ["--ro-bind", str(top), str(top)]
    for extra in ("/etc/ld.so.cache", "/etc/alternatives"):
        if Path(extra).exists():
            args += _ro_bind(extra, extra)
    base, venv = _python_layout()
    if not base.is_relative_to("/usr"):
        # Bound at its real path: the interpreter's RUNPATH and the venv's `python` symlink are
        # absolute.
        args += _ro_bind(base, str(base))
    if venv is not None:
        args += _ro_bind(venv, SANDBOX_VENV)
    return tuple(args)


def _sandbox_env(extra: Mapping[str, str] | None) -> list[str]:
    path = "/usr/local/bin:/usr/bin:/bin"
    if _python_layout()[1] is not None:
        path = f"{SANDBOX_VENV}/bin:{path}"
    env = {
        "PATH": path,
        "HOME": SANDBOX_WORKDIR,
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "PYTHONDONTWRITEBYTECODE": "1",
        # BLAS thread pools reserve address space per thread and count against RLIMIT_NPROC.
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }
    env.update(extra or {})
    args = ["--clearenv"]
    for key, value in env.items():
        args += ["--setenv", key, value]
    return args


def _is_root() -> bool:
    return os.geteuid() == 0


def _user_process_count(uid: int) -> int:
    count = 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    count += 1
            except OSError:
                continue
    return count


def _sandbox_uid(workdir: Path) -> int:
    owner = workdir.stat().st_uid
    if UID_LOW <= owner <= UID_HIGH:
        return owner
    uid = UID_LOW + secrets.randbelow(UID_HIGH - UID_LOW)
    os.chown(workdir, uid, uid)
    return uid


def _bind_target(inside: str) -> str:
    """An extra mount's path inside the sandbox: absolute, normalised, and outside `/app` and
    `/tmp`. A mount point under `/app` would make bubblewrap resolve (and create) a path in the
    directory the sandboxed code controls, where a planted symlink could redirect it."""
    path = PurePosixPath(inside)
    reserved = (PurePosixPath(SANDBOX_WORKDIR), PurePosixPath("/tmp"), PurePosixPath("/proc"))
    if (
        not path.is_absolute()
        or ".." in path.parts
        or path == PurePosixPath("/")
        or any(path == r or path.is_relative_to(r) for r in reserved)
        or path.parts[1] in ("usr", "bin", "lib", "lib64", "etc", "dev", "opt")
    ):
        raise ValueError(f"bind target must be an absolute path outside /app and /tmp: {inside!r}")
    return str(path)


def _prlimit_args(tools: Mapping[str, str], limits: SandboxLimits, uid: int | None) -> list[str]:
    """The resource limits every process of the sandbox inherits (prlimit before bubblewrap)."""
    cpu = max(1, int(limits.cpu_s + 0.999))
    nproc = limits.max_processes
    if uid is None:
        nproc += _user_process_count(os.getuid())
    return [
        tools["prlimit"],
        f"--cpu={cpu}:{cpu + 1}",
        f"--as={limits.memory_bytes}",
        f"--fsize={limits.file_size_bytes}",
        f"--nproc={nproc}",
        f"--nofile={limits.open_files}",
        "--core=0",
        "--",
    ]


def _bind_args(
    workdir: Path, ro_binds: Mapping[str, Path], rw_binds: Mapping[str, Path]
) -> list[str]:
    """The caller's read-only and writable binds, then the working directory at /app."""
    args: list[str] = []
    for inside, host in ro_binds.items():
        args += _ro_bind(host, _bind_target(inside))
    for inside, host in rw_binds.items():
        args += [
            *_dir_with_parents(PurePosixPath(_bind_target(inside))),
            "--bind",
            str(host),
            inside,
        ]
    return [*args, "--bind", str(workdir), SANDBOX_WORKDIR]


def _namespace_args(
    limits: SandboxLimits, env: Mapping[str, str] | None, status_fd: int
) -> list[str]:
    """Fresh /proc, /dev and a size-capped /tmp; every namespace but the user's unshared."""
    return [
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--size",
        str(limits.tmp_bytes),
        "--perms",
        "01777",
        "--tmpfs",
        "/tmp",
        "--unshare-ipc",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--hostname",
        "sandbox",
        "--die-with-parent",
        "--new-session",
        "--chdir",
        SANDBOX_WORKDIR,
        "--json-status-fd",
        str(status_fd),
        *_sandbox_env(env),
    ]


def _identity_args(tools: Mapping[str, str], uid: int | None) -> list[str]:
    """Who the program runs as: an unprivileged user namespace, or a dedicated uid."""
    if uid is None:
        return ["--unshare-user"]
    # Privileged bubblewrap drops every capability unless told otherwise; setpriv needs
    # these two to switch uid, and loses them (and all others) as it does.
    return [
        "--cap-add",
        "CAP_SETUID",
        "--cap-add",
        "CAP_SETGID",
        tools["setpriv"],
        f"--reuid={uid}",
        f"--regid={uid}",
        "--clear-groups",
        "--inh-caps=-all",
        "--",
    ]


def _shim_args(status_fd: int, times_fd: int) -> list[str]:
    # A bash shim runs the program and reports its children's CPU time on a private fd (closed
    # for the program itself): bubblewrap's pid-namespace init is not waited for in a way that
    # passes CPU time up to our wait4, so the host side cannot measure it.
    # Bash's own "Killed"/"Segmentation fault" notices go to /dev/null, not the program's stderr.
    # The program gets neither reporting fd, so it cannot forge its own status or CPU time.
    shim = (
        f'exec {status_fd}>&- {{err}}>&2 2>/dev/null; "$@" 2>&$err {{err}}>&- {times_fd}>&-; '
        f"s=$?; times >&{times_fd}; exit $s"
    )
    return ["/bin/bash", "-c", shim, "sandbox"]


def _command(
    argv: Sequence[str],
    *,
    workdir: Path,
    limits: SandboxLimits,
    uid: int | None,
    ro_binds: Mapping[str, Path],
    rw_binds: Mapping[str, Path],
    env: Mapping[str, str] | None,
    status_fd: int,
    times_fd: int,
) -> list[str]:
    """prlimit → bubblewrap (binds, namespaces, identity) → the reporting shim → ``argv``."""
    tools = _tools()
    return [
        *_prlimit_args(tools, limits, uid),
        tools["bwrap"],
        *_runtime_args(),
        *_bind_args(workdir, ro_binds, rw_binds),
        *_namespace_args(limits, env, status_fd),
        *_identity_args(tools, uid),
        *_shim_args(status_fd, times_fd),
        *argv,
    ]


def _kill_group(pid: int) -> None:
    # The group is gone when bubblewrap already exited on its own.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def sandbox_run(
    *,
    argv: Sequence[str],
    files: Mapping[str, bytes],
    stdin: bytes = b"",
    limits: SandboxLimits,
    workdir: Path | None = None,
    ro_binds: Mapping[str, Path] | None = None,
    rw_binds: Mapping[str, Path] | None = None,
    env: Mapping[str, str] | None = None,
) -> SandboxResult:
    """Run `argv` inside a fresh sandbox whose working directory `/app` holds `files`.

    `workdir`: an existing host directory to use as `/app` and keep afterwards (a
    Terminal-Bench session); otherwise a temp directory is created and removed. `files` may only
    be given for a fresh directory: the host never writes where sandboxed code has been.
    `ro_binds` / `rw_binds`: extra mounts, absolute sandbox path (outside `/app`, `/tmp`) ->
    host path.
    """
    if not argv:
        raise ValueError("argv must not be empty")
    own_dir = workdir is None
    run_dir = Path(tempfile.mkdtemp(prefix="srbench-sandbox-")) if own_dir else workdir
    assert run_dir is not None
    try:
        uid = _sandbox_uid(run_dir) if _is_root() else None
        write_sandbox_files(run_dir, files, uid)
        return _execute(
            argv,
            workdir=run_dir,
            stdin=stdin,
            limits=limits,
            uid=uid,
            ro_binds=dict(ro_binds or {}),
            rw_binds=dict(rw_binds or {}),
            env=env,
        )
    finally:
        if own_dir:
            shutil.rmtree(run_dir, ignore_errors=True)


def _execute(
    argv: Sequence[str],
    *,
    workdir: Path,
    stdin: bytes,
    limits: SandboxLimits,
    uid: int | None,
    ro_binds: Mapping[str, Path],
    rw_binds: Mapping[str, Path],
    env: Mapping[str, str] | None,
) -> SandboxResult:
    status_r, status_w = os.pipe()
    times_r, times_w = os.pipe()
    cmd = _command(
        argv,
        workdir=workdir,
        limits=limits,
        uid=uid,
        ro_binds=ro_binds,
        rw_binds=rw_binds,
        env=env,
        status_fd=status_w,
        times_fd=times_w,
    )
    proc, started = _spawn(cmd, stdin, (status_w, times_w))
    deadline = started + limits.wall_s
    assert proc.stdout is not None and proc.stderr is not None
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    buffers: dict[int, list[bytes]] = {out_fd: [], err_fd: []}
    selector = selectors.DefaultSelector()
    for fd in (out_fd, err_fd):
        os.set_blocking(fd, False)
        selector.register(fd, selectors.EVENT_READ)
    killed: Reason | None = None
    status: int | None = None
    try:
        killed = _read_capped(selector, buffers, limits.output_bytes, deadline)
        if killed is None:
            # Pipes closed: wait for the exit, still under the wall deadline, because a
            # program can close its stdout and keep running.
            status, killed = _wait_exit(proc.pid, deadline)
    finally:
        # Also on an exception here (e.g. a task's soft time limit): nothing may outlive us.
        selector.close()
        status_lines, cpu = _reap(proc, status, status_r, times_r)
    wall = time.monotonic() - started
    # bubblewrap reports the program's exit as {"exit-code": N}; without it the sandbox's own
    # set-up failed (a missing mount source, a refused capability), possibly after it had
    # forked: a host problem, never the sandboxed program's failure.
    if killed is None and b'"exit-code"' not in status_lines:
        raise SandboxError(
            "sandbox failed to start: "
            + b"".join(buffers[err_fd]).decode("utf-8", "replace")[-2000:]
        )
    stdout = b"".join(buffers[out_fd])
    stderr = b"".join(buffers[err_fd])
    assert proc.returncode is not None
    exit_code = _inner_exit_code(status_lines, proc.returncode)
    reason = killed or _classify(exit_code, stderr, cpu, limits)
    return SandboxResult(
        exit_code=None if killed else exit_code,
        stdout=stdout,
        stderr=stderr,
        timed_out=reason == "timeout",
        reason=reason,
        wall_s=round(wall, 3),
        cpu_s=None if cpu is None else round(cpu, 3),
    )


def _spawn(
    cmd: Sequence[str], stdin: bytes, report_fds: tuple[int, int]
) -> tuple[subprocess.Popen[bytes], float]:
    """Start the sandbox in its own session with the two reporting fds passed (and closed on
    our side once passed); stdin from a file, not a pipe, so a program that never reads it
    cannot block us. Returns the process and its monotonic start time."""
    with tempfile.TemporaryFile() as stdin_file:
        stdin_file.write(stdin)
        stdin_file.seek(0)
        started = time.monotonic()
        try:
            proc = subprocess.Popen(
                cmd,
                stdin=stdin_file,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env={"PATH": "/usr/bin:/bin"},
                start_new_session=True,
                umask=0o022,
                pass_fds=report_fds,
            )
        finally:
            for fd in report_fds:
                os.close(fd)
    return proc, started


def _read_capped(
    selector: selectors.BaseSelector,
    buffers: dict[int, list[bytes]],
    output_bytes: int,
    deadline: float,
) -> Reason | None:
    """Read stdout and stderr until both close, keeping at most ``output_bytes`` in all; the
    reason to kill when the wall deadline passes or the output cap is exceeded first."""
    total = 0
    while selector.get_map():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return "timeout"
        for key, _ in selector.select(timeout=min(remaining, 0.2)):
            fd = int(key.fd)
            try:
                chunk = os.read(fd, _READ_CHUNK)
            except BlockingIOError:
                continue
            if not chunk:
                selector.unregister(fd)
                continue
            room = output_bytes - total
            buffers[fd].append(chunk[: max(room, 0)])
            total += len(chunk)
            if total > output_bytes:
                return "output_cap"
    return None


def _wait_exit(pid: int, deadline: float) -> tuple[int | None, Reason | None]:
    """(wait status, None) once ``pid`` exits, or (None, "timeout") at the wall deadline."""
    while True:
        waited_pid, waited = os.waitpid(pid, os.WNOHANG)
        if waited_pid:
            return waited, None
        if time.monotonic() >= deadline:
            return None, "timeout"
        time.sleep(0.005)


def _reap(
    proc: subprocess.Popen[bytes], status: int | None, status_r: int, times_r: int
) -> tuple[bytes, float | None]:
    """Kill what is left of the session, collect the exit status and close the pipes; returns
    bubblewrap's JSON status lines and the program's CPU time from the shim."""
    _kill_group(proc.pid)
    if status is None:
        _, status = os.waitpid(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    proc.stderr.close()
    with os.fdopen(status_r, "rb") as status_file:
        status_lines = status_file.read()
    with os.fdopen(times_r, "rb") as times_file:
        cpu = _children_cpu(times_file.read())
    return status_lines, cpu


def _inner_exit_code(status_lines: bytes, outer: int) -> int:
    """The sandboxed program's status from bubblewrap's JSON status stream (exit code, or
    128+signal), falling back to bubblewrap's own exit status."""
    for line in status_lines.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("exit-code"), int):
            return int(record["exit-code"])
    return outer if outer >= 0 else 128 - outer


def _children_cpu(report: bytes) -> float | None:
    """User+system seconds from bash's `times` second line ("0m1.250s 0m0.010s")."""
    lines = report.decode("ascii", "replace").splitlines()
    if len(lines) < 2:
        return None
    total = 0.0
    for field in lines[1].split():
        match = _TIMES_FIELD.fullmatch(field)
        if match is None:
            return None
        total += int(match["m"]) * 60 + float(match["s"])
    return total


def _classify(exit_code: int, stderr: bytes, cpu: float | None, limits: SandboxLimits) -> Reason:
    if exit_code == 0:
        return "ok"
    if exit_code > 128:
        sig = exit_code - 128
        cpu_spent = cpu is not None and cpu >= limits.cpu_s - 0.05
        if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu_spent):
            return "timeout"
        if sig == signal.SIGXFSZ:
            return "file_size"
        if sig in CRASH_SIGNALS:
            return "crash"
        return "signal"
    # An allocation refused by RLIMIT_AS surfaces as the language's out-of-memory error, and
    # Python ignores SIGXFSZ, so RLIMIT_FSIZE surfaces as EFBIG.
    if _MEMORY_ERROR.search(stderr[-4096:]):
        return "memory"
    if _FILE_TOO_LARGE.search(stderr[-4096:]):
        return "file_size"
    return "ok"
