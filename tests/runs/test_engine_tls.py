"""The engine's own HTTP/1.1 client over TLS (issue 25 point 4; R1 calls to real endpoints are
HTTPS): a streamed chat completion and a plain JSON answer come back whole from a simulator
served over HTTPS, the certificate is verified (a client that does not trust it cannot
connect), and the host name is checked. The suite's other engine tests use loopback HTTP."""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import uvicorn

from runs.engine.transport import EnginePool, EngineTransport
from srbench.simulator.server import create_app
from tests.runs.async_support import run_on_own_loop


def _certificate(directory: Path, san: str) -> tuple[Path, Path]:
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-keyout", str(key), "-out", str(cert), "-subj", "/CN=srbench test",
            "-addext", f"subjectAltName={san}",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


@contextmanager
def _https_simulator(cert: Path, key: Path) -> Iterator[int]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(None),
            log_level="warning",
            ssl_certfile=str(cert),
            ssl_keyfile=str(key),
            timeout_graceful_shutdown=1,
        )
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "simulator did not start"
        time.sleep(0.01)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def _client(context: ssl.SSLContext) -> httpx.AsyncClient:
    pool = EnginePool(
        ssl_context=context, max_connections=4, max_keepalive_connections=4, keepalive_expiry=5
    )
    return httpx.AsyncClient(
        transport=EngineTransport(pool), trust_env=False, timeout=httpx.Timeout(30.0)
    )


async def _exchange(base: str, context: ssl.SSLContext) -> tuple[list[str], dict]:
    body = {
        "model": "sim-strong",
        "messages": [{"role": "user", "content": "Say something."}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    async with _client(context) as client:
        events: list[str] = []
        for _ in range(2):  # the second request reuses the kept-alive TLS connection
            events = []
            async with client.stream("POST", f"{base}/v1/chat/completions", json=body) as r:
                assert r.status_code == 200
                raw = b"".join([chunk async for chunk in r.aiter_bytes()])
            events = [e for e in raw.decode().split("\n\n") if e.strip()]
        models = (await client.get(f"{base}/v1/models")).json()
    return events, models


def _run(base: str, context: ssl.SSLContext) -> tuple[list[str], dict]:
    """The exchange on a fresh event loop in its own thread, as a worker's driver runs."""
    return run_on_own_loop(_exchange(base, context), timeout=120)


def test_a_stream_and_a_json_answer_come_back_whole_over_verified_tls(tmp_path: Path) -> None:
    cert, key = _certificate(tmp_path, "IP:127.0.0.1")
    trusting = ssl.create_default_context(cafile=str(cert))
    with _https_simulator(cert, key) as port:
        events, models = _run(f"https://127.0.0.1:{port}", trusting)
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(e.removeprefix("data: ")) for e in events[:-1]]
    content = "".join(
        (c["choices"][0]["delta"].get("content") or "") for c in chunks if c.get("choices")
    )
    assert content.strip()
    assert chunks[-1]["usage"]["completion_tokens"] > 0
    assert "sim-strong" in {m["id"] for m in models["data"]}


def test_an_untrusted_certificate_or_a_wrong_host_name_is_refused(tmp_path: Path) -> None:
    cert, key = _certificate(tmp_path, "DNS:elsewhere.example")
    with _https_simulator(cert, key) as port:
        base = f"https://127.0.0.1:{port}"
        # Not trusted: the system store does not know a self-signed test certificate.
        with pytest.raises(httpx.ConnectError):
            _run(base, ssl.create_default_context())
        # Trusted, but issued for another name than the one connected to.
        with pytest.raises(httpx.ConnectError):
            _run(base, ssl.create_default_context(cafile=str(cert)))


def test_the_system_trust_store_is_loaded_at_the_first_https_connection_only(
    tmp_path: Path,
) -> None:
    """Loading the system trust store costs about 0.1 s of CPU: a pool of the engine's
    client loads it when a run first connects over https, never for plain-HTTP targets."""
    pool = EnginePool(max_connections=4, max_keepalive_connections=4, keepalive_expiry=5)
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    try:

        async def connect(scheme: str) -> None:
            conn = await pool.connect((scheme, "127.0.0.1", port), timeout=10)
            conn.transport.close()

        run_on_own_loop(connect("http"), timeout=60)
        assert pool.ssl_context is None
        cert, key = _certificate(tmp_path, "IP:127.0.0.1")
        with _https_simulator(cert, key) as tls_port:
            port = tls_port
            # The system store does not know the test certificate: refused, but loaded.
            with pytest.raises(httpx.ConnectError):
                run_on_own_loop(connect("https"), timeout=60)
        assert isinstance(pool.ssl_context, ssl.SSLContext)
        assert pool.ssl_context.verify_mode == ssl.CERT_REQUIRED
    finally:
        server.close()
