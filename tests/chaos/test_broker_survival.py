"""Workers that outlive their broker (issue 34, item 2; DESIGN §4 "infrastructure faults are
weather"). Workers run the compose file's own command (docker/compose.yaml: gossip, mingle and
event heartbeats on, the default prefork pool; on Redis a second worker adds `--pool=threads`)
against a broker of this test's own, never the machine's shared Redis or RabbitMQ. Mid-run the
broker is stopped and started again on the same port, once after 1 s and once after 30 s.
After each restart: the same worker process (same pid, running throughout the outage, no
"Unrecoverable error" in its log) is still there and has reconnected by itself, the run that
was in flight has ended, and a second run started after the restart completes, its cells
claimed by that worker (its pid or one of its pool processes). The kill trials' invariants
(no call sent twice, none lost, the report equal to the ledger) hold for every run.

Redis is stopped with SHUTDOWN NOSAVE (queued and unacked messages are gone); RabbitMQ is a
throwaway node (its own node name, AMQP and distribution ports, data, logs and cookie under
tmp_path) stopped with SIGTERM and started again on the same data, as an operator's restart.

Cost: both outages share one worker start per broker, the two Redis workers (one per pool, each
on its own database of the same server) share the outages, and a 30 s outage is waited out
while the run in flight finishes (the database is the truth, the broker only a doorbell).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import httpx
import pytest
import yaml
from kombu import Connection

from runs.models import Call, Cell, Run
from runs.tasks import run_drive
from srbench.celery import app
from tests import factories as f
from tests.chaos import support as cs
from tests.chaos.test_infra_faults import ThrowawayRedis, free_port
from tests.conftest import ROOT, wait_until
from tests.runs import engine_support as es

pytestmark = pytest.mark.worker

COMPOSE = ROOT / "docker" / "compose.yaml"
OUTAGES = (1.0, 30.0)  # seconds between the broker's stop and its start, in this order
RABBITMQ_SERVER = next(
    (
        Path(p)
        for p in ("/usr/lib/rabbitmq/bin/rabbitmq-server", shutil.which("rabbitmq-server"))
        if p and Path(p).exists()
    ),
    None,
)
LEASE_SECONDS = 20.0
CONNECTED = re.compile(rb"Connected to (redis|amqp)://")


@pytest.fixture(scope="module")
def sim_url():
    with es.simulator(cs.BENCHMARKS, models=cs.SLOW_MODELS) as url:
        yield url


def compose_worker_command() -> list[str]:
    """The worker service's command from docker/compose.yaml, run with this interpreter."""
    command = yaml.safe_load(COMPOSE.read_text())["services"]["worker"]["command"]
    assert command[:4] == ["celery", "-A", "srbench", "worker"], command
    return [sys.executable, "-m", *command]


class ComposeWorker(cs.ChaosWorker):
    """A worker started with the compose file's command (gossip, mingle, heartbeats and the
    default pool as deployed, plus `extra_args`), the chaos suite's short leases, on the
    given broker."""

    def __init__(self, log_path: Path, *, broker_url: str, extra_args: list[str]) -> None:
        super().__init__(log_path, broker_url=broker_url)
        self.extra_args = extra_args
        # No worker dies here: a lease long enough that no recovery pass rings another lane's
        # run into its own broker while that lane's worker is picking it up on a busy machine.
        self.extra_env["SRBENCH_CELL_LEASE_SECONDS"] = str(LEASE_SECONDS)

    def start(self) -> None:
        self.log_from = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [*compose_worker_command(), *self.extra_args],
                cwd=ROOT,
                env=cs.child_env(CELERY_BROKER_URL=self.broker_url, **self.extra_env),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def connections(self) -> int:
        """How many times this worker said it connected to its broker."""
        return len(CONNECTED.findall(self.log_path.read_bytes()))

    def pids(self) -> set[int]:
        """The worker's pid and its pool processes' (prefork children)."""
        assert self.process is not None
        pids = {self.process.pid}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            with contextlib.suppress(OSError, IndexError, ValueError):
                # pid (comm) state ppid ...; comm may hold spaces, so split after ')'.
                if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == self.process.pid:
                    pids.add(int(stat.parent.name))
        return pids


class Broker(Protocol):
    def start(self) -> None: ...
    def shutdown(self) -> None: ...
    def stop(self) -> None: ...


