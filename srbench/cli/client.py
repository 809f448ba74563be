"""The API client behind `manage.py benchmark`: one code path for local and remote use.

With `--url` (or SRBENCH_URL) it talks HTTP to a server with a token; without, it calls the
same API in-process through httpx's WSGI transport, authenticated as a local user.
"""

from __future__ import annotations

import json
import os
from typing import Any

import httpx


class CliError(Exception):
    """A failure to show the user in one line; the command exits non-zero."""


LOCAL_ACCOUNT = "srbench-local"


def _local_user(username: str | None) -> Any:
    """Who an in-process command acts as: the named user; else the only operator; else, on
    an installation with no operator account yet (a fresh machine, a script), the local
    system account, created on demand with an unusable password so it can never log in."""
    from django.contrib.auth import get_user_model

    users = get_user_model().objects.filter(is_active=True)
    if username:
        user = users.filter(username=username).first()
        if user is None:
            raise CliError(f"no active user {username!r} (create one, or pass --user)")
        return user
    staff = list(users.filter(is_staff=True).exclude(username=LOCAL_ACCOUNT)[:2])
    if len(staff) == 1:
        return staff[0]
    if staff:
        raise CliError(
            "say which user runs this command: --user NAME or SRBENCH_USER "
            "(several operator accounts found)"
        )
    user, created = get_user_model().objects.get_or_create(
        username=LOCAL_ACCOUNT, defaults={"is_staff": True}
    )
    if created:
        user.set_unusable_password()
        user.save(update_fields=["password"])
    return user


def _in_process_app(user: Any) -> Any:
    """The project's WSGI application, authenticating every request as `user` the way DRF's
    test tools force authentication: no token is written for a local command.

    The request signals normally close the database connection around each request; in
    process the connection is the command's own (possibly inside a transaction), so the
    call keeps it, as Django's test client does."""
    from django.core import signals
    from django.core.handlers.wsgi import WSGIHandler
    from django.db import close_old_connections

    class InProcessHandler(WSGIHandler):
        def get_response(self, request: Any) -> Any:
            request._force_auth_user = user
            return super().get_response(request)

        def __call__(self, environ: Any, start_response: Any) -> Any:
            signals.request_started.disconnect(close_old_connections)
            signals.request_finished.disconnect(close_old_connections)
            try:
                response = super().__call__(environ, start_response)
                try:
                    body = b"".join(response)
                finally:
                    response.close()
            finally:
                signals.request_started.connect(close_old_connections)
                signals.request_finished.connect(close_old_connections)
            return [body]

    return InProcessHandler()


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
            self.http.headers["Authorization"] = f"Token {token}"
        else:
            import logging

            # In-process, a 4xx is the CLI's own answer to show in one line, not a server log.
            logging.getLogger("django.request").setLevel(logging.ERROR)
            app = _in_process_app(_local_user(user or os.environ.get("SRBENCH_USER")))
            self.http = httpx.Client(
                transport=httpx.WSGITransport(app=app),
                base_url="http://localhost/api/v1/",
                timeout=timeout,
            )

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


def api_error_message(response: httpx.Response) -> str:
    """The API's own one-line message (`error`), with the conflicts or differences a refusal
    lists in its detail; whitespace folded so it stays one greppable line."""
    try:
        body = response.json()
    except ValueError:
        return f"HTTP {response.status_code}: {response.text[:300]}"
    if not isinstance(body, dict) or "error" not in body:
        return f"HTTP {response.status_code}: {body}"
    message = str(body["error"])
    detail = body.get("detail")
    if isinstance(detail, dict) and isinstance(detail.get("conflicts"), list):
        message = "conflict: " + " | ".join(str(c.get("detail")) for c in detail["conflicts"])
    elif body.get("code") == "invalid" and detail:
        message = f"{message} {json.dumps(detail)}"
    return " ".join(message.split())


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
