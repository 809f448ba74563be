"""Login throttling (issue 40 item 1): per account and per address, with a cool-off, on the
portal's login, the admin's login and API token failures; failures recorded for staff."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from axes.models import AccessAttempt, AccessFailureLog
from django.conf import settings
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from srbench.tokens import create_token
from tests import factories as f

pytestmark = pytest.mark.django_db

PASSWORD = "the right password"
LIMIT = settings.AXES_FAILURE_LIMIT


def login(client: Client, username: str, password: str, url: str = "/login/") -> Any:
    return client.post(url, {"username": username, "password": password})


def signed_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


def expire_cool_off() -> None:
    """The cool-off has passed: every recorded attempt is older than it (no sleeping)."""
    AccessAttempt.objects.update(
        attempt_time=timezone.now() - settings.AXES_COOLOFF_TIME - timedelta(seconds=1)
    )


def test_the_limit_is_ten_failures_within_fifteen_minutes_by_default() -> None:
    """issue 40 acceptance: the 11th attempt is the one refused."""
    assert LIMIT == 10
    assert timedelta(minutes=15) == settings.AXES_COOLOFF_TIME


def test_the_attempt_after_ten_wrong_passwords_is_refused_even_with_the_right_one() -> None:
    """issue 40 item 1 / acceptance: 10 wrong passwords, then the right one is refused with a
    clear message until the cool-off ends; then it works."""
    f.user_create(username="alice", password=PASSWORD)
    client = Client(REMOTE_ADDR="10.0.0.1")
    for _ in range(LIMIT - 1):
        response = login(client, "alice", "wrong")
        assert response.status_code == 200 and not signed_in(client)
    tenth = login(client, "alice", "wrong")
    assert tenth.status_code == 429

    refused = login(client, "alice", PASSWORD)

    assert refused.status_code == 429 and not signed_in(client)
    page = refused.content.decode()
    assert 'id="locked-out"' in page and "locked for 15 minutes" in page
    assert refused["Retry-After"] == str(15 * 60)
    # Per account: another address is refused for this account too.
    assert login(Client(REMOTE_ADDR="10.0.0.2"), "alice", PASSWORD).status_code == 429
    # Recorded for staff: one failure log row per attempt, the refused ones marked locked out.
    failures = AccessFailureLog.objects.filter(username="alice").order_by("id")
    assert [row.locked_out for row in failures] == [False] * (LIMIT - 1) + [True] * 3

    expire_cool_off()
    after = Client(REMOTE_ADDR="10.0.0.1")
    assert login(after, "alice", PASSWORD).status_code == 302 and signed_in(after)


def test_one_address_trying_many_accounts_is_locked_out() -> None:
    """issue 40 item 1: per address as well as per account."""
    f.user_create(username="bob", password=PASSWORD)
    client = Client(REMOTE_ADDR="10.0.0.9")
    for n in range(LIMIT):
        login(client, f"nobody-{n}", "wrong")
    assert login(client, "bob", PASSWORD).status_code == 429
    # Bob from his own address is not affected.
    elsewhere = Client(REMOTE_ADDR="10.0.0.10")
    assert login(elsewhere, "bob", PASSWORD).status_code == 302


def test_the_admin_login_is_throttled_too() -> None:
    """issue 40 item 1: the same protection on the admin's login."""
    f.user_create(username="ops", staff=True, password=PASSWORD)
    client = Client(REMOTE_ADDR="10.0.1.1")
    for _ in range(LIMIT):
        login(client, "ops", "wrong", url="/admin/login/")

    refused = login(client, "ops", PASSWORD, url="/admin/login/")

    assert refused.status_code == 429 and not signed_in(client)
    # The portal's login shares the count: the account is locked there as well.
    assert login(Client(REMOTE_ADDR="10.0.1.2"), "ops", PASSWORD).status_code == 429


def test_token_failures_are_throttled_per_address() -> None:
    """issue 40 item 1: wrong API tokens count as failed sign-ins; past the limit a valid
    token from that address is refused with 429 JSON and Retry-After."""
    member = f.user_create(username="carol")
    _, secret = create_token(member, "ci")
    client = APIClient(REMOTE_ADDR="10.0.2.1")
    for n in range(LIMIT - 1):
        client.credentials(HTTP_AUTHORIZATION=f"Token srb_wrong{n}")
        response = client.get("/api/v1/runs/")
        assert response.status_code == 401 and response.json()["code"] == "authentication_failed"
    client.credentials(HTTP_AUTHORIZATION="Token srb_wrong-last")
    assert client.get("/api/v1/runs/").status_code == 429

    client.credentials(HTTP_AUTHORIZATION=f"Token {secret}")
    refused = client.get("/api/v1/runs/")

    assert refused.status_code == 429
    assert (
        refused.json()["code"] == "locked_out"
        and "locked for 15 minutes" in refused.json()["error"]
    )
    assert refused["Retry-After"] == str(15 * 60)
    # Another address with the same valid token works: the lock is the address's.
    other = APIClient(REMOTE_ADDR="10.0.2.2")
    other.credentials(HTTP_AUTHORIZATION=f"Token {secret}")
    assert other.get("/api/v1/runs/").status_code == 200
    assert AccessFailureLog.objects.filter(ip_address="10.0.2.1").count() == LIMIT


def test_staff_see_the_failures_in_the_admin() -> None:
    """issue 40 item 1: failures recorded and visible to staff."""
    f.user_create(username="dave", password=PASSWORD)
    login(Client(REMOTE_ADDR="10.0.3.1"), "dave", "wrong")
    operator = Client()
    operator.force_login(f.user_create(username="ops", staff=True))
    page = operator.get("/admin/axes/accessfailurelog/")
    assert page.status_code == 200 and b"dave" in page.content
    assert b"10.0.3.1" in operator.get("/admin/axes/accessattempt/").content


def test_behind_the_trusted_proxy_the_forwarded_address_is_the_clients(settings: Any) -> None:
    """issue 40 item 2: with SRBENCH_BEHIND_PROXY the proxy's appended address counts, so the
    whole office behind one proxy is not one address; without it the header is ignored."""
    from srbench.security import client_address

    class Request:
        META = {"REMOTE_ADDR": "10.9.9.9", "HTTP_X_FORWARDED_FOR": "1.2.3.4, 192.168.1.7"}

    settings.SRBENCH_BEHIND_PROXY = False
    assert client_address(Request()) == "10.9.9.9"
    settings.SRBENCH_BEHIND_PROXY = True
    assert client_address(Request()) == "192.168.1.7"


@pytest.mark.parametrize("url", ["/login/", "/admin/login/"])
def test_a_user_name_longer_than_the_record_keeps_is_a_failed_sign_in_not_a_500(url: str) -> None:
    """A user name of 300 characters reached Axes's record of the failure (a 255-character
    column): "value too long", a 500 on both login pages (outside probe "ka", 2026-12-07). It is
    an ordinary failed sign-in, recorded under its first 255 characters, and counted."""
    client = Client(REMOTE_ADDR="10.0.0.9")
    name = "n" * 300
    response = login(client, name, "wrong", url)
    assert response.status_code == 200 and not signed_in(client)
    assert AccessFailureLog.objects.filter(username=name[:255]).count() == 1
    assert AccessAttempt.objects.get(username=name[:255]).failures_since_start == 1
