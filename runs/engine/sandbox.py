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
  read or delete (issue 19; docs/decisions.md "Sandbox host paths").
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
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal

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


@functools.cache
def _tools() -> dict[str, str]:
    found = {}
    for name in ("bwrap", "prlimit", "setpriv"):
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


class SandboxPathError(ValueError):
    """A host-side file operation beneath a sandbox directory met a symlink, a non-directory
    parent, an existing entry or a path that leaves the directory: refused, nothing written."""


def _safe_relpath(name: str) -> PurePosixPath:
    rel = PurePosixPath(name)
    if rel.is_absolute() or ".." in rel.parts or not rel.parts or "\0" in name:
        raise SandboxPathError(
            f"sandbox file path must be relative and inside the workdir: {name!r}"
        )
    return rel


# Host-side file handling beneath a directory the sandboxed code can reach (docs/decisions.md,
# "Sandbox host paths"). Every component is opened relative to its parent's descriptor with
# O_NOFOLLOW, so a symlink anywhere on the path (not only the last component) is refused instead
# of followed, and nothing can resolve outside the starting directory.
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _open_beneath(root_fd: int, parts: Sequence[str], *, create: bool, uid: int | None) -> int:
    """A descriptor of the directory `root/parts…`, created 0755 (owned by `uid`) when `create`
    is set. Raises SandboxPathError on a symlink or non-directory component."""
    fd = os.dup(root_fd)
    try:
        for part in parts:
            created = False
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
                    created = True
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:  # ELOOP (a symlink), ENOTDIR, ENOENT
                raise SandboxPathError(f"not a plain directory: {part!r} ({exc.strerror})") from exc
            os.close(fd)
            fd = child
            if created:
                # Whatever the process umask: the sandbox uid must be able to traverse it.
                os.fchmod(fd, 0o755)
                if uid is not None:
                    os.fchown(fd, uid, uid)
        return fd
    except BaseException:
        os.close(fd)
        raise


def write_sandbox_files(workdir: Path, files: Mapping[str, bytes], uid: int | None) -> None:
    """Write `files` (relative paths) into `workdir`, owned by the sandbox uid when we are root.
    Scripts starting with `#!` are made executable, as a checkout would have them.

    Only ever called on a fresh directory that no sandboxed code has touched; it still refuses
    (SandboxPathError) to follow a symlink or to replace anything that exists, so a mistake can
    never write through a planted link."""
    if not files:
        return
    root_fd = os.open(workdir, _DIR_FLAGS)
    try:
        for name, data in files.items():
            rel = _safe_relpath(name)
            parent = _open_beneath(root_fd, rel.parts[:-1], create=True, uid=uid)
            try:
                mode = 0o755 if data.startswith(b"#!") else 0o644
                flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
                try:
                    fd = os.open(rel.parts[-1], flags, mode, dir_fd=parent)
                except FileExistsError as exc:
                    raise SandboxPathError(f"{name!r} exists already") from exc
                with os.fdopen(fd, "wb") as handle:
                    handle.write(data)
                    os.fchmod(handle.fileno(), mode)
                    if uid is not None:
                        os.fchown(handle.fileno(), uid, uid)
            finally:
                os.close(parent)
    finally:
        os.close(root_fd)


def read_file_beneath(directory: Path, name: str, *, max_bytes: int) -> bytes | None:
    """The first `max_bytes` of the regular file `directory/name`, or None when it is missing,
    a symlink (at any component), a FIFO, a device or a directory. Never blocks on a FIFO."""
    rel = _safe_relpath(name)
    root_fd = os.open(directory, _DIR_FLAGS)
    try:
        try:
            parent = _open_beneath(root_fd, rel.parts[:-1], create=False, uid=None)
        except SandboxPathError:
            return None
        try:
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
            try:
                fd = os.open(rel.parts[-1], flags, dir_fd=parent)
            except OSError:
                return None
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    return None
                return os.read(fd, max_bytes)
            finally:
                os.close(fd)
        finally:
            os.close(parent)
    finally:
        os.close(root_fd)


