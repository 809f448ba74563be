"""Load benchmark: can the simulator hold 1,000 concurrent streams on loopback?

Starts the simulator in its own process (so client and server do not share one GIL), opens
``--streams`` concurrent streamed chat completions with one httpx.AsyncClient, and prints the
throughput, TTFT percentiles against the configured TTFT, and the server's CPU per stream.

    .venv/bin/python bench/simulator_load.py [--streams 1000] [--ttft 0.2] [--tokens 50]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from srbench.simulator.lean import FAKE_SERVERS

FIRST_TOKEN = re.compile(rb'"(?:reasoning_)?content":"[^"]')
CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass
class StreamResult:
    headers_s: float | None
    ttft_s: float | None
    total_s: float
    ok: bool
    chunks: int


def simulator_config(ttft: float, tokens_per_second: float, tokens: int) -> str:
    # The reasoning text pads the reply to about ``tokens`` streamed chunks.
    reasoning = " ".join(f"step{i}" for i in range(max(tokens - 25, 0)))
    return f"""
seed = 1
[models.load]
accuracy = 0.5
ttft_s = {ttft}
tokens_per_second = {tokens_per_second}
chunk_tokens = 1
reasoning = "{reasoning}"
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / CLK_TCK, int(fields[12]) / CLK_TCK


async def one_stream(client: httpx.AsyncClient, i: int) -> StreamResult:
    body = {
        "model": "load",
        "messages": [{"role": "user", "content": f"Load test request number {i}."}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    started = time.monotonic()
    ttft = headers_at = None
    buffer = b""
    try:
        async with client.stream("POST", "/v1/chat/completions", json=body) as response:
            headers_at = time.monotonic() - started
            async for block in response.aiter_raw():
                buffer += block
                if ttft is None and FIRST_TOKEN.search(buffer):
                    ttft = time.monotonic() - started
        ok = response.status_code == 200 and buffer.endswith(b"data: [DONE]\n\n")
    except httpx.HTTPError:
        ok = False
    return StreamResult(headers_at, ttft, time.monotonic() - started, ok, buffer.count(b"\n\n"))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run(
    base_url: str, streams: int, per_client: int
) -> tuple[list[StreamResult], float, int]:
    # httpx's pool scans its connection list on every request, which is quadratic at 1,000
    # connections in one client; shards of ``per_client`` keep the client from being the
    # bottleneck it is meant to measure.
    shards = -(-streams // per_client)
    limits = httpx.Limits(max_connections=per_client, max_keepalive_connections=per_client)
    clients = [
        httpx.AsyncClient(base_url=base_url, limits=limits, timeout=120) for _ in range(shards)
    ]
    try:
        await clients[0].get("/health")
        started = time.monotonic()
        results = await asyncio.gather(
            *(one_stream(clients[i % shards], i) for i in range(streams))
        )
        wall = time.monotonic() - started
        stats = (await clients[0].get("/_sim/stats")).json()
        return list(results), wall, int(stats["max_open_streams"])
    finally:
        for client in clients:
            await client.aclose()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--ttft", type=float, default=0.2)
    parser.add_argument("--tokens-per-second", type=float, default=100.0)
    parser.add_argument("--tokens", type=int, default=50)
    parser.add_argument(
        "--per-client",
        type=int,
        default=25,
        help="connections per httpx.AsyncClient (shards the client pool)",
    )
    parser.add_argument(
        "--server",
        choices=sorted(FAKE_SERVERS),
        default="simulator",
        help="the simulator, or the lean server sending its streams (srbench.simulator.lean)",
    )
    args = parser.parse_args()
    module = FAKE_SERVERS[args.server]

    try:
        import uvloop

        uvloop.install()  # a faster client loop leaves more of the host to the server
    except ImportError:
        pass
    port = free_port()
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as fh:
        fh.write(simulator_config(args.ttft, args.tokens_per_second, args.tokens))
    server = subprocess.Popen(
        [sys.executable, "-m", module, "--config", fh.name, "--port", str(port)],
        cwd=Path(__file__).resolve().parent.parent,
    )
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                httpx.get(f"{base_url}/health", timeout=1)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        cpu_before = cpu_seconds(server.pid)
        client_before = resource.getrusage(resource.RUSAGE_SELF)
        results, wall, peak = asyncio.run(run(base_url, args.streams, args.per_client))
        cpu_after = cpu_seconds(server.pid)
        server_user, server_system = (a - b for a, b in zip(cpu_after, cpu_before, strict=True))
        server_cpu = server_user + server_system
        client_after = resource.getrusage(resource.RUSAGE_SELF)
        client_cpu = (client_after.ru_utime + client_after.ru_stime) - (
            client_before.ru_utime + client_before.ru_stime
        )
    finally:
        server.terminate()
        server.wait(timeout=10)
        os.unlink(fh.name)

    ok = [r for r in results if r.ok]
    ttfts = [r.ttft_s for r in ok if r.ttft_s is not None]
    totals = [r.total_s for r in ok]
    chunks = sum(r.chunks for r in ok)
    ideal = args.ttft + args.tokens / args.tokens_per_second if args.tokens_per_second else 0
    print(f"streams            {args.streams} concurrent, {len(ok)} complete with [DONE]")
    print(f"peak concurrency   {peak} streams open at once on the server")
    print(f"wall               {wall:.2f} s  (one unloaded stream ≈ {ideal:.2f} s)")
    print(f"throughput         {len(ok) / wall:.0f} streams/s, {chunks / wall:.0f} SSE events/s")
    if ttfts:
        print(
            f"TTFT               p50 {statistics.median(ttfts):.3f} s, "
            f"p99 {percentile(ttfts, 0.99):.3f} s (configured {args.ttft:.3f} s)"
        )
        # The server sends headers at once and the first token ttft_s later, so the gap is the
        # server's own TTFT; time to headers is the connection set-up and the client's queueing.
        gaps = [r.ttft_s - r.headers_s for r in ok if r.ttft_s is not None and r.headers_s]
        heads = [r.headers_s for r in ok if r.headers_s is not None]
        print(
            f"  time to headers  p50 {statistics.median(heads):.3f} s, "
            f"p99 {percentile(heads, 0.99):.3f} s (connect + client queueing)"
        )
        print(
            f"  headers → token  p50 {statistics.median(gaps):.3f} s, "
            f"p99 {percentile(gaps, 0.99):.3f} s (the server's TTFT)"
        )
        print(
            f"stream duration    p50 {statistics.median(totals):.3f} s, "
            f"p99 {percentile(totals, 0.99):.3f} s"
        )
    print(
        f"server CPU         {server_cpu:.2f} s total (user {server_user:.2f}, system "
        f"{server_system:.2f}), {1000 * server_cpu / max(len(ok), 1):.2f} ms per stream, "
        f"{1e6 * server_cpu / max(chunks, 1):.1f} µs per SSE event "
        f"(user {1e6 * server_user / max(chunks, 1):.1f})"
    )
    print(f"client CPU         {client_cpu:.2f} s total (the client shares this 2-core host)")
    print(f"load average       {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if len(ok) != args.streams:
        sys.exit(1)


if __name__ == "__main__":
    main()
