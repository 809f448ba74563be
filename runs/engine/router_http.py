"""Bounded reads from a router's management API: every byte counted, every wait capped.

A router is an external service; a misbehaving one (a huge config, a slow drip) must cost a
capture or a preview a readable refusal, never a worker's memory or a run's start.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import httpx

from srbench.digits import ascii_digits

PREVIEW_PATH = "/api/v1/routing/preview"


class BodyTooLarge(Exception):
    def __init__(self, limit: int) -> None:
        self.limit = limit
        super().__init__(f"larger than {limit // 1024} KiB")


class DeadlinePassed(Exception):
    pass


@dataclass(frozen=True)
class Reply:
    status: int
    headers: httpx.Headers
    body: bytes


def management_base_url(preview_url: str) -> str | None:
    """The router's management origin, from the canonical preview URL
    (`http://host:8080/api/v1/routing/preview` → `http://host:8080`); None if not canonical."""
    url = preview_url.strip().rstrip("/")
    if not url.endswith(PREVIEW_PATH):
        return None
    return url[: -len(PREVIEW_PATH)]


def new_client() -> httpx.Client:
    # trust_env=False: a proxy from the worker's environment must not see router traffic.
    return httpx.Client(trust_env=False, follow_redirects=False)


def bounded_request(
    client: httpx.Client,
    method: str,
    url: str,
    *,
    limit: int,
    deadline: float,
    per_request_timeout: float,
    headers: dict[str, str] | None = None,
    json: Any = None,
) -> Reply:
    """One request whose decoded body may not exceed `limit` bytes and which ends by the
    monotonic `deadline`. httpx's read timeout is per chunk, so a server dripping bytes is
    cut off here by the overall deadline."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise DeadlinePassed
    timeout = min(per_request_timeout, remaining)
    with client.stream(
        method, url, headers=headers, json=json, timeout=httpx.Timeout(timeout)
    ) as response:
        declared = response.headers.get("content-length", "")
        if ascii_digits(declared) and int(declared) > limit:
            raise BodyTooLarge(limit)
        body = bytearray()
        for chunk in response.iter_bytes():
            body += chunk
            if len(body) > limit:
                raise BodyTooLarge(limit)
            if time.monotonic() > deadline:
                raise DeadlinePassed
        return Reply(status=response.status_code, headers=response.headers, body=bytes(body))
