"""API rate limits (issue 40 item 3): per member, 429 JSON with Retry-After past the rate,
configurable, and by default generous enough for the CLI and the dashboard."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.core.cache import cache
from django.test import override_settings
from rest_framework.test import APIClient
from rest_framework.throttling import SimpleRateThrottle

from srbench.tokens import create_token
from tests import factories as f

pytestmark = pytest.mark.django_db


def low_rate(rate: str):  # type: ignore[no-untyped-def]
    rates = {"user": rate, "anon": rate}
    return override_settings(
        REST_FRAMEWORK={**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": rates}
    )


def test_past_the_user_rate_the_api_answers_429_json_with_retry_after() -> None:
    """issue 40 acceptance: drive the API past the member's limit (set low here, explicitly)."""
    cache.clear()
    member = f.user_create(username="fast")
    _, secret = create_token(member, "script")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {secret}")
    with low_rate("5/day"):
        answers = [client.get("/api/v1/targets/") for _ in range(6)]
        assert [a.status_code for a in answers] == [200] * 5 + [429]
        refused = answers[-1]
        assert refused["Content-Type"].startswith("application/json")
        assert refused.json()["code"] == "throttled"
        retry_after = int(refused["Retry-After"])
        assert 1 <= retry_after <= 24 * 3600
        # Writes count as well, and another member has a counter of their own.
        assert client.post("/tokens/").status_code != 429  # a portal page, not the API
        other = APIClient()
        other.force_authenticate(f.user_create(username="other"))
        assert other.get("/api/v1/targets/").status_code == 200


def test_the_default_rates_are_generous_and_configurable() -> None:
    """issue 40 item 3: the defaults (not the test settings) allow 3,000 requests a minute per
    member — a CLI following a run polls about once a second — and 300 per anonymous address;
    SRBENCH_API_RATE_USER / SRBENCH_API_RATE_ANON change them."""
    rates = settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]
    parse = SimpleRateThrottle.parse_rate
    assert parse(None, rates["user"]) == (3000, 60)  # type: ignore[arg-type]
    assert parse(None, rates["anon"]) == (300, 60)  # type: ignore[arg-type]
    assert settings.REST_FRAMEWORK["DEFAULT_THROTTLE_CLASSES"] == [
        "srbench.security.UserThrottle",
        "srbench.security.AnonThrottle",
    ]
