"""`make bench`: every benchmark script in order, their figures printed as they come; the first
failure stops the run loudly with the script's exit status (issue 36 item 4; this replaces a
20-line shell chain in the Makefile, with the same scripts and arguments).

The servers are the ones scripts/ensure_services.sh finds (or starts) for the tests: the
server of TEST_DATABASE_URL / TEST_BROKER_URL when set, else PostgreSQL and Redis on loopback.
The engine scripts share the database `srbench_bench` and Redis DB 12 (BENCH_DATABASE_URL,
BENCH_BROKER_URL); each scale script gets a scratch database of its own, created and migrated
before it runs and dropped after, so a live database's rows never mix with its numbers.

    .venv/bin/python bench/run_all.py [--list] [--from SCRIPT]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parent.parent
BENCH_REDIS_DB = 12


@dataclass(frozen=True)
class Step:
    script: str
    args: tuple[str, ...]
    # A scratch database made (and migrated) for this script alone, passed as DATABASE_URL.
    scratch_db: str | None = None


STEPS = (
    Step("simulator_load.py", ("--streams", "1000")),
    Step(
        "engine_throughput.py",
        ("--concurrency", "32", "256", "--per-chunk", "250", "--workers", "1", "2", "4"),
    ),
    # C = 1,024 against the lean server (the simulator's bytes at less CPU), and the machine's
    # floor for the same workload: a null client against the same server.
    Step(
        "engine_throughput.py",
        ("--cells", "4096", "--chunk-gap", "0.016", "--concurrency", "1024", "--server", "lean"),
    ),
    Step("stream_floor.py", ("--cells", "4096", "--chunk-gap", "0.016", "--concurrency", "1024")),
    Step("read_path.py", ()),
    Step("scale_out.py", ("--cells", "3000", "--workers", "1", "2", "4")),
    Step("cli_path.py", ("--rounds", "3")),
    Step("side_by_side.py", ("--rounds", "2")),
    Step("report_scale.py", ("--commit",), scratch_db="srbench_bench_scale"),
    Step("poll_scale.py", ("--commit",), scratch_db="srbench_bench_poll"),
    Step("pages.py", ("--commit",), scratch_db="srbench_bench_pages"),
    Step("million.py", ("--repeat", "3"), scratch_db="srbench_bench_million"),
    Step("bootstrap_scale.py", ("--rounds", "2")),
)


class BenchFailed(Exception):
    pass


def server_of(url: str) -> str:
    """`postgres://user@host:port/name` → `postgres://user@host:port` (the same for redis)."""
    return url.rsplit("/", 1)[0]


def servers() -> tuple[str, str]:
    database = os.environ.get("TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    broker = os.environ.get("TEST_BROKER_URL", "redis://127.0.0.1:6379/0")
    return server_of(database), server_of(broker)


def ensure_services(env: dict[str, str]) -> str:
    """Run scripts/ensure_services.sh; the data directory of an embedded PostgreSQL it started
    (to stop at the end), or ''."""
    done = subprocess.run(
        ["scripts/ensure_services.sh"], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True
    )
    if done.returncode != 0:
        raise BenchFailed(f"scripts/ensure_services.sh exited {done.returncode}")
    found = re.search(r"SRBENCH_EMBEDDED_PGDATA='([^']*)'", done.stdout)
    return found[1] if found else ""


def recreate(server: str, name: str, *, drop_only: bool = False) -> None:
    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
        if not drop_only:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def call(argv: list[str], env: dict[str, str], what: str) -> None:
    print(f"\n=== make bench: {what}", flush=True)
    status = subprocess.run(argv, cwd=ROOT, env=env).returncode
    if status != 0:
        raise BenchFailed(f"{what} exited {status}")


def run_step(step: Step, env: dict[str, str], server: str) -> None:
    script = [sys.executable, f"bench/{step.script}", *step.args]
    what = " ".join(["bench/" + step.script, *step.args])
    if step.scratch_db is None:
        call(script, env, what)
        return
    scratch = {**env, "DATABASE_URL": f"{server}/{step.scratch_db}", "SECRET_KEY": "bench"}
    recreate(server, step.scratch_db)
    try:
        call([sys.executable, "manage.py", "migrate", "-v0"], scratch, f"migrate {step.scratch_db}")
        call(script, scratch, what)
    finally:
        recreate(server, step.scratch_db, drop_only=True)


def bench_env() -> tuple[dict[str, str], str]:
    database_server, broker_server = servers()
    env = {
        **os.environ,
        "PYTHON": sys.executable,
        "BENCH_DATABASE_URL": f"{database_server}/srbench_bench",
        "BENCH_BROKER_URL": f"{broker_server}/{BENCH_REDIS_DB}",
        # The scale scripts load srbench.settings_test: the bench's broker DB, not a claimed one.
        "CELERY_BROKER_URL": f"{broker_server}/{BENCH_REDIS_DB}",
    }
    return env, database_server


def steps_from(script: str | None) -> tuple[Step, ...]:
    """Every step, or those from the first step of ``script`` on; stops naming the steps when
    none runs it."""
    if script is None:
        return STEPS
    names = [step.script for step in STEPS]
    name = script.removeprefix("bench/")
    if name not in names:
        raise SystemExit(
            f"run_all.py: --from {script}: no such step; the steps: {', '.join(names)}"
        )
    return STEPS[names.index(name) :]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="print the steps and stop")
    parser.add_argument(
        "--from",
        dest="start",
        metavar="SCRIPT",
        help="start at the first step of this script (e.g. pages.py), after a failed step",
    )
    args = parser.parse_args(argv)
    steps = steps_from(args.start)
    if args.list:
        for step in steps:
            print(" ".join([f"bench/{step.script}", *step.args]))
        return 0
    env, server = bench_env()
    services = {**env, "TEST_DATABASE_URL": env["BENCH_DATABASE_URL"]}
    services["TEST_BROKER_URL"] = env["BENCH_BROKER_URL"]
    embedded = ""
    try:
        embedded = ensure_services(services)
        for step in steps:
            run_step(step, env, server)
    except BenchFailed as failure:
        print(f"\nmake bench: FAILED: {failure}", file=sys.stderr)
        return 1
    finally:
        if embedded:
            subprocess.run(
                [sys.executable, "-m", "srbench.embedded_pg", "stop", "--pgdata", embedded]
            )
    print("\nmake bench: every script finished")
    return 0


if __name__ == "__main__":
    sys.exit(main())
