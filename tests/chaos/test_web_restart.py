"""The web process restarted during a CLI run (issue 13 point 1).

Real processes: the API under uvicorn on a fixed loopback port, a `celery worker`, the slow
simulator, and the installed `srbench` console script pointed at the API by URL and token. The
web process is SIGKILLed (a crash, an OOM kill, a careless deploy) and started again on the
same port:

- while `srbench run` follows a run: the CLI retries its reads with backoff, prints one notice,
  and finishes with exit 0 and the report the server has;
- for longer than the CLI's retry budget: the CLI exits 3 with one `error:` line saying how to
  resume, never a traceback; repeating the command it names returns the same run;
- while the create request waits for its INSERT (nothing committed): the CLI repeats the POST
  with its idempotency key, and exactly one run exists;
- after the create committed but before a byte of the response left (a relay in front of the
  web process, as a reverse proxy would be, kills it at the first byte of that response): the
  repeated POST is a replay of the same run, not a second one.

Each time the ledger must keep the promises of the kill trials (tests/chaos/support.py
`check_invariants`): no call sent twice, no completed call lost, every dispatched call completed
with evidence or `sent_unknown`, the run terminal or resumable, the report equal to the ledger;
and re-running the same command with the same idempotency key creates nothing.
"""

from __future__ import annotations

import contextlib
import json
import re
import shlex
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psycopg
import pytest
from django.db import connection
from rest_framework.authtoken.models import Token

from datasets.models import FrozenDataset
from runs.models import Call, Run
from srbench.cli.local import free_port
from tests import factories as f
from tests.chaos import support as cs
from tests.conftest import database_url_for_worker, purge_broker, wait_until
from tests.runs import engine_support as es

pytestmark = pytest.mark.worker

CLI_TIMEOUT = 120  # a whole run on a loaded 2-core machine, with a web restart in it
# The CLI's retry budget while the web process is down: longer than a uvicorn start at load 10
# on 2 cores (R15), so only the test that means to exhaust it (2 s) does.
CLI_RETRY_SECONDS = "120"


@pytest.fixture(scope="module")
def sim_url() -> Iterator[str]:
    with es.simulator(cs.BENCHMARKS, models=cs.SLOW_MODELS) as url:
        yield url


@dataclass
class Trial:
    web: cs.WebProcess
    worker: cs.ChaosWorker
    token: str
    dataset: FrozenDataset
    sim_url: str
    workdir: Path
    clis: list[cs.CliProcess] = field(default_factory=list)

    def run_args(
        self, url: str | None = None, key: str | None = None, target: str = "sim-strong"
    ) -> list[str]:
        """`srbench run` of the chaos plan (3 judged SimpleQA + 3 MMLU-Pro cells), --json. The
        slow `sim-strong` keeps calls in flight for a kill mid-run; `sim-weak` is fast."""
        args = ["run", "--url", url or self.web.url, "--token", self.token]
        args += ["--dataset", str(self.dataset.pk), "--target", target]
        args += ["--judge", "simpleqa=sim-judge", "--concurrency", "3", "--poll", "0.2", "--json"]
        return args + (["--idempotency-key", key] if key else [])

    def cli(self, name: str, args: list[str], **env: str) -> cs.CliProcess:
        env = {"SRBENCH_RETRY_SECONDS": CLI_RETRY_SECONDS, **env}
        process = cs.CliProcess(args, self.workdir, name, **env)
        self.clis.append(process)
        return process

    def sim(self) -> dict:
        return httpx.get(f"{self.sim_url}/_sim/stats", timeout=10).json()

    def api_report(self, run_id: int) -> dict:
        return httpx.get(
            f"{self.web.url}/api/v1/runs/{run_id}/report/",
            headers={"Authorization": f"Token {self.token}"},
            timeout=30,
        ).json()


@pytest.fixture
def trial(transactional_db, sim_url: str, tmp_path: Path) -> Iterator[Trial]:
    purge_broker()
    es.sim_targets(sim_url)
    token, _ = Token.objects.get_or_create(user=f.user_create(username="ops", staff=True))
    worker = cs.ChaosWorker(tmp_path / "worker.log")
    web = cs.WebProcess(tmp_path / "web.log", free_port(0))
    t = Trial(web, worker, token.key, cs.small_dataset("web restart"), sim_url, tmp_path)
    worker.start()
    try:
        web.start()
        yield t
    finally:
        for process in t.clis:
            process.stop()
        web.stop()  # before the test database is flushed
        worker.stop()
        purge_broker()


