"""Call evidence at rest (issue 38 item 5): what is stored reads back as the identical bytes,
whatever a server sent, and rows written before the codec column existed still read."""

from __future__ import annotations

import random
import zlib

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from runs.models import CallEvidence
from runs.models.evidence import (
    EvidenceCodec,
    EvidenceUnreadable,
    evidence_decode,
    evidence_fields,
    evidence_raw,
)
from srbench.canonical import sha256_bytes
from tests import factories as f


def sse_stream(chunks: int) -> bytes:
    head = '{"id":"c1","object":"chat.completion.chunk","model":"m","choices":[{"index":0,'
    body = "".join(
        f'data: {head}"delta":{{"content":" step{i % 7}"}}}}]}}\n\n' for i in range(chunks)
    )
    return (body + "data: [DONE]\n\n").encode()


HOSTILE = {
    "sse, 50 chunks": sse_stream(50),
    "empty": b"",
    "every byte value, NULs, invalid UTF-8": bytes(range(256)) * 64 + b"\x00\xff\xfe\xc3\x28",
    "random (incompressible)": random.Random(1).randbytes(65_536),
    "zlib stream itself": zlib.compress(sse_stream(200)),
    "huge (8 MiB: SSE then random)": sse_stream(20_000) + random.Random(2).randbytes(6 << 20),
}


@pytest.mark.django_db
@pytest.mark.parametrize("label", list(HOSTILE))
def test_evidence_reads_back_identical_bytes(label):
    raw = HOSTILE[label]
    call = f.call_create(status="completed")
    CallEvidence.objects.create(call=call, **evidence_fields(raw))
    stored = CallEvidence.objects.get(call=call)
    assert evidence_raw(stored) == raw
    assert stored.raw_size == len(raw) and stored.sha256 == sha256_bytes(raw)
    # Never larger than what came: what zlib does not shrink is kept as it came.
    assert len(bytes(stored.body)) <= len(raw)
    expected = EvidenceCodec.ZLIB if len(zlib.compress(raw, 6)) < len(raw) else "identity"
    assert stored.codec == expected


def test_a_50_chunk_call_is_stored_compressed():
    raw = HOSTILE["sse, 50 chunks"]
    codec, body = evidence_fields(raw)["codec"], evidence_fields(raw)["body"]
    assert codec == EvidenceCodec.ZLIB and len(body) * 5 < len(raw)


def test_unreadable_evidence_is_named_not_guessed():
    with pytest.raises(EvidenceUnreadable, match="does not decompress"):
        evidence_decode(EvidenceCodec.ZLIB, b"not zlib")
    with pytest.raises(EvidenceUnreadable, match="not one this code reads"):
        evidence_decode("brotli", zlib.compress(b"x"))


@pytest.mark.django_db(transaction=True)
def test_rows_written_before_the_codec_column_read_back():
    """A row as the engine wrote it before migration 0019 (zlib, no codec column) reads back
    identical after the migration: its default names it zlib without rewriting it."""
    call = f.call_create(status="completed")
    raw = HOSTILE["sse, 50 chunks"] + HOSTILE["every byte value, NULs, invalid UTF-8"]
    executor = MigrationExecutor(connection)
    before = [("runs", "0018_target_api_call_reasoning")]
    # Every app's latest state, not only runs': going back to runs 0018 also unapplies the
    # migrations of other apps that depend on a later runs migration (compare 0005's tables).
    latest = executor.loader.graph.leaf_nodes()
    executor.migrate(before)
    try:
        with connection.cursor() as cur:
            cur.execute(
                "INSERT INTO runs_callevidence (call_id, body, raw_size, sha256, created_at) "
                "VALUES (%s, %s, %s, %s, now())",
                [call.pk, zlib.compress(raw, 6), len(raw), sha256_bytes(raw)],
            )
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(latest)
    stored = CallEvidence.objects.get(call=call)
    assert stored.codec == EvidenceCodec.ZLIB
    assert evidence_raw(stored) == raw


@pytest.mark.django_db(transaction=True)
def test_a_writer_from_before_the_codec_column_is_stored_as_zlib():
    """A worker still on the code before migration 0019 (a rolling upgrade) inserts its zlib
    evidence without naming a codec, after the migration ran: the database's own default names
    it zlib, so the row is stored (not refused as NOT NULL) and reads back identical."""
    call = f.call_create(status="completed")
    raw = HOSTILE["sse, 50 chunks"]
    with connection.cursor() as cur:
        cur.execute(
            "INSERT INTO runs_callevidence (call_id, body, raw_size, sha256, created_at) "
            "VALUES (%s, %s, %s, %s, now())",
            [call.pk, zlib.compress(raw, 6), len(raw), sha256_bytes(raw)],
        )
    stored = CallEvidence.objects.get(call=call)
    assert stored.codec == EvidenceCodec.ZLIB
    assert evidence_raw(stored) == raw
