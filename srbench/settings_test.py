"""Test settings: the real PostgreSQL and Redis on loopback unless the environment says otherwise.

`make test` (scripts/run_tests.sh) passes TEST_DATABASE_URL / TEST_BROKER_URL on as
DATABASE_URL / CELERY_BROKER_URL when they are set; any URL in the environment wins. Without
one, the names come from the checkout (issue 36 item 4), so two suites on one machine (two
clones, two worktrees) never share a database, a broker DB or a var directory:

- the database is `srbench_<digest>` (pytest-django creates `test_srbench_<digest>`), the digest
  being the first 12 hex digits of SHA-256 of the checkout's absolute path: one path always gives
  the same name, two paths collide with probability 2^-48;
- Redis has only 16 DBs, too few for a hash alone (two checkouts would share one DB 1 time in
  11), so the DB is *claimed*: the checkout's hash picks where to start in REDIS_POOL and the
  first DB whose lock file (an flock held by this process for its lifetime, released by the
  kernel even on a crash) is free is taken. Two suites on one machine get two DBs for sure; a
  twelfth at once fails loudly. An explicit broker URL also takes its DB's lock when free, so a
  derived suite steps around a suite started with TEST_BROKER_URL;
- the var directory is `/tmp/srbench-test-var-<digest>`.
The chosen URLs are put into the environment, so every process a test starts (workers, the
web process, the CLI) inherits them instead of choosing again.
"""

import fcntl
import hashlib
import os
import tempfile
import urllib.parse
from pathlib import Path
from typing import IO

CHECKOUT = Path(__file__).resolve().parent.parent
POSTGRES_SERVER = "postgres://postgres@127.0.0.1:5432"
REDIS_SERVER = "redis://127.0.0.1:6379"
# Not 0 (every Redis client's default, the README's), 12 (`make bench`), 14 (the embedded-path
# test's inner suite) nor 15 (the fixed DB of checkouts from before issue 36).
REDIS_POOL = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11)
LOCK_DIR = Path(tempfile.gettempdir()) / "srbench-test-locks"


def checkout_digest(checkout: Path) -> str:
    """12 hex digits naming a checkout: the same path always gives the same digits."""
    return hashlib.sha256(str(checkout.resolve()).encode()).hexdigest()[:12]


def checkout_database_name(checkout: Path) -> str:
    return f"srbench_{checkout_digest(checkout)}"


def redis_db_order(checkout: Path) -> list[int]:
    """REDIS_POOL rotated to start where the checkout's hash points."""
    start = int(checkout_digest(checkout), 16) % len(REDIS_POOL)
    return [*REDIS_POOL[start:], *REDIS_POOL[:start]]


def _lock(server: str, db: int) -> IO[str] | None:
    """The lock of one Redis DB of one server, or None when another process holds it."""
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    where = urllib.parse.urlparse(server)
    name = f"redis-{where.hostname or '127.0.0.1'}-{where.port or 6379}-{db}.lock"
    handle = open(LOCK_DIR / name, "a")  # noqa: SIM115 - held open for the process's lifetime
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


def claim_redis_db(checkout: Path, server: str = REDIS_SERVER) -> tuple[int, IO[str]]:
    """The first free DB in the checkout's order, with its lock (keep the handle open)."""
    for db in redis_db_order(checkout):
        handle = _lock(server, db)
        if handle is not None:
            return db, handle
    raise RuntimeError(
        f"every Redis DB of {REDIS_POOL} on {server} is claimed by another test suite on this "
        f"machine (locks in {LOCK_DIR}); set TEST_BROKER_URL to choose one"
    )


def _broker_claim() -> IO[str] | None:
    """Derive CELERY_BROKER_URL when it is unset; take an explicit Redis DB's lock when free."""
    url = os.environ.get("CELERY_BROKER_URL")
    if url is None:
        db, handle = claim_redis_db(CHECKOUT)
        os.environ["CELERY_BROKER_URL"] = f"{REDIS_SERVER}/{db}"
        return handle
    where = urllib.parse.urlparse(url)
    if where.scheme == "redis" and where.path.strip("/").isdigit():
        return _lock(url, int(where.path.strip("/")))  # None: a parent suite holds it
    return None


os.environ.setdefault("SECRET_KEY", "test-only-secret-key")
os.environ.setdefault("DATABASE_URL", f"{POSTGRES_SERVER}/{checkout_database_name(CHECKOUT)}")
_redis_claim = _broker_claim()  # open for the process's lifetime: the claim
os.environ.setdefault("SRBENCH_VAR_DIR", f"/tmp/srbench-test-var-{checkout_digest(CHECKOUT)}")
# Short leases so the tests see a dead worker's cells settled within seconds.
os.environ.setdefault("SRBENCH_CELL_LEASE_SECONDS", "4")
os.environ.setdefault("SRBENCH_REAPER_INTERVAL_SECONDS", "1")

from srbench.settings import *  # noqa: E402,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast user creation only
