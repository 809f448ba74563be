"""The API tokens page lists every token that signs in as the member (outside probe, session 5):
the tokens `manage.py drf_create_token` makes (DRF's authtoken) too, with what is known of them
(when they were made) and unknown for the rest, and a member revokes them there."""

from __future__ import annotations

import re

import pytest
from django.core.management import call_command
from rest_framework.authtoken.models import Token

from srbench.tokens import create_token
from tests import factories as f

pytestmark = pytest.mark.django_db


def command_line_rows(page: str) -> list[str]:
    return re.findall(r'<tr data-command-line-token="\d+".*?</tr>', page, re.S)


def test_a_command_line_token_is_listed_with_what_is_known_and_can_be_revoked(client):
    member = f.user_create(username="cli-user")
    other = f.user_create(username="someone")
    call_command("drf_create_token", "cli-user")
    call_command("drf_create_token", "someone")
    create_token(member, "laptop")
    key = Token.objects.get(user=member).key
    client.force_login(member)

    page = client.get("/tokens/").content.decode()
    rows = command_line_rows(page)
    assert len(rows) == 1, rows  # the member's own, not someone's
    row = rows[0]
    assert f'data-command-line-token="{member.pk}"' in row
    assert "drf_create_token" in row
    created = Token.objects.get(user=member).created
    assert f"{created:%Y-%m-%d %H:%M}" in row
    assert '<td class="token-last-used"><span class="unknown"' in row  # not tracked: unknown
    assert "active" in row and 'class="token-revoke"' in row
    assert key not in page  # the secret is never on the page, only its first characters
    assert f"{key[:8]}…" in row
    assert client.get("/api/v1/runs/", HTTP_AUTHORIZATION=f"Token {key}").status_code == 200

    revoked = client.post(f"/tokens/command-line/{member.pk}/revoke/")
    assert revoked.status_code == 302 and revoked["Location"] == "/tokens/"
    assert not Token.objects.filter(user=member).exists()
    assert Token.objects.filter(user=other).exists()
    assert client.get("/api/v1/runs/", HTTP_AUTHORIZATION=f"Token {key}").status_code == 401
    after = client.get("/tokens/").content.decode()
    assert command_line_rows(after) == [] and "laptop" in after
    # Another member's command-line token is not theirs to revoke.
    assert client.post(f"/tokens/command-line/{other.pk}/revoke/").status_code == 404
    assert Token.objects.filter(user=other).exists()


def test_staff_see_and_revoke_everyones_command_line_tokens(client):
    member = f.user_create(username="cli-user")
    call_command("drf_create_token", "cli-user")
    client.force_login(f.user_create(username="ops", staff=True))
    rows = command_line_rows(client.get("/tokens/").content.decode())
    assert len(rows) == 1 and "cli-user" in rows[0]
    assert client.post(f"/tokens/command-line/{member.pk}/revoke/").status_code == 302
    assert not Token.objects.exists()


@pytest.mark.parametrize("name", ["a\x00b", "\x00"])
def test_a_token_name_holding_nul_is_refused_with_a_clear_error(client, name):
    """A NUL in the name reached PostgreSQL, which refuses it in a text field: a 500 (outside
    probe "ka", 2026-12-07). It is refused as any bad name is, and no token is made."""
    from srbench.models import ApiToken

    member = f.user_create(username="nul-name")
    client.force_login(member)
    response = client.post("/tokens/", {"name": name})
    assert response.status_code == 400
    assert "NUL" in response.content.decode()
    assert not ApiToken.objects.filter(user=member).exists()
    # The page still works and makes a token with a good name.
    assert client.post("/tokens/", {"name": "ci"}).status_code == 303
    assert ApiToken.objects.filter(user=member).count() == 1
