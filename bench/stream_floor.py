"""The machine's floor for C concurrent model streams: what a client that does nothing but read
reaches, against the same fake server and workload as the engine's C = 1,024 figure.

`bench/engine_throughput.py --cells 4096 --chunk-gap 0.016 --concurrency 1024` asks the engine
for ≥ 0.90 of the ideal wall ⌈N/C⌉·L (issue 38 item 2). Part of what stands between any client
and that ideal is not the engine's: the fake server's CPU (its sends on loopback are mostly
kernel time) and the client's own socket reads share the machine's cores. This script measures
that part alone: the lean server (`srbench.simulator.lean`, the simulator's bytes per stream)
in its own process, and a null client in this one — C keep-alive connections, each sending its
share of the N requests one after the other and reading every response to its chunked end with
one asyncio protocol callback per read, no parsing, no ledger, no database. It prints the null
client's efficiency (ideal / wall), each process's CPU (user and system), and what the ideal
wall would need in cores. An engine can at best reach the null client's figure on the same
machine; where the null client is below 0.90, so is every engine.

    .venv/bin/python bench/stream_floor.py [--cells 4096] [--concurrency 1024] [--chunk-gap 0.016]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
CLK_TCK = os.sysconf("SC_CLK_TCK")
END = b"\r\n0\r\n\r\n"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def proc_cpu(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / CLK_TCK, int(fields[12]) / CLK_TCK


def own_cpu() -> tuple[float, float]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


def config_text(ttft: float, chunks: int, chunk_gap: float) -> str:
    """The engine bench's model (bench/engine_throughput.py start_simulator) without a key:
    a reasoning text paced chunk_gap apart, about `chunks` events a reply."""
    return (
        f"seed = 1\n[models.bench]\naccuracy = 0.8\nttft_s = {ttft}\n"
        f"tokens_per_second = {1 / chunk_gap}\nchunk_tokens = 1\nprefix_cache = false\n"
        f'reasoning = "{" ".join(["step"] * (chunks - 4))}"\n'
    )


def request_bytes(port: int, i: int) -> bytes:
    body = json.dumps(
        {
            "model": "bench",
            "stream": True,
            "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": f"Question {i}: which option? A) x B) y"}],
        }
    ).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


class NullClient(asyncio.Protocol):
    """One connection: sends a request, reads its response to the chunked end, repeats."""

    def __init__(self, requests: list[bytes], done: asyncio.Future[None]) -> None:
        self.requests = requests
        self.done = done
        self.transport: asyncio.Transport | None = None
        self.tail = b""
        self.reads = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.send_next()

    def send_next(self) -> None:
        if not self.requests:
            if not self.done.done():
                self.done.set_result(None)
            return
        assert self.transport is not None
        self.transport.write(self.requests.pop())

    def data_received(self, data: bytes) -> None:
        self.reads += 1
        self.tail = (self.tail + data)[-len(END) :]
        if self.tail == END:
            self.tail = b""
            self.send_next()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_exception(exc or ConnectionError("closed by the server"))


async def drive(port: int, cells: int, concurrency: int) -> tuple[float, int]:
    loop = asyncio.get_running_loop()
    shares: list[list[bytes]] = [[] for _ in range(concurrency)]
    for i in range(cells):
        shares[i % concurrency].append(request_bytes(port, i))
    futures: list[asyncio.Future[None]] = [loop.create_future() for _ in shares]
    started = time.monotonic()
    # All connections at once, as the engine's first wave opens them.
    opened = await asyncio.gather(
        *(
            loop.create_connection(
                lambda share=share, done=done: NullClient(share, done), "127.0.0.1", port
            )
            for share, done in zip(shares, futures, strict=True)
        )
    )
    clients = [client for _, client in opened]
    await asyncio.gather(*futures)
    wall = time.monotonic() - started
    for client in clients:
        if client.transport is not None:
            client.transport.close()
    return wall, sum(c.reads for c in clients)


def unloaded_latency(port: int, calls: int = 5) -> float:
    times = []
    for i in range(calls):
        started = time.monotonic()
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(request_bytes(port, i))
            tail = b""
            while tail != END:
                part = sock.recv(65536)
                if not part:
                    raise ConnectionError("closed")
                tail = (tail + part)[-len(END) :]
        times.append(time.monotonic() - started)
    return statistics.median(times)


def _uvloop_run() -> Any:
    import uvloop

    return uvloop.run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cells", type=int, default=4096)
    parser.add_argument("--concurrency", type=int, default=1024)
    parser.add_argument("--ttft", type=float, default=0.2)
    parser.add_argument("--chunks", type=int, default=50)
    parser.add_argument("--chunk-gap", type=float, default=0.016)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--loops",
        nargs="+",
        choices=("asyncio", "uvloop"),
        default=["asyncio", "uvloop"],
        help="the null client's event loops, each round in turn: the engine's (asyncio's "
        "default) and uvloop's, the lightest this machine has",
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="srbench-floor-"))
    config = work / "sim.toml"
    config.write_text(config_text(args.ttft, args.chunks, args.chunk_gap))
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "srbench.simulator.lean", "--port", str(port)]
        + ["--config", str(config)],
        cwd=ROOT,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            except httpx.TransportError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("the lean server did not start") from None
                time.sleep(0.1)
        latency = unloaded_latency(port)
        ideal = math.ceil(args.cells / args.concurrency) * latency
        print(
            f"null client vs the lean server: N = {args.cells}, C = {args.concurrency}, "
            f"L = {latency:.3f} s (TTFT {args.ttft} s + {args.chunks} chunks {args.chunk_gap} s "
            f"apart), ideal {ideal:.2f} s; {os.cpu_count()} cores",
            flush=True,
        )
        for round_, loop_name in [(r, name) for r in range(args.rounds) for name in args.loops]:
            server_before, client_before = proc_cpu(server.pid), own_cpu()
            load_before = Path("/proc/loadavg").read_text().split()[0]
            runner = asyncio.run if loop_name == "asyncio" else _uvloop_run()
            wall, reads = runner(drive(port, args.cells, args.concurrency))
            server_after, client_after = proc_cpu(server.pid), own_cpu()
            s_user, s_sys = (a - b for a, b in zip(server_after, server_before, strict=True))
            c_user, c_sys = (a - b for a, b in zip(client_after, client_before, strict=True))
            stats = httpx.get(f"http://127.0.0.1:{port}/_sim/stats", timeout=10).json()
            httpx.post(f"http://127.0.0.1:{port}/_sim/reset", timeout=10)
            late = stats["stream_late_ms"]
            print(
                f"round {round_ + 1}, {loop_name}: wall {wall:.2f} s -> efficiency "
                f"{ideal / wall:.3f}; "
                f"{reads} reads for {stats['chat_requests']} streams; "
                f"server CPU {s_user + s_sys:.2f} s (user {s_user:.2f}, system {s_sys:.2f}), "
                f"null client CPU {c_user + c_sys:.2f} s (user {c_user:.2f}, system "
                f"{c_sys:.2f}); cores the ideal wall would need for these two alone "
                f"{(s_user + s_sys + c_user + c_sys) / ideal:.2f}; server lateness at a "
                f"stream's end p50 / p90 {late['p50']:.1f} / {late['p90']:.1f} ms; load "
                f"{load_before}",
                flush=True,
            )
    finally:
        server.kill()
        server.wait()


if __name__ == "__main__":
    main()
