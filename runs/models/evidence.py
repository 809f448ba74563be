"""A call's evidence at rest: the one home of how its raw bytes are encoded and read back
(issue 38 item 5).

The engine keeps every byte a server sent for a call (CallEvidence): usage is rebuilt from
them (runs.reporting.reconcile) and tests compare them with what the server sent. Each row names its
codec; rows written before the codec column existed are zlib, which the migration's default
records, so they read back unchanged. The codec was chosen by measurement (bench/million.py
prints the comparison; docs/performance.md records it): zlib at level 6 keeps the
simulator's 50-chunk call (17,560 bytes of SSE) in about 500 bytes and a stream of varied
text in a fifth of its size; zstd saved a few per cent more for a new dependency, lzma cost
ten times the CPU. Bytes that zlib does not make smaller (already compressed or random — a
server's output is hostile input) are kept as they came (`identity`), never larger.
"""

from __future__ import annotations

import zlib
from typing import Any

from django.db import models

from srbench.canonical import sha256_bytes

ZLIB_LEVEL = 6


class EvidenceCodec(models.TextChoices):
    """How a call's evidence bytes are kept at rest."""

    ZLIB = "zlib"
    IDENTITY = "identity"  # kept as received: what zlib did not make smaller


CODECS = tuple(EvidenceCodec.values)


class EvidenceUnreadable(ValueError):
    """Stored evidence that does not decode with its codec."""


def evidence_encode(raw: bytes) -> tuple[str, bytes]:
    """(codec, body) for raw bytes: zlib, or the bytes themselves where zlib is not smaller."""
    packed = zlib.compress(raw, ZLIB_LEVEL)
    if len(packed) < len(raw):
        return EvidenceCodec.ZLIB.value, packed
    return EvidenceCodec.IDENTITY.value, bytes(raw)


def evidence_fields(raw: bytes) -> dict[str, Any]:
    """The columns of a CallEvidence row for these raw bytes (without its call)."""
    codec, body = evidence_encode(raw)
    return {"codec": codec, "body": body, "raw_size": len(raw), "sha256": sha256_bytes(raw)}


def evidence_decode(codec: str, body: bytes | memoryview) -> bytes:
    """The raw bytes a stored body holds; EvidenceUnreadable when its codec cannot read it."""
    data = bytes(body)
    if codec == EvidenceCodec.ZLIB:
        try:
            return zlib.decompress(data)
        except zlib.error as exc:
            raise EvidenceUnreadable(f"evidence does not decompress: {exc}") from exc
    if codec == EvidenceCodec.IDENTITY:
        return data
    raise EvidenceUnreadable(f"evidence codec {codec!r} is not one this code reads")


def evidence_raw(evidence: Any) -> bytes:
    """The raw bytes of a CallEvidence row."""
    return evidence_decode(evidence.codec, evidence.body)
