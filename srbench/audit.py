"""The audit trail (issue 40 item 4): one row for every write a person makes.

One place records them, whatever endpoint was used: :class:`AuditMiddleware` wraps every
request. A request is a write when its method changes things (POST, PUT, PATCH, DELETE) and the
database saw it insert, update or delete rows of a table other than the bookkeeping ones
(sessions, login attempts, the trail itself); an export or download (GET) is recorded too, as
data leaving the portal. Refused requests (4xx/5xx) wrote nothing and leave no row; a replayed
idempotent request that wrote nothing leaves none either. So the API, the portal's forms, the
admin (target and price changes, with the admin's own change message) and the in-process CLI
are all covered, and a new endpoint is covered without touching it.

Rows are append-only: the database refuses UPDATE and DELETE (srbench/dbguards.py).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from django.db import connection
from django.http import HttpRequest, HttpResponse

from srbench.models import PREFIX_LENGTH, SECRET_PREFIX, AuditEvent
from srbench.security import client_address

log = logging.getLogger(__name__)

MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# Tables whose writes are bookkeeping of a request, not a change a person made.
BOOKKEEPING_TABLES = frozenset(
    {
        "django_session",
        "srbench_auditevent",
        "axes_accessattempt",
        "axes_accessattemptexpiration",
        "axes_accesslog",
        "axes_accessfailurelog",
    }
)
# Signing in and out writes sessions and last_login: recorded by django-axes, not here.
NOT_WRITES = frozenset({"login", "logout", "admin:login", "admin:logout"})
WRITE_SQL = re.compile(r'^\s*(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+"?([A-Za-z0-9_]+)', re.I)
_unaudited: ContextVar[bool] = ContextVar("srbench_unaudited", default=False)


@contextmanager
def unaudited() -> Iterator[None]:
    """Writes in this block are bookkeeping (a token's last use), not a person's change."""
    token = _unaudited.set(True)
    try:
        yield
    finally:
        _unaudited.reset(token)


class WriteObserver:
    """A database execute wrapper noting the tables a request wrote."""

    def __init__(self) -> None:
        self.tables: set[str] = set()

    def __call__(self, execute: Callable[..., Any], sql: str, params: Any, many: bool, ctx: Any):  # type: ignore[no-untyped-def]
        match = WRITE_SQL.match(sql) if isinstance(sql, str) else None
        if match and not _unaudited.get():
            table = match.group(1).lower()
            if table not in BOOKKEEPING_TABLES:
                self.tables.add(table)
        return execute(sql, params, many, ctx)


def is_export(view_name: str) -> bool:
    name = view_name.rsplit(":", 1)[-1]
    return "export" in name or "download" in name


def _user(request: HttpRequest) -> Any:
    user = getattr(request, "user", None)
    return user if user is not None and user.is_authenticated else None


def should_record(request: HttpRequest, response: HttpResponse, tables: set[str]) -> bool:
    if _user(request) is None or response.status_code >= 400:
        return False
    match = request.resolver_match
    view_name = match.view_name if match else ""
    if view_name in NOT_WRITES:
        return False
    if request.method in MUTATING:
        return bool(tables)
    return request.method == "GET" and is_export(view_name)


def via(request: HttpRequest) -> tuple[str, dict[str, Any]]:
    """How the person came in: a token (with its prefix), the admin, the portal, the CLI."""
    if getattr(request, "_force_auth_user", None) is not None:
        return "cli", {}
    header = request.META.get("HTTP_AUTHORIZATION", "").split()
    if len(header) == 2 and header[0].lower() == "token":
        secret = header[1]
        prefix = secret[:PREFIX_LENGTH] if secret.startswith(SECRET_PREFIX) else "legacy"
        return "token", {"token": prefix}
    if request.path_info.startswith("/admin/"):
        return "admin", {}
    return "session", {}


def admin_messages(user: Any, since: Any) -> list[str]:
    """The admin's own change messages of this request ("Changed price_in_per_mtok.")."""
    from django.contrib.admin.models import LogEntry

    entries = LogEntry.objects.filter(user_id=user.pk, action_time__gte=since).order_by("id")
    return [f"{entry.object_repr}: {entry.get_change_message() or entry}" for entry in entries]


def record(
    request: HttpRequest, response: HttpResponse, tables: set[str], started: Any
) -> AuditEvent:
    user = _user(request)
    match = request.resolver_match
    kind, detail = via(request)
    if tables:
        detail["tables"] = sorted(tables)
    if "django_admin_log" in tables:
        detail["admin"] = admin_messages(user, started)
    target = ", ".join(f"{k}={v}" for k, v in sorted((match.kwargs if match else {}).items()))
    return AuditEvent.objects.create(
        actor_id=user.pk,
        actor=user.get_username(),
        action=(match.view_name if match else "") or request.path_info,
        method=request.method or "",
        path=request.path[:500],
        query=request.META.get("QUERY_STRING", "")[:500],
        target=target[:200],
        status_code=response.status_code,
        via=kind,
        address=client_address(request),
        user_agent=request.META.get("HTTP_USER_AGENT", "")[:300],
        detail=detail,
    )


class AuditMiddleware:
    """Records the request as one AuditEvent when it was a person's write (see the module)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        from django.utils import timezone

        observer = WriteObserver()
        started = timezone.now()
        with connection.execute_wrapper(observer):
            response = self.get_response(request)
        if should_record(request, response, observer.tables):
            try:
                record(request, response, observer.tables, started)
            except Exception:  # the write itself is done; never turn it into an error page
                log.exception("audit: could not record %s %s", request.method, request.path)
        return response