class Redis(ThrowawayRedis):
    def url(self, db: int) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def shutdown(self) -> None:
        """SHUTDOWN NOSAVE on a raw socket: redis-py would retry its connection for seconds
        after the server closed it, and the outage would start that much later."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=10) as s:
            s.sendall(b"*2\r\n$8\r\nSHUTDOWN\r\n$6\r\nNOSAVE\r\n")
            with contextlib.suppress(OSError):
                s.recv(1024)  # the server closes the connection as it goes
        assert self.process is not None
        self.process.wait(timeout=20)


class ThrowawayRabbitMQ:
    """A RabbitMQ node of this test's own: node name, AMQP port, distribution port, data, logs,
    config, cookie (HOME) and plugins file all under `workdir`, listening on loopback only; no
    plugin, so no management listener. The machine's node (rabbit@localhost, 5672) is never
    touched; the node registers its name with the machine's epmd like any other node."""

    def __init__(self, port: int, workdir: Path) -> None:
        self.port, self.workdir = port, workdir
        self.dist_port = free_port()
        self.node = f"srbench_chaos_{port}@localhost"
        self.url = f"amqp://guest:guest@127.0.0.1:{port}//"
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / "rabbitmq.out"
        for sub in ("home", "mnesia", "log"):
            (workdir / sub).mkdir(parents=True, exist_ok=True)
        (workdir / "rabbitmq-env.conf").write_text("")  # not the machine's /etc/rabbitmq one
        (workdir / "rabbitmq.conf").write_text(f"listeners.tcp.1 = 127.0.0.1:{port}\n")
        (workdir / "enabled_plugins").write_text("[].\n")

    def env(self) -> dict[str, str]:
        w = self.workdir
        return {
            **{k: v for k, v in os.environ.items() if not k.startswith(("RABBITMQ_", "ERL_"))},
            "HOME": str(w / "home"),  # this node's Erlang cookie
            "RABBITMQ_CONF_ENV_FILE": str(w / "rabbitmq-env.conf"),
            "RABBITMQ_CONFIG_FILE": str(w / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(w / "advanced.config"),
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": str(w / "mnesia"),
            "RABBITMQ_LOG_BASE": str(w / "log"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(w / "enabled_plugins"),
            "RABBITMQ_PLUGINS_EXPAND_DIR": str(w / "plugins-expand"),
            "RABBITMQ_FEATURE_FLAGS_FILE": str(w / "feature_flags"),
            "RABBITMQ_PID_FILE": str(w / "rabbitmq.pid"),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "ERL_FLAGS": "-kernel inet_dist_use_interface {127,0,0,1}",
        }

    def start(self, timeout: float = 120.0) -> None:
        assert RABBITMQ_SERVER is not None
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [str(RABBITMQ_SERVER)],
                env=self.env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while not self._answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError(
                    f"RabbitMQ node {self.node} did not answer on {self.port}: "
                    f"{self.log_path.read_text(errors='replace')[-3000:]}"
                )
            time.sleep(0.2)

    def _answers(self) -> bool:
        try:
            with Connection(self.url, connect_timeout=2) as conn:
                conn.connect()
                return True
        except Exception:  # noqa: BLE001 - any failure means "not yet"
            return False

    def stop(self) -> None:
        """SIGTERM to the node's process group: the node stops gracefully, as in a restart."""
        if self.process is None or self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=20)
        wait_until(lambda: not self._port_open(), timeout=60)

    shutdown = stop

    def _port_open(self) -> bool:
        with socket.socket() as s:
            s.settimeout(0.5)
            return s.connect_ex(("127.0.0.1", self.port)) == 0


@dataclass
class Lane:
    """One worker and the broker URL its runs are dispatched to (it is its only consumer)."""

    name: str
    worker: ComposeWorker
    url: str
    pid: int = 0

    def problems(self) -> list[str]:
        process = self.worker.process
        problems = []
        if process is None or process.pid != self.pid:
            problems.append(f"{self.name}: not the same worker process (pid {self.pid})")
        elif process.poll() is not None:
            problems.append(f"{self.name}: worker {self.pid} exited with {process.returncode}")
        if "Unrecoverable error" in self.worker.log():
            problems.append(f"{self.name}: 'Unrecoverable error' in the worker's log")
        return problems

    def assert_alive(self) -> None:
        assert not self.problems(), (self.problems(), self.worker.log()[-6000:])


def is_mid_run(run: Run) -> bool:
    calls = Call.objects.filter(cell__run=run)
    return calls.filter(status="completed").exists() and calls.filter(status__in=cs.OPEN).exists()


def by_call_id(sim_url: str) -> dict[str, int]:
    return httpx.get(f"{sim_url}/_sim/stats").json()["by_call_id"]


def broker_outages(
    broker: Broker, lanes: list[Lane], sim_url: str, set_lane: Callable[[Lane], None]
) -> list[str]:
    """Start the lanes' workers; then for each outage, on every lane at once: a run in flight,
    the broker down for that long, the run must end; the worker must reconnect by itself and
    complete a run started after the restart. Returns one summary line per lane and outage."""
    for lane in lanes:
        lane.worker.start()
    for lane in lanes:
        lane.worker.wait_ready()
        lane.pid = lane.worker.process.pid  # type: ignore[union-attr]
    owner = f.user_create()
    lines = []
    for n, down in enumerate(OUTAGES):
        in_flight: dict[str, Run] = {}
        for lane in lanes:
            set_lane(lane)
            in_flight[lane.name] = cs.start_run(
                owner, cs.small_dataset(f"{lane.name}-{n}-a"), f"{lane.name} {down:g}s in flight"
            )
        # Every lane's run mid-way at once: some calls completed, some in flight.
        runs = list(in_flight.values())
        wait_until(lambda r=runs: all(map(is_mid_run, r)), timeout=120, interval=0.01)
        before = {name: cs.snapshot(run) for name, run in in_flight.items()}
        connections = {lane.name: lane.worker.connections() for lane in lanes}
        t0 = time.monotonic()
        broker.shutdown()
        stopped = time.monotonic()
        while time.monotonic() - stopped < down:
            for lane in lanes:  # the workers must ride the outage out, not come back after it
                lane.assert_alive()
            time.sleep(0.2)
        broker.start()
        unreachable = time.monotonic() - t0
        for lane in lanes:
            run = in_flight[lane.name]
            state = cs.settle(run, timeout=240)
            assert state == "terminal", (state, cs.timeline(run), lane.worker.log()[-4000:])
            lane.assert_alive()
        back, reconnected = time.monotonic(), {}
        for lane in lanes:
            # Reconnected by itself (the retry backoff of a 30 s outage can reach 12 s).
            wait_until(
                lambda w=lane.worker, k=connections[lane.name]: w.connections() > k, timeout=120
            )
            reconnected[lane.name] = time.monotonic() - back
        after: dict[str, Run] = {}
        for lane in lanes:
            set_lane(lane)
            after[lane.name] = cs.start_run(
                owner, cs.small_dataset(f"{lane.name}-{n}-b"), f"{lane.name} {down:g}s after"
            )
        for lane in lanes:
            first = cs.check_invariants(
                in_flight[lane.name], before[lane.name], by_call_id(sim_url)
            )
            assert first.duplicates == first.lost == first.unsettled == 0, first.problems
            assert not first.problems, first.problems
            run = after[lane.name]
            state = cs.settle(run, timeout=240)
            assert state == "terminal", (state, cs.timeline(run), lane.worker.log()[-4000:])
            second = cs.check_invariants(run, None, by_call_id(sim_url))
            assert second.status == "completed", (
                second,
                cs.timeline(run),
                lane.worker.log()[-4000:],
            )
            assert not second.problems, second.problems
            lane.assert_alive()
            claimers = {
                int(claimed.split(":")[1])
                for claimed in Cell.objects.filter(run=run).values_list("claimed_by", flat=True)
            }
            assert claimers and claimers <= lane.worker.pids(), (claimers, lane.worker.pids())
            lines.append(
                f"{lane.name}: broker stopped {down:g}s (unreachable {unreachable:.1f}s), worker "
                f"pid {lane.pid} alive throughout, reconnected by itself (seen "
                f"{reconnected[lane.name]:.1f}s after the broker answered); run in flight "
                f"{first.status} "
                f"({first.calls} calls, sent_unknown {first.sent_unknown}, duplicates "
                f"{first.duplicates}, lost {first.lost}); run after the restart {second.status} "
                f"({second.calls} calls) by the same worker"
            )
    return lines


@pytest.fixture
def set_lane(monkeypatch):  # type: ignore[no-untyped-def]
    """run_dispatch publishes to the lane's broker URL (the workers' own recovery pass uses
    their own broker URL already)."""
    current: list[Lane] = []

    def dispatch(*, run_id: int) -> None:
        with app.connection_for_write(current[-1].url) as conn:
            run_drive.apply_async(args=[run_id], connection=conn)

    monkeypatch.setattr("runs.planning.services.run_dispatch", dispatch)
    return current.append


@pytest.mark.timeout(600)
@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")
def test_workers_outlive_redis_restarts(
    transactional_db, sim_url, tmp_path: Path, set_lane
) -> None:
    broker = Redis(free_port(), tmp_path)
    broker.start()
    es.sim_targets(sim_url)
    lanes = [
        Lane(
            f"redis {pool}",
            ComposeWorker(tmp_path / f"worker-{pool}.log", broker_url=url, extra_args=args),
            url,
        )
        for pool, url, args in (
            ("prefork", broker.url(0), []),
            ("threads", broker.url(1), ["--pool=threads"]),
        )
    ]
    try:
        lines = broker_outages(broker, lanes, sim_url, set_lane)
    finally:
        for lane in lanes:
            lane.worker.stop()
        broker.stop()
    print("\n" + "\n".join(lines))


@pytest.mark.timeout(600)
def test_worker_outlives_rabbitmq_restarts(
    transactional_db, sim_url, tmp_path: Path, set_lane
) -> None:
    if RABBITMQ_SERVER is None:
        pytest.skip("rabbitmq-server is not installed: the RabbitMQ restart is NOT tested")
    broker = ThrowawayRabbitMQ(free_port(), tmp_path / "rabbitmq")
    broker.start()
    es.sim_targets(sim_url)
    worker = ComposeWorker(tmp_path / "worker.log", broker_url=broker.url, extra_args=[])
    lanes = [Lane("rabbitmq prefork", worker, broker.url)]
    try:
        lines = broker_outages(broker, lanes, sim_url, set_lane)
    finally:
        worker.stop()
        broker.stop()
    print("\n" + "\n".join(lines))
