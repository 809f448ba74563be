"""Who uses the embedded PostgreSQL (srbench.embedded_pg): each process registers its pid in
var/.pg.users/ and the last one to exit stops the server. A registration left by a process that
died without its exit handlers must not keep the server in use once its pid names another
process; and the demo's web, stopped by the demo, unregisters."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import httpx

from srbench import embedded_pg
from srbench.cli.local import demo_commands, start_children, stop_children
from tests.srbench.test_embedded_pg import HOLD, ROOT, embedded_env, free_port


def start_holder(env: dict[str, str]) -> subprocess.Popen[str]:
    """A user of the embedded server that holds it until its stdin closes."""
    return subprocess.Popen(
        [sys.executable, "-c", HOLD],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def users(pgdata: Path) -> set[str]:
    directory = pgdata.parent / f".{pgdata.name}.users"
    return {p.name for p in directory.glob("*")} if directory.exists() else set()


def test_a_registration_whose_pid_now_names_another_process_does_not_keep_the_server(
    shared_dir: Path,
):
    env = embedded_env(shared_dir)
    pgdata = shared_dir / "pg"
    holder = start_holder(env)
    # A process unrelated to the database, alive, whose pid a dead user of the server had
    # before it (as after uvicorn died of its re-raised SIGTERM and the pid was given again).
    reuser = subprocess.Popen(["sleep", "600"])
    try:
        assert holder.stdout.readline().strip() == "connected"
        assert users(pgdata) == {str(holder.pid)}
        stat = Path(f"/proc/{reuser.pid}/stat").read_text()
        started = stat[stat.rfind(")") + 2 :].split()[19]  # field 22: its start time
        stale = pgdata.parent / f".{pgdata.name}.users" / str(reuser.pid)
        stale.write_text(f"{int(started) - 100}\n")  # the earlier process started earlier
    finally:
        holder.stdin.close()
        holder.wait(timeout=120)
    try:
        # The holder was the last live user: it stopped the server and removed the stale entry.
        assert holder.returncode == 0
        assert not embedded_pg.is_running(pgdata)
        assert users(pgdata) == set()
    finally:
        reuser.kill()
        reuser.wait()


def test_a_live_user_keeps_the_server_whatever_its_registration_holds(shared_dir: Path):
    """The other side: a registration of a process that still runs keeps the server (also
    one written without a start time, by an older version)."""
    env = embedded_env(shared_dir)
    pgdata = shared_dir / "pg"
    holder = start_holder(env)
    other = subprocess.Popen(["sleep", "600"])
    try:
        assert holder.stdout.readline().strip() == "connected"
        (pgdata.parent / f".{pgdata.name}.users" / str(other.pid)).write_text("")
    finally:
        holder.stdin.close()
        holder.wait(timeout=120)
    try:
        assert embedded_pg.is_running(pgdata)
        assert users(pgdata) == {str(other.pid)}
    finally:
        other.kill()
        other.wait()
        embedded_pg.stop(pgdata)


def test_the_demos_web_stopped_by_the_demo_unregisters(shared_dir: Path):
    """uvicorn re-raises the SIGTERM it caught once it has shut down, and dies without its exit
    handlers; stopped by the demo, the web exits normally and so unregisters, and the server it
    was the last user of stops. The web as the demo starts it (demo_commands, start_children)."""
    env = embedded_env(shared_dir)
    pgdata = shared_dir / "pg"
    port = free_port()
    commands = demo_commands(port, free_port(), shared_dir / "unused.toml")
    logs = shared_dir / "logs"
    logs.mkdir()
    children: dict[str, subprocess.Popen[bytes]] = {}
    try:
        start_children({"web": commands["web"]}, env, logs, children)
        web = children["web"]
        deadline = time.monotonic() + 240
        base = f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=base, timeout=60) as client:
            while time.monotonic() < deadline:
                assert web.poll() is None, (logs / "web.log").read_text()
                try:
                    form = client.get("/login/")
                    break
                except httpx.HTTPError:
                    time.sleep(0.5)
            # A login attempt reads the database: the web connects and registers (the
            # database is not migrated: the attempt itself ends in an error page).
            token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text)
            assert token, form.text
            client.post(
                "/login/",
                data={"csrfmiddlewaretoken": token.group(1), "username": "u", "password": "p"},
                headers={"Referer": f"{base}/login/"},
            )
        while str(web.pid) not in users(pgdata) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert str(web.pid) in users(pgdata), (logs / "web.log").read_text()
        assert embedded_pg.is_running(pgdata)
    finally:
        stop_children(children)
    assert web.returncode == 0, (logs / "web.log").read_text()
    assert users(pgdata) == set()
    assert not embedded_pg.is_running(pgdata)
