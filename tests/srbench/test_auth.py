"""Every dashboard page and API endpoint needs an authenticated user (issue 2, DESIGN §9)."""

import re

import pytest
from django.core.management import call_command
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.authtoken.models import Token

from tests import factories as f

pytestmark = pytest.mark.django_db

# The only pages an anonymous visitor may see: the two login forms and static assets (and
# /favicon.ico, a redirect to the static icon).
PUBLIC = {"/login/", "/admin/login/"}
SAMPLE_ARGS = {
    "int": "1",
    "slug": "x",
    "str": "x",
    "path": "x",
    "uuid": "0" * 8 + "-0000-0000-0000-" + "0" * 12,
}


def concrete_paths(patterns=None, prefix=""):
    """Every URL pattern with its parameters filled by sample values."""
    for p in patterns if patterns is not None else get_resolver().url_patterns:
        route = str(p.pattern)
        if "(?P<format>" in route or "<drf_format_suffix:format>" in route:
            continue  # DRF's ".json" suffix variants route to the same views
        if hasattr(p.pattern, "converters") and p.pattern.converters:
            for name, conv in p.pattern.converters.items():
                kind = type(conv).__name__.replace("Converter", "").lower()
                route = re.sub(rf"<(?:\w+:)?{name}>", SAMPLE_ARGS.get(kind, "x"), route)
        route = route.lstrip("^").rstrip("$").replace("\\Z", "")
        route = re.sub(r"\(\?P<\w+>\\d\+\)", "1", route)  # numeric groups get a number
        route = re.sub(r"\(\?P<\w+>[^)]*\)", "x", route).replace("\\.", ".").replace("/?", "/")
        if isinstance(p, URLResolver):
            yield from concrete_paths(p.url_patterns, prefix + route)
        elif isinstance(p, URLPattern):
            yield "/" + (prefix + route).lstrip("/")


def test_url_walk_finds_the_pages_and_the_api():
    paths = set(concrete_paths())
    assert {"/", "/targets/", "/api/v1/runs/", "/api/v1/targets/", "/api/schema/"} <= paths


@pytest.mark.parametrize("path", sorted(set(concrete_paths())))
def test_anonymous_visitor_gets_no_data(client, path):
    f.target_create(slug="x")
    response = client.get(path)
    if path in PUBLIC:
        assert response.status_code == 200
        return
    if path == "/favicon.ico":  # browsers ask for it on the login page: the icon, no data
        assert response.status_code == 301 and response["Location"] == "/static/favicon.svg"
        return
    if response.status_code in (301, 302):
        assert "/login/" in response["Location"], (path, response["Location"])
    elif response.status_code == 404 and path.startswith("/api/"):
        # Only the catch-all for unknown API paths answers 404: an error document, no data.
        assert response.json()["code"] == "not_found", (path, response.content[:200])
        assert set(response.json()) == {"error", "code", "detail"}
    else:
        assert response.status_code in (401, 403, 405), (path, response.status_code)
        if path.startswith("/api/") and response.status_code != 405:
            if response["Content-Type"].startswith("application/json"):
                assert set(response.json()) == {"error", "code", "detail"}
            else:  # the schema endpoint renders its error as YAML, without the schema
                assert b"paths" not in response.content


def test_member_sees_the_runs_page_after_login(client):
    f.user_create(username="ada", password="pw-123456")
    response = client.post("/login/", {"username": "ada", "password": "pw-123456"})
    assert response.status_code == 302
    page = client.get("/")
    assert page.status_code == 200
    assert b"Runs" in page.content and b"ada" in page.content


def test_logout_ends_the_session(client):
    user = f.user_create()
    client.force_login(user)
    assert client.get("/").status_code == 200
    client.post("/logout/")
    assert client.get("/").status_code == 302


def test_token_command_creates_a_token_that_authenticates_the_api(client):
    user = f.user_create(username="cli-user")
    call_command("drf_create_token", "cli-user")
    token = Token.objects.get(user=user).key
    anonymous = client.get("/api/v1/runs/")
    authed = client.get("/api/v1/runs/", HTTP_AUTHORIZATION=f"Token {token}")
    assert anonymous.status_code == 401
    assert authed.status_code == 200


def test_members_cannot_use_the_admin(client):
    client.force_login(f.user_create())
    response = client.get("/admin/runs/target/add/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_api_targets_are_read_only_even_for_operators(client):
    client.force_login(f.user_create(staff=True))
    response = client.post("/api/v1/targets/", {"slug": "new"}, content_type="application/json")
    assert response.status_code == 405


def test_a_failed_sign_in_keeps_the_user_name_typed(client):
    """An outside probe: after a wrong password the user name field came back empty, so a
    user who fixed only the password failed again (and spent the lock-out budget)."""
    f.user_create(username="alice")
    page = client.post("/login/", {"username": "alice", "password": "wrong"}).content.decode()
    field = re.search(r'<input[^>]*name="username"[^>]*>', page).group(0)
    assert 'value="alice"' in field, field
