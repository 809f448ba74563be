"""Shared machinery of the fault suite: workers with short leases, a small judged run, a
ledger snapshot taken at the moment of a fault, and the five invariants checked after it.

The invariants (issue 13): no call sent twice; no completed call lost; every dispatched call
either completed with evidence or `sent_unknown`; the run terminal or resumable; the report
consistent with the ledger. `check_invariants` returns counts and a list of problems, so a
trial can be summarised before it is asserted.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
from django.conf import settings
from django.db.models import Count, Q, Sum

from datasets.models import FrozenDataset
from runs.models import TERMINAL_RUN_STATUSES, Call, CallEvidence, Cell, Run
from runs.planning.services import run_cancel, run_create
from runs.reporting.report import run_report
from runs.settlement.recovery import recovery_plan
from srbench.refusals import Refusal
from tests.conftest import ROOT, WorkerProcess, database_url_for_worker
from tests.runs.engine_support import fixture_dataset

# Short leases: a killed worker's cells are settled about 2 s after its last renewal. A live
# worker renews every third of a lease, so 2.5 s leaves room for a loaded 2-core machine.
LEASE_SECONDS = 2.5
REAPER_SECONDS = 0.5
# How long a run may sit with nothing held and nothing moving before `settle` calls it stuck
# (R15: time budgets hold at load 10 on 2 cores). A run nobody drives is rung again by the
# recovery pass after a whole lease without an event plus up to a reaper interval; a loaded
# worker then needs a few seconds to take the task and claim. Several such windows: a run
# still idle after them is not slow, no worker will ever drive it — a bug, never noise.
QUIET_SECONDS = 4 * LEASE_SECONDS + 2 * REAPER_SECONDS + 20
# A `celery worker` start (Django set-up, broker connection) on a loaded 2-core machine.
WORKER_READY_SECONDS = 120.0
# Slow enough that a kill can land before, during and after a stream and during grading.
SLOW_MODELS = {
    "sim-strong": {"ttft_s": 0.15, "tokens_per_second": 25.0, "chunk_tokens": 1},
    "sim-judge": {"ttft_s": 0.15, "tokens_per_second": 40.0, "chunk_tokens": 1},
}
BENCHMARKS = ["simpleqa", "mmlu-pro"]  # a judged benchmark (2 calls a cell) and a direct one
PER_BENCHMARK = 3
OPEN = ("sent", "streaming")


class ChaosWorker(WorkerProcess):
    """A `celery worker --pool=threads` with short leases, optionally on another broker."""

    def __init__(self, log_path: Path, *, broker_url: str | None = None) -> None:
        super().__init__(
            log_path,
            ["--pool=threads", "--concurrency=4"],
            broker_url=broker_url,
            extra_env={
                "SRBENCH_CELL_LEASE_SECONDS": str(LEASE_SECONDS),
                "SRBENCH_REAPER_INTERVAL_SECONDS": str(REAPER_SECONDS),
            },
        )
        self.log_from = 0  # where this start's output begins in a log shared by restarts

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def start(self) -> None:
        self.log_from = self.log_path.stat().st_size if self.log_path.exists() else 0
        super().start()

    def ready(self) -> bool:
        """The worker said `ready.`: it consumes its queues and its recovery pass runs."""
        if self.process is None or self.process.poll() is not None:
            code = None if self.process is None else self.process.returncode
            raise AssertionError(f"worker not running (exit {code}): {self.log()[-3000:]}")
        with open(self.log_path, "rb") as log:
            log.seek(self.log_from)
            return b" ready." in log.read()

    def wait_ready(self, timeout: float = WORKER_READY_SECONDS) -> None:
        """Poll the worker's log until it is ready (a budget for a loaded machine, R15)."""
        deadline = time.monotonic() + timeout
        while not self.ready():
            if time.monotonic() > deadline:
                raise AssertionError(f"worker not ready within {timeout}s: {self.log()[-3000:]}")
            time.sleep(0.1)


def small_dataset(name: str = "chaos") -> FrozenDataset:
    """PER_BENCHMARK fixture questions of each of BENCHMARKS (secrets included, for grading)."""
    return fixture_dataset(BENCHMARKS, name=name, per_benchmark=PER_BENCHMARK)


