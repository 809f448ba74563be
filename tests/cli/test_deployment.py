"""Processes, not threads (issue 7): the API served by uvicorn with the installed `srbench`
console script pointed at it by URL and token, and the `simulator` verb as a server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import warnings
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


def test_static_files_under_uvicorn_stream_without_a_warning(
    uvicorn_server: str, tmp_path: Path
) -> None:
    """Served by uvicorn (ASGI), a static file (whole, ranged, HEAD, not modified) is answered
    without Django's warning that a synchronous iterator is consumed asynchronously (an outside
    probe, 2026-12-06: every static file logged it)."""
    url = f"{uvicorn_server}/static/css/srbench.css"
    on_disk = (ROOT / "static" / "css" / "srbench.css").read_bytes()
    whole = httpx.get(url)
    assert whole.status_code == 200 and whole.content == on_disk
    ranged = httpx.get(url, headers={"Range": "bytes=0-9"})
    assert ranged.status_code == 206 and ranged.content == on_disk[:10]
    head = httpx.head(f"{uvicorn_server}/static/favicon.svg")
    assert head.status_code == 200 and head.content == b""
    again = httpx.get(url, headers={"If-None-Match": whole.headers["ETag"]})
    assert again.status_code == 304 and again.content == b""
    # The server's stderr (stderr is line-buffered: a warning is in the file once written).
    logged = (tmp_path / "uvicorn.log").read_text(errors="replace")
    assert "StreamingHttpResponse must consume" not in logged, logged
    assert "Traceback" not in logged, logged


def test_static_files_under_wsgi_stay_synchronous(client) -> None:  # type: ignore[no-untyped-def]
    """The WSGI side (the in-process CLI, the test server) is answered as WhiteNoise answers."""
    on_disk = (ROOT / "static" / "css" / "srbench.css").read_bytes()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        response = client.get("/static/css/srbench.css")
        assert response.status_code == 200 and b"".join(response.streaming_content) == on_disk
