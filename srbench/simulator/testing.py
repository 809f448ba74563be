"""``running_simulator``: a real simulator on a free loopback port for the length of a test."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import uvicorn

from srbench.simulator.arrival import ArrivalStampingProtocol
from srbench.simulator.config import SimConfig, deep_merge, load_config, parse_config
from srbench.simulator.oracle import AnswerKey
from srbench.simulator.server import create_app


def _config_with(config: SimConfig | str | Path | None, overrides: dict[str, Any]) -> SimConfig:
    if not isinstance(config, SimConfig):
        return load_config(config, overrides)
    if not overrides:
        return config
    merged = parse_config(deep_merge(config.raw, overrides))
    if "answer_key" not in overrides:
        # A relative [answer_key] file was resolved against the config file's directory.
        merged = replace(merged, answer_key_file=config.answer_key_file)
    return merged


@contextmanager
def running_simulator(
    config: SimConfig | str | Path | None = None,
    *,
    answer_key: AnswerKey | None = None,
    startup_timeout: float = 10.0,
    **overrides: Any,
) -> Iterator[str]:
    """Start the simulator with uvicorn in a background thread and yield its root URL
    (``http://127.0.0.1:PORT``; the OpenAI base URL is that plus ``/v1``).

    ``overrides`` are deep-merged into the config document, e.g.
    ``running_simulator(models={"sim-strong": {"ttft_s": 0}})``.
    """
    app = create_app(_config_with(config, overrides), answer_key=answer_key)
    # Bind the socket ourselves so the port is known before the server starts and no other
    # process can take it between choosing and binding.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            log_level="warning",
            backlog=4096,
            timeout_graceful_shutdown=1,
            http=ArrivalStampingProtocol,
        )
    )
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name=f"simulator:{port}", daemon=True
    )
    thread.start()
    deadline = time.monotonic() + startup_timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            sock.close()
            raise RuntimeError("simulator did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