def start_run(
    owner: Any,
    dataset: FrozenDataset,
    name: str,
    concurrency: int = 3,
    max_cost_usd: str | None = None,
) -> Run:
    limits: dict[str, Any] = {"concurrency": concurrency}
    if max_cost_usd is not None:
        limits["max_cost_usd"] = max_cost_usd
    run, created = run_create(
        owner=owner,
        plan={
            "name": name,
            "dataset": dataset.pk,
            "targets": ["sim-strong"],
            "judges": {"simpleqa": "sim-judge"},
            "limits": limits,
        },
    )
    assert created
    return run


@dataclass
class Snapshot:
    """The ledger of a run at the instant of a fault (taken after the worker is gone)."""

    completed: dict[int, tuple[str, str]]  # call → (content, evidence sha256)
    dispatched: set[int]
    open_calls: set[int]
    cells: dict[str, int]


def snapshot(run: Run) -> Snapshot:
    calls = list(Call.objects.filter(cell__run=run).values_list("pk", "status", "content"))
    evidence = dict(
        CallEvidence.objects.filter(call__cell__run=run).values_list("call_id", "sha256")
    )
    cells = dict(
        Cell.objects.filter(run=run)
        .values("status")
        .annotate(n=Count("id"))
        .values_list("status", "n")
    )
    return Snapshot(
        completed={
            pk: (content, evidence.get(pk, ""))
            for pk, status, content in calls
            if status == "completed"
        },
        dispatched={pk for pk, _, _ in calls},
        open_calls={pk for pk, status, _ in calls if status in OPEN},
        cells=cells,
    )


@dataclass
class Outcome:
    status: str
    calls: int = 0
    duplicates: int = 0  # extra requests for one call id (must be 0)
    lost: int = 0  # calls completed before the fault and no longer completed with evidence
    unsettled: int = 0  # dispatched calls neither completed-with-evidence nor sent_unknown
    sent_unknown: int = 0
    unknown_never_reached: int = 0  # sent_unknown calls the model never saw: killed before send
    failed_with_evidence: int = 0
    resumable: bool = False
    problems: list[str] = field(default_factory=list)


def report_problems(run: Run) -> list[str]:
    """The report must say what the ledger says: counts and known costs from SQL."""
    report = run_report(run=run)
    problems = []
    cells = Cell.objects.filter(run=run).aggregate(
        planned=Count("id"),
        completed=Count("id", filter=Q(status="completed")),
        failed=Count("id", filter=Q(status="failed")),
        sent_unknown=Count("id", filter=Q(status="sent_unknown")),
        pending=Count("id", filter=Q(status__in=["pending", "running"])),
        correct=Count("id", filter=Q(correct=True)),
        scored=Count("id", filter=Q(scored=True)),
    )
    for key, value in cells.items():
        if report["counts"][key] != value:
            problems.append(f"report {key} {report['counts'][key]} != ledger {value}")
    if report["run"]["status"] != run.status:
        problems.append(f"report status {report['run']['status']} != {run.status}")
    calls = Call.objects.filter(cell__run=run)
    for role, key in (("subject", "known_cost_usd"), ("judge", "known_evaluation_cost_usd")):
        ledger = calls.filter(role=role).aggregate(s=Sum("cost_usd"))["s"] or Decimal(0)
        got = Decimal(report["targets"][0][key] or "0")
        if got != ledger:
            problems.append(f"report {key} {got} != ledger {ledger}")
    unknown_cost = calls.filter(role="subject", cost_usd__isnull=True).exists()
    complete = cells["completed"] == cells["planned"] and not unknown_cost
    if (report["targets"][0]["subject_cost_usd"] is not None) != complete:
        problems.append("report subject_cost_usd is known while the ledger is incomplete")
    if report["complete"] != (run.status == "completed" and complete):
        problems.append(f"report complete={report['complete']} with run {run.status}")
    return problems


def resumable_problems(run: Run) -> list[str]:
    """A terminal run that did not complete can be reviewed for recovery, and the plan never
    offers a cell whose call may have reached the model."""
    if run.status == "completed":
        return []
    problems = []
    try:
        plan = recovery_plan(run=run, mode="undispatched")
    except Refusal as exc:
        return [f"recovery plan refused: {exc.code}: {exc.message}"]
    eligible = {e["cell"] for e in plan["eligible_cells"]}
    dispatched = set(Cell.objects.filter(run=run, calls__isnull=False).values_list("pk", flat=True))
    if eligible & dispatched:
        problems.append(f"recovery would re-send cells {sorted(eligible & dispatched)}")
    covered = eligible | {e["cell"] for e in plan["excluded"]}
    if covered != set(Cell.objects.filter(run=run).values_list("pk", flat=True)):
        problems.append("recovery plan does not classify every cell")
    return problems


