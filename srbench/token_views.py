"""The portal's API tokens page (issue 40 item 5): create, see, revoke.

A new token's secret is on the page that answers its creation and nowhere else (not in a
session, a message or a log: the database has its digest only); the page is not cached.
Staff see and revoke everyone's tokens.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.cache import add_never_cache_headers
from django.views.decorators.http import require_http_methods, require_POST

from srbench.tokens import create_token, revoke_token, tokens_visible_to

NAME_MAX = 100


def _page(request: HttpRequest, **context: Any) -> HttpResponse:
    tokens = tokens_visible_to(request.user)
    status = context.pop("status", 200)
    response = render(
        request,
        "srbench/tokens.html",
        {
            "tokens": tokens,
            "staff": request.user.is_staff,
            "server_url": request.build_absolute_uri("/").rstrip("/"),
            "name_max": NAME_MAX,
            **context,
        },
        status=status,
    )
    add_never_cache_headers(response)
    return response


@require_http_methods(["GET", "POST"])
def token_list(request: HttpRequest) -> HttpResponse:
    """GET: the member's tokens (everyone's for staff). POST `name`: a new token, shown once."""
    if request.method == "GET":
        return _page(request)
    name = " ".join(request.POST.get("name", "").split())
    if not name or len(name) > NAME_MAX:
        return _page(
            request,
            name_error=f"Give the token a name of 1 to {NAME_MAX} characters.",
            status=400,
        )
    token, secret = create_token(request.user, name)
    return _page(request, created=token, secret=secret, status=201)


@require_POST
def token_revoke(request: HttpRequest, pk: int) -> HttpResponse:
    """Revoke one token: the member's own, or anyone's for staff."""
    token = get_object_or_404(tokens_visible_to(request.user), pk=pk)
    if revoke_token(token, request.user):
        messages.success(request, f"Revoked the token “{token.name}” ({token.prefix}…).")
    else:
        messages.info(request, f"The token “{token.name}” was already revoked.")
    return redirect("tokens")
