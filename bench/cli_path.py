"""The user's path, end to end: the CLI submits a run to the real web process and follows it
until the report is printed, while a real Celery worker drives it against the simulator.

Both CLIs are measured, round by round in turn (issue 38 item 3): the `srbench` console script
and `python manage.py benchmark run`, each following the run by the events long poll.

This is what PERFORMANCE.md's side-by-side workload measures (740 MMLU-Pro-format questions, one
OpenAI-compatible server with TTFT 0.2 s and 50 chunks 0.01 s apart, C = 32): the wall time from
submission to the printed report against the ideal ceil(N/C)·L, and the CPU per call of every
process of ours — the web server, the workers, their PostgreSQL backends (sampled while the run
goes), Redis and the CLI itself — not the simulator's. Run events are written as in any run, so a
poll that scaled with the run's events would show here (issue 25).

    .venv/bin/python bench/cli_path.py [--cells 740] [--concurrency 32] [--rounds 3]
        [--ttft 0.2] [--chunks 50] [--chunk-gap 0.01] [--poll 1.0] [--cli both|console|manage]

Needs PostgreSQL and Redis on loopback (as `make test`); uses its own database and Redis DB
(BENCH_DATABASE_URL, BENCH_BROKER_URL).
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import contextlib

from engine_throughput import (  # noqa: E402  (bench scripts share their set-up and helpers)
    ROOT,
    bench_setup,
    bench_target,
    broker_pids,
    cpu_seconds,
    free_port,
    start_simulator,
    start_worker,
    synthetic_questions,
    unloaded_latency,
    wait_for_workers,
    wait_http,
)


def session_pids(sid: int) -> list[int]:
    """Every live process of session `sid`: a process this bench started in a session of its
    own, with its children. (Matching command lines would also count other benches' and test
    suites' web servers and workers on a shared machine.)"""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid:  # field 6 of stat: the session id
                pids.append(int(entry.name))
    return pids


def start_web(port: int) -> subprocess.Popen:
    """The web process as the README starts it (uvicorn, one process)."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "srbench.asgi:application",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "warning",
            "--no-access-log",
        ],
        cwd=ROOT,
        env=os.environ.copy(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


class CpuSampler:
    """CPU seconds per process group, with PostgreSQL backends sampled while they live (a
    backend that exits takes its counters with it)."""

    def __init__(self, groups: dict[str, list[int]]) -> None:
        self.groups = groups
        self.first: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self.group_of: dict[int, str] = {}
        self.sample()

    def _backends(self) -> list[int]:
        from django.db import connection

        with connection.cursor() as cur:
            rows = cur.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid()"
            ).fetchall()
        return [pid for (pid,) in rows]

    def sample(self) -> None:
        groups = {**self.groups, "postgres": self._backends()}
        for name, pids in groups.items():
            for pid in pids:
                value = cpu_seconds([pid])
                if pid not in self.first:
                    self.first[pid] = value
                    self.group_of[pid] = name
                self.last[pid] = max(self.last.get(pid, 0.0), value)

    def totals(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for pid, name in self.group_of.items():
            out[name] = out.get(name, 0.0) + self.last[pid] - self.first[pid]
        return out


@dataclass
class OurStack:
    """Our processes for the user's path: the web server, one worker, and the CLI's token."""

    web: subprocess.Popen
    worker: subprocess.Popen
    web_port: int
    token: str


def start_ours(sim_port: int) -> OurStack:
    """Starts the web process and one worker, registers target `bench` at the simulator and a
    user with an API token (Django is set up: `bench_setup`)."""
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    web_port = free_port()
    stack = OurStack(web=start_web(web_port), worker=start_worker(), web_port=web_port, token="")
    try:
        wait_http(f"http://127.0.0.1:{web_port}/")
        wait_for_workers(1)
        bench_target(sim_port)
        owner = get_user_model().objects.create(username="bench")
        stack.token = Token.objects.create(user=owner).key
    except BaseException:
        stop_processes(groups=(stack.worker, stack.web))
        raise
    return stack


def stop_processes(*procs: subprocess.Popen, groups: tuple[subprocess.Popen, ...] = ()) -> None:
    """SIGTERM to each of `groups`' process groups and to every one of `procs`; waits, then
    kills what is left."""
    for proc in groups:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 15)
    for proc in procs:
        proc.terminate()
    for proc in (*groups, *procs):
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


# The two ways in: the console script and Django's manage.py (both `run --url`, following).
CLI_COMMANDS = {
    "console": [str(Path(sys.executable).with_name("srbench")), "run"],
    "manage": [sys.executable, str(ROOT / "manage.py"), "benchmark", "run"],
}


def our_round(
    stack: OurStack,
    questions: list[Any],
    round_no: int,
    concurrency: int,
    poll: float,
    cli_name: str = "console",
) -> dict[str, Any]:
    """One run of `questions` through one of our CLIs (`CLI_COMMANDS`, `run --url`,
    following): a fresh frozen dataset, the CLI's wall from start to the printed report, and
    CPU per process group."""
    from datasets.models import DatasetQuestion, FrozenDataset
    from runs.models import Call, Run, RunEvent
    from srbench.canonical import sha256_hex

    dataset = FrozenDataset.objects.create(
        identity_sha256=sha256_hex(["bench-cli", round_no, time.time()]),
        name="bench",
        profile="quick",
        seed=1,
        split="dev",
        selection={},
    )
    DatasetQuestion.objects.bulk_create(
        DatasetQuestion(dataset=dataset, question=q, position=i) for i, q in enumerate(questions)
    )
    groups = {
        "web": session_pids(os.getsid(stack.web.pid)),
        "worker": session_pids(os.getsid(stack.worker.pid)),
        "broker": broker_pids(),
    }
    cli_cpu_seconds()  # children reaped so far (psql, other tools) are not this CLI's
    sampler = CpuSampler(groups)
    started = time.monotonic()
    started_wall = time.time()
    cli = subprocess.Popen(
        CLI_COMMANDS[cli_name]
        + ["--url", f"http://127.0.0.1:{stack.web_port}", "--token", stack.token]
        + ["--dataset", str(dataset.pk), "--target", "bench", "--name", f"cli {round_no}"]
        + ["--concurrency", str(concurrency), "--poll", str(poll)],
        cwd=ROOT,
        env=os.environ.copy(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    while cli.poll() is None:
        sampler.sample()
        # Waiting on the process (not sleeping) stamps its exit to the millisecond.
        with contextlib.suppress(subprocess.TimeoutExpired):
            cli.wait(timeout=0.25)
    wall = time.monotonic() - started
    ended_wall = started_wall + wall
    _out, err = cli.communicate()
    sampler.sample()
    if cli.returncode != 0:
        raise SystemExit(f"the CLI failed ({cli.returncode}): {err.strip()[-2000:]}")
    run = Run.objects.latest("pk")
    cpu = sampler.totals()
    cpu["cli"] = cli_cpu_seconds()
    ttft = list(
        Call.objects.filter(cell__run=run, ttft_ms__isnull=False).values_list("ttft_ms", flat=True)
    )
    finished = run.finished_at
    first_sent = Call.objects.filter(cell__run=run).order_by("sent_at").first()
    # Where the wall goes: the CLI's start and submission (start → run row), the dispatch to a
    # worker (run row → first call), the engine (first call → run ended), the follow and the
    # report (run ended → CLI exit). Wall-clock stamps of one machine.
    phases = {
        "submit": run.created_at.timestamp() - started_wall,
        "dispatch": (
            first_sent.sent_at.timestamp()
            if first_sent and first_sent.sent_at
            else run.created_at.timestamp()
        )
        - run.created_at.timestamp(),
        "engine": (finished.timestamp() if finished else ended_wall)
        - (
            first_sent.sent_at.timestamp()
            if first_sent and first_sent.sent_at
            else run.created_at.timestamp()
        ),
        "follow": ended_wall - (finished.timestamp() if finished else ended_wall),
    }
    return {
        "cli": cli_name,
        "followed_by_push": "the server pushes its end" in err,
        "phases": phases,
        "wall": wall,
        "engine_wall": (finished - run.started_at).total_seconds() if finished else None,
        "calls": Call.objects.filter(cell__run=run, status="completed").count(),
        "events": RunEvent.objects.filter(run=run).count(),
        "cpu": cpu,
        "ttft_ms": statistics.median(ttft) if ttft else None,
        "status": run.status,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cells", type=int, default=740)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ttft", type=float, default=0.2)
    parser.add_argument("--chunks", type=int, default=50)
    parser.add_argument("--chunk-gap", type=float, default=0.01)
    parser.add_argument("--poll", type=float, default=1.0, help="the CLI's --poll while following")
    parser.add_argument("--cli", choices=["both", *CLI_COMMANDS], default="both")
    args = parser.parse_args()

    work = bench_setup("srbench-bench-cli-")
    adapter, loaded, questions, data = synthetic_questions(work, args.cells)
    sim, sim_port = start_simulator(
        work, data, ttft=args.ttft, chunks=args.chunks, chunk_gap=args.chunk_gap
    )
    stack = None
    try:
        stack = start_ours(sim_port)
        latency = unloaded_latency(sim_port, adapter.messages(loaded[0].payload))
        n = len(questions)
        ideal = math.ceil(n / args.concurrency) * latency
        print(
            f"user's path: `srbench run --url` (following, --poll {args.poll}) → web (uvicorn) "
            f"→ 1 worker → simulator; N = {n} cells, C = {args.concurrency}, unloaded L = "
            f"{latency:.3f} s (TTFT {args.ttft} s + {args.chunks} chunks {args.chunk_gap} s "
            f"apart), ideal ceil(N/C)·L = {ideal:.2f} s; load before: "
            f"{os.getloadavg()[0]:.2f}"
        )
        rows = []
        clis = list(CLI_COMMANDS) if args.cli == "both" else [args.cli]
        for round_no in range(args.rounds * len(clis)):
            cli_name = clis[round_no % len(clis)]
            row = our_round(stack, questions, round_no, args.concurrency, args.poll, cli_name)
            rows.append(row)
            wall, cpu, calls, engine_wall = (
                row["wall"],
                row["cpu"],
                row["calls"],
                row["engine_wall"],
            )
            print(
                f"  round {round_no + 1} ({cli_name}, "
                f"{'push' if row['followed_by_push'] else 'polled'}): {row['status']}, {calls} calls, {row['events']} events; "
                f"wall {wall:.2f} s = {wall / ideal:.2f}× ideal (engine {engine_wall or 0:.2f} s = "
                f"{(engine_wall or 0) / ideal:.2f}×; report printed {wall - (engine_wall or 0):.2f}"
                f" s after submission+run), {calls / wall:.1f} calls/s; CPU per call "
                f"{sum(cpu.values()) / max(calls, 1) * 1000:.1f} ms ("
                + ", ".join(f"{k} {v / max(calls, 1) * 1000:.1f}" for k, v in sorted(cpu.items()))
                + f"); median TTFT {row['ttft_ms'] or 0:.0f} ms for {args.ttft * 1000:.0f}"
                + "; phases "
                + ", ".join(f"{k} {v:.2f} s" for k, v in row["phases"].items())
                + f"; load {os.getloadavg()[0]:.2f}"
            )
        for cli_name in clis:
            mine = [r for r in rows if r["cli"] == cli_name]
            ratios = [r["wall"] / ideal for r in mine]
            per_call = [sum(r["cpu"].values()) / max(r["calls"], 1) * 1000 for r in mine]
            print(
                f"summary {cli_name} over {len(mine)} rounds: wall/ideal median "
                f"{statistics.median(ratios):.2f}× [{min(ratios):.2f}–{max(ratios):.2f}], CPU per "
                f"call median {statistics.median(per_call):.1f} ms "
                f"[{min(per_call):.1f}–{max(per_call):.1f}]; load {os.getloadavg()[0]:.2f}"
            )
    finally:
        groups = (stack.worker, stack.web) if stack else ()
        stop_processes(sim, groups=groups)
        shutil.rmtree(work, ignore_errors=True)


_CHILDREN_CPU = [0.0]


def cli_cpu_seconds() -> float:
    """CPU of the CLI processes reaped since the last call (RUSAGE_CHILDREN grows as they end)."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = usage.ru_utime + usage.ru_stime
    spent, _CHILDREN_CPU[0] = total - _CHILDREN_CPU[0], total
    return spent


if __name__ == "__main__":
    main()
