"""Test settings: the real PostgreSQL and Redis on loopback unless the environment says otherwise.

`make test` exports DATABASE_URL / CELERY_BROKER_URL; these defaults let a plain `pytest` work
on a development machine with the services already running.
"""

import os

os.environ.setdefault("SECRET_KEY", "test-only-secret-key")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/srbench")
os.environ.setdefault("CELERY_BROKER_URL", "redis://127.0.0.1:6379/15")
os.environ.setdefault("SRBENCH_VAR_DIR", "/tmp/srbench-test-var")
# Short leases so the tests see a dead worker's cells settled within seconds.
os.environ.setdefault("SRBENCH_CELL_LEASE_SECONDS", "4")
os.environ.setdefault("SRBENCH_REAPER_INTERVAL_SECONDS", "1")

from srbench.settings import *  # noqa: E402,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast user creation only
