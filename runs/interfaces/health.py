"""A target's health check for operators (issue 23): `GET {base_url}/models` through the
registered endpoint with its key, timed. It sends no model call and costs nothing."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import httpx

from runs.ledger.selectors import target_api_key
from runs.models import Target

MAX_BODY = 1024 * 1024
TIMEOUT_S = 10.0


@dataclass(frozen=True)
class HealthCheck:
    url: str
    status_code: int | None
    latency_ms: float | None
    models: tuple[str, ...]
    model_listed: bool | None  # None: the answer listed no models we could read
    error: str

    @property
    def ok(self) -> bool:
        return self.status_code == 200 and not self.error

    def summary(self) -> str:
        if self.status_code is None:
            return f"{self.url}: no answer ({self.error})"
        took = f"{self.latency_ms:.0f} ms"
        if not self.ok:
            return f"{self.url}: HTTP {self.status_code} in {took}" + (
                f" ({self.error})" if self.error else ""
            )
        listed = {
            True: "the target's model is listed",
            False: "the target's model is NOT listed",
            None: "no model list to check",
        }[self.model_listed]
        return f"{self.url}: HTTP 200 in {took}; {len(self.models)} model(s); {listed}"


def target_health_check(*, target: Target, timeout: float = TIMEOUT_S) -> HealthCheck:
    url = target.base_url.rstrip("/") + "/models"
    headers = {"accept": "application/json"}
    key = target_api_key(target=target)
    if key:
        headers["authorization"] = f"Bearer {key}"
    started = time.perf_counter()
    try:
        with (
            httpx.Client(timeout=timeout, trust_env=False, follow_redirects=False) as client,
            client.stream("GET", url, headers=headers) as response,
        ):
            body = b""
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > MAX_BODY:
                    break
            latency_ms = (time.perf_counter() - started) * 1000
    except httpx.HTTPError as exc:
        return HealthCheck(url, None, None, (), None, f"{type(exc).__name__}: {exc}"[:300])
    if response.status_code != 200:
        return HealthCheck(url, response.status_code, latency_ms, (), None, "")
    if len(body) > MAX_BODY:
        return HealthCheck(url, 200, latency_ms, (), None, "model list larger than 1 MiB")
    try:
        data = json.loads(body).get("data")
        models = tuple(str(m["id"])[:200] for m in data if isinstance(m, dict) and "id" in m)
    except (ValueError, AttributeError, TypeError):
        return HealthCheck(url, 200, latency_ms, (), None, "the answer is not an OpenAI model list")
    listed = (target.model in models) if models else None
    return HealthCheck(url, 200, latency_ms, models, listed, "")
