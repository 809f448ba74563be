"""Canonical JSON and its hash: the one way this project fingerprints plans, datasets and evidence;
and JSON text any UTF-8 wire can carry, whatever strings a value holds."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
_CANONICAL = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), sort_keys=True)
_SURROGATE = re.compile("[\ud800-\udfff]")


def _escaped(text: str) -> str:
    # A lone surrogate (JSON text from outside may hold one as \udXXX, and json.loads keeps
    # it) goes out as that escape again: UTF-8 cannot carry it as a character.
    if text.isascii() or not _SURROGATE.search(text):
        return text
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def json_text(value: Any) -> str:
    """Compact JSON, non-ASCII as itself, a lone surrogate as its JSON escape: what a model or
    server sent comes back out as it came, and the text always encodes to UTF-8."""
    return _escaped(_COMPACT.encode(value))


def canonical_json(obj: Any) -> bytes:
    """Sorted keys, no whitespace, UTF-8 without escaping (but for a lone surrogate, as in
    `json_text`): the same value gives the same bytes on every machine, so its hash can sit
    behind an idempotency key or a dataset identity."""
    return _escaped(_CANONICAL.encode(obj)).encode("utf-8")


def sha256_hex(obj: Any) -> str:
    return hashlib.sha256(canonical_json(obj)).hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
