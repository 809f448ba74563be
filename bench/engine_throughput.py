"""Engine throughput: N cells against the simulator with a fixed latency L at concurrency C.

Prints, for each concurrency C on one worker process and for 1..K worker processes sharing one
run (`--workers`):

- the achieved wall time against the ideal ceil(N/C)·L, and calls per second;
- harness CPU per call counting every process of ours (the workers, PostgreSQL backends,
  Redis — not the simulator);
- measured TTFT against the simulator's configured TTFT, its own (arrival-stamped) figure and
  the server's true TTFT per call (request in its socket -> first delta out, PERFORMANCE.md),
  split into the simulator's intake, the server's own and what the engine's read adds;
- with `--per-chunk K`, CPU per extra SSE chunk: C = 32 with `--chunks` and with K chunks per
  call, interleaved rounds;
- worker memory per in-flight stream (peak RSS during the run minus RSS before it, over the
  streams in flight);
- database rows and bytes per call (rows of the run in the ledger tables, their tuple bytes,
  the compressed evidence against the raw SSE, and the on-disk growth of the tables with their
  indexes and TOAST).

    .venv/bin/python bench/engine_throughput.py [--cells 740] [--concurrency 32 256]
        [--workers 1 2 4] [--workers-concurrency 256]
        [--ttft 0.2] [--chunks 50] [--chunk-gap 0.01] [--per-chunk 250]

Needs PostgreSQL and Redis on loopback (as `make test`); uses its own database and Redis DB.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from srbench.simulator.lean import FAKE_SERVERS  # noqa: E402

DB = os.environ.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/srbench_bench")
BROKER = os.environ.get("BENCH_BROKER_URL", "redis://127.0.0.1:6379/12")
CLK_TCK = os.sysconf("SC_CLK_TCK")
LEDGER_TABLES = ("runs_cell", "runs_call", "runs_callevidence", "runs_runevent")


# The fake servers the bench can run (--server; tests/simulator/test_lean_server.py).
SERVERS = FAKE_SERVERS


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime + stime of the process
    return total / CLK_TCK


def sys_seconds(pids: list[int]) -> float:
    """Kernel-mode CPU of the processes (system calls: reads, epoll, wake-ups)."""
    total = 0
    for pid in pids:
        try:
            total += int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[12])
        except OSError:
            continue
    return total / CLK_TCK


def broker_purge() -> None:
    """Start from an empty queue: a Redis DB is flushed; a RabbitMQ (amqp://) queue purged."""
    if BROKER.startswith("redis://"):
        import redis

        redis.Redis.from_url(BROKER).flushdb()
    else:
        from srbench.celery import app

        app.control.purge()


def broker_pids() -> list[int]:
    """The broker's processes on this machine (its CPU is ours): Redis or RabbitMQ's VM."""
    return pids_of("redis-server") if BROKER.startswith("redis://") else pids_of("beam.smp")


def cpu_by_pid(pids: list[int]) -> dict[int, float]:
    return {pid: cpu_seconds([pid]) for pid in pids}


def rss_bytes(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            continue
    return total


def pids_of(pattern: str) -> list[int]:
    out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def db_backends() -> set[int]:
    """The PostgreSQL client backends of the bench database (sampled while the run goes, so
    that ones that come and go are counted)."""
    from django.db import connection

    with connection.cursor() as cur:
        rows = cur.execute(
            "SELECT pid FROM pg_stat_activity "
            "WHERE datname = current_database() AND backend_type = 'client backend'"
        ).fetchall()
    return {pid for (pid,) in rows}


def ours(worker_pids: list[int]) -> list[int]:
    """Every process of ours: the bench's workers (by pid: other Celery workers on a shared
    machine are not ours), the PostgreSQL backends of the bench database, PostgreSQL's own
    background processes, and the broker; not the simulator, and not other databases' backends
    of a shared server."""
    from django.db import connection

    with connection.cursor() as cur:
        background = cur.execute(
            "SELECT pid FROM pg_stat_activity WHERE backend_type <> 'client backend'"
        ).fetchall()
    return sorted({*worker_pids, *db_backends(), *(pid for (pid,) in background), *broker_pids()})


def start_worker() -> subprocess.Popen:
    # One drive task per worker process (--concurrency=1 thread for tasks; the engine runs
    # its streams on an asyncio loop inside that task, the reaper on its own thread).
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "srbench",
            "worker",
            "--pool=threads",
            "--concurrency=1",
            "--without-gossip",
            "--without-mingle",
            "--loglevel=WARNING",
        ],
        cwd=ROOT,
        env=os.environ.copy(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def wait_for_workers(count: int) -> None:
    from srbench.celery import app

    for _ in range(300):
        replies = app.control.ping(timeout=0.5) or []
        if len(replies) >= count:
            return
    raise SystemExit(f"only {len(replies)} of {count} workers answered a ping")


def ledger_bytes() -> dict[str, int]:
    from django.db import connection

    with connection.cursor() as cur:
        return {
            table: cur.execute("SELECT pg_total_relation_size(%s)", [table]).fetchone()[0]
            for table in LEDGER_TABLES
        }


def ledger_footprint(run_id: int) -> dict[str, Any]:
    """Rows and tuple bytes the run left in each ledger table, and its evidence sizes."""
    from django.db import connection

    queries = {
        "runs_cell": "SELECT count(*), sum(pg_column_size(t.*)) FROM runs_cell t WHERE run_id = %s",
        "runs_call": "SELECT count(*), sum(pg_column_size(t.*)) FROM runs_call t "
        "JOIN runs_cell c ON c.id = t.cell_id WHERE c.run_id = %s",
        "runs_callevidence": "SELECT count(*), sum(pg_column_size(t.*)) FROM runs_callevidence t "
        "JOIN runs_call k ON k.id = t.call_id JOIN runs_cell c ON c.id = k.cell_id "
        "WHERE c.run_id = %s",
        "runs_runevent": "SELECT count(*), sum(pg_column_size(t.*)) FROM runs_runevent t "
        "WHERE run_id = %s",
    }
    out: dict[str, Any] = {}
    with connection.cursor() as cur:
        for table, sql in queries.items():
            rows, size = cur.execute(sql, [run_id]).fetchone()
            out[table] = (rows, size or 0)
        out["evidence"] = cur.execute(
            "SELECT coalesce(sum(length(e.body)), 0), coalesce(sum(e.raw_size), 0) "
            "FROM runs_callevidence e JOIN runs_call k ON k.id = e.call_id "
            "JOIN runs_cell c ON c.id = k.cell_id WHERE c.run_id = %s",
            [run_id],
        ).fetchone()
    return out


def dataset_of(questions: list[Any], key: list[Any]) -> Any:
    """A frozen dataset of ``questions`` in order, named by ``key`` (unique per measurement)."""
    from datasets.models import DatasetQuestion, FrozenDataset
    from srbench.canonical import sha256_hex

    dataset = FrozenDataset.objects.create(
        identity_sha256=sha256_hex([*key, time.time()]),
        name=str(key[0]),
        profile="quick",
        seed=1,
        split="dev",
        selection={},
    )
    DatasetQuestion.objects.bulk_create(
        DatasetQuestion(dataset=dataset, question=q, position=i) for i, q in enumerate(questions)
    )
    return dataset


def bench_setup(prefix: str) -> Path:
    """The bench's own environment, a fresh database (migrated) and an empty broker queue;
    returns the scratch directory. Django is set up on return."""
    os.environ.update(
        DJANGO_SETTINGS_MODULE="srbench.settings",
        SECRET_KEY="bench-only",
        DATABASE_URL=DB,
        CELERY_BROKER_URL=BROKER,
        SRBENCH_VAR_DIR=tempfile.mkdtemp(prefix=prefix),
    )
    server, dbname = DB.rsplit("/", 1)
    subprocess.run(
        ["psql", f"{server}/postgres", "-q", "-c", f"DROP DATABASE IF EXISTS {dbname}"]
        + ["-c", f"CREATE DATABASE {dbname}"],
        check=True,
    )
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    broker_purge()
    return Path(os.environ["SRBENCH_VAR_DIR"])


def synthetic_questions(work: Path, cells: int) -> tuple[Any, list[Any], list[Any], Path]:
    """`cells` MMLU-Pro-format questions written in the official format and stored:
    (adapter, loaded questions, Question rows, the data file)."""
    from datasets.benchmarks import get_adapter
    from datasets.models import Question, QuestionSecret
    from datasets.synthetic import write_synthetic
    from srbench.canonical import sha256_hex

    data = write_synthetic("mmlu-pro", work / "mmlu", cells, 7)
    adapter = get_adapter("mmlu-pro")
    loaded = adapter.load(data)[:cells]
    questions = []
    for q in loaded:
        question = Question.objects.create(
            benchmark=q.benchmark,
            native_id=q.native_id,
            subject=q.subject,
            payload=q.payload,
            content_sha256=sha256_hex([q.benchmark, q.native_id, q.payload, q.secret]),
        )
        QuestionSecret.objects.create(question=question, data=q.secret)
        questions.append(question)
    return adapter, loaded, questions, data


def start_simulator(
    work: Path,
    data: Path,
    *,
    ttft: float,
    chunks: int,
    chunk_gap: float,
    long_chunks: int | None = None,
    module: str = "srbench.simulator",
) -> tuple[subprocess.Popen, int]:
    """The simulator in its own process: model `bench` answers after `ttft` with a reasoning
    text of (chunks - answer tokens) tokens paced `chunk_gap` apart, so every reply is about
    `chunks` SSE content/reasoning events; with `long_chunks`, model `bench-long` the same with
    about `long_chunks` events. Returns (process, port) once it answers."""
    from datasets.answer_key import answer_key_write

    port = free_port()
    # The simulator reads no dataset file: the key is built here and handed over as JSON.
    key = answer_key_write([("mmlu-pro", str(data))], work / "answer-key.json")
    config = work / "sim.toml"
    models = {"bench": chunks} | ({"bench-long": long_chunks} if long_chunks else {})
    config.write_text(
        "seed = 1\n"
        + "".join(
            f"[models.{name}]\naccuracy = 0.8\nttft_s = {ttft}\n"
            f"tokens_per_second = {1 / chunk_gap}\nchunk_tokens = 1\nprefix_cache = false\n"
            f'reasoning = "{" ".join(["step"] * (n - 4))}"\n'
            for name, n in models.items()
        )
        + f'[answer_key]\nfile = "{key}"\n'
    )
    sim = subprocess.Popen(
        [sys.executable, "-m", module, "--port", str(port), "--config", str(config)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_http(f"http://127.0.0.1:{port}/health")
    return sim, port


def wait_http(url: str, seconds: float = 60) -> None:
    import httpx

    deadline = time.monotonic() + seconds
    while True:
        try:
            httpx.get(url, timeout=2)
            return
        except httpx.HTTPError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def bench_target(port: int, model: str = "bench") -> Any:
    from runs.models import Target

    return Target.objects.create(
        slug=model,
        name=model,
        model=model,
        base_url=f"http://127.0.0.1:{port}/v1",
        prices={model: {"input": "1", "output": "2"}},
    )


def slot_time(run_id: int, concurrency: int, latency: float) -> dict[str, Any] | None:
    """Where the run's slot-seconds went (C × wall), from the ledger's own stamps, cell by
    cell: the cell's claim (`started_at`), its first call opened (`sent_at`: the time of the
    transaction that opened it), that call's request made (its end less its `duration_ms`),
    its last call's end (`finished_at`: the stream's end) and the cell's finish (its
    `finished_at`: the transaction that finished it). The parts add up to C × wall exactly
    (one call a cell, as here; with more, the calls between count as the call): calls at the
    unloaded length L; calls past L (the loop read them late); claim -> first call opened (the
    claim's round trip back, the episode's start and the open's wait in the ledger's queue);
    opened -> request made (the open's commit and the loop coming back to the cell); last
    call's end -> cell finished (its close and finish in the ledger); and slots free (between
    a cell's finish and the claim of its successor; before the first claim; after each slot's
    last cell). Item 2's loss is everything but the first part. Per-cell medians and 90th
    percentiles too (ms)."""
    import numpy as np
    from django.db import connection

    with connection.cursor() as cur:
        start, end = cur.execute(
            "SELECT extract(epoch FROM started_at), extract(epoch FROM finished_at) "
            "FROM runs_run WHERE id = %s",
            [run_id],
        ).fetchone()
        rows = cur.execute(
            "SELECT extract(epoch FROM c.started_at), extract(epoch FROM min(k.sent_at)), "
            "extract(epoch FROM min(k.finished_at)) - min(k.duration_ms) / 1000, "
            "extract(epoch FROM max(k.finished_at)), extract(epoch FROM c.finished_at) "
            "FROM runs_cell c JOIN runs_call k ON k.cell_id = c.id WHERE c.run_id = %s "
            "AND c.started_at IS NOT NULL AND c.finished_at IS NOT NULL "
            "AND k.finished_at IS NOT NULL GROUP BY c.id",
            [run_id],
        ).fetchall()
    if not rows or start is None or end is None:
        return None
    start, end = float(start), float(end)
    claimed, opened, requested, ended, finished = (
        np.array(col, dtype=float) for col in zip(*rows, strict=True)
    )
    total = concurrency * (end - start)
    claim_open, call, end_finish = opened - claimed, ended - requested, finished - ended
    parts = {
        "at L": len(rows) * latency,
        "past L": float(call.sum()) - len(rows) * latency,
        "claim -> opened": float(claim_open.sum()),
        "opened -> request made": float((requested - opened).sum()),
        "call end -> cell finished": float(end_finish.sum()),
    }
    free = total - sum(parts.values())
    # Of the free time: before the first claim, and after each slot's last cell (the last C
    # finishes, once nothing is left to claim) until the run's end; the rest is between a
    # cell's finish and its successor's claim.
    head = concurrency * (float(claimed.min()) - start)
    tail = float((end - np.sort(finished)[-concurrency:]).sum())
    parts["slots free: before the first claim"] = head
    parts["slots free: between a finish and the next claim"] = free - head - tail
    parts["slots free: after the last cells"] = tail

    def pct(x: Any) -> tuple[float, float]:
        return float(np.percentile(x, 50) * 1000), float(np.percentile(x, 90) * 1000)

    return {
        "total": total,
        "cells": len(rows),
        "parts": parts,
        "claim_open": pct(claim_open),
        "open_request": pct(requested - opened),
        "call": pct(call),
        "end_finish": pct(end_finish),
    }


def ttft_split(run_id: int, streams: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Where a call's TTFT goes, per call matched by its id with the simulator's own stamps
    (GET /_sim/streams; wall clocks of one machine): `socket`, from the engine handing the
    request to its socket to the simulator's loop reading it (the simulator's intake, which
    its own figure cannot see); `server`, the simulator's own TTFT (arrival → first delta
    handed to its connection); `engine_read`, from that hand-over to the engine's read of the
    bytes; `true`, the server's true TTFT: from the request in its socket to its first delta
    out (`socket` + `server`), what the engine's TTFT should equal but for the time its own
    read adds; `engine`, the engine's TTFT of the same calls. Medians and 90th percentiles in
    ms, or None when nothing matched."""
    from runs.models import Call

    marks = {s["call_id"]: s for s in streams}
    parts: dict[str, list[float]] = {
        "socket": [],
        "server": [],
        "engine_read": [],
        "true": [],
        "engine": [],
        "late": [],
    }
    calls = Call.objects.filter(cell__run_id=run_id, ttft_ms__isnull=False)
    for call_id, first_token_at, ttft_ms in calls.values_list("id", "first_token_at", "ttft_ms"):
        mark = marks.get(str(call_id))
        if mark is None:
            continue
        read = first_token_at.timestamp()
        sent = read - ttft_ms / 1000
        parts["socket"].append((mark["arrived_at"] - sent) * 1000)
        parts["server"].append((mark["first_delta_at"] - mark["arrived_at"]) * 1000)
        parts["engine_read"].append((read - mark["first_delta_at"]) * 1000)
        parts["true"].append((mark["first_delta_at"] - sent) * 1000)
        parts["engine"].append(ttft_ms)
        if mark.get("last_delta_at") is not None:
            # The server's lateness at the stream's end, counted from the request in its
            # socket: its last delta out against sent + ttft + (n - 1) intervals.
            due = sent + mark["last_delta_due"] - mark["arrived_at"]
            parts["late"].append(max(0.0, mark["last_delta_at"] - due) * 1000)
    if not parts["server"]:
        return None

    def p(values: list[float], q: float) -> float:
        ordered = sorted(values)
        return ordered[round(q * (len(ordered) - 1))]

    split: dict[str, Any] = {"matched": len(parts["server"])}
    for name, values in parts.items():
        split[name] = (p(values, 0.5), p(values, 0.9), max(values)) if values else None
    return split


def per_chunk(measure: Callable[..., dict[str, Any]], args: argparse.Namespace) -> None:
    """CPU per extra SSE chunk (PERFORMANCE.md: at most 0.05 ms): C = 32 on the same cells with
    `--chunks` and with `--per-chunk` chunks per call, interleaved (short, long, long, short,
    …) so that load drift hits both alike; (CPU per call long − short) / (extra chunks), for
    the worker, the run's PostgreSQL backends and every process of ours. Not all of it is
    chunk work: a longer call also lasts longer, and the worker spends CPU per second of a run
    (checkpoints, lease renewals)."""
    extra = args.per_chunk - args.chunks
    cells = args.per_chunk_cells
    kinds = ("short", "long")
    got: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
    for r in range(args.per_chunk_rounds):
        for kind in kinds if r % 2 == 0 else kinds[::-1]:
            target = "bench" if kind == "short" else "bench-long"
            got[kind].append(measure(32, 1, cells=cells, target=target))

    def per_extra(field: str) -> list[float]:
        return [
            (b[field] - a[field]) / extra for a, b in zip(got["short"], got["long"], strict=True)
        ]

    worker, db, total = per_extra("worker_cpu"), per_extra("db_cpu"), per_extra("cpu")
    rounds = "; ".join(
        f"{a['worker_cpu']:.2f} -> {b['worker_cpu']:.2f} (load {a['loadavg'][0]}, "
        f"{b['loadavg'][0]})"
        for a, b in zip(got["short"], got["long"], strict=True)
    )
    print(
        f"CPU per extra chunk (C = 32, {cells} cells, {args.chunks} -> {args.per_chunk} chunks "
        f"per call, {args.per_chunk_rounds} interleaved rounds): worker "
        f"{statistics.median(worker):.3f} ms [{min(worker):.3f}-{max(worker):.3f}], the run's "
        f"PostgreSQL backends {statistics.median(db):.3f} ms, all our processes "
        f"{statistics.median(total):.3f} ms; worker ms per call by round: {rounds}",
        flush=True,
    )


def unloaded_latency(port: int, messages: list[dict[str, Any]], calls: int = 5) -> float:
    """The unloaded latency L of one call, measured the way the engine streams it: the median
    of `calls` calls one after the other (one call alone varies by a few per cent, and every
    ratio to the ideal ⌈N/C⌉·L inherits that)."""
    import httpx

    times = []
    for _ in range(calls):
        t0 = time.monotonic()
        with httpx.stream(
            "POST",
            f"http://127.0.0.1:{port}/v1/chat/completions",
            json={"model": "bench", "stream": True, "messages": messages},
        ) as r:
            for _ in r.iter_raw():
                pass
        times.append(time.monotonic() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cells", type=int, default=740)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[32, 256])
    parser.add_argument(
        "--workers",
        type=int,
        nargs="*",
        default=[],
        help="worker process counts to drive one run together (scaling), e.g. 1 2 4",
    )
    parser.add_argument("--workers-concurrency", type=int, default=256)
    parser.add_argument("--ttft", type=float, default=0.2)
    parser.add_argument("--chunks", type=int, default=50)
    parser.add_argument("--chunk-gap", type=float, default=0.01)
    parser.add_argument(
        "--per-chunk",
        type=int,
        default=0,
        metavar="K",
        help="also measure CPU per extra chunk: C = 32 with --chunks and with K chunks per call",
    )
    parser.add_argument(
        "--server",
        choices=sorted(SERVERS),
        default="simulator",
        help="the fake server: the simulator, or the lean server sending the simulator's "
        "streams at a fraction of its CPU (srbench.simulator.lean), so that at C = 1,024 the "
        "fake server is not a bottleneck of the measurement on a 2-core machine",
    )
    parser.add_argument("--per-chunk-cells", type=int, default=320)
    parser.add_argument("--per-chunk-rounds", type=int, default=3)
    args = parser.parse_args()
    import httpx

    work = bench_setup("srbench-bench-")
    from django.contrib.auth import get_user_model

    from runs.engine.doorbell import run_dispatch
    from runs.planning.services import run_create
    from runs.reporting.report import run_report

    adapter, loaded, questions, data = synthetic_questions(work, args.cells)
    sim, port = start_simulator(
        work,
        data,
        ttft=args.ttft,
        chunks=args.chunks,
        chunk_gap=args.chunk_gap,
        long_chunks=args.per_chunk or None,
        module=SERVERS[args.server],
    )
    workers = [start_worker()]
    sim_pid = sim.pid
    try:
        wait_for_workers(1)
        bench_target(port)
        if args.per_chunk:
            bench_target(port, "bench-long")
        owner = get_user_model().objects.create(username="bench")
        latency = unloaded_latency(port, adapter.messages(loaded[0].payload))
        n = len(questions)
        print(
            f"unloaded call latency L = {latency:.3f} s (TTFT {args.ttft} s + {args.chunks} "
            f"chunks {args.chunk_gap} s apart); N = {n} cells; fake server: {args.server} "
            f"({SERVERS[args.server]})"
        )

        def measure(
            concurrency: int, n_workers: int, cells: int = n, target: str = "bench"
        ) -> dict[str, Any]:
            while len(workers) < n_workers:
                workers.append(start_worker())
            wait_for_workers(len(workers))
            dataset = dataset_of(questions[:cells], ["bench", concurrency, n_workers])
            worker_pids = [w.pid for w in workers]
            rss_before = rss_bytes(worker_pids)
            rss_peak = rss_before
            disk_before = ledger_bytes()
            sim = f"http://127.0.0.1:{port}/_sim"
            httpx.post(f"{sim}/reset", timeout=10)
            before = cpu_by_pid(ours(worker_pids))
            sys_before = sys_seconds(worker_pids)
            sim_cpu_before = cpu_seconds([sim_pid])
            sim_sys_before = sys_seconds([sim_pid])
            seen = dict(before)
            backends = db_backends()
            run, _ = run_create(
                owner=owner,
                plan={
                    "name": f"bench C={concurrency} W={n_workers}",
                    "dataset": dataset.pk,
                    "targets": [target],
                    "limits": {"concurrency": concurrency, "max_output_tokens": 4096},
                },
            )
            # One drive task per worker process: they share the run's cells and its
            # concurrency through the claim protocol (leases and fencing tokens).
            for _ in range(n_workers - 1):
                run_dispatch(run_id=run.pk)
            while True:
                backends |= db_backends()
                for pid, cpu in cpu_by_pid(ours(worker_pids)).items():
                    seen[pid] = max(cpu, seen.get(pid, 0.0))
                rss_peak = max(rss_peak, rss_bytes(worker_pids))
                run.refresh_from_db()
                if run.is_terminal:
                    break
                time.sleep(0.2)
            for pid, cpu in cpu_by_pid(ours(worker_pids)).items():
                seen[pid] = max(cpu, seen.get(pid, 0.0))
            used = {pid: cpu - before.get(pid, 0.0) for pid, cpu in seen.items()}
            worker_sys = sys_seconds(worker_pids) - sys_before
            sim_cpu = cpu_seconds([sim_pid]) - sim_cpu_before
            sim_sys = sys_seconds([sim_pid]) - sim_sys_before
            worker_cpu = sum(v for pid, v in used.items() if pid in set(worker_pids))
            db_cpu = sum(v for pid, v in used.items() if pid in backends)
            total_cpu = sum(used.values())
            wall = (run.finished_at - run.started_at).total_seconds()
            ideal = math.ceil(cells / concurrency) * latency
            report = run_report(run=run)["targets"][0]
            sim_stats = httpx.get(f"{sim}/stats", timeout=10).json()
            streams = httpx.get(f"{sim}/streams", timeout=10).json()["streams"]
            disk_after = ledger_bytes()
            return {
                "status": run.status,
                "wall": wall,
                "ideal": ideal,
                "rate": cells / wall,
                "cpu": total_cpu / cells * 1000,
                "worker_cpu": worker_cpu / cells * 1000,
                "pg_cpu": (total_cpu - worker_cpu) / cells * 1000,
                "db_cpu": db_cpu / cells * 1000,
                "cpu_s": {
                    "worker": worker_cpu,
                    "worker_sys": worker_sys,
                    "db": db_cpu,
                    "total": total_cpu,
                },
                "calls": cells,
                "loadavg": Path("/proc/loadavg").read_text().split()[:3],
                "ttft": report["ttft_p50_ms"],
                # The server's own TTFT (request in → first delta out), where it reports one.
                "server_ttft": (sim_stats.get("stream_ttft_ms") or {}).get("p50"),
                # The simulator's own lateness at each stream's end, and its CPU: a server
                # that cannot keep up is printed beside the engine's figures, not hidden.
                "server_late": sim_stats.get("stream_late_ms") or {},
                "sim_cpu": sim_cpu,
                "sim_sys": sim_sys,
                "ttft_split": ttft_split(run.pk, streams),
                "slots": slot_time(run.pk, concurrency, latency),
                "in_flight": min(concurrency, cells),
                "rss_before": rss_before,
                "rss_peak": rss_peak,
                "footprint": ledger_footprint(run.pk),
                "disk": sum(disk_after.values()) - sum(disk_before.values()),
            }

        def line(label: str, m: dict[str, Any]) -> str:
            per_stream = (m["rss_peak"] - m["rss_before"]) / m["in_flight"] / 1024
            server_ttft = "n/a" if m["server_ttft"] is None else f"{m['server_ttft']:.0f} ms"
            return (
                (
                    f"{label}: status {m['status']}; wall {m['wall']:.2f} s vs ideal "
                    f"{m['ideal']:.2f} s -> wall/ideal {m['wall'] / m['ideal']:.3f} (efficiency "
                    f"{m['ideal'] / m['wall']:.3f}); {m['rate']:.1f} calls/s; harness CPU "
                    f"{m['cpu']:.2f} ms/call (workers {m['worker_cpu']:.2f}, PostgreSQL + Redis "
                    f"{m['pg_cpu']:.2f} of which the run's PostgreSQL backends {m['db_cpu']:.2f}); "
                    f"CPU s worker {m['cpu_s']['worker']:.2f} (system {m['cpu_s']['worker_sys']:.2f}) db {m['cpu_s']['db']:.2f} total "
                    f"{m['cpu_s']['total']:.2f}; load {' '.join(m['loadavg'])}; TTFT p50 {m['ttft']:.0f} ms vs configured "
                    f"{args.ttft * 1000:.0f} ms, server's own p50 {server_ttft}; worker RSS {m['rss_before'] / 2**20:.0f} -> "
                    f"{m['rss_peak'] / 2**20:.0f} MiB = {per_stream:.1f} KiB per in-flight stream "
                    f"({m['in_flight']})"
                )
                + server_line(m)
                + split_line(m["ttft_split"])
                + slots_line(m["slots"])
            )

        def slots_line(slots: dict[str, Any] | None) -> str:
            if slots is None:
                return ""
            shares = "; ".join(
                f"{name} {100 * v / slots['total']:.1f} %" for name, v in slots["parts"].items()
            )
            return (
                f"\n  where the slots' time went (C x wall = {slots['total']:.0f} slot-s, "
                f"{slots['cells']} cells; from the ledger's stamps): {shares}; per cell p50 / "
                f"p90 ms: claim -> first call opened {slots['claim_open'][0]:.0f} / "
                f"{slots['claim_open'][1]:.0f}, opened -> request made "
                f"{slots['open_request'][0]:.0f} / {slots['open_request'][1]:.0f}, call "
                f"{slots['call'][0]:.0f} / "
                f"{slots['call'][1]:.0f} (L = {latency * 1000:.0f}), call end -> cell finished "
                f"{slots['end_finish'][0]:.0f} / {slots['end_finish'][1]:.0f}"
            )

        def server_line(m: dict[str, Any]) -> str:
            late = m["server_late"]
            if not late.get("count"):
                return ""
            return (
                f"\n  the fake server ({args.server}, its own process, nothing subtracted): CPU "
                f"{m['sim_cpu']:.2f} s (system {m['sim_sys']:.2f}) = "
                f"{m['sim_cpu'] / m['wall']:.2f} of a core over the wall; "
                f"lateness of each stream's last delta against its arrival + ttft + (n - 1) "
                f"intervals, {late['count']} streams, p50 / p90 / max "
                f"{late['p50']:.1f} / {late['p90']:.1f} / {late['max']:.1f} ms"
                f"\n  CPU the ideal wall would need (CPU s of the run / ideal s; a process runs on "
                f"one core at most): worker {m['cpu_s']['worker'] / m['ideal']:.2f} cores, "
                f"fake server {m['sim_cpu'] / m['ideal']:.2f}, all our processes with it "
                f"{(m['cpu_s']['total'] + m['sim_cpu']) / m['ideal']:.2f} on "
                f"{os.cpu_count()} cores"
            )

        def split_line(split: dict[str, Any] | None) -> str:
            if split is None:
                return ""
            a, s, b = split["socket"], split["server"], split["engine_read"]
            true, engine = split["true"], split["engine"]
            return (
                f"\n  TTFT per call ({split['matched']} matched by call id; p50 / p90 ms): "
                f"the engine's {engine[0]:.1f} / {engine[1]:.1f} vs the server's true "
                f"(request in its socket -> first delta out) {true[0]:.1f} / {true[1]:.1f}: "
                f"engine / true {engine[0] / true[0]:.3f}; of which request in the "
                f"simulator's socket before its loop read it {a[0]:.1f} / {a[1]:.1f}, the "
                f"server's own (from that read) {s[0]:.1f} / {s[1]:.1f}; its first delta "
                f"handed to the connection -> read by the engine {b[0]:.1f} / {b[1]:.1f}"
            ) + late_line(split["late"])

        def late_line(late: tuple[float, float, float] | None) -> str:
            if late is None:
                return ""
            return (
                f"\n  the server's lateness at the stream's end counted from the request in "
                f"its socket (last delta out vs sent + ttft + (n - 1) intervals; p50 / p90 / "
                f"max ms): {late[0]:.1f} / {late[1]:.1f} / {late[2]:.1f}"
            )

        # A short warm-up run so that imports, connection pools and caches of the worker are
        # not charged to the first measurement.
        measure(8, 1, cells=min(16, n))
        last: dict[str, Any] | None = None
        for concurrency in args.concurrency:
            last = measure(concurrency, 1)
            print(line(f"C={concurrency:>4}, 1 worker", last), flush=True)
        if args.per_chunk:
            per_chunk(measure, args)
        scaling: list[tuple[int, dict[str, Any]]] = []
        for n_workers in args.workers:
            m = measure(args.workers_concurrency, n_workers)
            scaling.append((n_workers, m))
            label = f"{n_workers} worker" + ("s" if n_workers > 1 else "")
            print(line(f"C={args.workers_concurrency:>4}, {label}", m), flush=True)
            last = m
        if scaling:
            base = scaling[0][1]["rate"]
            print(
                "scaling (worker processes: calls/s relative to the first): "
                + ", ".join(f"{k} x{m['rate'] / base:.2f}" for k, m in scaling)
                + f" on {os.cpu_count()} cores"
            )
        if last is not None:
            fp = last["footprint"]
            calls = fp["runs_call"][0] or 1
            parts = ", ".join(
                f"{table.removeprefix('runs_')} {rows / calls:.2f} rows {size / calls:,.0f} B"
                for table, (rows, size) in ((t, fp[t]) for t in LEDGER_TABLES)
            )
            stored, raw = fp["evidence"]
            print(
                f"database per call ({calls} calls of the last run): {parts}; evidence "
                f"{stored / calls:,.0f} B compressed of {raw / calls:,.0f} B raw SSE "
                f"({stored / max(raw, 1):.2f}); tables + indexes + TOAST grew "
                f"{last['disk'] / calls:,.0f} B per call"
            )
    finally:
        for worker in workers:
            os.killpg(worker.pid, 15)
        sim.terminate()
        for worker in workers:
            worker.wait(timeout=30)
        sim.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
