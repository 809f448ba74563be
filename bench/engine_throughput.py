"""Engine throughput: N cells against the simulator with a fixed latency L at concurrency C.

Prints the achieved wall time against the ideal ceil(N/C)·L, calls per second, harness CPU
per call counting every process of ours (the worker, PostgreSQL backends, Redis — not the
simulator), and measured TTFT against the simulator's configured TTFT (PERFORMANCE.md).

    .venv/bin/python bench/engine_throughput.py [--cells 740] [--concurrency 32 256]
        [--ttft 0.2] [--chunks 50] [--chunk-gap 0.01]

Needs PostgreSQL and Redis on loopback (as `make test`); uses its own database and Redis DB.
"""

from __future__ import annotations

import argparse
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DB = os.environ.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/srbench_bench")
BROKER = os.environ.get("BENCH_BROKER_URL", "redis://127.0.0.1:6379/12")
CLK_TCK = os.sysconf("SC_CLK_TCK")


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


def cpu_by_pid(pids: list[int]) -> dict[int, float]:
    return {pid: cpu_seconds([pid]) for pid in pids}


def pids_of(pattern: str) -> list[int]:
    out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cells", type=int, default=740)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[32, 256])
    parser.add_argument("--ttft", type=float, default=0.2)
    parser.add_argument("--chunks", type=int, default=50)
    parser.add_argument("--chunk-gap", type=float, default=0.01)
    args = parser.parse_args()

    os.environ.update(
        DJANGO_SETTINGS_MODULE="srbench.settings",
        SECRET_KEY="bench-only",
        DATABASE_URL=DB,
        CELERY_BROKER_URL=BROKER,
        SRBENCH_VAR_DIR=tempfile.mkdtemp(prefix="srbench-bench-"),
    )
    dbname = DB.rsplit("/", 1)[1]
    subprocess.run(
        [
            "psql",
            "-h",
            "127.0.0.1",
            "-U",
            "postgres",
            "-q",
            "-c",
            f"DROP DATABASE IF EXISTS {dbname}",
            "-c",
            f"CREATE DATABASE {dbname}",
        ],
        check=True,
    )
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    import redis

    redis.Redis.from_url(BROKER).flushdb()

    from django.contrib.auth import get_user_model

    from datasets.benchmarks import get_adapter
    from datasets.models import DatasetQuestion, FrozenDataset, Question, QuestionSecret
    from datasets.synthetic import write_synthetic
    from runs.models import Target
    from runs.services import run_create
    from srbench.canonical import sha256_hex

    work = Path(os.environ["SRBENCH_VAR_DIR"])
    data = write_synthetic("mmlu-pro", work / "mmlu", args.cells, 7)
    adapter = get_adapter("mmlu-pro")
    loaded = adapter.load(data)[: args.cells]
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

    # Reasoning text of (chunks - answer tokens) tokens paced chunk_gap apart: every reply is
    # about `chunks` SSE content/reasoning events after a fixed TTFT.
    reasoning = " ".join(["step"] * (args.chunks - 4))
    port = free_port()
    config = work / "sim.toml"
    config.write_text(
        f"seed = 1\n[models.bench]\naccuracy = 0.8\nttft_s = {args.ttft}\n"
        f"tokens_per_second = {1 / args.chunk_gap}\nchunk_tokens = 1\nprefix_cache = false\n"
        f'reasoning = "{reasoning}"\n[answer_key]\nsources = [["mmlu-pro", "{data}"]]\n'
    )
    sim = subprocess.Popen(
        [sys.executable, "-m", "srbench.simulator", "--port", str(port), "--config", str(config)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "srbench",
            "worker",
            "--pool=threads",
            "--concurrency=2",
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
    try:
        import httpx

        for _ in range(100):
            try:
                httpx.get(f"http://127.0.0.1:{port}/health")
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        Target.objects.create(
            slug="bench",
            name="bench",
            model="bench",
            base_url=f"http://127.0.0.1:{port}/v1",
            prices={"bench": {"input": "1", "output": "2"}},
        )
        owner = get_user_model().objects.create(username="bench")
        # The unloaded latency L of one call, measured the way the engine streams it.
        t0 = time.monotonic()
        with httpx.stream(
            "POST",
            f"http://127.0.0.1:{port}/v1/chat/completions",
            json={
                "model": "bench",
                "stream": True,
                "messages": adapter.messages(loaded[0].payload),
            },
        ) as r:
            for _ in r.iter_raw():
                pass
        latency = time.monotonic() - t0
        print(
            f"unloaded call latency L = {latency:.3f} s (TTFT {args.ttft} s + {args.chunks} "
            f"chunks {args.chunk_gap} s apart); N = {len(questions)} cells"
        )
        for concurrency in args.concurrency:
            dataset = FrozenDataset.objects.create(
                identity_sha256=sha256_hex(["bench", concurrency, time.time()]),
                name="bench",
                profile="quick",
                seed=1,
                split="dev",
                selection={},
            )
            DatasetQuestion.objects.bulk_create(
                DatasetQuestion(dataset=dataset, question=q, position=i)
                for i, q in enumerate(questions)
            )

            # CPU of every process of ours: worker (with its children), PostgreSQL backends
            # (including ones that come and go during the run: sampled while it runs) and
            # Redis; not the simulator.
            def ours() -> list[int]:
                return sorted(
                    {
                        *pids_of("celery -A srbench worker"),
                        *pids_of("postgres"),
                        *pids_of("redis-server"),
                    }
                )

            before = cpu_by_pid(ours())
            seen = dict(before)
            run, _ = run_create(
                owner=owner,
                plan={
                    "name": f"bench C={concurrency}",
                    "dataset": dataset.pk,
                    "targets": ["bench"],
                    "limits": {"concurrency": concurrency, "max_output_tokens": 4096},
                },
            )
            while True:
                for pid, cpu in cpu_by_pid(ours()).items():
                    seen[pid] = max(cpu, seen.get(pid, 0.0))
                run.refresh_from_db()
                if run.is_terminal:
                    break
                time.sleep(0.2)
            for pid, cpu in cpu_by_pid(ours()).items():
                seen[pid] = max(cpu, seen.get(pid, 0.0))
            used = {pid: cpu - before.get(pid, 0.0) for pid, cpu in seen.items()}
            worker_pids = set(pids_of("celery -A srbench worker"))
            worker_cpu = sum(v for pid, v in used.items() if pid in worker_pids)
            total_cpu = sum(used.values())
            pg_cpu = total_cpu - worker_cpu
            wall = (run.finished_at - run.started_at).total_seconds()
            ideal = math.ceil(len(questions) / concurrency) * latency
            from runs.report import run_report

            report = run_report(run=run)["targets"][0]
            print(
                f"C={concurrency:>4}: status {run.status}; wall {wall:.2f} s vs ideal "
                f"{ideal:.2f} s -> wall/ideal {wall / ideal:.3f} (efficiency {ideal / wall:.3f}); "
                f"{len(questions) / wall:.1f} calls/s; harness CPU "
                f"{total_cpu / len(questions) * 1000:.2f} ms/call; TTFT p50 "
                f"{report['ttft_p50_ms']:.0f} ms vs configured {args.ttft * 1000:.0f} ms "
                f"(worker {worker_cpu / len(questions) * 1000:.2f} ms/call, PostgreSQL + Redis "
                f"{pg_cpu / len(questions) * 1000:.2f} ms/call)"
            )
    finally:
        os.killpg(worker.pid, 15)
        sim.terminate()
        worker.wait(timeout=30)
        sim.wait(timeout=30)


if __name__ == "__main__":
    main()
