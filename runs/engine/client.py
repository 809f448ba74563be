"""The engine's HTTP client: httpx's client over the engine's transport
(`runs.engine.transport`), whose model calls go straight to that transport.

A model call is one `httpx.Request` built as httpx's client builds it — the client's default
headers (Accept, Accept-Encoding, Connection, User-Agent) under the call's own, the JSON body
as httpx encodes it (but for a lone surrogate a model sent, which goes back as the JSON
escape it came as: `srbench.canonical.json_text`), the client's timeouts — and handed to the
transport. What is skipped is the client's per-request machinery: merging a base URL, auth and
redirect handling (the engine has neither) and the cookie jar. The jar is left out on purpose: each model call is a request
of its own, so a cookie a gateway or router sets on one call is not sent back on the run's
later calls, where it could pin them to one backend (session affinity) and bias what the
benchmark measures. At C = 1,024 those layers were about a tenth of the worker's CPU
(docs/performance.md, 2026-12-06 afternoon).
"""

from __future__ import annotations

from typing import Any

import httpx

from runs.engine.transport import EnginePool, EngineTransport
from srbench.canonical import json_text
from srbench.keepalive import KEEPALIVE_EXPIRY_S

__all__ = ["EngineClient", "engine_client"]


class EngineClient(httpx.AsyncClient):
    """httpx's AsyncClient on the engine's transport, plus `call_send` for model calls."""

    def __init__(self, *, timeout: httpx.Timeout, transport: EngineTransport) -> None:
        super().__init__(timeout=timeout, transport=transport, trust_env=False)
        self.engine_transport = transport
        self._timeouts = self.timeout.as_dict()
        self._urls: dict[str, httpx.URL] = {}

    async def call_send(
        self, url: str, body: Any, headers: dict[str, str], extensions: dict[str, Any]
    ) -> httpx.Response:
        """POST `body` as JSON to `url` with `headers` over the client's defaults; the
        response's body is not read (the caller reads it and closes the response)."""
        parsed = self._urls.get(url)
        if parsed is None:
            parsed = self._urls[url] = httpx.URL(url)
        merged = self.headers.copy()
        merged.update(headers)
        extensions = {"timeout": self._timeouts, **extensions}
        try:
            request = httpx.Request(
                "POST", parsed, headers=merged, json=body, extensions=extensions
            )
        except UnicodeEncodeError:
            # A lone surrogate a model sent (JSON's \udXXX) in a conversation going back to
            # it: the same escape goes back, as httpx would send the rest of the body.
            request = httpx.Request(
                "POST",
                parsed,
                headers=merged,
                content=json_text(body).encode("utf-8"),
                extensions=extensions,
            )
            request.headers["Content-Type"] = "application/json"
        response = await self.engine_transport.handle_async_request(request)
        response.request = request
        return response


def engine_client(*, timeout: httpx.Timeout, limits: httpx.Limits) -> EngineClient:
    """The engine's HTTP client. No proxies from the environment, no retries (a request that
    left is never sent again); no connection reused after `KEEPALIVE_EXPIRY_S` idle, whatever
    `limits` asks (httpx's default of 5 s is the very idle timeout of common model servers)."""
    expiry = limits.keepalive_expiry
    pool = EnginePool(
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=KEEPALIVE_EXPIRY_S if expiry is None else min(expiry, KEEPALIVE_EXPIRY_S),
    )
    return EngineClient(timeout=timeout, transport=EngineTransport(pool))
