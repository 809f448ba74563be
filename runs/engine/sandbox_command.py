"""How a sandbox is started (runs/engine/sandbox.py runs it): the tools, the limits, and the
command line prlimit → bubblewrap (the disk budget as its root, the read-only runtime, the
namespaces, the identity) → the driver → the inner bubblewrap (no user namespaces) → the
reporting shim → the program. Split out of :mod:`runs.engine.sandbox`, which re-exports the
public names.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import secrets
import shlex
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from runs.engine.sandbox_pythons import (
    PYVENV_CFG,
    TOP_LEVEL,
    StartupRule,
    interpreter_binds,
    runtime_installations,
    site_overlays,
)
from runs.engine.startup_plants import EDITABLE_PREFIX, MODULE_SUFFIXES, STARTUP_MODULES

__all__ = [
    "DEFAULT_DISK_MB",
    "DISK_MB_ENV",
    "SANDBOX_SHM",
    "SANDBOX_WORKDIR",
    "TOOLS_DIR_ENV",
    "UID_HIGH",
    "UID_LOW",
    "SandboxFds",
    "SandboxLimits",
    "SandboxUnavailable",
    "bind_target",
    "disk_budget_bytes",
    "fresh_uid",
    "is_root",
    "sandbox_available",
    "sandbox_command",
    "sandbox_python",
    "sandbox_tools",
]

SANDBOX_WORKDIR = "/app"
SANDBOX_VENV = "/opt/venv"
# /dev/shm is bound from here, so POSIX shared memory is on the budget too.
SANDBOX_SHM = "/run/shm"
# Random uids for sandboxed code come from a range no real account uses, so a sandbox can never
# signal or share the process budget of a host user (or of another sandbox).
UID_LOW, UID_HIGH = 1_000_000_000, 1_999_999_999
# The disk budget: the setting (srbench/settings.py) when Django is configured, else this
# environment variable, else the default. A tmpfs, so it is RAM while a program runs.
DISK_MB_ENV = "SRBENCH_SANDBOX_DISK_MB"
DEFAULT_DISK_MB = 256
# `--size` for a tmpfs came in 0.6, `--disable-userns` in 0.8 (Debian bookworm ships 0.8.0).
MIN_BWRAP = (0, 8)
# Where to look for the tools instead of PATH and the system directories: a test points it at
# an empty directory to run a worker as on a machine without bubblewrap.
TOOLS_DIR_ENV = "SRBENCH_SANDBOX_TOOLS_DIR"


class SandboxUnavailable(RuntimeError):
    """bubblewrap (0.8 or later), setpriv, prlimit, tar, stat or chown is missing; run
    scripts/ensure_sandbox.sh."""


@dataclass(frozen=True)
class SandboxLimits:
    wall_s: float = 10.0
    cpu_s: float = 10.0
    memory_bytes: int = 1024 * 1024 * 1024
    max_processes: int = 64
    file_size_bytes: int = 16 * 1024 * 1024
    # stdout and stderr together; the captured output never exceeds it.
    output_bytes: int = 1024 * 1024
    open_files: int = 256
    # Everything the code can write, in total (/app, /tmp, /dev/shm, writable_dirs); also the
    # cap on a saved /app snapshot. None: the configured default (disk_budget_bytes).
    disk_bytes: int | None = None


@functools.cache
def sandbox_tools() -> dict[str, str]:
    found = {}
    only = os.environ.get(TOOLS_DIR_ENV)
    # All but prlimit also run inside the sandbox, which sees the host's /usr.
    for name in ("bwrap", "prlimit", "setpriv", "tar", "stat", "chown"):
        if only is not None:
            path = shutil.which(name, path=only)
        else:
            path = shutil.which(name) or shutil.which(name, path="/usr/bin:/bin:/usr/sbin:/sbin")
        if path is None:
            raise SandboxUnavailable(f"{name} not found; run scripts/ensure_sandbox.sh")
        found[name] = path
    version = subprocess.run(
        [found["bwrap"], "--version"], capture_output=True, text=True, check=False
    ).stdout.split()
    numbers = tuple(int(n) for n in re.findall(r"\d+", version[-1])[:2]) if version else ()
    if numbers < MIN_BWRAP:
        raise SandboxUnavailable(
            f"bubblewrap {' '.join(version[1:]) or '(unknown version)'} is too old: the sandbox "
            f"needs {'.'.join(map(str, MIN_BWRAP))} or later (--size, --disable-userns)"
        )
    return found


def sandbox_available() -> bool:
    try:
        sandbox_tools()
    except SandboxUnavailable:
        return False
    return True


def disk_budget_bytes(limits: SandboxLimits | None = None) -> int:
    """The disk budget of a run with `limits`: its own, else the configured default."""
    if limits is not None and limits.disk_bytes is not None:
        return int(limits.disk_bytes)
    megabytes: object = None
    with contextlib.suppress(ImportError):
        from django.conf import settings

        if settings.configured:
            megabytes = getattr(settings, "SRBENCH_SANDBOX_DISK_MB", None)
    if megabytes is None:
        megabytes = os.environ.get(DISK_MB_ENV) or DEFAULT_DISK_MB
    return int(float(str(megabytes)) * 1024 * 1024)


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


def is_root() -> bool:
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


def fresh_uid() -> int:
    return UID_LOW + secrets.randbelow(UID_HIGH - UID_LOW)


_RESERVED = tuple(
    PurePosixPath(p) for p in (SANDBOX_WORKDIR, "/tmp", "/proc", "/dev", "/run", "/sys")
)


def bind_target(inside: str) -> str:
    """An extra mount's (or writable directory's) path inside the sandbox: absolute, normalised,
    and outside `/app`, `/tmp` and the other places the sandbox itself lays out, so no caller's
    path is ever resolved in a directory the sandboxed code controls."""
    path = PurePosixPath(inside)
    if (
        not path.is_absolute()
        or ".." in path.parts
        or path == PurePosixPath("/")
        or any(path == r or path.is_relative_to(r) for r in _RESERVED)
        or path.parts[1] in ("usr", "bin", "lib", "lib64", "etc", "opt")
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


def _venv_site_dirs() -> dict[str, Path]:
    """The site directory of `sandbox_python` when it is a virtualenv's: sandbox path -> host
    path (its base installation and the system's are among `runtime_installations`)."""
    host = Path(sysconfig.get_path("purelib")).resolve()
    _base, venv = _python_layout()
    if venv is not None and host.is_relative_to(venv):
        return {str(PurePosixPath(SANDBOX_VENV) / host.relative_to(venv)): host}
    return {}


def _pth_lines(site_files: Mapping[str, Path]) -> list[str]:
    """The `import` lines of the `.pth` site files, as `site` would run them."""
    return [
        line
        for name, path in sorted(site_files.items())
        if name.endswith(".pth")
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.startswith(("import ", "import\t"))
    ]


def _site_file_args(site_files: Mapping[str, Path]) -> list[str]:
    """`site_files` (name -> host file) added to each site directory of every Python of the
    sandbox, which reads them at start whatever its environment says, and a `pyvenv.cfg` beside
    each base installation so that none reads a user site (runs/engine/sandbox_pythons.py): a
    read-only tmpfs over the directory, holding a bind of each entry of the real one plus these
    files (a new file cannot be mounted inside the read-only runtime itself). Then each base
    interpreter is run through a wrapper (by the path it was started by, never from a writable
    place) and its `encodings` runs the `.pth` lines first, so that `-S` is guarded too."""
    if not site_files:
        return []
    for name in site_files:
        if "/" in name or name in ("", ".", "..", PYVENV_CFG):
            raise ValueError(f"a site file's name must be a plain file name: {name!r}")
    base, venv = _python_layout()
    installations = runtime_installations(str(base))
    read_only = ["/usr", *(f"/{name}" for name in TOP_LEVEL), str(base)]
    if venv is not None:
        read_only.append(SANDBOX_VENV)
    startup = StartupRule(STARTUP_MODULES, MODULE_SUFFIXES, EDITABLE_PREFIX)
    hidden, file_binds = interpreter_binds(
        installations, read_only, _pth_lines(site_files), startup
    )
    venv_dirs = _venv_site_dirs()
    overlays = site_overlays(installations, venv_dirs, site_files, hidden)
    args = []
    for inside, added in overlays.items():
        if inside == "/":
            # The sandbox's own root tmpfs (for /bin/python3): the files go straight in.
            for name, path in sorted(added.items()):
                args += ["--ro-bind", str(path), f"/{name}"]
            continue
        host = venv_dirs.get(inside, Path(inside))
        args += ["--tmpfs", inside]
        top = {name.split("/")[0] for name in added}
        for entry in sorted(os.listdir(host)):
            if entry in top:
                continue
            source = host / entry
            if source.is_symlink():
                args += ["--symlink", os.readlink(source), f"{inside}/{entry}"]
            else:
                args += ["--ro-bind", str(source), f"{inside}/{entry}"]
        for name, path in sorted(added.items()):
            if "/" in name:  # beneath a directory of ours, which the sandbox's uid may enter
                args += ["--perms", "0755", "--dir", f"{inside}/{name.rsplit('/', 1)[0]}"]
            args += ["--ro-bind", str(path), f"{inside}/{name}"]
        args += ["--remount-ro", inside]
    for inside, path in file_binds:
        args += ["--ro-bind", str(path), inside]
    return args


def _filesystem_args(
    disk_bytes: int,
    ro_binds: Mapping[str, Path],
    writable_dirs: Sequence[str],
    site_files: Mapping[str, Path] | None = None,
) -> list[str]:
    """The budget tmpfs as the root (first, so every later mount lands on it), the read-only
    runtime (with any `site_files`) and binds, then the writable places: plain directories on
    the budget."""
    args = ["--size", str(disk_bytes), "--tmpfs", "/", *_runtime_args()]
    args += _site_file_args(site_files or {})
    for inside, host in ro_binds.items():
        args += _ro_bind(host, bind_target(inside))
    args += ["--proc", "/proc", "--dev", "/dev"]
    args += ["--perms", "0755", "--dir", SANDBOX_WORKDIR]
    args += ["--perms", "01777", "--dir", "/tmp"]
    args += ["--perms", "0755", "--dir", "/run", "--perms", "01777", "--dir", SANDBOX_SHM]
    for inside in writable_dirs:
        path = PurePosixPath(inside)
        args += [*_dir_with_parents(path), "--perms", "0755", "--dir", str(path)]
    return args


def _namespace_args(env: Mapping[str, str] | None, status_fd: int) -> list[str]:
    """Every namespace but the user's unshared (the identity decides that one)."""
    return [
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


def _identity_args(tools: Mapping[str, str], uid: int | None, owned: Sequence[str]) -> list[str]:
    """Who the driver and the program run as: an unprivileged user namespace, or a dedicated
    uid. As root, a root step first gives the writable directories (`owned`) to that uid: the
    budget tmpfs and its directories were made by root."""
    if uid is None:
        return ["--unshare-user"]
    # Privileged bubblewrap drops every capability unless told otherwise; chown and setpriv
    # need these three, and setpriv loses them (and all others) as it switches uid.
    give = f"{shlex.quote(tools['chown'])} {uid}:{uid} {' '.join(shlex.quote(p) for p in owned)}"
    switch = (
        f"exec {shlex.quote(tools['setpriv'])} --reuid={uid} --regid={uid} --clear-groups "
        '--inh-caps=-all -- "$@"'
    )
    return [
        "--cap-add",
        "CAP_SETUID",
        "--cap-add",
        "CAP_SETGID",
        "--cap-add",
        "CAP_CHOWN",
        "/bin/bash",
        "-c",
        f"{give} && {switch}",
        "srbench-root",
    ]


@dataclass(frozen=True)
class SandboxFds:
    """The descriptors the sandbox gets besides stdin/stdout/stderr, by the number it sees."""

    status: int  # bubblewrap's JSON status (outer)
    report: int  # the driver's and the shim's report lines
    control: int  # read end: a line from the host asks the driver to stop the program
    restore: int | None  # an archive to unpack into /app before the program
    snapshot: int | None  # write end: /app archived after the program
    collect: int | None  # write end: the `collect` files archived after the program


def _driver_args(
    tools: Mapping[str, str], fds: SandboxFds, wall_s: float, collect: Sequence[str]
) -> list[str]:
    """The driver: bash, as the sandbox uid, pid 2 of the sandbox. It unpacks the input, runs
    the inner bubblewrap (and so the program) under the wall limit, kills everything left,
    reports the budget's use and archives what the host asked for. Its own errors go nowhere;
    the program's stdout and stderr are the sandbox's."""
    tar, r = shlex.quote(tools["tar"]), fds.report
    lines = [f"exec {fds.status}>&- {{err}}>&2 2>/dev/null"]
    if fds.restore is not None:
        lines.append(
            f"{tar} -x -p --no-same-owner --warning=no-timestamp -f - -C {SANDBOX_WORKDIR} "
            f"<&{fds.restore}; echo restored $? >&{r}; exec {fds.restore}<&-"
        )
    closed = " ".join(f"{fd}>&-" for fd in (fds.snapshot, fds.collect) if fd is not None)
    lines += [
        # An asynchronous command's stdin would be /dev/null without the explicit redirection.
        f'exec {{inp}}<&0; "$@" <&$inp {{inp}}<&- 2>&$err {{err}}>&- {fds.control}<&- {closed} &',
        "p=$!",
        f"( if read -r -t {wall_s:.3f} -u {fds.control} _; then echo stopped host >&{r};"
        f" elif [ $? -gt 128 ]; then echo stopped timeout >&{r}; else echo stopped eof >&{r};"
        f" fi; kill -9 $p ) <&- >&- {{err}}>&- &",
        "wait $p; s=$?",
        # Every process the program left (kill(-1) spares only init and the caller).
        "kill -9 -1",
        f"echo exit $s >&{r}",
        f"{shlex.quote(tools['stat'])} -f -c 'disk %S %b %f' / >&{r}",
    ]
    if fds.snapshot is not None:
        lines.append(
            f"{tar} -c --sparse -f - -C {SANDBOX_WORKDIR} . >&{fds.snapshot};"
            f" echo snapshot $? >&{r}; exec {fds.snapshot}>&-"
        )
    if fds.collect is not None:
        names = " ".join(shlex.quote(str(PurePosixPath(p).relative_to("/"))) for p in collect)
        lines.append(
            f"{tar} -c --no-recursion --ignore-failed-read -f - -C / {names} >&{fds.collect};"
            f" echo collect $? >&{r}; exec {fds.collect}>&-"
        )
    lines.append("exit $s")
    return ["/bin/bash", "-c", "\n".join(lines), "srbench-driver"]


def _inner_args(tools: Mapping[str, str]) -> list[str]:
    """The second bubblewrap, unprivileged, around the program: the same tree (the budget and
    every mount, `/dev` made read-only with `/dev/shm` on the budget), in a user namespace of
    its own that may not create more."""
    return [
        tools["bwrap"],
        "--dev-bind",
        "/",
        "/",
        "--remount-ro",
        "/dev",
        "--bind",
        SANDBOX_SHM,
        "/dev/shm",
        "--unshare-user",
        "--disable-userns",
        "--die-with-parent",
        "--new-session",
        "--chdir",
        SANDBOX_WORKDIR,
        "--",
    ]


def _shim_args(report_fd: int) -> list[str]:
    # A bash shim runs the program and reports that it started and its children's CPU time on
    # the report fd (closed for the program itself): bubblewrap's pid-namespace init is not
    # waited for in a way that passes CPU time up to our wait4, so the host cannot measure it.
    # Bash's own "Killed"/"Segmentation fault" notices go to /dev/null, not the program's stderr.
    # The program gets no reporting fd, so it cannot forge its own status or CPU time.
    shim = (
        f"exec {{err}}>&2 2>/dev/null; echo started >&{report_fd}; "
        f'"$@" 2>&$err {{err}}>&- {report_fd}>&-; '
        f"s=$?; echo times >&{report_fd}; times >&{report_fd}; exit $s"
    )
    return ["/bin/bash", "-c", shim, "sandbox"]


def sandbox_command(
    argv: Sequence[str],
    *,
    limits: SandboxLimits,
    uid: int | None,
    ro_binds: Mapping[str, Path],
    writable_dirs: Sequence[str],
    collect: Sequence[str],
    env: Mapping[str, str] | None,
    fds: SandboxFds,
    site_files: Mapping[str, Path] | None = None,
) -> list[str]:
    """prlimit → bubblewrap (budget, binds, namespaces, identity) → the driver → the inner
    bubblewrap (no user namespaces) → the reporting shim → ``argv``."""
    tools = sandbox_tools()
    return [
        *_prlimit_args(tools, limits, uid),
        tools["bwrap"],
        *_filesystem_args(disk_budget_bytes(limits), ro_binds, writable_dirs, site_files),
        *_namespace_args(env, fds.status),
        *_identity_args(tools, uid, [SANDBOX_WORKDIR, *writable_dirs]),
        *_driver_args(tools, fds, limits.wall_s, collect),
        *_inner_args(tools),
        *_shim_args(fds.report),
        *argv,
    ]
