"""Issue 25's side-by-side workload, in one sitting: sr-bench 1.0 (the `vllm-sr` 0.4.0 wheel,
standalone service) and srbench, each through its own CLI, interleaved, against one simulator.

The workload: the same 740 MMLU-Pro-format questions for both tools, taken from one local file in
the official layout (`data/test-*.parquet`, written by `datasets.synthetic`; no network), one
OpenAI-compatible simulator (ours) with TTFT 0.2 s and 50 chunks 0.01 s apart and an MMLU-Pro
answer key, C = 32, ideal wall ceil(N/C)·L with L the unloaded latency of one call. sr-bench
freezes the file with `dataset prepare --local` (profile standard, `--limit`, its own
stratified-hash order); ours gets exactly the questions it selected, in its order.

Per run: wall from the CLI's start to its printed report, wall/ideal, calls/s, CPU per call over
every process of that tool (sr-bench: its service — which holds its SQLite store and engine
threads — and its CLI; ours: web, worker, PostgreSQL backends, broker and CLI, as
bench/cli_path.py counts them), TTFT p50 as the tool reports it, and the calls the simulator saw
(no duplicate, none lost). Prints a side-by-side table with ratios and /proc/loadavg at start and
end: the machine may be shared, so the load goes with the figures.

sr-bench 1.0 lives in its own venv (scripts/ensure_srbench1.sh, hash-checked). If it cannot be
installed or run here, this says exactly why and still prints our side.

    .venv/bin/python bench/side_by_side.py [--rounds 2] [--cells 740] [--concurrency 32]
        [--ttft 0.2] [--chunks 50] [--chunk-gap 0.01] [--poll 1.0]

Needs PostgreSQL and Redis on loopback (as `make test`); uses its own database and Redis DB
(BENCH_DATABASE_URL, BENCH_BROKER_URL).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cli_path import (  # noqa: E402  (bench scripts share their set-up and helpers)
    CpuSampler,
    cli_cpu_seconds,
    our_round,
    session_pids,
    start_ours,
    stop_processes,
)
from engine_throughput import (  # noqa: E402
    ROOT,
    bench_setup,
    free_port,
    start_simulator,
    synthetic_questions,
    unloaded_latency,
    wait_http,
)

SRBENCH1_VENV = Path(os.environ.get("SRBENCH1_VENV", ROOT / "var" / "srbench1-venv"))
SOURCE_ROWS = 2500  # sr-bench's standard window starts after the 500 quick cases
KEY_ENV = "SIDE_BY_SIDE_SIM_KEY"  # sr-bench targets name a credential variable, never a key
TARGET = "sim"


class SrBenchUnavailable(Exception):
    """sr-bench 1.0 cannot be installed or run here; the message says why."""


def sim_stats(port: int, reset: bool = False) -> dict[str, Any]:
    import httpx

    url = f"http://127.0.0.1:{port}/_sim/"
    return (httpx.post(url + "reset") if reset else httpx.get(url + "stats")).json()


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().strip()


class ProcessSampler(CpuSampler):
    """cli_path's sampler over plain process groups (sr-bench has no PostgreSQL backends)."""

    def _backends(self) -> list[int]:
        return []


@dataclass
class SrBench:
    """A standalone sr-bench 1.0 service on loopback, its store, and the target's definition."""

    proc: subprocess.Popen
    store: Path
    url: str
    target: dict[str, Any]
    dataset: dict[str, Any] = field(default_factory=dict)  # the frozen manifest it runs

    def cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return srbench_cli("--url", self.url, "--store", str(self.store), *args, timeout=timeout)


def srbench_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    exe = SRBENCH1_VENV / "bin" / "vllm-sr"
    return subprocess.run(
        [str(exe), "benchmark", *args], capture_output=True, text=True, timeout=timeout
    )


def ensure_srbench1() -> None:
    """The hash-checked venv of `vllm-sr==0.4.0`, or SrBenchUnavailable with the installer's
    own words."""
    script = ROOT / "scripts" / "ensure_srbench1.sh"
    done = subprocess.run(
        [str(script)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHON": sys.executable},
        cwd=ROOT,
    )
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-8:])
        raise SrBenchUnavailable(f"{script.name} exited {done.returncode}:\n{tail}")


