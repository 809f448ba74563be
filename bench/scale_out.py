"""Scale-out measured (issue 38 item 4): the engine with 1, 2 and 4 worker processes on the
production broker (Redis) at L ≈ 0, one run's cells shared through the claim protocol.

The simulator answers at once (TTFT 0, 50 chunks 10 µs apart: the calls' bytes of a real
50-chunk call, no waiting), so every call costs only our own work. Per worker count it prints
calls/s, the efficiency against linear (calls/s ÷ (workers × calls/s of one)), and where the
CPU went in cores busy over the run's wall time: the workers, PostgreSQL, Redis, the simulator
and the machine in all; then it names the first bottleneck.

PostgreSQL's CPU includes its short-lived connections (web requests, the CLI, the reaper's):
from `pg_stat_statements` where the server preloads it (executor time of every statement of
the database, whatever connection ran it), else from /proc: the backends of the bench's
database sampled every 50 ms from pg_stat_activity (a backend first seen during the run counts
from zero; one that exited counts to its last sample), plus PostgreSQL's own background
processes. Beside it, the CPU of every backend the server reaped during the run (the kernel adds
an exited child's CPU to the postmaster's children's time), which misses nothing that came and
went between samples but covers every database of the server — on a shared server, other
clients' too: an upper bound. It says which it used. Lock waits are sampled from
pg_stat_activity the same way (the share of samples where a backend of the run waits on a
lock: the run row that group commit takes is the candidate).

    .venv/bin/python bench/scale_out.py [--cells 3000] [--concurrency 64] [--workers 1 2 4]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import engine_throughput as et  # noqa: E402


def proc_stat(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def reaped_seconds(pid: int) -> float:
    """CPU of the process's children that exited and were waited for (cutime + cstime)."""
    fields = proc_stat(pid)
    return 0.0 if fields is None else (int(fields[13]) + int(fields[14])) / et.CLK_TCK


@dataclass
class PgSampler:
    """PostgreSQL CPU over a window, short-lived connections included (see the docstring)."""

    postmaster: int
    background: list[int]
    mode: str = "proc"
    start: dict[int, float] = field(default_factory=dict)
    last: dict[int, float] = field(default_factory=dict)
    samples: int = 0
    lock_waits: int = 0
    active: int = 0
    reaped_start: float = 0.0
    background_start: float = 0.0
    statements_start: float = 0.0

    def backends(self) -> dict[int, str | None]:
        from django.db import connection

        with connection.cursor() as cur:
            rows = cur.execute(
                "SELECT pid, wait_event_type FROM pg_stat_activity WHERE datname = "
                "current_database() AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
            ).fetchall()
        return dict(rows)

    def statements_ms(self) -> float:
        from django.db import connection

        with connection.cursor() as cur:
            return cur.execute(
                "SELECT coalesce(sum(total_exec_time + total_plan_time), 0) FROM "
                "pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid "
                "WHERE d.datname = current_database()"
            ).fetchone()[0]

    def begin(self) -> None:
        self.start = {pid: et.cpu_seconds([pid]) for pid in self.backends()}
        self.last = dict(self.start)
        self.reaped_start = reaped_seconds(self.postmaster)
        self.background_start = et.cpu_seconds(self.background)
        if self.mode == "pg_stat_statements":
            self.statements_start = self.statements_ms()

    def sample(self) -> None:
        now = self.backends()
        self.samples += 1
        for pid, wait in now.items():
            self.last[pid] = et.cpu_seconds([pid])
            self.start.setdefault(pid, 0.0)
            self.active += 1
            self.lock_waits += wait == "Lock"

    def end(self) -> dict[str, float]:
        self.sample()
        alive = set(self.backends())
        live = sum(et.cpu_seconds([p]) - self.start[p] for p in alive if p in self.start)
        # A backend that exited is in the postmaster's reaped time whole: take off what it had
        # used before the window.
        gone = [p for p in self.start if p not in alive]
        exited = reaped_seconds(self.postmaster) - self.reaped_start
        out = {
            "live": live,
            # Ours that exited, to their last sample (a connection shorter than one sample
            # interval is missed here, and counted in the server-wide figure below).
            "exited": sum(self.last[p] - self.start[p] for p in gone),
            "exited_server": max(exited - sum(self.start[p] for p in gone), 0.0),
            "background": et.cpu_seconds(self.background) - self.background_start,
        }
        out["cpu"] = out["live"] + out["exited"] + out["background"]
        if self.mode == "pg_stat_statements":
            out["statements"] = (self.statements_ms() - self.statements_start) / 1000
        return out