def fresh_directory(prefix: str, *, uid: int | None = None) -> Path:
    """A new host directory (0755) that no sandboxed code has ever seen, owned by `uid` when
    given. Hidden files (tests, verifier logs) are only ever written into these."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o755)
    if uid is not None:
        os.chown(path, uid, uid)
    return path


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
    tools = _tools()
    cpu = max(1, int(limits.cpu_s + 0.999))
    nproc = limits.max_processes
    if uid is None:
        nproc += _user_process_count(os.getuid())
    cmd = [
        tools["prlimit"],
        f"--cpu={cpu}:{cpu + 1}",
        f"--as={limits.memory_bytes}",
        f"--fsize={limits.file_size_bytes}",
        f"--nproc={nproc}",
        f"--nofile={limits.open_files}",
        "--core=0",
        "--",
        tools["bwrap"],
        *_runtime_args(),
    ]
    for inside, host in ro_binds.items():
        cmd += _ro_bind(host, _bind_target(inside))
    for inside, host in rw_binds.items():
        cmd += [
            *_dir_with_parents(PurePosixPath(_bind_target(inside))),
            "--bind",
            str(host),
            inside,
        ]
    cmd += [
        "--bind",
        str(workdir),
        SANDBOX_WORKDIR,
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
    if uid is None:
        cmd += ["--unshare-user"]
    else:
        # Privileged bubblewrap drops every capability unless told otherwise; setpriv needs
        # these two to switch uid, and loses them (and all others) as it does.
        cmd += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        cmd += [
            tools["setpriv"],
            f"--reuid={uid}",
            f"--regid={uid}",
            "--clear-groups",
            "--inh-caps=-all",
            "--",
        ]
    # A bash shim runs the program and reports its children's CPU time on a private fd (closed
    # for the program itself): bubblewrap's pid-namespace init is not waited for in a way that
    # passes CPU time up to our wait4, so the host side cannot measure it.
    # Bash's own "Killed"/"Segmentation fault" notices go to /dev/null, not the program's stderr.
    # The program gets neither reporting fd, so it cannot forge its own status or CPU time.
    shim = (
        f'exec {status_fd}>&- {{err}}>&2 2>/dev/null; "$@" 2>&$err {{err}}>&- {times_fd}>&-; '
        f"s=$?; times >&{times_fd}; exit $s"
    )
    return [*cmd, "/bin/bash", "-c", shim, "sandbox", *argv]


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
    # stdin from a file, not a pipe, so a program that never reads it cannot block us.
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
                pass_fds=(status_w, times_w),
            )
        finally:
            os.close(status_w)
            os.close(times_w)
    deadline = started + limits.wall_s
    killed: Reason | None = None
    buffers: dict[int, list[bytes]] = {}
    total = 0
    assert proc.stdout is not None and proc.stderr is not None
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    status: int | None = None
    selector = selectors.DefaultSelector()
    for stream in (proc.stdout, proc.stderr):
        os.set_blocking(stream.fileno(), False)
        selector.register(stream.fileno(), selectors.EVENT_READ)
        buffers[stream.fileno()] = []
    try:
        while selector.get_map() and killed is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                killed = "timeout"
                break
            for key, _ in selector.select(timeout=min(remaining, 0.2)):
                fd = int(key.fd)
                try:
                    chunk = os.read(fd, _READ_CHUNK)
                except BlockingIOError:
                    continue
                if not chunk:
                    selector.unregister(fd)
                    continue
                room = limits.output_bytes - total
                buffers[fd].append(chunk[: max(room, 0)])
                total += len(chunk)
                if total > limits.output_bytes:
                    killed = "output_cap"
                    break
        # Pipes closed (or a limit hit): wait for the exit, still under the wall deadline,
        # because a program can close its stdout and keep running.
        while killed is None:
            pid, waited = os.waitpid(proc.pid, os.WNOHANG)
            if pid:
                status = waited
                break
            if time.monotonic() >= deadline:
                killed = "timeout"
                break
            time.sleep(0.005)
    finally:
        # Also on an exception here (e.g. a task's soft time limit): nothing may outlive us.
        selector.close()
        _kill_group(proc.pid)
        if status is None:
            _, status = os.waitpid(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        proc.stdout.close()
        proc.stderr.close()
        with os.fdopen(status_r, "rb") as status_file:
            status_lines = status_file.read()
        with os.fdopen(times_r, "rb") as times_file:
            cpu = _children_cpu(times_file.read())
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