def check_invariants(
    run: Run, before: Snapshot | None, by_call_id: dict[str, int], *, strict_settled: bool = True
) -> Outcome:
    run.refresh_from_db()
    out = Outcome(status=run.status)
    calls = list(Call.objects.filter(cell__run=run).values_list("pk", "status", "content"))
    evidence = dict(
        CallEvidence.objects.filter(call__cell__run=run).values_list("call_id", "sha256")
    )
    out.calls = len(calls)
    for pk, status, _content in calls:
        sent = by_call_id.get(str(pk), 0)
        if sent > 1:
            out.duplicates += sent - 1
            out.problems.append(f"call {pk} reached the model {sent} times")
        if status == "completed":
            if pk not in evidence:
                out.unsettled += 1
                out.problems.append(f"call {pk} completed without evidence")
            if sent == 0:
                out.problems.append(f"call {pk} completed but the model never saw it")
        elif status == "sent_unknown":
            out.sent_unknown += 1
            out.unknown_never_reached += sent == 0
        elif status in ("failed", "cancelled") and pk in evidence and not strict_settled:
            out.failed_with_evidence += 1
        else:
            out.unsettled += 1
            out.problems.append(f"call {pk} is {status} (evidence: {pk in evidence})")
    if before is not None:
        now = {pk: (status, content) for pk, status, content in calls}
        for pk, (content, sha) in before.completed.items():
            if now.get(pk) != ("completed", content) or evidence.get(pk) != sha or not sha:
                out.lost += 1
                out.problems.append(f"call {pk} completed before the fault is now {now.get(pk)}")
        missing = before.dispatched - set(now)
        if missing:
            out.lost += len(missing)
            out.problems.append(f"call rows disappeared: {sorted(missing)}")
    if run.status not in TERMINAL_RUN_STATUSES:
        out.problems.append(f"run is {run.status}, not terminal")
    else:
        if Cell.objects.filter(run=run, status__in=["running"]).exists():
            out.problems.append("terminal run with a running cell")
        resumable = resumable_problems(run)
        out.resumable = not resumable
        out.problems += resumable
    out.problems += report_problems(run)
    return out


def settle(run: Run, *, timeout: float, quiet: float = QUIET_SECONDS) -> str:
    """Wait until the run is terminal. Returns "terminal", "timeout", or "stuck" when the run
    is not terminal, no cell is running and nothing in the ledger moved for `quiet` seconds:
    longer than the recovery pass takes to ring an idle run again and a loaded worker to claim
    (QUIET_SECONDS), so no worker will ever drive it. Both are failures of the product (R15)."""
    deadline = time.monotonic() + timeout
    last: tuple[Any, ...] | None = None
    since = time.monotonic()
    while time.monotonic() < deadline:
        run.refresh_from_db()
        # Terminal, and no cell still held under a lease: a run is interrupted by the first
        # expired lease; cells the dead worker claimed later are settled when theirs expire.
        if run.is_terminal and not Cell.objects.filter(run=run, status="running").exists():
            return "terminal"
        state = (
            run.status,
            tuple(
                Cell.objects.filter(run=run)
                .values("status")
                .annotate(n=Count("id"))
                .order_by("status")
                .values_list("status", "n")
            ),
            Call.objects.filter(cell__run=run).exclude(status__in=OPEN).count(),
        )
        if state != last:
            last, since = state, time.monotonic()
        elif not Cell.objects.filter(run=run, status="running").exists() and (
            time.monotonic() - since > quiet
        ):
            return "stuck"
        time.sleep(0.1)
    return "timeout"


def timeline(run: Run) -> str:
    """The run's events (seconds after its creation) and cell states: what a failure shows."""
    run.refresh_from_db()
    events = " ".join(
        f"{(at - run.created_at).total_seconds():.2f}s:{kind}"
        for kind, at in run.events.order_by("seq").values_list("type", "created_at")
    )
    cells = list(
        Cell.objects.filter(run=run)
        .order_by("id")
        .values_list("status", "claimed_by", "lease_expires_at")
    )
    return (
        f"run {run.pk} {run.status} stop_reason={run.stop_reason!r} events [{events}] cells {cells}"
    )


def cancel_stuck(run: Run) -> None:
    """What an operator does with a run no worker drives: cancel it (it becomes terminal and
    reviewable for recovery)."""
    run_cancel(run=run)
    run.refresh_from_db()


