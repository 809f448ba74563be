"""The wire of a target preflight (issue 39): one request sent once, read whole, and the free
metadata reads (llama.cpp's ``/props``, the ``/models`` list).

A request here is never retried: the preflight's ledger row is committed before it leaves
(`runs.preflight.checks`), and whatever happens — a refusal, a cut stream, a timeout — is what it
found. Streams are read with the engine's own decoder (`runs.engine.sse`), so a stream the
engine would call incomplete is incomplete here too.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from typing import Any

import httpx

from runs.engine.sse import ChatStreamAccumulator, SSEDecoder

MAX_BODY = 1024 * 1024
CALL_TIMEOUT_S = 60.0
META_TIMEOUT_S = 10.0
# "This model's maximum context length is 4096 tokens" (OpenAI, llama-cpp-python, vLLM).
CONTEXT_STATED = re.compile(r"maximum context length is ([0-9]+)", re.IGNORECASE)


@dataclass
class WireResult:
    """What one request got back. ``first_event`` is set (by the reader thread) once the
    stream's first event arrived: the concurrency probe sends the next request only then."""

    http_status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    served_model: str = ""
    finish_reason: str = ""
    saw_done: bool | None = None
    usage: Any = None
    content: str = ""
    error: str = ""
    incomplete_reason: str = ""
    # The answer's body bytes read, and ``http_<status>`` once an error answer's body was read to
    # its end (a cut, a timeout or more than MAX_BODY leaves it empty): the columns
    # `runs.ledger.accounting.known_failure_unbilled` reads, as the engine records them.
    bytes_received: int = 0
    error_code: str = ""
    # The concurrency probe's first stream had already ended when the others were sent: that
    # level shows nothing about cutting.
    ended_before_next: bool = False
    first_event: threading.Event = field(default_factory=threading.Event)
    ended: threading.Event = field(default_factory=threading.Event)

    @property
    def whole(self) -> bool:
        """A stream the engine would accept: a 200, a finish_reason and one [DONE]."""
        return self.http_status == 200 and not self.error and not self.incomplete_reason


def _client(timeout: float) -> httpx.Client:
    return httpx.Client(timeout=timeout, trust_env=False, follow_redirects=False)


def send_once(url: str, headers: dict[str, str], body: dict[str, Any], out: WireResult) -> None:
    """POST ``body`` once and fill ``out``; never raises, never retries."""
    try:
        with (
            _client(CALL_TIMEOUT_S) as client,
            client.stream("POST", url, headers=headers, json=body) as response,
        ):
            out.http_status = response.status_code
            out.headers = {k.lower(): v for k, v in response.headers.items()}
            if response.status_code == 200 and body.get("stream"):
                _read_stream(response, out)
            else:
                _read_plain(response, out)
    except httpx.HTTPError as exc:
        out.error = f"{type(exc).__name__}: {exc}"[:300]
    finally:
        out.first_event.set()
        out.ended.set()


def _read_stream(response: httpx.Response, out: WireResult) -> None:
    decoder = SSEDecoder()
    accumulator = ChatStreamAccumulator()
    try:
        for chunk in response.iter_raw():
            out.bytes_received += len(chunk)
            events = decoder.feed(chunk)
            if events:
                out.first_event.set()
            accumulator.feed_events(events)
        accumulator.feed_events(decoder.close())
    finally:
        result = accumulator.result()
        out.served_model = result.served_model or ""
        out.finish_reason = result.finish_reason or ""
        out.saw_done = result.done_count > 0
        out.usage = result.usage
        out.content = (result.reasoning + result.content)[:2000]
        out.incomplete_reason = result.incomplete_reason or ""


def _read_plain(response: httpx.Response, out: WireResult) -> None:
    body = b""
    for chunk in response.iter_bytes():
        body += chunk
        out.bytes_received = len(body)  # decoded: never fewer than the engine's raw count
        if len(body) > MAX_BODY:
            out.error = "answer larger than 1 MiB"
            return
    if response.status_code != 200:
        out.error_code = f"http_{response.status_code}"
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        out.error = f"HTTP {response.status_code}: the answer is not JSON"
        return
    if response.status_code != 200:
        error = data.get("error") if isinstance(data, dict) else None
        message = error.get("message") if isinstance(error, dict) else error
        out.error = f"HTTP {response.status_code}: {message or body[:200]!r}"[:1000]
        return
    if not isinstance(data, dict):
        out.error = "the answer is not a chat completion"
        return
    out.served_model = str(data.get("model") or "")
    out.usage = data.get("usage")
    choices = data.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], dict) else {}
    out.finish_reason = str(choice.get("finish_reason") or "")
    message = choice.get("message") or {}
    out.content = str(message.get("content") or "")[:2000] if isinstance(message, dict) else ""


def stated_context(error: str) -> int | None:
    """The context a refusal states ("maximum context length is N"), else None."""
    match = CONTEXT_STATED.search(error)
    return _positive_int(int(match.group(1))) if match else None


def _get_json(url: str, headers: dict[str, str]) -> Any:
    try:
        with _client(META_TIMEOUT_S) as client:
            response = client.get(url, headers=headers)
    except httpx.HTTPError:
        return None
    if response.status_code != 200 or len(response.content) > MAX_BODY:
        return None
    try:
        return response.json()
    except (ValueError, RecursionError):
        return None


# The largest context a preflight's PositiveIntegerField column holds: a server that states
# more (hostile, or a typo) made the preflight's write fail; it is then unknown.
MAX_CONTEXT_TOKENS = 2**31 - 1


def _positive_int(value: Any) -> int | None:
    """A context size a server states: a positive int the ledger's column holds, else None."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_CONTEXT_TOKENS:
        return value
    return None


def advertised_context(base_url: str, model: str, headers: dict[str, str]) -> tuple[int, str]:
    """The context a server says without a model call: llama.cpp's ``/props``
    (``default_generation_settings.n_ctx``), then the model's entry on ``/models``
    (``max_model_len`` as vLLM says it, ``context_length``, ``context_window``, ``meta.n_ctx``).
    (0, "") when neither says it."""
    root = base_url.rstrip("/")
    if root.endswith("/v1"):
        root = root[: -len("/v1")]
    props = _get_json(root + "/props", headers)
    if isinstance(props, dict):
        settings = props.get("default_generation_settings") or {}
        n_ctx = _positive_int(settings.get("n_ctx") if isinstance(settings, dict) else None)
        if n_ctx := n_ctx or _positive_int(props.get("n_ctx")):
            return n_ctx, f"{root}/props (n_ctx)"
    listing = _get_json(base_url.rstrip("/") + "/models", headers)
    entries = listing.get("data") if isinstance(listing, dict) else None
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict) or entry.get("id") != model:
            continue
        meta: dict[str, Any] = entry["meta"] if isinstance(entry.get("meta"), dict) else {}
        for key, value in (
            ("max_model_len", entry.get("max_model_len")),
            ("context_length", entry.get("context_length")),
            ("context_window", entry.get("context_window")),
            ("meta.n_ctx", meta.get("n_ctx")),
        ):
            if tokens := _positive_int(value):
                return tokens, f"{base_url.rstrip('/')}/models ({key})"
    return 0, ""
