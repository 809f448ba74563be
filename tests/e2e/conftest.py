"""Browser end-to-end fixtures: Playwright for Python driving Debian's Chromium against
pytest-django's live server (SPEC R7, R8, R10, R14; reference Pattern 6).

`scripts/ensure_browser.sh` installs the browser and the Python driver; Playwright's own
browser download is never used. `scripts/ensure_frontend.sh` puts htmx in static/vendor/.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

# Playwright's sync API runs an event loop in the test thread; the ORM calls the tests make
# between browser steps are ordinary synchronous code and safe here.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOTS = Path(settings.BASE_DIR) / "var" / "screenshots"
# Budgets for a loaded machine (load 10 on 2 cores, R15): Playwright's actions and waits and
# its `expect` assertions poll until their condition holds, so a generous ceiling costs nothing
# when the page is quick and keeps a slow one from failing. Speed is measured in bench/.
ACTION_TIMEOUT_MS = 60_000
HTMX = Path(settings.BASE_DIR) / "static" / "vendor" / "htmx.min.js"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="package")
def browser() -> Iterator[Any]:
    """One Chromium for the browser tests, closed after the last of them: Playwright's sync API
    keeps its event loop marked as running in the main thread while it is open, where Django's
    test client then refuses every async view (the events long poll) with "You cannot use
    AsyncToSync in the same thread as an async event loop". Package scope ends it with
    tests/e2e; tests/conftest.py fails any later test that still finds a loop running."""
    from playwright import sync_api  # installed by make test (scripts/ensure_browser.sh)

    sync_api.expect.set_options(timeout=ACTION_TIMEOUT_MS)  # 5 s by default
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: run scripts/ensure_browser.sh")
    if not HTMX.exists():
        pytest.fail(f"{HTMX} is missing: run scripts/ensure_frontend.sh")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, timezone_id="UTC")
    context.set_default_timeout(ACTION_TIMEOUT_MS)
    page = context.new_page()
    try:
        yield page
    finally:
        context.close()


@pytest.fixture
def member(transactional_db: None) -> Any:
    from tests import factories as f

    return f.user_create(username="alice", password="correct horse battery")


@pytest.fixture
def logged_in_page(page: Any, live_server: Any, member: Any) -> Any:
    """A browser already holding a session (for tests whose subject is not the login)."""
    from django.test import Client

    client = Client()
    client.force_login(member)
    page.context.add_cookies(
        [
            {
                "name": settings.SESSION_COOKIE_NAME,
                "value": client.cookies[settings.SESSION_COOKIE_NAME].value,
                "url": live_server.url,
            }
        ]
    )
    return page


def screenshot(page: Any, name: str) -> None:
    """Saved for people to look at (gitignored), not compared."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
