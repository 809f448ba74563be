"""The simulator's HTTP server: an OpenAI-compatible listener, a MoM router on the same port,
the router's management API and the test hooks. Standalone: no Django, no database.

Endpoints:
  POST /v1/chat/completions, GET /v1/models                 OpenAI-compatible
  POST /v1/messages                                         Anthropic Messages API (anthropic.py)
  GET  /props                                               llama.cpp's n_ctx, when configured
  GET  /api/v1/config/hash (also /config/hash)              source/generated/active hashes
  GET  /api/v1/config                                       the source document, ETag = source hash
  PUT  /api/v1/config[?activate=false]                      test hook: replace (or stage) config
  POST /api/v1/config/activate                              activate a staged config
  POST /api/v1/routing/preview                              routing decision, no model call
  GET  /_sim/stats, /_sim/streams, /_sim/arrivals, POST /_sim/reset         counters for tests and benchmarks
  GET  /health

Faults (header ``x-sim-fault: a,b`` or ``faults = [...]`` on a model/router; stall length from
``x-sim-stall-seconds``, else ``stall_seconds``): 429, 500, stall-first-byte, stall-mid,
disconnect, no-usage, no-done, malformed-chunk, u2028, unstorable, hostile-headers, wrong-config-hash and no-receipt (the
last two on routed models only), and the real-server quirks of issue 39: cut-on-concurrent (a
new request cuts the stream in progress; ``max_whole_streams`` on a model sets another limit),
length-as-stop and no-cache-details; ``context_tokens`` on a model refuses longer prompts. Non-streamed replies honour 429, 500, stall-first-byte,
no-usage, malformed-chunk (a truncated JSON body), u2028 and unstorable; the other faults are stream-only.

Router requests may carry ``x-sr-bench-expected-config-hash`` (a mismatch is refused with 409
before any model call), ``x-sr-bench-max-inference-calls`` (a route needing more is refused with
409) and ``x-session-id`` (for session-dependent decisions).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route as HttpRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from srbench.canonical import json_text, sha256_hex
from srbench.simulator.anthropic import messages_handler
from srbench.simulator.arrival import ArrivalStampingProtocol, arrival
from srbench.simulator.config import (
    FAULTS,
    ConfigError,
    ModelSpec,
    RouterSpec,
    SimConfig,
    load_config,
    parse_config,
)
from srbench.simulator.generation import (
    Completion,
    ResponseIdentity,
    build_completion,
    completion_body,
    sse_body,
    total_generation_seconds,
)
from srbench.simulator.oracle import AnswerKey, entry_domain, prompt_text_of
from srbench.simulator.router import Route, route
from srbench.simulator.streaming import SSEResponse, StreamCutter
from srbench.simulator.tokens import PrefixCache, prompt_token_sequence

__all__ = ["configured_answer_key", "create_app", "load_config", "serve"]

CALL_ID_HEADER = "x-srbench-call-id"
FAULT_HEADER = "x-sim-fault"
STALL_HEADER = "x-sim-stall-seconds"
EXPECTED_HASH_HEADER = "x-sr-bench-expected-config-hash"
MAX_CALLS_HEADER = "x-sr-bench-max-inference-calls"
SESSION_HEADER = "x-session-id"

PREVIEW_FIELDS = frozenset(
    {
        "text",
        "messages",
        "model",
        "tools",
        "functions",
        "tool_choice",
        "function_call",
        "response_format",
        "metadata",
        "max_tokens",
        "max_completion_tokens",
        "options",
        "preview_context",
    }
)


@dataclass
class Counters:
    total_requests: int = 0
    chat_requests: int = 0
    preview_requests: int = 0
    # Internal inference calls (a fan-out request makes several): proves preview calls none.
    model_calls: int = 0
    by_call_id: dict[str, int] = field(default_factory=dict)
    by_model: dict[str, int] = field(default_factory=dict)
    # Streams whose body is being sent now, and the most at once: the load benchmark's proof
    # that the streams really were concurrent.
    open_streams: int = 0
    max_open_streams: int = 0
    # The server's own TTFT per stream (ms): from the request's arrival (its first bytes parsed
    # by the HTTP protocol, srbench.simulator.arrival) to the first event after the role chunk
    # being handed to the connection. Benchmarks compare the engine's TTFT with this, not with
    # the configured pause (issue 25).
    stream_ttft_ms: list[float] = field(default_factory=list)
    # Per stream whose request named its call (``x-srbench-call-id``): the call id, the
    # request's arrival and the first delta's hand-over to the connection, as wall-clock
    # seconds (``time.time()``), so that a benchmark on the same machine can set them beside
    # the engine's own stamps of the same call (GET /_sim/streams).
    stream_marks: list[tuple[str, float, float]] = field(default_factory=list)
    # The server's own lateness per stream (ms): its last delta handed to the connection after
    # its due time (the request's arrival + ttft + (n - 1) intervals; 0 if on time);
    # and per stream that named its call, that hand-over and its due time in wall-clock
    # seconds. A benchmark prints it so that a server too slow for its load is seen, never
    # charged to the engine nor subtracted from it silently (issue 38 item 2).
    stream_late_ms: list[float] = field(default_factory=list)
    stream_ends: list[tuple[str, float, float]] = field(default_factory=list)
    # Every request that named its call, in arrival order: (call id, wall-clock seconds as it
    # entered the app). The stall trials compare them with the ledger's settlement times
    # (GET /_sim/arrivals, issue 34).
    call_arrivals: list[tuple[str, float]] = field(default_factory=list)

    def streams_json(self) -> dict[str, Any]:
        """Per stream that named its call: its arrival, first and last delta and the last's
        due time, wall-clock (GET /_sim/streams)."""
        ends = {call_id: (last, due) for call_id, last, due in self.stream_ends}
        return {
            "streams": [
                {
                    "call_id": call_id,
                    "arrived_at": arrived,
                    "first_delta_at": first,
                    "last_delta_at": ends.get(call_id, (None, None))[0],
                    "last_delta_due": ends.get(call_id, (None, None))[1],
                }
                for call_id, arrived, first in self.stream_marks
            ]
        }

    def as_json(self) -> dict[str, Any]:
        return {
            "stream_ttft_ms": _summary(self.stream_ttft_ms),
            "stream_late_ms": _summary(self.stream_late_ms),
            "total_requests": self.total_requests,
            "chat_requests": self.chat_requests,
            "preview_requests": self.preview_requests,
            "model_calls": self.model_calls,
            "by_call_id": dict(self.by_call_id),
            "by_model": dict(self.by_model),
            "open_streams": self.open_streams,
            "max_open_streams": self.max_open_streams,
        }


def _summary(values: list[float]) -> dict[str, Any]:
    ordered = sorted(values)
    return {
        "count": len(ordered),
        "p50": statistics.median(ordered) if ordered else None,
        "p90": ordered[int(0.9 * (len(ordered) - 1))] if ordered else None,
        "max": ordered[-1] if ordered else None,
    }


class SimState:
    """Mutable server state; touched only from the server's event loop."""

    def __init__(self, config: SimConfig, answer_key: AnswerKey) -> None:
        self.active = config
        self.staged: SimConfig | None = None
        self.answer_key = answer_key
        self.cache = PrefixCache()
        self.counters = Counters()
        self.cutter = StreamCutter()

    @property
    def source(self) -> SimConfig:
        return self.staged or self.active

    def hashes(self) -> dict[str, str]:
        return {
            "source_config_hash": self.source.source_hash,
            "generated_runtime_hash": self.source.generated_hash,
            "active_runtime_hash": self.active.generated_hash,
            "activation_status": "pending" if self.staged else "active",
        }


