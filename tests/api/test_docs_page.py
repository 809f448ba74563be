"""The API docs pages (issue 18, point 7): Swagger UI at /api/docs/ and Redoc at /api/redoc/,
behind the portal's login, linked from the navigation, with every asset served by this server
from drf_spectacular_sidecar (no CDN, no other host)."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import pytest
from django.core.management import call_command
from django.test import Client, RequestFactory, override_settings
from rest_framework.authtoken.models import Token

from srbench.middleware import StaticFilesMiddleware
from tests import factories as f

pytestmark = pytest.mark.django_db

DOCS_PAGES = ["/api/docs/", "/api/redoc/"]
SOURCE_MAP = re.compile(rb"[#@] sourceMappingURL=([^\s*]+)")


class AssetReferences(HTMLParser):
    """Every URL the page makes the browser load: script/img src, link href, Redoc's spec-url."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[tuple[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value and (
                name == "src" or (tag == "link" and name == "href") or name == "spec-url"
            ):
                self.urls.append((tag, value))


def asset_urls(html: str) -> list[tuple[str, str]]:
    parser = AssetReferences()
    parser.feed(html)
    return parser.urls


@pytest.fixture
def member_client(client: Client) -> Client:
    client.force_login(f.user_create(username="docs-reader"))
    return client


def fetch_body(client: Client, url: str) -> bytes:
    response = client.get(url)
    assert response.status_code == 200, (url, response.status_code)
    body = b"".join(response.streaming_content) if response.streaming else response.content
    assert body, url
    return body


@pytest.mark.parametrize("page", DOCS_PAGES)
def test_docs_page_loads_every_asset_from_this_server(member_client: Client, page: str) -> None:
    response = member_client.get(page)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")
    html = response.content.decode()
    # No CDN or other host anywhere in the page, not only in the src/href attributes.
    for outside in ("https://", "http://", "//cdn", "fonts.googleapis", "jsdelivr"):
        assert outside not in html, (page, outside)

    urls = asset_urls(html)
    scripts = [url for tag, url in urls if tag == "script"]
    # The sidecar's files, and the portal's own (Redoc's logo kept local, issue 40).
    ours = ("/static/drf_spectacular_sidecar/", "/static/js/")
    assert scripts and all(any(o in url for o in ours) for url in scripts), urls
    for _tag, url in urls:
        assert url.startswith("/") and not url.startswith("//"), (page, url)
        body = fetch_body(member_client, url)
        # A source map the browser's developer tools would ask for must exist too.
        for ref in SOURCE_MAP.findall(body[-512:]):
            fetch_body(member_client, urljoin(url, ref.decode()))


def test_swagger_ui_reads_the_schema_the_member_can_fetch(member_client: Client) -> None:
    html = member_client.get("/api/docs/").content.decode()
    assert 'url: "/api/schema/"' in html
    # The online validator would send the schema URL to swagger.io.
    assert '"validatorUrl": null' in html
    schema = member_client.get("/api/schema/", {"format": "json"})
    assert schema.status_code == 200 and "/api/v1/runs/" in schema.json()["paths"]


def test_redoc_reads_the_schema_url(member_client: Client) -> None:
    urls = asset_urls(member_client.get("/api/redoc/").content.decode())
    assert ("redoc", "/api/schema/") in urls
    assert any(url.endswith("/redoc.standalone.js") for _tag, url in urls)


@pytest.mark.parametrize("page", DOCS_PAGES)
def test_anonymous_visitor_gets_the_json_error_document_not_the_docs(
    client: Client, page: str
) -> None:
    response = client.get(page, HTTP_ACCEPT="text/html")
    assert response.status_code == 401
    assert response["Content-Type"].startswith("application/json")
    assert set(response.json()) == {"error", "code", "detail"}
    assert b"swagger" not in response.content.lower() and b"redoc" not in response.content.lower()


@pytest.mark.parametrize("page", [*DOCS_PAGES, "/api/schema/"])
def test_docs_pages_accept_the_same_credentials_as_the_schema(client: Client, page: str) -> None:
    token, _ = Token.objects.get_or_create(user=f.user_create())
    assert client.get(page).status_code == 401
    assert client.get(page, HTTP_AUTHORIZATION=f"Token {token.key}").status_code == 200


def test_dashboard_navigation_links_to_the_api_docs(member_client: Client) -> None:
    page = member_client.get("/").content.decode()
    nav = page[page.index("<nav") : page.index("</nav>")]
    assert '<a href="/api/docs/">API docs</a>' in nav


@pytest.mark.parametrize(
    ("page", "other"), [("/api/docs/", "/api/redoc/"), ("/api/redoc/", "/api/docs/")]
)
def test_each_docs_page_links_back_to_the_portal_and_to_the_other(
    member_client: Client, page: str, other: str
) -> None:
    """Outside probe, session 5: the docs pages were a dead end, with no way back but the
    browser's Back button."""
    html = member_client.get(page).content.decode()
    bar = html[html.index('<nav id="docs-portal"') :]
    bar = bar[: bar.index("</nav>")]
    assert '<a href="/">' in bar and "srbench portal" in bar
    assert f'<a href="{other}">' in bar and '<a href="/tokens/">' in bar


def test_collected_static_files_serve_the_docs_without_finders(
    member_client: Client, tmp_path: Path
) -> None:
    """Production may serve a collectstatic folder (WHITENOISE_USE_FINDERS off): the sidecar's
    files must be collected and served from there too."""
    urls = [
        url
        for page in DOCS_PAGES
        for _t, url in asset_urls(member_client.get(page).content.decode())
    ]
    static_urls = [url for url in urls if url.startswith("/static/")]
    assert static_urls
    root = tmp_path / "static"
    with override_settings(STATIC_ROOT=root, WHITENOISE_USE_FINDERS=False):
        call_command("collectstatic", interactive=False, verbosity=0)
        whitenoise = StaticFilesMiddleware(get_response=lambda request: None)
        for url in static_urls:
            assert (root / urlsplit(url).path.removeprefix("/static/")).is_file(), url
            response = whitenoise(RequestFactory().get(url))
            assert response is not None and response.status_code == 200, url
