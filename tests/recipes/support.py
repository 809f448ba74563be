"""Shared set-up for recipe tests: MoM targets and runs pointing at a running simulator."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from runs.models import Run, Target
from tests import factories as f

PRICES = {
    "sim-strong": {"input": "3", "cached_input": "0.3", "output": "15"},
    "sim-weak": {"input": "0.5", "cached_input": "0.05", "output": "1.5"},
}


def router_hashes(url: str) -> dict[str, str]:
    return httpx.get(f"{url}/api/v1/config/hash").json()


def router_config(url: str) -> dict[str, Any]:
    return httpx.get(f"{url}/api/v1/config").json()


def mom_target(url: str, *, capture: bool = True, **fields: Any) -> Target:
    values: dict[str, Any] = {
        "kind": "mom",
        "model": "auto",
        "base_url": f"{url}/v1",
        "config_hash": router_hashes(url)["active_runtime_hash"],
        "preview_url": f"{url}/api/v1/routing/preview",
        "capture_recipe": capture,
        "prices": PRICES,
    }
    values.update(fields)
    return f.target_create(**values)


def run_of(*targets: Target, **fields: Any) -> Run:
    """A run whose frozen manifest pins the targets as they are now (as plan_freeze does)."""
    manifest = {
        "targets": [
            {
                "slug": target.slug,
                "kind": target.kind,
                "model": target.model,
                "config_hash": target.config_hash or None,
            }
            for target in targets
        ]
    }
    return f.run_create(manifest=manifest, **fields)


class ActAfter(httpx.BaseTransport):
    """The real transport, plus `action()` right after the `nth` response to `path`: a
    deterministic way to change the router between two of the capture's reads."""

    def __init__(self, path: str, nth: int, action: Callable[[], object]) -> None:
        self.inner = httpx.HTTPTransport()
        self.path, self.nth, self.action = path, nth, action
        self.seen = 0
        self.paths: list[str] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        self.paths.append(request.url.path)
        if request.url.path == self.path:
            self.seen += 1
            if self.seen == self.nth:
                self.action()
        return response

    def close(self) -> None:
        self.inner.close()


def put_config(url: str, config: dict[str, Any]) -> None:
    response = httpx.put(f"{url}/api/v1/config", json=config)
    assert response.status_code == 200, response.text
