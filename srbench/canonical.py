"""Canonical JSON and its hash: the one way this project fingerprints plans, datasets and evidence."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(obj: Any) -> bytes:
    """Sorted keys, no whitespace, UTF-8 without escaping: the same value gives the same bytes
    on every machine, so its hash can sit behind an idempotency key or a dataset identity."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode(
        "utf-8"
    )


def sha256_hex(obj: Any) -> str:
    return hashlib.sha256(canonical_json(obj)).hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
