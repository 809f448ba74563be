"""Encryption at rest for stored API keys.

The key is derived from SECRET_KEY, so a database dump alone does not reveal target keys.
Rotating SECRET_KEY makes stored keys unreadable: operators re-enter them (documented).
"""

from __future__ import annotations

import base64
import hashlib

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings


def _fernet() -> Fernet:
    digest = hashlib.sha256(b"srbench-target-secret:" + settings.SECRET_KEY.encode()).digest()
    return Fernet(base64.urlsafe_b64encode(digest))


def encrypt_secret(plaintext: str) -> bytes:
    return _fernet().encrypt(plaintext.encode("utf-8"))


def decrypt_secret(token: bytes) -> str | None:
    """None when the key cannot be read (e.g. SECRET_KEY rotated): the caller reports it."""
    try:
        return _fernet().decrypt(bytes(token)).decode("utf-8")
    except InvalidToken:
        return None