# --- The web process (issue 13: "the web process restarted during a CLI run") -------------


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a process of the project on the test database and broker."""
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "srbench.settings_test",
        "DATABASE_URL": database_url_for_worker(),
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
        "SRBENCH_VAR_DIR": str(settings.VAR_DIR),
        **extra,
    }


class WebProcess:
    """The API served by uvicorn in its own process group on a fixed loopback port, so it can
    be SIGKILLed and started again on the same port (uvicorn binds with SO_REUSEADDR)."""

    def __init__(self, log_path: Path, port: int) -> None:
        self.log_path, self.port = log_path, port
        self.url = f"http://127.0.0.1:{port}"
        self.process: Any = None
        self.starts = 0

    def start(self, timeout: float = 60.0) -> None:
        self.starts += 1
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "uvicorn", "srbench.asgi:application",
                 "--host", "127.0.0.1", "--port", str(self.port), "--log-level", "warning"],
                cwd=ROOT, env=child_env(), stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"uvicorn exited with {self.process.returncode}: {self.log()}")
            try:
                httpx.get(f"{self.url}/login/", timeout=2)
                return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise AssertionError(f"uvicorn did not answer within {timeout}s: {self.log()}")

    def kill(self) -> None:
        """SIGKILL: no graceful shutdown, open connections are reset mid-request."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=20)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.kill()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:] if self.log_path.exists() else ""


class CliProcess:
    """The installed `srbench` console script as a subprocess, its output in files so a test
    can poll what it has printed so far."""

    def __init__(self, args: list[str], workdir: Path, name: str, **env: str) -> None:
        self.out_path, self.err_path = workdir / f"{name}.out", workdir / f"{name}.err"
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.process = subprocess.Popen(
                [str(Path(sys.executable).with_name("srbench")), *args],
                env=child_env(**env), stdout=out, stderr=err, start_new_session=True,
            )  # fmt: skip

    def err(self) -> str:
        return self.err_path.read_text(errors="replace")

    def out(self) -> str:
        return self.out_path.read_text(errors="replace")

    def wait(self, timeout: float) -> int:
        return self.process.wait(timeout=timeout)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=20)


def report_line(path: Path, prefix: str, line: str) -> None:
    """Write this suite's summary line into the shared report, replacing its previous one and
    keeping the other suites' lines (the kill and stall trials both write there)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    kept = [
        old
        for old in (path.read_text().splitlines() if path.exists() else [])
        if old and not old.startswith(prefix)
    ]
    path.write_text("\n".join([*kept, line]) + "\n")


def sim(url: str) -> dict:
    return httpx.get(f"{url}/_sim/stats", timeout=10).json()


def wait_for_point(run: Run, point: str, rng: random.Random, url: str) -> tuple[str, bool]:
    """Poll the ledger (or the simulator) until the trial's kill point; returns a description
    and whether the point was reached before the run ended."""
    calls = Call.objects.filter(cell__run=run)
    if point == "run_started":
        delay = rng.choice([0.0, 0.0, rng.uniform(0.0, 0.3)])
        label = f"run running +{delay:.2f}s"
        cond = lambda: Run.objects.filter(pk=run.pk, status="running").exists()  # noqa: E731
    elif point == "call_row":
        k = rng.randint(1, 8)
        label, cond = f"call row {k}", lambda: calls.count() >= k
    elif point == "mid_stream":
        delay = rng.uniform(0.0, 0.25)
        label, cond = f"mid-stream +{delay:.2f}s", lambda: sim(url)["open_streams"] > 0
    elif point == "after_last_byte":
        label = "subject answered, cell running"
        cond = lambda: calls.filter(  # noqa: E731
            role="subject", status="completed", cell__status="running"
        ).exists()
    elif point == "grading":
        label = "judge in flight"
        cond = lambda: calls.filter(role="judge", status__in=OPEN).exists()  # noqa: E731
    elif point == "cells_done":
        m = rng.randint(1, 4)
        label = f"{m} cells completed"
        cond = lambda: Cell.objects.filter(run=run, status="completed").count() >= m  # noqa: E731
    else:
        delay = rng.uniform(0.0, 3.0)
        start = time.monotonic()
        label, cond = f"random +{delay:.2f}s", lambda: time.monotonic() - start >= delay
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if cond():
            if point in ("mid_stream", "run_started"):
                time.sleep(delay)
            return label, True
        if Run.objects.filter(pk=run.pk, status__in=TERMINAL_RUN_STATUSES).exists():
            return label, False
        time.sleep(0.005)
    return label, False
