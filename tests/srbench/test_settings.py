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


def settings_probe(env_over: dict[str, str], drop: set[str], code: str, var_dir: str):
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update({"DJANGO_SETTINGS_MODULE": "srbench.settings", "SRBENCH_VAR_DIR": var_dir})
    env.update(env_over)
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )


def test_embedded_default_is_postgresql_and_a_serverless_broker(tmp_path):
    code = (
        "import django; django.setup(); from django.conf import settings as s; "
        "print(s.DATABASES['default']['ENGINE'], s.CELERY_BROKER_URL, "
        "s.DATABASES['default']['ATOMIC_REQUESTS'], s.CELERY_TASK_ACKS_LATE, "
        "s.CELERY_TASK_REJECT_ON_WORKER_LOST, s.CELERY_WORKER_PREFETCH_MULTIPLIER, "
        "s.CELERY_ACCEPT_CONTENT, s.DEBUG)"
    )
    # No DATABASE_URL, no broker, no SECRET_KEY, no DJANGO_DEBUG: the README's embedded path.
    drop = {"DATABASE_URL", "CELERY_BROKER_URL", "SECRET_KEY", "DJANGO_DEBUG"}
    out = settings_probe({}, drop, code, str(tmp_path))
    assert out.stdout.split() == [
        "srbench.embedded_pg",
        "filesystem://localhost/",
        "False",
        "True",
        "True",
        "1",
        "['json']",
        "False",  # debug off unless asked
    ], out.stderr
    # Reading settings starts nothing: the server starts on the first connection.
    assert not (tmp_path / "pg").exists()
    # A development key was generated once, private, and is reused by the next process.
    key_file = tmp_path / "secret_key"
    assert key_file.stat().st_mode & 0o777 == 0o600
    key = key_file.read_text()
    again = settings_probe({}, drop, code + "; print(s.SECRET_KEY)", str(tmp_path))
    assert again.stdout.split()[-1] == key.strip()


def test_a_database_url_that_is_not_postgresql_is_refused(tmp_path):
    out = settings_probe(
        {"DATABASE_URL": f"sqlite:///{tmp_path}/x.sqlite3", "SECRET_KEY": "x" * 50},
        set(),
        "import django; django.setup()",
        str(tmp_path),
    )
    assert out.returncode != 0
    assert "DATABASE_URL must point at PostgreSQL" in out.stderr
    assert not (tmp_path / "x.sqlite3").exists()


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
