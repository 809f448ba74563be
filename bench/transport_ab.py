"""The engine's HTTP client, A/B: CPU per streamed chunk (per SSE event the server sent in its
own chunked-encoding piece) of two `engine_client` builds.

Streams SSE responses from a bare loopback server (a subprocess, so its CPU is not counted)
through `runs.engine.transport.engine_client` and through the same module as it stood at a git
revision (`--baseline`, default HEAD), interleaved, and prints the client's CPU per chunk for
each. It decided the public-transport change in docs/decisions.md.

    .venv/bin/python bench/transport_ab.py [--baseline REV] [--streams 64] [--chunks 400]
        [--rounds 5] [--concurrency 32]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SERVER = r"""
import asyncio, sys
CHUNKS = int(sys.argv[2])
EVENT = b'data: {"choices":[{"delta":{"content":"tok"}}]}\n\n'
BODY = EVENT * CHUNKS + b"data: [DONE]\n\n"

async def handle(reader, writer):
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            if length:
                await reader.readexactly(length)
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                         b"transfer-encoding: chunked\r\n\r\n")
            for i in range(CHUNKS):
                writer.write(b"%x\r\n%s\r\n" % (len(EVENT), EVENT))
                if i % 8 == 7:
                    await writer.drain()
                    await asyncio.sleep(0)
            tail = b"data: [DONE]\n\n"
            writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(tail), tail))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()

async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", int(sys.argv[1]))
    async with server:
        await server.serve_forever()

asyncio.run(main())
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load_module(name: str, path: Path):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def one_round(module, url: str, streams: int, concurrency: int) -> tuple[float, int]:  # type: ignore[no-untyped-def]
    client = module.engine_client(
        timeout=httpx.Timeout(30.0),
        limits=httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency),
    )
    gate = asyncio.Semaphore(concurrency)
    chunks = 0

    async def stream() -> None:
        nonlocal chunks
        async with gate, client.stream("POST", url, json={"stream": True}) as response:
            async for part in response.aiter_raw():
                # Per chunk the server sent (one SSE event each), not per piece handed out: a
                # client may hand out every piece one read brought at once.
                chunks += part.count(b"\n\n")

    async with client:
        start = time.process_time()
        await asyncio.gather(*(stream() for _ in range(streams)))
        return time.process_time() - start, chunks


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--baseline", default="HEAD")
    parser.add_argument("--streams", type=int, default=64)
    parser.add_argument("--chunks", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()

    source = subprocess.run(
        ["git", "show", f"{args.baseline}:runs/engine/transport.py"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    with tempfile.TemporaryDirectory() as tmp:
        baseline_path = Path(tmp) / "baseline_transport.py"
        baseline_path.write_text(source)
        builds = {
            f"baseline ({args.baseline})": load_module("baseline_transport", baseline_path),
            "working tree": load_module("current_transport", ROOT / "runs/engine/transport.py"),
        }
        port = free_port()
        server = subprocess.Popen([sys.executable, "-c", SERVER, str(port), str(args.chunks)])
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
            url = f"http://127.0.0.1:{port}/v1/chat/completions"
            per_chunk: dict[str, list[float]] = {name: [] for name in builds}
            for _ in range(args.rounds):  # interleaved, so load drifts hit both alike
                for name, module in builds.items():
                    cpu, chunks = asyncio.run(
                        one_round(module, url, args.streams, args.concurrency)
                    )
                    per_chunk[name].append(cpu / chunks * 1e6)
        finally:
            server.terminate()
            server.wait()
    print(
        f"transport A/B: {args.streams} streams x ~{args.chunks} chunks, C = {args.concurrency}, "
        f"{args.rounds} interleaved rounds; client CPU per chunk (µs), median [min–max]"
    )
    for name, values in per_chunk.items():
        print(
            f"  {name:<24} {statistics.median(values):7.1f}  [{min(values):.1f}–{max(values):.1f}]"
        )


if __name__ == "__main__":
    main()
