"""Shared fixtures: real database, real broker, a real Celery worker process."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent


def wait_until(
    predicate: Callable[[], Any], *, timeout: float = 30.0, interval: float = 0.1
) -> Any:
    """Poll the database (results are ignored by design) until the predicate holds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Outside the browser tests no event loop may be running in the main thread when a test
    starts: one left running (Playwright's sync API keeps its loop marked as running while it
    is open) makes Django's test client refuse every async view, so the tests that read the
    events long poll would fail depending only on which tests ran before them."""
    if "tests/e2e/" in str(item.fspath):
        return
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return
    pytest.fail(f"an event loop is left running in the main thread by an earlier test: {loop!r}")


def database_url_for_worker() -> str:
    """The URL of the *test* database pytest-django created, for a worker process."""
    db = connection.settings_dict
    user = db.get("USER") or "postgres"
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    host = db.get("HOST") or "127.0.0.1"
    port = db.get("PORT") or 5432
    return f"postgres://{user}{password}@{host}:{port}/{db['NAME']}"


def purge_broker() -> None:
    url = settings.CELERY_BROKER_URL
    if url.startswith("redis://"):
        import redis

        redis.Redis.from_url(url).flushdb()
    elif url.startswith("filesystem://"):
        folder = Path(settings.CELERY_BROKER_TRANSPORT_OPTIONS["data_folder_in"])
        for message in folder.glob("*"):
            message.unlink(missing_ok=True)


class WorkerProcess:
    """A real `celery worker` subprocess on the configured broker and the test database."""

    def __init__(
        self,
        log_path: Path,
        extra_args: list[str] | None = None,
        *,
        broker_url: str | None = None,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.log_path = log_path
        self.extra_args = extra_args or []
        self.broker_url = broker_url or settings.CELERY_BROKER_URL
        self.extra_env = extra_env or {}
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "srbench.settings_test",
            "DATABASE_URL": database_url_for_worker(),
            "CELERY_BROKER_URL": self.broker_url,
            "SRBENCH_VAR_DIR": str(settings.VAR_DIR),
            **self.extra_env,
        }
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child for its lifetime
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "srbench",
                "worker",
                "--loglevel=INFO",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                *self.extra_args,
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def stop(self, sig: int | None = None) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        if sig is not None:
            os.killpg(self.process.pid, sig)
        else:
            self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, 9)
            self.process.wait(timeout=10)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def warnings(self, last: int = 20) -> list[str]:
        """The log's last WARNING/ERROR lines: what a failed assertion about a run should show
        (a lost claim, a failed renewal), since the log itself is gone with tmp_path."""
        lines = [line for line in self.log().splitlines() if "WARNING" in line or "ERROR" in line]
        return lines[-last:]


@pytest.fixture
def celery_worker(transactional_db: None, tmp_path: Path) -> Iterator[WorkerProcess]:
    """A fresh worker per test: tests that need a worker commit their rows (transactional_db)
    because a separate process sees only committed data."""
    purge_broker()
    worker = WorkerProcess(tmp_path / "worker.log", ["--pool=solo"])
    worker.start()
    try:
        yield worker
    finally:
        worker.stop()
        purge_broker()