def srbench_prepare(store: Path, source: Path, cells: int) -> dict[str, Any]:
    """Freezes `cells` questions of the local official-format file into sr-bench's store
    (its `dataset prepare --local`; profile standard, custom `--limit`); returns its manifest."""
    done = srbench_cli(
        "--store", str(store), "--no-autostart", "dataset", "prepare", "--local",
        "--benchmark", "mmlu-pro", "--profile", "standard", "--limit", str(cells),
        "--revision", "side-by-side-synthetic", "--source-path", str(source),
    )  # fmt: skip
    if done.returncode != 0:
        raise SrBenchUnavailable(f"dataset prepare exited {done.returncode}: {done.stderr[-800:]}")
    manifest = json.loads(done.stdout)
    if manifest.get("case_count") != cells:
        raise SrBenchUnavailable(f"dataset prepare froze {manifest.get('case_count')} cases")
    return manifest


def srbench_case_ids(manifest: dict[str, Any]) -> list[str]:
    """Native question ids of the frozen cases, in sr-bench's order (`mmlu-pro/<id>`)."""
    lines = Path(manifest["path"]).read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["id"].split("/", 1)[1] for line in lines if line.strip()]


def start_srbench(work: Path, sim_port: int) -> SrBench:
    """`vllm-sr benchmark --store DIR serve` on a free loopback port, with the simulator
    registered as single target `sim` (priced, as ours)."""
    store = work / "srbench1-store"
    port = free_port()
    log = (work / "srbench1-serve.log").open("w")
    proc = subprocess.Popen(
        [str(SRBENCH1_VENV / "bin" / "vllm-sr"), "benchmark", "--store", str(store), "serve"]
        + ["--host", "127.0.0.1", "--port", str(port)],
        env={**os.environ, KEY_ENV: "side-by-side"},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    target = {
        "id": TARGET,
        "kind": "single",
        "base_url": f"http://127.0.0.1:{sim_port}/v1",
        "model": "bench",
        "api_key_env": KEY_ENV,
        "prices": {"bench": {"input": 1, "cached_input": 1, "cache_write": 1, "output": 2}},
    }
    service = SrBench(proc=proc, store=store, url=url, target=target)
    try:
        wait_http(f"{url}/health", seconds=60)
        registry = work / "srbench1-targets.json"
        registry.write_text(json.dumps([target]))
        done = service.cli("target", "register", "--file", str(registry))
        if done.returncode != 0:
            raise SrBenchUnavailable(f"target register exited {done.returncode}: {done.stderr}")
    except BaseException as exc:
        stop_processes(groups=(proc,))
        if isinstance(exc, SrBenchUnavailable):
            raise
        raise SrBenchUnavailable(
            f"the service did not start ({exc!r}); its log: "
            + (work / "srbench1-serve.log").read_text()[-800:]
        ) from exc
    return service


def srbench_round(
    service: SrBench, dataset: dict[str, Any], round_no: int, concurrency: int, work: Path
) -> dict[str, Any]:
    """One live run through sr-bench's CLI (`run --manifest`, which follows the run and prints
    the report): wall from the CLI's start to its exit, CPU of the service and the CLI."""
    manifest = {
        "version": "sr-bench-1.0",
        "name": f"side-by-side {round_no}",
        "mode": "live",
        "profile": dataset["profile"],
        "seed": dataset["seed"],
        "dataset": {"path": dataset["path"], "sha256": dataset["sha256"]},
        "targets": [service.target],
        "limits": {"concurrency": concurrency},
    }
    path = work / f"srbench1-manifest-{round_no}.json"
    path.write_text(json.dumps(manifest))
    sid = os.getsid(service.proc.pid)
    cli_cpu_seconds()  # children reaped so far are not this CLI's
    sampler = ProcessSampler({"service": session_pids(sid)})
    exe = SRBENCH1_VENV / "bin" / "vllm-sr"
    started = time.monotonic()
    cli = subprocess.Popen(
        [str(exe), "benchmark", "--url", service.url, "--store", str(service.store)]
        + ["run", "--manifest", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    while cli.poll() is None:
        sampler.groups = {"service": session_pids(sid)}
        sampler.sample()
        # Waiting on the process (not sleeping) stamps its exit to the millisecond.
        with contextlib.suppress(subprocess.TimeoutExpired):
            cli.wait(timeout=0.25)
    wall = time.monotonic() - started
    out, err = cli.communicate()
    sampler.sample()
    cpu = sampler.totals()
    cpu["cli"] = cli_cpu_seconds()
    try:
        report = json.loads(out)
    except ValueError as exc:
        raise SrBenchUnavailable(f"run exited {cli.returncode}: {err[-800:]}") from exc
    target = report["summary"]["targets"][0]
    ttft = target.get("ttft_p50_s")
    return {
        "wall": wall,
        "engine_wall": report["summary"].get("wall_time_s"),
        "calls": target.get("call_count") or 0,
        "cpu": cpu,
        "ttft_ms": ttft * 1000 if ttft is not None else None,
        "status": report.get("status"),
        "failed": target.get("failed"),
        "cli_rc": cli.returncode,
    }


def sim_calls(stats: dict[str, Any], expected: int) -> dict[str, Any]:
    """The calls the simulator saw in one run (reset before it). Ours tag each call with its
    id, so duplicates are seen per call; sr-bench's calls carry no id, so for it the check is
    that the chat requests seen equal the cells (and its report's calls)."""
    by_id = stats["by_call_id"]
    seen = stats["chat_requests"]
    if by_id:
        duplicated = sum(n - 1 for n in by_id.values())
        lost = expected - len(by_id)
    else:
        duplicated, lost = max(seen - expected, 0), max(expected - seen, 0)
    return {"seen": seen, "duplicated": duplicated, "lost": lost, "by_id": bool(by_id)}


def describe(label: str, row: dict[str, Any], ideal: float) -> str:
    calls, wall, cpu = row["calls"], row["wall"], row["cpu"]
    sim = row["sim"]
    engine = row["engine_wall"] or 0
    return (
        f"  {label:<13} {row['status']}, {calls} calls; wall {wall:.2f} s = {wall / ideal:.2f}×"
        f" ideal (its own run wall {engine:.2f} s), {calls / wall:.1f} calls/s; CPU per call "
        f"{sum(cpu.values()) / max(calls, 1) * 1000:.1f} ms ("
        + ", ".join(f"{k} {v / max(calls, 1) * 1000:.1f}" for k, v in sorted(cpu.items()))
        + f"); TTFT p50 {row['ttft_ms'] or 0:.0f} ms; simulator saw {sim['seen']} "
        f"(duplicated {sim['duplicated']}, lost {sim['lost']}); load {os.getloadavg()[0]:.2f}"
    )


def metrics(row: dict[str, Any], ideal: float) -> dict[str, float | None]:
    calls = max(row["calls"], 1)
    out: dict[str, float | None] = {
        "wall (s)": row["wall"],
        "wall / ideal (×)": row["wall"] / ideal,
        "run wall, own clock (s)": row["engine_wall"],
        "calls/s": row["calls"] / row["wall"],
        "CPU per call, all processes (ms)": sum(row["cpu"].values()) / calls * 1000,
    }
    for name, seconds in sorted(row["cpu"].items()):
        out[f"  of which {name} (ms)"] = seconds / calls * 1000
    out["TTFT p50 (ms)"] = row["ttft_ms"]
    out["simulator: calls seen"] = row["sim"]["seen"]
    out["simulator: duplicated + lost"] = row["sim"]["duplicated"] + row["sim"]["lost"]
    return out


def cell(values: list[float]) -> str:
    if not values:
        return "—"
    mid = statistics.median(values)
    spread = f" [{min(values):.2f}–{max(values):.2f}]" if len(values) > 1 else ""
    return f"{mid:.2f}{spread}"


def table(rows: dict[str, list[dict[str, Any]]], ideal: float) -> None:
    """Medians [min–max] over the rounds, side by side; ratio = srbench / sr-bench 1.0."""
    theirs = [metrics(r, ideal) for r in rows["theirs"]]
    ours = [metrics(r, ideal) for r in rows["ours"]]
    names = list(dict.fromkeys(k for m in theirs + ours for k in m))
    names.sort(key=lambda k: ("CPU" in k or "of which" in k, "TTFT" in k, "simulator" in k))
    print(f"{'':34} {'sr-bench 1.0':>22} {'srbench':>22} {'srbench / sr-bench':>19}")
    for name in names:
        a = [m[name] for m in theirs if m.get(name) is not None]
        b = [m[name] for m in ours if m.get(name) is not None]
        ratio = (
            f"{statistics.median(b) / statistics.median(a):.2f}"
            if a and b and statistics.median(a)
            else "—"
        )
        print(f"{name:34} {cell(a):>22} {cell(b):>22} {ratio:>19}")


def prepare_theirs(work: Path, source: Path, cells: int, sim_port: int) -> tuple[Any, list[str]]:
    """sr-bench installed, the dataset frozen and the service started: (service, case ids)."""
    ensure_srbench1()
    dataset = srbench_prepare(work / "srbench1-store", source, cells)
    ids = srbench_case_ids(dataset)
    service = start_srbench(work, sim_port)
    service.dataset = dataset
    return service, ids


def sitting(args: argparse.Namespace, work: Path, setup: tuple, sim_port: int) -> None:
    """Both tools' rounds, interleaved (the first tool alternates), then the table."""
    adapter, loaded, questions, data = setup
    source = sorted((data / "data").glob("test-*.parquet"))[0]
    service, reason = None, None
    by_native = {q.native_id: row for q, row in zip(loaded, questions, strict=True)}
    chosen = questions[: args.cells]
    try:
        service, ids = prepare_theirs(work, source, args.cells, sim_port)
        chosen = [by_native[i] for i in ids]
    except SrBenchUnavailable as exc:
        reason = str(exc)
    stack = None
    try:
        stack = start_ours(sim_port)
        latency = unloaded_latency(sim_port, adapter.messages(loaded[0].payload))
        n = len(chosen)
        ideal = math.ceil(n / args.concurrency) * latency
        print(
            f"side by side: N = {n} MMLU-Pro-format questions from {source.name} (the same "
            f"{'cases sr-bench froze' if service else 'first cases'}), C = {args.concurrency}, "
            f"unloaded L = {latency:.3f} s (TTFT {args.ttft} s + {args.chunks} chunks "
            f"{args.chunk_gap} s apart), ideal ceil(N/C)·L = {ideal:.2f} s"
        )
        rows: dict[str, list[dict[str, Any]]] = {"theirs": [], "ours": []}
        for r in range(args.rounds):
            print(f"round {r + 1}:")
            for side in ("theirs", "ours") if r % 2 == 0 else ("ours", "theirs"):
                if side == "theirs" and service is None:
                    continue
                sim_stats(sim_port, reset=True)
                try:
                    row = (
                        srbench_round(service, service.dataset, r, args.concurrency, work)
                        if side == "theirs"
                        else our_round(stack, chosen, r, args.concurrency, args.poll)
                    )
                except SrBenchUnavailable as exc:
                    reason = f"round {r + 1}: {exc}"
                    stop_processes(groups=(service.proc,))
                    service = None
                    continue
                row["sim"] = sim_calls(sim_stats(sim_port), n)
                rows[side].append(row)
                print(describe("sr-bench 1.0" if side == "theirs" else "srbench", row, ideal))
        table(rows, ideal)
        if reason:
            print(f"sr-bench 1.0 not measured here: {reason}")
    finally:
        ours = (stack.worker, stack.web) if stack else ()
        stop_processes(groups=(*ours, *((service.proc,) if service else ())))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cells", type=int, default=740)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--ttft", type=float, default=0.2)
    parser.add_argument("--chunks", type=int, default=50)
    parser.add_argument("--chunk-gap", type=float, default=0.01)
    parser.add_argument("--poll", type=float, default=1.0, help="our CLI's --poll while following")
    args = parser.parse_args()
    print(f"/proc/loadavg at start: {loadavg()}")
    work = bench_setup("srbench-bench-sbs-")
    setup = synthetic_questions(work, max(SOURCE_ROWS, args.cells))
    sim, sim_port = start_simulator(
        work, setup[3], ttft=args.ttft, chunks=args.chunks, chunk_gap=args.chunk_gap
    )
    try:
        sitting(args, work, setup, sim_port)
    finally:
        stop_processes(sim)
        shutil.rmtree(work, ignore_errors=True)
        print(f"/proc/loadavg at end: {loadavg()}")


if __name__ == "__main__":
    main()
