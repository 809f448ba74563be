"""The portal's API tokens page (issue 40 item 5): create, see, revoke.

Creating a token answers with a redirect to the list (POST/redirect/GET), so reloading the page
that shows the secret re-submits nothing and makes no second token. The secret rides in the
session from the POST to that one GET, which pops it: it is shown once, never logged or put in a
message, and the database keeps its digest only. The page is not cached. Staff see and revoke
everyone's tokens.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.cache import add_never_cache_headers
from django.views.decorators.http import require_http_methods, require_POST

from srbench.tokens import (
    command_line_tokens_visible_to,
    create_token,
    revoke_command_line_token,
    revoke_token,
    tokens_visible_to,
)

NAME_MAX = 100
# The characters of a `drf_create_token` key the list shows (its key is 40 hex digits).
COMMAND_LINE_PREFIX = 8
# The session key holding a new token's id and secret between its POST and the one GET showing it.
NEW_TOKEN_SESSION_KEY = "srbench_new_token"


def _page(request: HttpRequest, **context: Any) -> HttpResponse:
    tokens = tokens_visible_to(request.user)
    status = context.pop("status", 200)
    response = render(
        request,
        "srbench/tokens.html",
        {
            "tokens": tokens,
            "command_line_tokens": [
                # The key is the secret: the template gets its first characters only.
                {"user": t.user, "prefix": t.key[:COMMAND_LINE_PREFIX], "created": t.created}
                for t in command_line_tokens_visible_to(request.user)
            ],
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
        return _page(request, **_new_token_once(request))
    name = " ".join(request.POST.get("name", "").split())
    if not name or len(name) > NAME_MAX:
        return _page(
            request,
            name_error=f"Give the token a name of 1 to {NAME_MAX} characters.",
            status=400,
        )
    if "\x00" in name:
        # PostgreSQL keeps no NUL in a text field: refused here, not a 500 at the insert.
        return _page(
            request,
            name_error="A token name may not hold a NUL character (\\u0000).",
            status=400,
        )
    token, secret = create_token(request.user, name)
    request.session[NEW_TOKEN_SESSION_KEY] = {"id": token.pk, "secret": secret}
    return HttpResponseRedirect(reverse("tokens"), status=303)  # See Other: GET the list


def _new_token_once(request: HttpRequest) -> dict[str, Any]:
    """The token just created and its secret, taken out of the session: shown by this GET only."""
    new = request.session.pop(NEW_TOKEN_SESSION_KEY, None)
    if not new:
        return {}
    token = tokens_visible_to(request.user).filter(pk=new["id"]).first()
    return {} if token is None else {"created": token, "secret": new["secret"]}


@require_POST
def token_revoke(request: HttpRequest, pk: int) -> HttpResponse:
    """Revoke one token: the member's own, or anyone's for staff."""
    token = get_object_or_404(tokens_visible_to(request.user), pk=pk)
    if revoke_token(token, request.user):
        messages.success(request, f"Revoked the token “{token.name}” ({token.prefix}…).")
    else:
        messages.info(request, f"The token “{token.name}” was already revoked.")
    return redirect("tokens")


@require_POST
def command_line_token_revoke(request: HttpRequest, user_id: int) -> HttpResponse:
    """Revoke the `drf_create_token` token of one account (one per account): the member's own,
    or anyone's for staff. Addressed by its account, never by the key, which is the secret."""
    token = get_object_or_404(command_line_tokens_visible_to(request.user), user_id=user_id)
    shown = f"{token.user.get_username()} ({token.key[:COMMAND_LINE_PREFIX]}…)"
    revoke_command_line_token(token)
    messages.success(
        request,
        f"Revoked the command-line token of {shown}; make a new one here if a script needs one.",
    )
    return redirect("tokens")
