"""Services of the runs app (`<entity>_<verb>`, keyword-only; each write is one durable
transaction). Interfaces (admin, API, CLI, tasks) call these, never the ORM directly for writes."""

from __future__ import annotations

import os

from django.db import transaction

from runs.models import Target, TargetSecret
from srbench.secrets import decrypt_secret, encrypt_secret


def target_set_api_key(*, target: Target, api_key: str) -> None:
    """Store (or replace) a target's API key, encrypted. An empty key removes the stored one."""
    with transaction.atomic():
        if api_key:
            TargetSecret.objects.update_or_create(
                target=target, defaults={"api_key_encrypted": encrypt_secret(api_key)}
            )
        else:
            TargetSecret.objects.filter(target=target).delete()


def target_api_key(*, target: Target) -> str | None:
    """The key to send, for the engine only: a stored key wins, else the named env variable."""
    secret = TargetSecret.objects.filter(target=target).first()
    if secret is not None:
        return decrypt_secret(secret.api_key_encrypted)
    if target.api_key_env:
        return os.environ.get(target.api_key_env)
    return None
