"""The API tokens page in Chromium (outside probe, session 5): creating a token answers with a
redirect (POST/redirect/GET), so reloading the page that shows the new secret re-submits
nothing and makes no second live token; the secret is shown on that first view only."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import expect

from srbench.models import ApiToken


def test_reloading_after_creating_a_token_makes_no_second_token(
    logged_in_page: Any, live_server: Any, member: Any
) -> None:
    page = logged_in_page
    page.goto(f"{live_server.url}/tokens/")
    page.fill("#id_token_name", "laptop")
    page.click("#token-create button[type=submit]")
    secret = page.locator("#new-token-secret").inner_text().strip()
    assert secret.startswith("srb_")
    expect(page).to_have_url(f"{live_server.url}/tokens/")

    page.on("dialog", lambda dialog: dialog.accept())  # a resubmission prompt, if any
    page.reload()
    page.wait_for_load_state("load")
    expect(page.locator("#token-list")).to_be_visible()
    assert ApiToken.objects.filter(user=member).count() == 1
    assert ApiToken.objects.filter(user=member, revoked_at__isnull=True).count() == 1
    # The secret was shown once: the reloaded page no longer has it.
    expect(page.locator("#new-token-secret")).to_have_count(0)
    assert secret not in page.content()
    expect(page.locator("#token-list tbody tr[data-token]")).to_have_count(1)
