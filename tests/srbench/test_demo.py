"""`make demo` runs `manage.py benchmark demo`: on the embedded default (no DATABASE_URL, no
broker server) it brings up simulator, worker and web, prints a URL and a login that work, and
runs a smoke evaluation of all nine benchmarks against the simulator's strong model, weak
model and router."""

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.embedded


def read_until(process: subprocess.Popen, pattern: str, lines: list[str]) -> re.Match:
    for line in process.stdout:
        lines.append(line)
        match = re.search(pattern, line)
        if match:
            return match
    raise AssertionError("demo exited before printing: " + "".join(lines))


def test_demo_prints_a_url_and_login_that_work_and_stops_cleanly(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "CELERY_BROKER_URL"}}
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "srbench.settings",
            "DJANGO_DEBUG": "1",
            "SRBENCH_VAR_DIR": str(tmp_path),
        }
    )
    demo = subprocess.Popen(
        [sys.executable, "manage.py", "benchmark", "demo", "--port", "0", "--simulator-port", "0"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    try:
        url = read_until(demo, r"running at (http://\S+)", lines).group(1)
        username, password = read_until(demo, r"log in as: (\S+) / (\S+)", lines).groups()
        # The demo runs a real smoke evaluation of the MCQ, judge and grid benchmarks.
        finished = read_until(demo, r"evaluation finished: run (\d+) (\w+)", lines)
        assert finished.group(2) == "completed", "".join(lines)
        text = "".join(lines)
        # All nine benchmarks complete, so each target gets a full sr-bench score (R4.2).
        for benchmark in (
            "mmlu-pro",
            "gpqa",
            "simpleqa",
            "hle",
            "arc",
            "livecodebench",
            "scicode",
            "terminal-bench",
            "tau3",
        ):
            assert benchmark in text
        assert "sim-router (mom): sr-bench score" in text, text
        assert "subset macro average" not in text

        with httpx.Client(base_url=url, follow_redirects=False, timeout=10) as web:
            assert web.get("/").status_code == 302  # login required
            login_page = web.get("/login/")
            token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login_page.text)[1]
            response = web.post(
                "/login/",
                data={"username": username, "password": password, "csrfmiddlewaretoken": token},
            )
            assert response.status_code == 302, response.text[:500]
            runs = web.get("/")
            assert runs.status_code == 200 and "Runs" in runs.text
            assert web.get("/static/css/srbench.css").status_code == 200

        # The demo's worker answers through the embedded broker.
        doctor = subprocess.run(
            [sys.executable, "manage.py", "benchmark", "doctor", "--timeout", "60"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    finally:
        demo.send_signal(signal.SIGINT)
        demo.wait(timeout=60)
    assert (tmp_path / "srbench.sqlite3").exists()
