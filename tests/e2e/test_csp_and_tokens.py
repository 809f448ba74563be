"""In Chromium (issue 40): every page works under the Content-Security-Policy with no
violation in the console, htmx included; a member creates an API token, uses it from the CLI
over --url, revokes it, and the next CLI call is refused with a clear error."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from playwright.sync_api import expect

from runs.models import Target
from srbench.models import ApiToken, AuditEvent
from tests import factories as f
from tests.conftest import purge_broker
from tests.security.test_permissions import completed_run, failed_run, planned_run

ROOT = Path(settings.BASE_DIR)
# Every violation, whether or not the console reports it: listened to before any page script.
LISTEN = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__csp.push(e.violatedDirective + " " + (e.blockedURI || "inline") + " " + e.sourceFile + ":" + e.lineNumber);
});
"""


@pytest.fixture(autouse=True)
def _clean_broker() -> Any:
    yield
    purge_broker()


class Console:
    """The console's errors and CSP reports of one page."""

    def __init__(self, page: Any) -> None:
        self.messages: list[str] = []
        page.on("console", self.take)
        page.on("pageerror", lambda error: self.messages.append(f"pageerror: {error}"))
        page.add_init_script(LISTEN)

    def take(self, message: Any) -> None:
        if message.type in ("error", "warning"):
            self.messages.append(f"{message.type}: {message.text}")

    def violations(self, page: Any) -> list[str]:
        reported = page.evaluate("window.__csp || []")
        seen = [m for m in self.messages if "Content Security Policy" in m or "Refused" in m]
        return reported + seen


def pages_of(live_server: Any, staff: Any) -> list[tuple[str, str | None]]:
    """(URL, a selector that shows the page's script ran or its content arrived)."""
    done = completed_run(staff)
    failed = failed_run(staff)
    running = planned_run(staff, status="running")
    target = Target.objects.get(slug="sim-strong")
    dataset = done.dataset_id
    return [
        ("/", "#runs-table"),
        ("/runs/new/", "#profile-step"),
        (f"/runs/{done.pk}/", "#run-cli"),
        (f"/runs/{done.pk}/?tab=calls", None),
        (f"/runs/{running.pk}/", "#run-live"),
        (f"/runs/{failed.pk}/recovery/?mode=failed", "#recovery-form"),
        (f"/runs/{done.pk}/side-by-side/", None),
        ("/datasets/", None),
        (f"/datasets/{dataset}/", None),
        ("/compare/", None),
        ("/targets/", None),
        ("/recipes/", None),
        ("/tokens/", "#token-create"),
        ("/api/docs/", ".swagger-ui .info"),
        ("/api/redoc/", "redoc h1, #redoc-container h1"),
        ("/admin/", "#content"),
        ("/admin/runs/target/", "#result_list"),
        (f"/admin/runs/target/{target.pk}/change/", "#target_form"),
        ("/admin/srbench/auditevent/", "#content"),
        ("/admin/axes/accessfailurelog/", "#content"),
    ]


def sign_in(page: Any, live_server: Any, username: str, password: str) -> None:
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit]")
    expect(page.locator("header.top .user")).to_contain_text(username)


def test_every_page_loads_under_the_csp_without_a_violation(
    page: Any, live_server: Any, transactional_db: None
) -> None:
    """issue 40 item 2 / acceptance: the browser enforces the policy (no inline script, no
    eval) on every page, signed in through the login form; htmx polls and the page scripts
    (copy buttons, recovery, auto-submitting choices) work under it."""
    staff = f.user_create(username="ops", staff=True, password="ops-password-1")
    urls = pages_of(live_server, staff)
    console = Console(page)
    sign_in(page, live_server, "ops", "ops-password-1")
    assert console.violations(page) == []

    for url, ready in urls:
        response = page.goto(live_server.url + url)
        assert response.status == 200, url
        assert (
            "'unsafe-inline'"
            not in response.headers["content-security-policy"].split("script-src")[1].split(";")[0]
        ), url
        if ready:
            expect(page.locator(ready).first).to_be_visible()
        page.wait_for_load_state("load")
        if page.locator("button[data-copy]").count():  # portal.js ran: copy buttons shown
            expect(page.locator("button[data-copy]").first).to_have_js_property("hidden", False)
        assert console.violations(page) == [], url

    # htmx works under the policy: the runs list polls (the visibility gate is in portal.js).
    page.goto(live_server.url + "/")
    with page.expect_request(lambda r: r.headers.get("hx-request") == "true"):
        pass
    # A choice that submits its form on change (was an inline onchange handler).
    page.goto(live_server.url + "/runs/new/")
    unchecked = page.locator("#profile-step input[type=radio][data-autosubmit]:not(:checked)").first
    value = unchecked.get_attribute("value")
    unchecked.check()
    expect(page).to_have_url(f"{live_server.url}/runs/new/?profile={value}", timeout=60_000)
    assert console.violations(page) == []
    assert not [m for m in console.messages if m.startswith("pageerror")], console.messages


def srbench_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The `srbench` console script, as a member runs it on their machine."""
    script = Path(sys.executable).with_name("srbench")
    return subprocess.run(
        [str(script), *args],
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if k not in {"SRBENCH_URL", "SRBENCH_TOKEN"}},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_member_creates_a_token_uses_it_from_the_cli_revokes_it_and_is_refused(
    page: Any, live_server: Any, transactional_db: None
) -> None:
    """issue 40 item 5 / acceptance, in the browser and the real console script."""
    member = f.user_create(username="mia", password="mia-password-1")
    console = Console(page)
    sign_in(page, live_server, "mia", "mia-password-1")
    page.click("#user-tokens")
    expect(page).to_have_url(f"{live_server.url}/tokens/")
    page.fill("#id_token_name", "laptop")
    page.click("#token-create button[type=submit]")
    secret = page.locator("#new-token-secret").inner_text().strip()
    assert secret.startswith("srb_")
    expect(page.locator("#new-token button[data-copy]")).to_be_visible()
    token = ApiToken.objects.get(user=member, name="laptop")
    row = page.locator(f"tr[data-token='{token.pk}']")
    expect(row.locator(".token-prefix")).to_have_text(f"{token.prefix}…")
    expect(row.locator(".token-last-used")).to_have_text("never")
    assert secret not in page.content().replace(page.locator("#new-token").inner_html(), "")

    used = srbench_cli("runs", "--json", "--url", live_server.url, "--token", secret)
    assert used.returncode == 0, used.stderr
    page.goto(f"{live_server.url}/tokens/")
    expect(row.locator(".token-last-used")).not_to_have_text("never")
    expect(page.locator("#new-token-secret")).to_have_count(0)  # shown once only

    page.on("dialog", lambda dialog: dialog.accept())
    row.locator("button.token-revoke").click()
    expect(row.locator(".token-status")).to_contain_text("revoked")

    refused = srbench_cli("runs", "--url", live_server.url, "--token", secret)
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.startswith("error:") and refused.stderr.count("\n") == 1
    assert f"This API token ({token.prefix}…, “laptop”) was revoked" in refused.stderr
    assert "/tokens/" in refused.stderr
    actions = list(
        AuditEvent.objects.filter(actor="mia").order_by("id").values_list("action", "via")
    )
    assert actions == [("tokens", "session"), ("token-revoke", "session")]
    assert console.violations(page) == []