def mid_run(run_id: int) -> None:
    """Some calls of the run completed, some in flight."""
    calls = Call.objects.filter(cell__run_id=run_id)
    wait_until(
        lambda: (
            calls.filter(status="completed").exists() and calls.filter(status__in=cs.OPEN).exists()
        ),
        timeout=60,
        interval=0.01,
    )


def printed(cli: cs.CliProcess, text: str, timeout: float = 60) -> None:
    """Wait until the CLI has written `text` to stderr; fail at once if it exited without."""

    def seen() -> bool:
        if text in cli.err():
            return True
        if cli.process.poll() is not None:
            raise AssertionError(f"the CLI exited {cli.process.returncode}: {cli.err()}")
        return False

    wait_until(seen, timeout=timeout, interval=0.05)


def the_run(key: str) -> Run:
    return wait_until(lambda: Run.objects.filter(idempotency_key=key).first(), timeout=60)


def assert_clean_exit(cli: cs.CliProcess, code: int) -> None:
    err = cli.err()
    assert "Traceback" not in err and "Traceback" not in cli.out(), err
    assert code == 0, err


def assert_ledger_and_report(
    t: Trial, cli: cs.CliProcess, run: Run, before: cs.Snapshot | None
) -> None:
    """The CLI printed the server's report; the ledger kept its promises; one run exists."""
    outcome = cs.check_invariants(run, before, t.sim()["by_call_id"])
    print(
        f"run {run.pk} {outcome.status}: calls {outcome.calls}, sent_unknown "
        f"{outcome.sent_unknown}, duplicates {outcome.duplicates}, lost {outcome.lost}, "
        f"web starts {t.web.starts}\n{cli.err()}"
    )
    assert outcome.duplicates == 0 and outcome.lost == 0 and outcome.unsettled == 0
    assert not outcome.problems, (outcome.problems, t.worker.log()[-3000:])
    assert outcome.status == "completed"  # only the web process died: the worker finished it
    printed = json.loads(cli.out())
    assert printed == t.api_report(run.pk)
    assert printed["run"]["id"] == run.pk and printed["run"]["status"] == "completed"
    assert printed["counts"]["completed"] == printed["denominator"] == 6
    assert Run.objects.count() == 1


def assert_rerun_creates_nothing(t: Trial, args: list[str], run: Run, name: str) -> None:
    sent = t.sim()["total_requests"]
    again = t.cli(name, args)
    assert_clean_exit(again, again.wait(CLI_TIMEOUT))
    assert f"run {run.pk} already existed for this idempotency key" in again.err()
    assert json.loads(again.out()) == t.api_report(run.pk)
    assert Run.objects.count() == 1 and t.sim()["total_requests"] == sent


def test_web_killed_while_the_cli_follows_a_run(trial: Trial) -> None:
    args = trial.run_args(key="follow-1")
    cli = trial.cli("follow", args)
    run = the_run("follow-1")
    printed(cli, f"run {run.pk} created", timeout=60)
    mid_run(run.pk)
    trial.web.kill()
    before = cs.snapshot(run)
    assert before.open_calls and not Run.objects.get(pk=run.pk).is_terminal
    # The CLI noticed (its next poll failed) and is retrying; then the web process comes back.
    printed(cli, "the srbench API is unreachable")
    trial.web.start()
    assert_clean_exit(cli, cli.wait(CLI_TIMEOUT))
    assert "the srbench API answers again" in cli.err()
    assert_ledger_and_report(trial, cli, run, before)
    assert_rerun_creates_nothing(trial, args, run, "follow-again")


def test_web_down_longer_than_the_retry_budget(trial: Trial) -> None:
    # No --idempotency-key: the CLI makes one up and must say how to repeat the command.
    args = trial.run_args()
    cli = trial.cli("give-up", args, SRBENCH_RETRY_SECONDS="2")
    run = wait_until(lambda: Run.objects.first(), timeout=60)
    printed(cli, f"run {run.pk} created", timeout=60)
    mid_run(run.pk)
    trial.web.kill()
    before = cs.snapshot(run)
    code = cli.wait(60)
    err = cli.err()
    assert "Traceback" not in err and cli.out() == "", err
    assert code == 3, err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and err.rstrip().endswith(errors[0]), err
    assert "gave up after retrying GET" in errors[0]
    assert f"Run {run.pk} goes on without this command" in errors[0]
    assert f"`srbench show {run.pk}`" in errors[0]
    resume = re.search(r"repeat this command with (--idempotency-key cli-\S+ --name '[^']+')", err)
    assert resume, err
    assert resume[1].split()[1] == run.idempotency_key

    trial.web.start()
    resumed = trial.cli("resumed", [*args, *shlex.split(resume[1])])
    assert_clean_exit(resumed, resumed.wait(CLI_TIMEOUT))
    assert f"run {run.pk} already existed for this idempotency key" in resumed.err()
    assert_ledger_and_report(trial, resumed, run, before)


