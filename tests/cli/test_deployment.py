"""Processes, not threads (issue 7): the API served by uvicorn with the installed `srbench`
console script pointed at it by URL and token, and the `simulator` verb as a server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from rest_framework.authtoken.models import Token

from srbench.cli.local import free_port
from tests import factories as f
from tests.conftest import ROOT, database_url_for_worker

pytestmark = pytest.mark.django_db(transaction=True)

SRBENCH = Path(sys.executable).with_name("srbench")


def child_env() -> dict[str, str]:
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "srbench.settings_test",
        "DATABASE_URL": database_url_for_worker(),
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
        "SRBENCH_VAR_DIR": str(settings.VAR_DIR),
    }


def wait_for(url: str, process: subprocess.Popen[bytes], timeout: float = 60) -> httpx.Response:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"{process.args!r} exited with {process.returncode}")
        try:
            return httpx.get(url, timeout=2)
        except httpx.HTTPError:
            time.sleep(0.2)
    raise AssertionError(f"{url} did not answer within {timeout}s")


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@pytest.fixture
def uvicorn_server(tmp_path: Path) -> Iterator[str]:
    port = free_port(0)
    log = open(tmp_path / "uvicorn.log", "wb")  # noqa: SIM115 - held by the child
    process = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "srbench.asgi:application",
         "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"],
        cwd=ROOT, env=child_env(), stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(f"{url}/login/", process)
        yield url
    finally:
        stop(process)  # before the test database is flushed or dropped
        log.close()


def srbench(*args: str) -> subprocess.CompletedProcess[str]:
    # The console script with no in-process fallback: everything goes over HTTP.
    return subprocess.run(
        [str(SRBENCH), *args], env=child_env(), capture_output=True, text=True, timeout=120
    )


def test_console_script_against_uvicorn(uvicorn_server: str) -> None:
    assert SRBENCH.exists(), "pip install -e . installs the srbench console script"
    token, _ = Token.objects.get_or_create(user=f.user_create(username="remote"))
    run = f.run_create(name="served by uvicorn")
    f.target_create(slug="remote-t")
    connection = ["--url", uvicorn_server, "--token", token.key]

    listed = srbench("runs", *connection)
    assert listed.returncode == 0, listed.stderr
    assert "served by uvicorn" in listed.stdout and str(run.pk) in listed.stdout

    targets = srbench("targets", *connection, "--json")
    assert targets.returncode == 0 and json.loads(targets.stdout)[0]["slug"] == "remote-t"

    missing = srbench("report", "999999", *connection)
    assert missing.returncode == 2 and missing.stderr.startswith("error: run 999999 does not exist")

    bad_token = srbench("runs", "--url", uvicorn_server, "--token", "not-a-token")
    assert bad_token.returncode == 2 and "Invalid token" in bad_token.stderr

    unreachable = srbench("runs", "--url", "http://127.0.0.1:9", "--token", token.key)
    assert unreachable.returncode == 2 and "cannot reach the srbench API" in unreachable.stderr


def test_simulator_verb_serves_models(tmp_path: Path) -> None:
    port = free_port(0)
    log = open(tmp_path / "simulator.log", "wb")  # noqa: SIM115 - held by the child
    process = subprocess.Popen(
        [str(SRBENCH), "simulator", "--port", str(port)],
        cwd=ROOT, env=child_env(), stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        models = wait_for(f"http://127.0.0.1:{port}/v1/models", process).json()
        assert models["object"] == "list" and any(m["id"] == "sim-strong" for m in models["data"])
    finally:
        stop(process)
        log.close()
    assert process.returncode is not None