def pg_sampler() -> PgSampler:
    from django.db import connection

    with connection.cursor() as cur:
        backend = cur.execute("SELECT pg_backend_pid()").fetchone()[0]
        background = [
            pid
            for (pid,) in cur.execute(
                "SELECT pid FROM pg_stat_activity WHERE backend_type <> 'client backend'"
            ).fetchall()
        ]
        mode = "proc"
        try:
            cur.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            cur.execute("SELECT count(*) FROM pg_stat_statements")
            mode = "pg_stat_statements"
        except Exception as exc:  # not in shared_preload_libraries: the /proc count
            print(f"pg_stat_statements unusable here ({str(exc).strip()}): CPU from /proc")
    connection.close()  # a failed statement leaves the connection's transaction unusable
    fields = proc_stat(backend)
    assert fields is not None, "the PostgreSQL backend is not on this machine's /proc"
    return PgSampler(postmaster=int(fields[1]), background=background, mode=mode)


def cores(seconds: float, wall: float) -> float:
    return seconds / wall if wall > 0 else 0.0


def measure(
    n_workers: int, cells: int, concurrency: int, ctx: dict[str, Any], sampler: PgSampler
) -> dict[str, Any]:
    """One run of `cells` cells driven by `n_workers` worker processes together."""
    import httpx

    from runs.engine.doorbell import run_dispatch
    from runs.planning.services import run_create

    workers = ctx["workers"]
    while len(workers) < n_workers:
        workers.append(et.start_worker())
    et.wait_for_workers(len(workers))
    dataset = et.dataset_of(ctx["questions"][:cells], ["scale", n_workers, cells])
    httpx.post(f"http://127.0.0.1:{ctx['port']}/_sim/reset", timeout=10)
    pids = [w.pid for w in workers]
    others = {"redis": et.broker_pids(), "simulator": [ctx["sim"].pid]}
    before = {name: et.cpu_seconds(p) for name, p in others.items()}
    worker_before = et.cpu_seconds(pids)
    machine_before = machine_seconds()
    sampler.begin()
    run, _ = run_create(
        owner=ctx["owner"],
        plan={
            "name": f"scale W={n_workers}",
            "dataset": dataset.pk,
            "targets": ["bench"],
            "limits": {"concurrency": concurrency, "max_output_tokens": 4096},
        },
    )
    for _ in range(n_workers - 1):
        run_dispatch(run_id=run.pk)
    while True:
        sampler.sample()
        run.refresh_from_db()
        if run.is_terminal:
            break
        time.sleep(0.05)
    pg = sampler.end()
    wall = (run.finished_at - run.started_at).total_seconds()
    used = {name: et.cpu_seconds(p) - before[name] for name, p in others.items()}
    used["workers"] = et.cpu_seconds(pids) - worker_before
    used["postgres"] = pg["cpu"]
    return {
        "workers": n_workers,
        "status": run.status,
        "wall": wall,
        "rate": cells / wall,
        "cores": {name: cores(s, wall) for name, s in used.items()},
        "machine": cores(machine_seconds() - machine_before, wall),
        "pg": pg,
        "lock_share": sampler.lock_waits / max(sampler.active, 1),
        "load": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


def machine_seconds() -> float:
    """CPU seconds every process of the machine used (user + nice + system + irq + softirq)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    busy = sum(int(fields[i]) for i in (0, 1, 2, 5, 6))
    return busy / et.CLK_TCK


def bottleneck(points: list[dict[str, Any]]) -> str:
    """The first thing that stops the growth, named from the measured points."""
    ncpu = os.cpu_count() or 1
    base = points[0]["rate"]
    for p in points[1:]:
        efficiency = p["rate"] / (p["workers"] * base)
        if efficiency >= 0.8:
            continue
        c = p["cores"]
        if p["machine"] >= 0.85 * ncpu:
            top = max(c, key=c.get)
            return (
                f"from {p['workers']} workers: this machine's {ncpu} cores "
                f"({p['machine']:.2f} busy, all processes); the largest share is {top} "
                f"({c[top]:.2f} cores) — more workers on the same cores only divide them"
            )
        if p["lock_share"] >= 0.2:
            return (
                f"from {p['workers']} workers: PostgreSQL row locks ({p['lock_share']:.0%} "
                f"of sampled backends wait on a lock: the run row group commit serialises)"
            )
        per_worker = c["workers"] / p["workers"]
        if per_worker >= 0.85:
            return f"from {p['workers']} workers: each worker's own core ({per_worker:.2f})"
        return (
            f"from {p['workers']} workers: none of CPU (machine {p['machine']:.2f} of {ncpu}), "
            f"locks ({p['lock_share']:.0%}) or a worker's core: the claim loop's waits"
        )
    return "none within the measured points (every step ≥ 0.8 of linear)"


def line(p: dict[str, Any], base: float) -> str:
    c, pg = p["cores"], p["pg"]
    efficiency = p["rate"] / (p["workers"] * base)
    per_worker_core = p["rate"] / c["workers"] if c["workers"] else float("nan")
    per_pg_core = p["rate"] / c["postgres"] if c["postgres"] else float("nan")
    statements = (
        f", statements' executor time {pg['statements']:.2f} s" if "statements" in pg else ""
    )
    return (
        f"{p['workers']} worker(s): {p['status']}, {p['rate']:.0f} calls/s (wall {p['wall']:.2f} s), "
        f"efficiency vs linear {efficiency:.2f}; cores busy: workers {c['workers']:.2f}, "
        f"PostgreSQL {c['postgres']:.2f}, Redis {c['redis']:.2f}, simulator {c['simulator']:.2f}, "
        f"machine {p['machine']:.2f}; {per_worker_core:.0f} calls/s per worker core, "
        f"{per_pg_core:.0f} per PostgreSQL core; PostgreSQL CPU s: live backends "
        f"{pg['live']:.2f} + exited backends {pg['exited']:.2f} + background "
        f"{pg['background']:.2f} (every backend the server reaped meanwhile, any database's: "
        f"{pg['exited_server']:.2f}){statements}; lock waits {p['lock_share']:.0%} of samples; "
        f"load {p['load']}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    args = parser.parse_args()
    if not et.BROKER.startswith("redis://"):
        raise SystemExit(f"scale_out measures on Redis, the production broker; got {et.BROKER}")
    work = et.bench_setup("srbench-scale-")
    from django.contrib.auth import get_user_model

    _, _, questions, data = et.synthetic_questions(work, args.cells)
    sim, port = et.start_simulator(work, data, ttft=0.0, chunks=50, chunk_gap=0.00001)
    ctx: dict[str, Any] = {"workers": [], "questions": questions, "sim": sim, "port": port}
    try:
        et.bench_target(port)
        ctx["owner"] = get_user_model().objects.create(username="scale")
        sampler = pg_sampler()
        print(
            f"scale-out at L ≈ 0 (TTFT 0, 50 chunks 10 µs apart), {args.cells} cells, run "
            f"concurrency {args.concurrency}, broker {et.BROKER}, {os.cpu_count()} cores; "
            f"PostgreSQL CPU from {sampler.mode}"
        )
        measure(1, min(64, args.cells), 8, ctx, sampler)  # warm-up: imports, pools
        points = []
        for n in args.workers:
            points.append(measure(n, args.cells, args.concurrency, ctx, sampler))
            print(line(points[-1], points[0]["rate"]), flush=True)
        print("first bottleneck: " + bottleneck(points))
    finally:
        for worker in ctx["workers"]:
            os.killpg(worker.pid, 15)
        sim.terminate()
        for worker in ctx["workers"]:
            worker.wait(timeout=30)
        sim.wait(timeout=30)


if __name__ == "__main__":
    main()
