"""The API client behind `manage.py benchmark`: one code path for local and remote use.

With `--url` (or SRBENCH_URL) it talks HTTP to a server with a token; without, it calls the
same API in-process through httpx's WSGI transport, authenticated as a local user's token.
"""

from __future__ import annotations

import os
from typing import Any

import httpx


class CliError(Exception):
    """A failure to show the user in one line; the command exits non-zero."""


def _local_token(username: str | None) -> str:
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    users = get_user_model().objects.filter(is_active=True)
    if username:
        user = users.filter(username=username).first()
        if user is None:
            raise CliError(f"no active user {username!r} (create one, or pass --user)")
    else:
        staff = list(users.filter(is_staff=True)[:2])
        if len(staff) != 1:
            raise CliError(
                "say which user runs this command: --user NAME or SRBENCH_USER "
                f"({len(staff)} operator accounts found)"
            )
        user = staff[0]
    token, _ = Token.objects.get_or_create(user=user)
    return token.key


class ApiClient:
    def __init__(
        self,
        *,
        url: str | None = None,
        token: str | None = None,
        user: str | None = None,
        timeout: float = 60.0,
    ) -> None:
        url = url or os.environ.get("SRBENCH_URL")
        token = token or os.environ.get("SRBENCH_TOKEN")
        if url:
            if not token:
                raise CliError("a remote --url needs --token or SRBENCH_TOKEN")
            self.http = httpx.Client(base_url=url.rstrip("/") + "/api/v1/", timeout=timeout)
        else:
            import logging

            from django.core.wsgi import get_wsgi_application

            app = get_wsgi_application()  # (re)configures logging, so adjust levels after it
            # In-process, a 4xx is the CLI's own answer to show in one line, not a server log.
            logging.getLogger("django.request").setLevel(logging.ERROR)
            token = _local_token(user or os.environ.get("SRBENCH_USER"))
            self.http = httpx.Client(
                transport=httpx.WSGITransport(app=app),
                base_url="http://localhost/api/v1/",
                timeout=timeout,
            )
        self.http.headers["Authorization"] = f"Token {token}"

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            return self.http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise CliError(f"cannot reach the srbench API: {exc}") from exc

    def json(
        self, method: str, path: str, *, ok: tuple[int, ...] = (200, 201), **kwargs: Any
    ) -> Any:
        response = self.request(method, path, **kwargs)
        if response.status_code not in ok:
            raise CliError(api_error_text(response))
        return response.json()


def api_error_text(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return f"HTTP {response.status_code}: {response.text[:300]}"
    if isinstance(body, dict) and "error" in body:
        detail = body.get("detail")
        return f"{body['error']} ({body.get('code')})" + (f": {detail}" if detail else "")
    return f"HTTP {response.status_code}: {body}"


def add_connection_arguments(parser: Any) -> None:
    parser.add_argument("--url", help="srbench server (default: in-process, or SRBENCH_URL)")
    parser.add_argument("--token", help="API token for --url (or SRBENCH_TOKEN)")
    parser.add_argument("--user", help="local user for in-process use (or SRBENCH_USER)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def client_from(options: dict[str, Any]) -> ApiClient:
    return ApiClient(url=options.get("url"), token=options.get("token"), user=options.get("user"))
