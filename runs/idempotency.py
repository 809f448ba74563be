"""The one rule for an Idempotency-Key's length, for every entry point that takes one (creating
a run, a re-judge, a recovery): at most what the columns that store it hold —
``Run.idempotency_key`` (a created run, a re-judge child) and ``RecoveryRequest.idempotency_key``
(a recovery) — so a longer key is refused as a 400, never a database error. Each entry point
keeps its own refusal (error class, code, wording); the limit and the test are read here."""

from __future__ import annotations

from runs.models import RecoveryRequest, Run


def _column_length(model: type[Run] | type[RecoveryRequest]) -> int:
    length = model._meta.get_field("idempotency_key").max_length
    if length is None:  # a column without a limit cannot decide one
        raise TypeError(f"{model.__name__}.idempotency_key has no max_length")
    return length


IDEMPOTENCY_KEY_MAX = min(_column_length(Run), _column_length(RecoveryRequest))


def idempotency_key_too_long(key: str) -> str | None:
    """Why `key` cannot be stored — it is longer than the columns hold — or None if it fits."""
    if len(key) > IDEMPOTENCY_KEY_MAX:
        return f"the idempotency key is too long (≤ {IDEMPOTENCY_KEY_MAX})"
    return None
