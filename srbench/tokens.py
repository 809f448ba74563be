"""API tokens people manage (issue 40 item 5) and the API's token authentication.

A member creates named tokens on the portal's Tokens page, sees the secret once, then only its
prefix and when it was last used, and revokes it; staff revoke anyone's (here and in the admin).
The database keeps the secret's SHA-256 digest only. `Authorization: Token <secret>` is the
header, as before: the tokens of `manage.py drf_create_token` (DRF's authtoken) still work.

Every failed token is a failed sign-in for django-axes (srbench.security): past the limit from
one address within the cool-off, even a valid token is refused with 429 until it ends.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta
from typing import Any

from axes.handlers.proxy import AxesProxyHandler  # type: ignore[import-untyped]
from axes.helpers import get_credentials  # type: ignore[import-untyped]
from django.contrib.auth.signals import user_login_failed
from django.utils import timezone
from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication, get_authorization_header
from rest_framework.authtoken.models import Token

from srbench.audit import unaudited
from srbench.models import PREFIX_LENGTH, SECRET_PREFIX, ApiToken
from srbench.security import cool_off_seconds, lockout_message

# last_used_at is written at most this often per token: not a write on every API request.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def create_token(user: Any, name: str) -> tuple[ApiToken, str]:
    """A new token of `user` and its secret (the only time the secret exists in clear)."""
    secret = SECRET_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        user=user, name=name.strip()[:100], prefix=secret[:PREFIX_LENGTH], digest=digest(secret)
    )
    return token, secret


def revoke_token(token: ApiToken, by: Any) -> bool:
    """Revoke once; False when it was already revoked (nothing changes then)."""
    changed = ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(
        revoked_at=timezone.now(), revoked_by=by
    )
    token.refresh_from_db()
    return bool(changed)


def tokens_visible_to(user: Any) -> Any:
    """A member's own tokens; staff see everyone's."""
    tokens = ApiToken.objects.select_related("user", "revoked_by")
    return tokens if user.is_staff else tokens.filter(user=user)


def command_line_tokens_visible_to(user: Any) -> Any:
    """The tokens `manage.py drf_create_token` made (DRF's authtoken, one per account) that sign
    in as this member; staff see everyone's. They have no name, prefix column or last use."""
    tokens = Token.objects.select_related("user").order_by("-created")
    return tokens if user.is_staff else tokens.filter(user=user)


def revoke_command_line_token(token: Token) -> None:
    """DRF's authtoken has no revoked state: revoking deletes the row (the key stops working)."""
    token.delete()


def _touch(token: ApiToken) -> None:
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at >= LAST_USED_RESOLUTION:
        with unaudited():  # bookkeeping of a read, not a write the person made
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now


class LockedOut(exceptions.Throttled):
    default_detail = "Too many failed sign-in attempts."
    default_code = "locked_out"


class ApiTokenAuthentication(TokenAuthentication):
    """`Authorization: Token <secret>`: a portal token (by digest), else a legacy DRF token;
    failures recorded by django-axes and refused past its limit (429 with Retry-After)."""

    def authenticate(self, request: Any) -> tuple[Any, Any] | None:
        words = get_authorization_header(request).split()
        if not words or words[0].lower() != self.keyword.lower().encode():
            return None  # no token: nothing to throttle (the session or a 401 follows)
        django_request, credentials = request._request, get_credentials(None)
        if not AxesProxyHandler.is_allowed(django_request, credentials):
            raise self.locked_out(django_request)
        try:
            return super().authenticate(request)
        except exceptions.AuthenticationFailed:
            user_login_failed.send(
                sender=type(self), credentials=credentials, request=django_request
            )
            # Axes marks the request: the middleware answers it with its lockout response
            # (srbench.security.lockout_response) once the limit is reached.
            raise

    def locked_out(self, django_request: Any) -> LockedOut:
        # Not recorded as another failure: the lockout keeps its end (axes does the same).
        return LockedOut(detail=lockout_message(django_request), wait=cool_off_seconds())

    def authenticate_credentials(self, key: str) -> tuple[Any, Any]:
        token = ApiToken.objects.select_related("user").filter(digest=digest(key)).first()
        if token is None:
            return super().authenticate_credentials(key)  # DRF's authtoken, or "Invalid token."
        if token.revoked_at is not None:
            raise exceptions.AuthenticationFailed(
                f"This API token ({token.prefix}…, “{token.name}”) was revoked on "
                f"{token.revoked_at:%Y-%m-%d %H:%M} UTC; create a new one on the portal's "
                "API tokens page (/tokens/)."
            )
        if not token.user.is_active:
            raise exceptions.AuthenticationFailed("User inactive or deleted.")
        _touch(token)
        return token.user, token
