"""Production settings from the environment (issue 40 item 2): one HTTPS switch, a trusted
proxy, HSTS with a configurable age, and a Content-Security-Policy without inline scripts."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import Client

from tests import factories as f

ROOT = Path(__file__).resolve().parents[2]
# The README's production variables (its configuration table), a real-looking key and host.
PRODUCTION = {
    "DJANGO_DEBUG": "0",
    "SECRET_KEY": "k7Qv-2LmZp9sR4tW8xYc3nB6dF1gH5jK0aE-uIoP7yTrEwQz-Xm4Nb8Vc2Lk6Jh0Gf",
    "ALLOWED_HOSTS": "srbench.example.com",
    "SRBENCH_HTTPS": "1",
    "SRBENCH_BEHIND_PROXY": "1",
}


def run_python(env_over: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("SRBENCH_HSTS")
        # The browser tests' conftest sets DJANGO_ALLOW_ASYNC_UNSAFE for its own process.
        and k not in {"SRBENCH_HTTPS", "SRBENCH_BEHIND_PROXY", "DJANGO_ALLOW_ASYNC_UNSAFE"}
    }
    env.update(
        {"DJANGO_SETTINGS_MODULE": "srbench.settings", "SRBENCH_VAR_DIR": "/tmp/srb-settings"}
    )
    env.update(env_over)
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def deploy_check(env_over: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return run_python(env_over, "manage.py", "check", "--deploy", "--fail-level", "WARNING")


def test_check_deploy_is_clean_with_the_documented_production_variables() -> None:
    """issue 40 item 2 / acceptance: no warning at all."""
    result = deploy_check(PRODUCTION)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout, result.stdout + result.stderr


def test_without_the_https_switch_check_deploy_names_what_is_missing() -> None:
    """issue 40 item 2: the test above can fail — the four warnings of the issue are back."""
    result = deploy_check({k: v for k, v in PRODUCTION.items() if k != "SRBENCH_HTTPS"})
    assert result.returncode != 0
    for warning in ("W004", "W008", "W012", "W016"):
        assert f"security.{warning}" in result.stdout + result.stderr, warning


def test_the_switch_sets_secure_cookies_hsts_redirect_and_the_proxy_header() -> None:
    """issue 40 item 2: one switch; HSTS's age configurable; the proxy header only when the
    proxy is declared trusted."""
    probe = (
        "import django; django.setup(); from django.conf import settings as s; "
        "print(s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE, s.SECURE_SSL_REDIRECT, "
        "s.SECURE_HSTS_SECONDS, s.SECURE_HSTS_INCLUDE_SUBDOMAINS, "
        "getattr(s, 'SECURE_PROXY_SSL_HEADER', None))"
    )
    on = run_python({**PRODUCTION, "SRBENCH_HSTS_SECONDS": "3600"}, "-c", probe)
    assert on.stdout.strip() == ("True True True 3600 True ('HTTP_X_FORWARDED_PROTO', 'https')"), (
        on.stderr
    )
    off = run_python(
        {k: v for k, v in PRODUCTION.items() if k not in {"SRBENCH_HTTPS", "SRBENCH_BEHIND_PROXY"}},
        "-c",
        probe,
    )
    assert off.stdout.strip() == "False False False 0 False None", off.stderr


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/login/", "/", "/tokens/", "/api/docs/", "/api/redoc/"])
def test_every_page_carries_a_csp_without_inline_scripts_or_eval(path: str) -> None:
    """issue 40 item 2: scripts from this server or with the response's nonce only; the page's
    own inline scripts (the API docs' start-up) carry that nonce, and no other inline script
    is on the page. The browser test (tests/e2e/test_csp_and_tokens.py) loads them all."""
    client = Client()
    if path != "/login/":
        client.force_login(f.user_create(username="csp"))
    response = client.get(path)
    assert response.status_code == 200
    policy = dict(
        (d.split(" ", 1) + [""])[:2] for d in response["Content-Security-Policy"].split("; ")
    )
    scripts = policy["script-src"].split()
    assert "'unsafe-inline'" not in scripts and "'unsafe-eval'" not in scripts
    # The nonce is in the header only when the page used it (Django's lazy nonce).
    nonces = {s[len("'nonce-") : -1] for s in scripts if s.startswith("'nonce-")}
    html = response.content.decode()
    assert "<script>" not in html and " onchange=" not in html and " onclick=" not in html
    assert set(re.findall(r'<script nonce="([^"]*)"', html)) <= nonces
    assert policy["object-src"] == "'none'" and policy["frame-ancestors"] == "'none'"