def test_web_killed_while_the_create_request_waits_to_commit(trial: Trial) -> None:
    """The create request is held at its INSERT (the test locks the runs table against
    writes), the web process dies there: nothing was committed, the CLI's POST lost its
    connection, and the CLI repeats it with the same key once the web process is back."""
    args = trial.run_args(key="create-1", target="sim-weak")
    with psycopg.connect(database_url_for_worker()) as locker:
        locker.execute(f'LOCK TABLE "{Run._meta.db_table}" IN EXCLUSIVE MODE')
        cli = trial.cli("create", args)
        wait_until(lambda: insert_waiting_for_lock(Run._meta.db_table), timeout=60, interval=0.05)
        trial.web.kill()
        locker.rollback()  # the orphaned INSERT proceeds; its backend then finds the client gone
    printed(cli, "retrying POST runs/")
    assert "created" not in cli.err()
    trial.web.start()
    assert_clean_exit(cli, cli.wait(CLI_TIMEOUT))
    run = Run.objects.get(idempotency_key="create-1")
    assert f"run {run.pk} created (idempotency key create-1)" in cli.err()
    assert_ledger_and_report(trial, cli, run, None)


def insert_waiting_for_lock(table: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND query LIKE %s",
            [f'INSERT INTO "{table}"%'],
        )
        return cursor.fetchone()[0] > 0


class CreateResponseCutter:
    """A loopback relay in front of the web process, as a reverse proxy would be. The first time
    the response to `POST /api/v1/runs/` starts to come back — the run is committed and its
    doorbell rung — it calls `cut` (which SIGKILLs the web process) and closes the client's
    connection without relaying a byte of that response. While nothing listens upstream it
    answers 502, as a proxy does. Everything else is relayed unchanged."""

    def __init__(self, upstream_port: int, cut: Callable[[], None]) -> None:
        self.upstream_port, self.cut = upstream_port, cut
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.armed = threading.Lock()  # released once: the one cut
        self.done = threading.Event()
        self.bad_gateways = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=5)
        except OSError:
            self.bad_gateways += 1
            with contextlib.suppress(OSError), client:
                client.settimeout(5)
                client.recv(65536)
                client.sendall(
                    b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                )
            return
        upstream.settimeout(None)
        create = threading.Event()
        threading.Thread(target=self._up, args=(client, upstream, create), daemon=True).start()
        with contextlib.suppress(OSError), client, upstream:
            while data := upstream.recv(65536):
                if create.is_set() and self.armed.acquire(blocking=False):
                    self.cut()
                    self.done.set()
                    break  # the client gets no byte of the response
                client.sendall(data)
            # shutdown, not just close: the other relay thread is blocked reading these sockets.
            for sock in (client, upstream):
                sock.shutdown(socket.SHUT_RDWR)

    @staticmethod
    def _up(client: socket.socket, upstream: socket.socket, create: threading.Event) -> None:
        with contextlib.suppress(OSError):
            while data := client.recv(65536):
                if b"POST /api/v1/runs/ HTTP/1.1" in data:
                    create.set()
                upstream.sendall(data)
            upstream.shutdown(socket.SHUT_WR)


def test_web_killed_after_the_create_committed_before_it_answered(trial: Trial) -> None:
    relay = CreateResponseCutter(trial.web.port, trial.web.kill)
    try:
        args = trial.run_args(url=relay.url, key="lost-1", target="sim-weak")
        cli = trial.cli("lost-response", args)
        assert relay.done.wait(60), cli.err()
        # The run was committed (and dispatched) before the first byte of the answer.
        run = Run.objects.get(idempotency_key="lost-1")
        printed(cli, "retrying POST runs/")
        wait_until(lambda: relay.bad_gateways, timeout=60)  # it retried while nothing listened
        assert "created" not in cli.err()
        trial.web.start()
        assert_clean_exit(cli, cli.wait(CLI_TIMEOUT))
        # The repeated POST found the run the lost answer was about.
        assert f"run {run.pk} already existed for this idempotency key" in cli.err()
        assert_ledger_and_report(trial, cli, run, None)
    finally:
        relay.close()
