"""Login throttling and API rate limits (issue 40 items 1 and 3).

Login throttling is django-axes (docs/decisions.md "A portal fit for a company network"): every
failed `authenticate()` — the portal's login, the admin's login — and every failed API token
(srbench.tokens) is recorded per account and per address; past the limit within the cool-off
the attempt is refused, even with the right password, until the cool-off ends. This module holds
the project's side of it: which parameters lock, the client's address behind a trusted proxy,
and the lockout answer (an HTML page for a person, the API's JSON error document under /api/).

API rate limits are DRF throttles over a fixed window counted in the cache, so a counter is one
atomic increment (shared by every web process when SRBENCH_CACHE_URL names a Redis).
"""

from __future__ import annotations

import math
import time
from typing import Any

from axes.backends import AxesStandaloneBackend  # type: ignore[import-untyped]
from axes.helpers import (  # type: ignore[import-untyped]
    get_client_username,
    get_cool_off,
    get_failure_limit,
)
from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from rest_framework.settings import api_settings
from rest_framework.throttling import AnonRateThrottle, UserRateThrottle


class LoginThrottleBackend(AxesStandaloneBackend):
    """Axes's lockout check, abstaining when there is no request: an `authenticate()` outside
    an HTTP request (Django's test client `login()`, a shell) comes from no address and is
    not an attempt from the network. Every login form passes its request."""

    def authenticate(self, request: Any, username: Any = None, password: Any = None, **kw: Any):  # type: ignore[no-untyped-def]
        if request is None:
            return None
        return super().authenticate(request, username, password, **kw)


# The length of the user name Axes keeps with each failure (its models' column).
AXES_USERNAME_LENGTH = 255


def client_username(request: Any, credentials: dict[str, Any] | None) -> str | None:
    """The user name an attempt names, as Axes reads it (credentials first, then the form),
    cut to what its record keeps: a longer one (no account has it; ours are at most 150
    characters) was a 500 at the failure's insert instead of a failed sign-in."""
    field = getattr(settings, "AXES_USERNAME_FORM_FIELD", "username")
    if credentials:
        name = credentials.get(field)
    else:
        name = getattr(request, "data", getattr(request, "POST", {})).get(field)
    return name[:AXES_USERNAME_LENGTH] if isinstance(name, str) else name


def lockout_parameters(request: Any, credentials: dict[str, Any] | None) -> list[str]:
    """Per account and per address; a token failure names no account, so only its address
    counts (all token failures sharing the empty account would lock every client at once)."""
    if get_client_username(request, credentials):
        return ["username", "ip_address"]
    return ["ip_address"]


def client_address(request: Any) -> str | None:
    """The client's address: REMOTE_ADDR, or behind the trusted proxy of SRBENCH_BEHIND_PROXY
    the last address of X-Forwarded-For (the one the proxy itself appended)."""
    meta = getattr(request, "META", {})
    if settings.SRBENCH_BEHIND_PROXY:
        forwarded = [a.strip() for a in meta.get("HTTP_X_FORWARDED_FOR", "").split(",")]
        forwarded = [a for a in forwarded if a]
        if forwarded:
            return forwarded[-1]
    return meta.get("REMOTE_ADDR") or None


def cool_off_seconds(request: Any = None) -> int:
    cool_off = get_cool_off(request)
    return int(cool_off.total_seconds()) if cool_off else 0


def lockout_message(request: Any = None) -> str:
    minutes = math.ceil(cool_off_seconds(request) / 60)
    return (
        "Too many failed sign-in attempts for this account or from this address: sign-in is "
        f"locked for {minutes} minute{'s' if minutes != 1 else ''}. Wait, then try again "
        "(or ask an operator to unlock it in the admin's Access attempts)."
    )


def lockout_response(
    request: HttpRequest, original_response: Any = None, credentials: Any = None
) -> HttpResponse:
    """Axes's lockout answer: 429 with Retry-After; JSON under /api/, a page otherwise."""
    retry_after = str(cool_off_seconds(request))
    if request.path_info.startswith("/api/"):
        response: HttpResponse = JsonResponse(
            {"error": lockout_message(request), "code": "locked_out", "detail": None},
            status=429,
        )
    else:
        context = {
            "message": lockout_message(request),
            "failure_limit": get_failure_limit(request, credentials),
        }
        response = render(request, "registration/locked_out.html", context, status=429)
    response["Retry-After"] = retry_after
    return response


class FixedWindowThrottle:
    """A DRF throttle counting requests in fixed windows of the rate's duration: one atomic
    cache increment per request (DRF's own keeps and rewrites a list of every timestamp).
    The rate is read from the settings at each request, so a test can set a low one."""

    scope: str
    cache_format = "srbench-throttle:%(scope)s:%(ident)s"

    def get_rate(self) -> str | None:
        rates: Any = api_settings.DEFAULT_THROTTLE_RATES or {}
        rate = rates.get(self.scope)
        return None if rate is None else str(rate)

    def allow_request(self, request: Any, view: Any) -> bool:
        rate = self.get_rate()
        if rate is None:
            return True
        num_requests, duration = self.parse_rate(rate)  # type: ignore[attr-defined]
        key = self.get_cache_key(request, view)  # type: ignore[attr-defined]
        if key is None:
            return True
        now = time.time()
        window = int(now // duration)
        self.wait_seconds = (window + 1) * duration - now
        window_key = f"{key}:{window}"
        cache.add(window_key, 0, timeout=duration + 1)
        try:
            count = cache.incr(window_key)
        except ValueError:  # expired between add and incr: a new window
            cache.set(window_key, 1, timeout=duration + 1)
            count = 1
        return count <= num_requests

    def wait(self) -> float | None:
        return max(1.0, math.ceil(getattr(self, "wait_seconds", 1.0)))


class UserThrottle(FixedWindowThrottle, UserRateThrottle):
    """Per signed-in member (and per address for a request without one)."""

    scope = "user"


class AnonThrottle(FixedWindowThrottle, AnonRateThrottle):
    """Per anonymous address (the views that allow one: the schema's public errors)."""

    scope = "anon"
