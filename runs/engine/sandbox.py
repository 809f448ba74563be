"""Run untrusted code (model-written programs, agent commands, task test scripts) in a sandbox
built from what Linux offers without a container engine: bubblewrap namespaces plus rlimits.

What one `sandbox_run` gives:

- **Filesystem**: a fresh mount namespace whose root is a size-limited tmpfs, the **disk
  budget** (`SandboxLimits.disk_bytes`, default `SRBENCH_SANDBOX_DISK_MB`). Everything the code
  can write lives on it and shares that one budget: the working directory `/app`, `/tmp`,
  `/dev/shm` (bound from `/run/shm` on the same tmpfs) and any `writable_dirs` the caller names
  (e.g. Terminal-Bench's `/logs`). No host directory is mounted writable, so nothing the code
  does can fill the host's disk; a write past the budget fails with ENOSPC and the run's reason
  is `disk_quota_exceeded`. Visible read-only: `/usr` (with the merged-usr `/bin`, `/lib*`
  symlinks), `/etc/ld.so.cache` and `/etc/alternatives` (the dynamic loader and Debian's `awk`
  etc. need them), the Python installation that runs this process and its virtualenv (mounted
  at `/opt/venv`, so the repository path never appears), plus any `ro_binds` the caller names
  (e.g. SciCode's HDF5 targets). Nothing else of the host exists inside: not the repo, `/work`,
  `/root` (beyond the Python prefix, when Python lives there), the host `/tmp`, `/etc` or
  `/home`. Fresh `/proc` (own pid namespace) and a minimal `/dev` (read-only, its device nodes
  and a private `/dev/pts`).
- **Files in and out**: `files` reach `/app` as a tar archive that the sandbox itself unpacks
  before the program starts. A Terminal-Bench session keeps its `/app` between commands as a
  snapshot archive in a host directory (`workdir`): unpacked before the command, written back
  after it (capped at the budget: a snapshot larger than the budget is the quota exceeded).
  Files a grader needs afterwards (the verifier's reward) are returned by `collect`: the sandbox
  archives them and the host reads the archive from memory, regular files only (a planted
  symlink is never followed). The host never mounts, opens or deletes a path the sandboxed code
  could have touched.
- **Network**: a new network namespace with only its own loopback; host loopback services and
  abstract unix sockets are unreachable.
- **Identity**: when the worker is root, the code runs as a fresh unprivileged uid (random per
  run) with no capabilities and no supplementary groups, via `setpriv` inside bubblewrap. A
  distinct uid matters because RLIMIT_NPROC is counted per uid and is not enforced for root at
  all. When the worker is not root, bubblewrap uses an unprivileged user namespace and the
  process budget is added to the user's current process count. In both cases the program runs
  inside a second, unprivileged bubblewrap (its own user namespace, `--disable-userns`), so it
  cannot create user namespaces of its own (`unshare -Ur` fails): the kernel's namespace code
  is a frequent source of privilege escalations.
- **Limits**: CPU seconds (RLIMIT_CPU), address space (RLIMIT_AS), processes/threads
  (RLIMIT_NPROC), file size (RLIMIT_FSIZE), no core files, open files, the disk budget; wall
  time and combined stdout+stderr bytes are enforced by a small driver inside the sandbox (told
  by the host over a pipe when the output cap is reached), which kills the program, every
  process it left, and then reports the budget's use and saves `/app`. The host keeps a hard
  deadline above that (wall time plus the time to move the archives): on it, or when the saved
  snapshot outgrows the budget, the outer bubblewrap process group is SIGKILLed; bubblewrap's
  init in the pid namespace dies with its parent (`--die-with-parent`) and the kernel then kills
  every process left in that namespace, including ones that called setsid() or daemonised.
- **Environment**: cleared; only PATH, HOME, LANG, TMPDIR, single-thread BLAS settings and what
  the caller passes explicitly. No secret, DATABASE_URL or broker URL is inherited.

What it does **not** give:

- No seccomp filter and a shared kernel: a kernel exploit escapes.
- Memory is capped by address space, not resident memory; programs that map large sparse regions
  (some JITs, sanitizers) fail early. There is no cgroup memory or I/O accounting. The disk
  budget is a tmpfs, so it is RAM while the program runs (only what is written is used).
- tmpfs counts data pages, not inodes: empty files and directories cost kernel memory, not
  budget, bounded only by the wall time (a saved snapshot counts them, 512 bytes each).
- A program that fills the budget and frees it again before it ends is not reported as over the
  quota (it saw ENOSPC and failed, or coped, on its own).
- CPU time is per process; a multi-process program is bounded by wall time and the process cap.
- `/proc` still shows host-wide facts (CPU, memory, kernel version) and bubblewrap's own command
  line (host paths of the bind mounts, not their contents).
- The read-only runtime exposes the virtualenv's installed packages (code, no secrets).

A container backend (gVisor `runsc`, or Docker/Podman with `--network none` and a read-only
root) is the production option on hosts that have one; it would implement the same
`sandbox_run` contract.

The command line is built in :mod:`runs.engine.sandbox_command`, the pipes and archives are
handled in :mod:`runs.engine.sandbox_pipes`, host-side files in :mod:`runs.engine.sandbox_files`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Literal

from runs.engine.sandbox_command import (
    SANDBOX_WORKDIR,
    TOOLS_DIR_ENV,
    UID_HIGH,
    UID_LOW,
    SandboxFds,
    SandboxLimits,
    SandboxUnavailable,
    bind_target,
    disk_budget_bytes,
    fresh_uid,
    is_root,
    sandbox_available,
    sandbox_command,
    sandbox_python,
    sandbox_tools,
)
from runs.engine.sandbox_pipes import (
    COLLECT_MAX_BYTES,
    READ_CHUNK,
    REPORT_MAX_BYTES,
    OutputPipes,
    Report,
    collected_files,
    files_archive,
    parse_report,
)

__all__ = [
    "DISK_QUOTA_EXCEEDED",
    "SANDBOX_WORKDIR",
    "SNAPSHOT_NAME",
    "TOOLS_DIR_ENV",
    "UID_HIGH",
    "UID_LOW",
    "SandboxError",
    "SandboxLimits",
    "SandboxResult",
    "SandboxUnavailable",
    "disk_budget_bytes",
    "sandbox_available",
    "sandbox_python",
    "sandbox_run",
]

Reason = Literal[
    "ok", "timeout", "memory", "output_cap", "file_size", "disk_quota_exceeded", "crash", "signal"
]
DISK_QUOTA_EXCEEDED: Reason = "disk_quota_exceeded"

CRASH_SIGNALS = {signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE, signal.SIGABRT}
_MEMORY_ERROR = re.compile(rb"\bMemoryError\b|Cannot allocate memory|std::bad_alloc|out of memory")
_FILE_TOO_LARGE = re.compile(rb"File too large")
# A Terminal-Bench session's /app between two commands, in its host directory.
SNAPSHOT_NAME = "app.tar"
# The host's hard deadline is the wall limit plus this, plus the time to move the archives at
# a slow disk's pace: the driver inside ends the program at the wall limit itself.
_GRACE_S = 10.0
_ARCHIVE_BYTES_PER_S = 25 * 1024 * 1024
# The tools as found (tests/srbench/test_docker.py checks which Debian package ships each).
_tools = sandbox_tools


class SandboxError(RuntimeError):
    """The sandbox itself failed to start (a host problem, never the sandboxed code's fault)."""


@dataclass(frozen=True)
class SandboxResult:
    """`reason` says what ended the run: "ok" means the program exited on its own (whatever its
    exit code), the others name the limit or fault. `exit_code` is the program's status, or
    128+signal when a signal killed it, or None when the sandbox killed it from outside.
    `collected`: the regular files asked for by `collect` that existed, by sandbox path."""

    exit_code: int | None
    stdout: bytes
    stderr: bytes
    timed_out: bool
    reason: Reason
    wall_s: float
    # None when unknown: a run killed from outside never reports its CPU time.
    cpu_s: float | None
    collected: Mapping[str, bytes] = field(default_factory=dict)


def sandbox_run(
    *,
    argv: Sequence[str],
    files: Mapping[str, bytes],
    stdin: bytes = b"",
    limits: SandboxLimits,
    workdir: Path | None = None,
    save: bool = True,
    ro_binds: Mapping[str, Path] | None = None,
    writable_dirs: Sequence[str] = (),
    collect: Sequence[str] = (),
    collect_max_bytes: int = COLLECT_MAX_BYTES,
    env: Mapping[str, str] | None = None,
    site_files: Mapping[str, Path] | None = None,
) -> SandboxResult:
    """Run `argv` inside a fresh sandbox whose working directory `/app` holds `files`.

    `workdir`: a host directory that keeps `/app` between runs (a Terminal-Bench session), as
    a snapshot archive the sandbox unpacks first and (with `save`) writes back afterwards; the
    directory itself is never mounted. `files` may only be given while it holds no snapshot.
    `ro_binds`: extra read-only mounts, absolute sandbox path (outside `/app`, `/tmp`) -> host
    path. `writable_dirs`: extra empty directories on the budget (e.g. `/logs/verifier`).
    `collect`: sandbox paths (in `/app` or a writable directory) of files to return in
    `SandboxResult.collected`; `collect_max_bytes` caps their archive (past it, a file may
    come back cut short).
    `site_files`: file name -> host file, added read-only to every site directory of every
    Python the sandbox holds (the virtualenv's, its base, the system's and any other under
    `/usr`), which reads a `.pth` there at every start, whatever `PYTHONPATH` or `-E`/`-I` say;
    each base installation also gets a `pyvenv.cfg` so that none reads a user site
    (runs/engine/sandbox_pythons.py).
    """
    if not argv:
        raise ValueError("argv must not be empty")
    writable = [bind_target(d) for d in writable_dirs]
    wanted = [p if p.startswith(f"{SANDBOX_WORKDIR}/") else bind_target(p) for p in collect]
    if any(".." in PurePosixPath(p).parts for p in wanted):
        raise ValueError(f"collect paths must be normalised: {collect!r}")
    snapshot = workdir / SNAPSHOT_NAME if workdir is not None else None
    if files and snapshot is not None and snapshot.exists():
        raise ValueError("files may only be given for a directory with no snapshot yet")
    with contextlib.ExitStack() as stack:
        restore: BinaryIO | None = None
        if snapshot is not None and snapshot.exists():
            restore = stack.enter_context(open(snapshot, "rb"))  # noqa: SIM115
        elif files:
            restore = stack.enter_context(tempfile.TemporaryFile())
            files_archive(files, restore)
            restore.seek(0)
        return _execute(
            argv,
            stdin=stdin,
            limits=limits,
            uid=fresh_uid() if is_root() else None,
            ro_binds=dict(ro_binds or {}),
            writable_dirs=writable,
            collect=wanted,
            collect_max_bytes=collect_max_bytes,
            env=env,
            restore=restore,
            snapshot=snapshot if save else None,
            site_files=site_files,
        )


class _Descriptors:
    """The pipes of one run. Every descriptor is closed exactly once: a worker runs sandboxes
    on several threads, and a second close could hit a number another thread has since been
    given (a database socket)."""

    def __init__(self, *, snapshot: bool, collect: bool, restore: BinaryIO | None) -> None:
        self.owned: set[int] = set()
        self.status_r, status_w = self._pipe()
        self.report_r, report_w = self._pipe()
        control_r, self.control_w = self._pipe()
        self.snapshot_r, snapshot_w = self._pipe() if snapshot else (None, None)
        self.collect_r, collect_w = self._pipe() if collect else (None, None)
        self.restore = restore
        self.sandbox = SandboxFds(
            status=status_w,
            report=report_w,
            control=control_r,
            restore=restore.fileno() if restore is not None else None,
            snapshot=snapshot_w,
            collect=collect_w,
        )
        self.sandbox_ends = [
            fd for fd in (status_w, report_w, control_r, snapshot_w, collect_w) if fd is not None
        ]

    def _pipe(self) -> tuple[int, int]:
        r, w = os.pipe()
        self.owned.update((r, w))
        return r, w

    def passed(self) -> tuple[int, ...]:
        restore = () if self.sandbox.restore is None else (self.sandbox.restore,)
        return (*self.sandbox_ends, *restore)

    def close(self, fd: int) -> None:
        if fd in self.owned:
            self.owned.discard(fd)
            os.close(fd)

    def spawned(self) -> None:
        """Ours are closed once the sandbox has its copies: they decide when each pipe ends."""
        for fd in self.sandbox_ends:
            self.close(fd)
        if self.restore is not None:
            self.restore.close()

    def close_all(self) -> None:
        for fd in list(self.owned):
            self.close(fd)


def _execute(
    argv: Sequence[str],
    *,
    stdin: bytes,
    limits: SandboxLimits,
    uid: int | None,
    ro_binds: Mapping[str, Path],
    writable_dirs: Sequence[str],
    collect: Sequence[str],
    collect_max_bytes: int,
    env: Mapping[str, str] | None,
    restore: BinaryIO | None,
    snapshot: Path | None,
    site_files: Mapping[str, Path] | None = None,
) -> SandboxResult:
    budget = disk_budget_bytes(limits)
    # The hard deadline: the driver ends the program at the wall limit itself; this leaves it
    # the time to unpack and save /app on a slow disk.
    moved = budget if snapshot is not None else 0
    if restore is not None:
        moved += os.fstat(restore.fileno()).st_size
    grace = _GRACE_S + moved / _ARCHIVE_BYTES_PER_S
    fds = _Descriptors(snapshot=snapshot is not None, collect=bool(collect), restore=restore)
    try:
        cmd = sandbox_command(
            argv,
            limits=limits,
            uid=uid,
            ro_binds=ro_binds,
            writable_dirs=writable_dirs,
            collect=collect,
            env=env,
            fds=fds.sandbox,
            site_files=site_files,
        )
        with contextlib.ExitStack() as stack:
            new_snapshot = None
            if snapshot is not None:
                new_snapshot = stack.enter_context(_new_snapshot_file(snapshot))
            proc, started = _spawn(cmd, stdin, fds.passed())
            fds.spawned()
            run = _Run(proc, fds, limits, budget, snapshot, new_snapshot, collect)
            run.collect_max_bytes = collect_max_bytes
            return run.supervise(started, started + limits.wall_s + grace)
    finally:
        fds.close_all()


def _partial(snapshot: Path) -> Path:
    return snapshot.with_name(SNAPSHOT_NAME + ".new")


@contextlib.contextmanager
def _new_snapshot_file(snapshot: Path) -> Iterator[BinaryIO]:
    """A new file beside the snapshot, created exclusively in the host directory (which no
    sandbox ever sees); removed unless it replaced the snapshot."""
    partial = _partial(snapshot)
    with contextlib.suppress(FileNotFoundError):
        partial.unlink()
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    handle = os.fdopen(os.open(partial, flags, 0o600), "wb")
    try:
        yield handle
    finally:
        handle.close()
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()


@dataclass
class _Run:
    """One started sandbox, read to its end."""

    proc: subprocess.Popen[bytes]
    fds: _Descriptors
    limits: SandboxLimits
    budget: int
    snapshot: Path | None
    new_snapshot: BinaryIO | None
    collect: Sequence[str]
    output_capped: bool = False
    collect_max_bytes: int = COLLECT_MAX_BYTES

    def supervise(self, started: float, deadline: float) -> SandboxResult:
        assert self.proc.stdout is not None and self.proc.stderr is not None
        out_fd, err_fd = self.proc.stdout.fileno(), self.proc.stderr.fileno()
        pipes = self._pipes(out_fd, err_fd)
        killed: Literal["timeout", "disk_quota_exceeded"] | None = None
        status: int | None = None
        try:
            killed = pipes.read(deadline, (out_fd, err_fd), self._stop_program)
            if killed is None:
                status, killed = _wait_exit(self.proc.pid, deadline)
        finally:
            # Also on an exception here (e.g. a task's soft time limit): nothing may outlive us.
            pipes.close()
            status_lines = _reap(self.proc, status, self.fds.status_r)
            if killed is not None:
                pipes.drain(self.fds.report_r)
        wall = time.monotonic() - started
        report = parse_report(pipes.data(self.fds.report_r))
        stderr = pipes.data(err_fd)
        # bubblewrap reports the driver's exit as {"exit-code": N}, and the shim says "started";
        # without them the sandbox's own set-up failed (a missing mount source, a refused
        # capability, a user namespace refused to the inner bubblewrap): a host problem, never
        # the sandboxed program's failure.
        if killed is None and (
            b'"exit-code"' not in status_lines or not (report.started or report.stopped)
        ):
            raise SandboxError(
                "sandbox failed to start: " + stderr.decode("utf-8", "replace")[-2000:]
            )
        collected: dict[str, bytes] = {}
        if killed is None:
            self._keep_snapshot(report)
            if self.fds.collect_r is not None:
                collected = collected_files(pipes.data(self.fds.collect_r), self.collect)
        exit_code = report.exit_code
        if exit_code is None:
            assert self.proc.returncode is not None
            exit_code = _inner_exit_code(status_lines, self.proc.returncode)
        reason = self._reason(killed, report, exit_code, stderr)
        stopped_from_outside = killed is not None or report.stopped is not None
        return SandboxResult(
            exit_code=None if stopped_from_outside else exit_code,
            stdout=pipes.data(out_fd),
            stderr=stderr,
            timed_out=reason == "timeout",
            reason=reason,
            wall_s=round(wall, 3),
            cpu_s=None if report.cpu_s is None else round(report.cpu_s, 3),
            collected=collected,
        )

    def _pipes(self, out_fd: int, err_fd: int) -> OutputPipes:
        pipes = OutputPipes(self.limits.output_bytes)
        pipes.add(out_fd)
        pipes.add(err_fd)
        pipes.add(self.fds.report_r, cap=REPORT_MAX_BYTES)
        if self.fds.snapshot_r is not None:
            assert self.new_snapshot is not None
            pipes.add(self.fds.snapshot_r, cap=self.budget, sink=self.new_snapshot)
        if self.fds.collect_r is not None:
            pipes.add(self.fds.collect_r, cap=self.collect_max_bytes)
        seen = bytearray()

        def on_report(chunk: bytes) -> None:
            # Once the driver has unpacked the old snapshot, its name goes: the host never holds
            # more than one budget's worth of a session's files (the sandbox's open copy ends
            # when the driver closes it).
            seen.extend(chunk)
            if self.snapshot is not None and b"restored " in seen:
                with contextlib.suppress(FileNotFoundError):
                    self.snapshot.unlink()
                pipes.on_data.pop(self.fds.report_r, None)

        pipes.on_data[self.fds.report_r] = on_report
        return pipes

    def _stop_program(self) -> None:
        # The output cap: the driver kills the program (and all it left), then still saves /app.
        self.output_capped = True
        with contextlib.suppress(OSError):
            os.write(self.fds.control_w, b"stop\n")

    def _keep_snapshot(self, report: Report) -> None:
        # tar's 1 (a file changed while read) and 2 (one it could not read) still end a whole
        # archive; anything else, or no word from it, keeps nothing.
        if self.snapshot is None or self.new_snapshot is None or report.snapshot is None:
            return
        if report.snapshot <= 2:
            self.new_snapshot.flush()
            os.replace(_partial(self.snapshot), self.snapshot)

    def _reason(
        self,
        killed: Literal["timeout", "disk_quota_exceeded"] | None,
        report: Report,
        exit_code: int,
        stderr: bytes,
    ) -> Reason:
        if killed == "disk_quota_exceeded" or report.disk_full(self.budget):
            return "disk_quota_exceeded"
        if killed is not None or report.stopped == "timeout":
            return "timeout"
        if self.output_capped:
            return "output_cap"
        if report.stopped is not None:
            return "signal"  # the host went away: the program did not end on its own
        return _classify(exit_code, stderr, report.cpu_s, self.limits)


def _kill_group(pid: int) -> None:
    # The group is gone when bubblewrap already exited on its own.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def _spawn(
    cmd: Sequence[str], stdin: bytes, report_fds: tuple[int, ...]
) -> tuple[subprocess.Popen[bytes], float]:
    """Start the sandbox in its own session with the given fds passed; stdin from a file, not a
    pipe, so a program that never reads it cannot block us. Returns the process and its
    monotonic start time."""
    with tempfile.TemporaryFile() as stdin_file:
        stdin_file.write(stdin)
        stdin_file.seek(0)
        started = time.monotonic()
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
    return proc, started


def _wait_exit(pid: int, deadline: float) -> tuple[int | None, Literal["timeout"] | None]:
    """(wait status, None) once ``pid`` exits, or (None, "timeout") at the deadline."""
    while True:
        waited_pid, waited = os.waitpid(pid, os.WNOHANG)
        if waited_pid:
            return waited, None
        if time.monotonic() >= deadline:
            return None, "timeout"
        time.sleep(0.005)


def _reap(proc: subprocess.Popen[bytes], status: int | None, status_r: int) -> bytes:
    """Kill what is left of the session, collect the exit status and close the pipes; returns
    bubblewrap's JSON status lines."""
    _kill_group(proc.pid)
    if status is None:
        _, status = os.waitpid(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    proc.stderr.close()
    os.set_blocking(status_r, True)
    chunks = []
    while chunk := os.read(status_r, READ_CHUNK):
        chunks.append(chunk)
    return b"".join(chunks)


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