class CountingMiddleware:
    """Counts every request outside ``/_sim`` and, per call id, every one carrying the
    ``x-srbench-call-id`` header: tests prove "never re-sent" by these counts."""

    def __init__(self, app: ASGIApp, state: SimState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not scope["path"].startswith("/_sim"):
            counters = self.state.counters
            counters.total_requests += 1
            for name, value in scope["headers"]:
                if name == CALL_ID_HEADER.encode():
                    call_id = value.decode("latin-1")
                    counters.by_call_id[call_id] = counters.by_call_id.get(call_id, 0) + 1
                    counters.call_arrivals.append((call_id, time.time()))
        await self.app(scope, receive, send)


def openai_error(
    status: int, message: str, code: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return JSONResponse(
        {"error": {"message": message, "type": kind, "param": None, "code": code}},
        status_code=status,
        headers=headers,
    )


def wrong_hash(active: str) -> str:
    return sha256_hex(["wrong-config-hash", active])


def request_faults(request: Request, *specs: ModelSpec | RouterSpec) -> frozenset[str]:
    header = request.headers.get(FAULT_HEADER, "")
    faults = {f.strip() for f in header.split(",") if f.strip()}
    for spec in specs:
        faults.update(spec.faults)
    return frozenset(faults)


def stall_seconds(request: Request, config: SimConfig) -> float:
    try:
        return float(request.headers.get(STALL_HEADER, config.stall_seconds))
    except ValueError:
        return config.stall_seconds


def receipt(completions: list[Completion]) -> dict[str, Any]:
    calls = []
    for i, completion in enumerate(completions):
        if len(completions) == 1:
            role = "primary"
        else:
            role = "aggregator" if i == len(completions) - 1 else "candidate"
        calls.append(
            {
                "model": completion.model,
                "role": role,
                "stage": "generation",
                "status": "ok",
                "usage": completion.receipt_usage(),
            }
        )
    return {"version": 1, "complete": True, "calls": calls}


def router_headers(
    request: Request, config: SimConfig, chosen: Route, faults: frozenset[str]
) -> dict[str, str] | Response:
    """The x-vsr headers a router answers with, or the 409 it refuses the request with."""
    active_hash = config.generated_hash
    ack = wrong_hash(active_hash) if "wrong-config-hash" in faults else active_hash
    expected = request.headers.get(EXPECTED_HASH_HEADER)
    # The router checks the expected hash before any generation; the wrong-config-hash
    # fault models a router that ignores it and serves another generation.
    if expected and expected != active_hash and "wrong-config-hash" not in faults:
        return openai_error(
            409,
            "expected config hash does not match the active runtime",
            "config_hash_mismatch",
            {"x-vsr-config-hash": active_hash},
        )
    max_calls = request.headers.get(MAX_CALLS_HEADER)
    if (
        max_calls
        and max_calls.isascii()
        and max_calls.isdigit()
        and len(chosen.models) > int(max_calls)
    ):
        return openai_error(
            409,
            "route needs more inference calls than allowed",
            "max_inference_calls_exceeded",
            {"x-vsr-config-hash": ack},
        )
    hostile = "hostile-headers" in faults  # names past their columns, a count int() refuses
    return {
        "x-vsr-selected-model": chosen.served_model + ("-" + "m" * 300 if hostile else ""),
        "x-vsr-selected-decision": chosen.decision + ("-" + "d" * 300 if hostile else ""),
        "x-vsr-config-hash": ack,
        "x-vsr-inference-call-count": "\xb2" if hostile else str(len(chosen.models)),
        "x-vsr-response-path": "upstream",
        "x-vsr-schema-version": "2",
    }


def generate(
    state: SimState, members: list[ModelSpec], body: dict, seed: int, faults: frozenset[str]
) -> list[Completion]:
    """One completion per member model, counted."""
    completions = []
    for spec in members:
        state.counters.model_calls += 1
        state.counters.by_model[spec.name] = state.counters.by_model.get(spec.name, 0) + 1
        completions.append(
            build_completion(
                spec, body, seed=seed, key=state.answer_key, cache=state.cache, faults=faults
            )
        )
    return completions


def over_context(spec: ModelSpec, body: dict) -> int | None:
    """The prompt's tokens when they exceed the model's ``context_tokens`` (issue 39), else
    None."""
    if not spec.context_tokens:
        return None
    tokens = len(prompt_token_sequence(body["messages"], body.get("tools")))
    return tokens if tokens > spec.context_tokens else None


def context_refusal(spec: ModelSpec, body: dict, tokens: int) -> Response:
    """llama-cpp-python's refusal of a non-streamed prompt longer than its context."""
    asked = body.get("max_tokens")
    wanted = asked if isinstance(asked, int) else 0
    return openai_error(
        400,
        f"This model's maximum context length is {spec.context_tokens} tokens. However, you "
        f"requested {tokens + wanted} tokens ({tokens} in the messages, {wanted} in the "
        "completion). Please reduce the length of the messages or completion.",
        "context_length_exceeded",
    )


def stream_cut_signal(
    state: SimState, spec: ModelSpec, faults: frozenset[str], stream: bool
) -> tuple[asyncio.Event | None, Any]:
    """For a model whose streams are cut by a new request: register this request (cutting the
    oldest open streams beyond the limit) and return its signal and release; a non-streamed
    request cuts but holds no stream."""
    limit = spec.whole_streams_limit(faults)
    if not limit:
        return None, None
    signal = state.cutter.arrive(spec.name, limit)
    cutter = state.cutter

    def release() -> None:
        cutter.leave(spec.name, signal)

    if not stream:
        release()
        return None, None
    return signal, release


async def respond(
    state: SimState,
    final: Completion,
    ident: ResponseIdentity,
    body: dict,
    faults: frozenset[str],
    stall: float,
    headers: dict[str, str],
    received: float,
    call_id: str | None,
) -> Response:
    """The final completion as an SSE stream or as one JSON body. ``received``: when the
    request arrived (``time.monotonic()``); ``call_id``: the call it named, if any."""
    cut, release = stream_cut_signal(state, final.spec, faults, bool(body.get("stream")))
    if body.get("stream"):
        options = body.get("stream_options") or {}
        headers["cache-control"] = "no-cache"
        events = sse_body(
            final,
            ident,
            include_usage=bool(options.get("include_usage")),
            faults=faults,
            stall_seconds=stall,
        )
        if over_context(final.spec, body) is not None:
            # llama-cpp-python raises after its headers went out: a 200 whose chunked body
            # ends at once, with no event at all (seen on its 0.3 server: `0\r\n\r\n`
            # right after the headers; tests/real/test_llama_long_prompts.py).
            events = dataclasses.replace(events, role=b"", deltas=(), tail=(), ttft_s=0.0)
        return SSEResponse(
            events, state.counters, received, headers, call_id=call_id, cut=cut, release=release
        )
    if (tokens := over_context(final.spec, body)) is not None:
        return context_refusal(final.spec, body, tokens)
    await asyncio.sleep(total_generation_seconds(final))
    payload = completion_body(final, ident, include_usage="no-usage" not in faults)
    raw = json_text(payload).encode("utf-8")
    if "malformed-chunk" in faults:
        raw = raw[: len(raw) // 2]
    return Response(raw, media_type="application/json", headers=headers)


async def chat_completions(request: Request) -> Response:
    received = arrival(request.scope)
    state: SimState = request.app.state.sim
    config = state.active
    state.counters.chat_requests += 1
    try:
        body = await request.json()
    except ValueError:
        return openai_error(400, "request body is not JSON", "invalid_json")
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        return openai_error(400, "messages must be a list", "invalid_request")
    requested = str(body.get("model", ""))
    target = config.resolve(requested)
    if target is None:
        return openai_error(404, f"model {requested!r} does not exist", "model_not_found")

    prompt_text = prompt_text_of(body["messages"])
    chosen: Route | None = None
    if isinstance(target, RouterSpec):
        chosen = route(
            target,
            prompt_text,
            request.headers.get(SESSION_HEADER),
            entry_domain(state.answer_key.lookup(prompt_text)),
        )
        members = [config.models[m] for m in chosen.models]
        faults = request_faults(request, target, *members)
    else:
        members = [target]
        faults = request_faults(request, target)
    unknown = faults - FAULTS
    if unknown:
        return openai_error(400, f"unknown faults {sorted(unknown)}", "unknown_fault")
    stall = stall_seconds(request, config)
    if "stall-first-byte" in faults:
        await asyncio.sleep(stall)
    if "429" in faults:
        return openai_error(
            429, "simulated rate limit", "rate_limit_exceeded", {"retry-after": "1"}
        )
    if "500" in faults:
        return openai_error(500, "simulated server error", "internal_error")

    headers: dict[str, str] = {}
    if chosen is not None:
        answer = router_headers(request, config, chosen, faults)
        if isinstance(answer, Response):
            return answer
        headers.update(answer)

    seed = body["seed"] if isinstance(body.get("seed"), int) else config.seed
    completions = generate(state, members, body, seed, faults)
    if chosen is not None and "no-receipt" not in faults:
        headers["x-vsr-model-usage"] = json.dumps(receipt(completions), separators=(",", ":"))
    ident = ResponseIdentity.of(requested, body, seed)
    call_id = request.headers.get(CALL_ID_HEADER)
    final = completions[-1]
    return await respond(state, final, ident, body, faults, stall, headers, received, call_id)


async def list_models(request: Request) -> Response:
    config: SimConfig = request.app.state.sim.active
    data: list[dict[str, Any]] = [
        {"id": name, "object": "model", "created": 1_750_000_000, "owned_by": "srbench-simulator"}
        for name in config.model_ids()
    ]
    for entry in data:
        spec = config.models.get(entry["id"])
        if spec is not None and spec.context_advertise == "models" and spec.context_tokens:
            entry["max_model_len"] = spec.context_tokens  # as vLLM says it
    return JSONResponse({"object": "list", "data": data})


async def props(request: Request) -> Response:
    """llama.cpp's GET /props: the server's context (``n_ctx``) when a model says it there."""
    config: SimConfig = request.app.state.sim.active
    for spec in config.models.values():
        if spec.context_advertise == "props" and spec.context_tokens:
            return JSONResponse(
                {"default_generation_settings": {"n_ctx": spec.context_tokens}, "total_slots": 1}
            )
    return JSONResponse({"error": "not found"}, status_code=404)


async def config_hash(request: Request) -> Response:
    return JSONResponse(request.app.state.sim.hashes())


async def get_config(request: Request) -> Response:
    state: SimState = request.app.state.sim
    etag = f'"{state.source.source_hash}"'
    if request.headers.get("if-none-match") == etag:
        return Response(status_code=304, headers={"etag": etag})
    # As the config came (a lone surrogate as its JSON escape).
    raw = json_text(state.source.raw).encode("utf-8")
    return Response(raw, media_type="application/json", headers={"etag": etag})


async def put_config(request: Request) -> Response:
    state: SimState = request.app.state.sim
    try:
        new = parse_config(await request.json())
    except (ValueError, KeyError, TypeError, ConfigError) as exc:
        return JSONResponse({"error": "invalid config", "detail": str(exc)}, status_code=400)
    if request.query_params.get("activate", "true").lower() in ("0", "false", "no"):
        state.staged = new
    else:
        state.active, state.staged = new, None
    return JSONResponse(state.hashes(), headers={"etag": f'"{new.source_hash}"'})


async def activate_config(request: Request) -> Response:
    state: SimState = request.app.state.sim
    if state.staged is not None:
        state.active, state.staged = state.staged, None
    return JSONResponse(state.hashes())


async def routing_preview(request: Request) -> Response:
    state: SimState = request.app.state.sim
    config = state.active
    state.counters.preview_requests += 1
    try:
        body = await request.json()
    except ValueError:
        return JSONResponse({"error": "request body is not JSON"}, status_code=400)
    if not isinstance(body, dict):
        return JSONResponse({"error": "request body must be an object"}, status_code=400)
    unknown = set(body) - PREVIEW_FIELDS
    if unknown:
        return JSONResponse({"error": f"unknown fields {sorted(unknown)}"}, status_code=400)
    requested = str(body.get("model") or "auto")
    target = config.resolve(requested)
    if not isinstance(target, RouterSpec):
        return JSONResponse({"error": f"{requested!r} is not a routed model"}, status_code=400)
    if isinstance(body.get("messages"), list):
        prompt_text = prompt_text_of(body["messages"])
    elif isinstance(body.get("text"), str):
        prompt_text = body["text"]
    else:
        return JSONResponse({"error": "text or messages is required"}, status_code=400)
    context = body.get("preview_context") or {}
    options = body.get("options") or {}
    chosen = route(
        target,
        prompt_text,
        context.get("session_id"),
        entry_domain(state.answer_key.lookup(prompt_text)),
    )
    active_hash = config.generated_hash
    result: dict[str, Any] = {
        "requested_model": requested,
        "selected_model": chosen.served_model,
        "selection_status": "selected",
        "selection_method": chosen.method,
        "recipe": target.name,
        "routing_decision": chosen.decision,
        "decision_result": {
            "decision_name": chosen.decision,
            "algorithm": chosen.method,
            "plugins": [],
            "matched_signals": list(chosen.matched_signals),
        },
        "recommended_models": list(chosen.models),
        "config_hash": active_hash,
        "selection_reason": chosen.reason,
        "selection_provenance": {
            "config_hash": active_hash,
            "state_hash": sha256_hex(["stateless", active_hash]),
            "sampled": False,
            "seed": context.get("sampling_seed"),
            "session_id": context.get("session_id"),
            "conversation_id": context.get("conversation_id"),
        },
    }
    if options.get("trace"):
        result["eval_trace"] = [
            {"decision": d.name, "selected": d.name == chosen.decision} for d in target.decisions
        ]
    return JSONResponse(result)


async def sim_stats(request: Request) -> Response:
    return JSONResponse(request.app.state.sim.counters.as_json())


async def sim_streams(request: Request) -> Response:
    return JSONResponse(request.app.state.sim.counters.streams_json())


async def sim_arrivals(request: Request) -> Response:
    arrivals = request.app.state.sim.counters.call_arrivals
    return JSONResponse(
        {"arrivals": [{"call_id": call_id, "arrived_at": at} for call_id, at in arrivals]}
    )


async def sim_reset(request: Request) -> Response:
    state: SimState = request.app.state.sim
    state.counters = Counters()
    state.cache.clear()
    return JSONResponse({"reset": True})


async def health(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


def configured_answer_key(config: SimConfig) -> AnswerKey:
    """The key the config names at start-up: ``[answer_key] file`` (JSON from
    ``AnswerKey.save``), else an empty key. ``[answer_key] sources`` are dataset files only the
    project reads (``datasets/answer_key.py``): without a key built from them this refuses to
    start, since an empty key would answer every benchmark question generically."""
    if config.answer_key_file is not None:
        try:
            return AnswerKey.load(config.answer_key_file)
        except (OSError, ValueError) as exc:
            raise ConfigError(
                f"answer_key.file: cannot read {config.answer_key_file}: {exc}"
            ) from exc
    if config.answer_key_sources:
        raise ConfigError(
            "answer_key.sources: the simulator reads no dataset files itself. Start it with "
            "`srbench simulator --config …` (which builds the key from the sources), or save a "
            "key with datasets.answer_key.answer_key_write and set [answer_key] file instead."
        )
    return AnswerKey()


def create_app(
    config: SimConfig | str | Path | None = None, *, answer_key: AnswerKey | None = None
) -> Starlette:
    """The ASGI app. ``answer_key`` (e.g. built by the project from dataset files) defaults to
    the one the config names (``configured_answer_key``)."""
    if not isinstance(config, SimConfig):
        config = load_config(config)
    if answer_key is None:
        answer_key = configured_answer_key(config)
    state = SimState(config, answer_key)
    app = Starlette(
        routes=[
            HttpRoute("/v1/chat/completions", chat_completions, methods=["POST"]),
            HttpRoute(
                "/v1/messages",
                messages_handler(generate, request_faults, CALL_ID_HEADER),
                methods=["POST"],
            ),
            HttpRoute("/v1/models", list_models, methods=["GET"]),
            HttpRoute("/props", props, methods=["GET"]),
            HttpRoute("/api/v1/config/hash", config_hash, methods=["GET"]),
            HttpRoute("/config/hash", config_hash, methods=["GET"]),
            HttpRoute("/api/v1/config", get_config, methods=["GET"]),
            HttpRoute("/api/v1/config", put_config, methods=["PUT"]),
            HttpRoute("/api/v1/config/activate", activate_config, methods=["POST"]),
            HttpRoute("/api/v1/routing/preview", routing_preview, methods=["POST"]),
            HttpRoute("/_sim/stats", sim_stats, methods=["GET"]),
            HttpRoute("/_sim/streams", sim_streams, methods=["GET"]),
            HttpRoute("/_sim/arrivals", sim_arrivals, methods=["GET"]),
            HttpRoute("/_sim/reset", sim_reset, methods=["POST"]),
            HttpRoute("/health", health, methods=["GET"]),
        ]
    )
    app.state.sim = state
    app.add_middleware(CountingMiddleware, state=state)
    return app


def serve(
    config: SimConfig | str | Path | None = None,
    *,
    answer_key: AnswerKey | None = None,
    host: str = "127.0.0.1",
    port: int = 8100,
) -> None:
    """Run the simulator in the foreground (blocks). Loopback by default: it has no auth."""
    import uvicorn

    uvicorn.run(
        create_app(config, answer_key=answer_key),
        host=host,
        port=port,
        log_level="warning",
        # A benchmark opens a thousand streams at once; keep them all in the accept queue.
        backlog=4096,
        timeout_keep_alive=30,
        # Stamps each request's arrival for the server's own TTFT (srbench.simulator.arrival).
        http=ArrivalStampingProtocol,
    )
