"""Settings come from the environment; production refuses to start without a secret key."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def django_check(env_over: dict[str, str]) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in {"SECRET_KEY", "DJANGO_DEBUG"}}
    env.update(
        {"DJANGO_SETTINGS_MODULE": "srbench.settings", "SRBENCH_VAR_DIR": "/tmp/srb-settings"}
    )
    env.update(env_over)
    return subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True
    )


def test_production_refuses_to_start_without_a_secret_key():
    result = django_check({})
    assert result.returncode != 0
    assert "SECRET_KEY is not set" in result.stderr


def test_development_starts_with_the_dev_default():
    result = django_check({"DJANGO_DEBUG": "1"})
    assert result.returncode == 0, result.stderr


def test_production_starts_with_a_secret_key():
    result = django_check({"SECRET_KEY": "x" * 50})
    assert result.returncode == 0, result.stderr


def test_embedded_default_is_sqlite_and_a_serverless_broker():
    code = (
        "import django; django.setup(); from django.conf import settings as s; "
        "print(s.DATABASES['default']['ENGINE'], s.CELERY_BROKER_URL, "
        "s.DATABASES['default']['ATOMIC_REQUESTS'], s.CELERY_TASK_ACKS_LATE, "
        "s.CELERY_TASK_REJECT_ON_WORKER_LOST, s.CELERY_WORKER_PREFETCH_MULTIPLIER, "
        "s.CELERY_ACCEPT_CONTENT)"
    )
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "CELERY_BROKER_URL"}}
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "srbench.settings",
            "DJANGO_DEBUG": "1",
            "SRBENCH_VAR_DIR": "/tmp/srb-settings",
        }
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert out.stdout.split() == [
        "django.db.backends.sqlite3",
        "filesystem://",
        "False",
        "True",
        "True",
        "1",
        "['json']",
    ], out.stderr


def test_redis_broker_visibility_timeout_exceeds_the_task_time_limit():
    code = (
        "import django; django.setup(); from django.conf import settings as s; "
        "print(s.CELERY_BROKER_TRANSPORT_OPTIONS['visibility_timeout'] > s.CELERY_TASK_TIME_LIMIT)"
    )
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "srbench.settings",
        "DJANGO_DEBUG": "1",
        "CELERY_BROKER_URL": "redis://127.0.0.1:6379/15",
        "SRBENCH_VAR_DIR": "/tmp/srb-settings",
    }
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert out.stdout.strip() == "True", out.stderr
