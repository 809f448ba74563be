"""The one Idempotency-Key of every write that creates a run (issue 36 item 2): a new run, a
re-judge child, a recovery child.

- :meth:`IdempotencyKey.of_request` reads it (the ``Idempotency-Key`` header, else the body's
  ``idempotency_key`` where the body takes one) and :meth:`IdempotencyKey.parse` checks it: a
  blank key is no key; a key that is not a string, is longer than the columns that store it
  (``Run.idempotency_key``, ``RecoveryRequest.idempotency_key``) or holds NUL / invalid
  Unicode (a header bypasses the body parser's checks) is one refusal,
  :class:`InvalidIdempotencyKey` — a 400, never a database error.
- :meth:`IdempotencyKey.replay` is the one reader of those columns: the row this key already
  made in its scope (an owner's runs, a parent's recoveries), when the request is the same;
  :class:`IdempotencyKeyReused` (422) when the key made something else.
- :func:`replay_response` is the one answer of a write that may be a replay: the new thing's
  status, or on a replay the replay status and the ``Idempotent-Replayed: true`` header.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from django.db.models import Model, QuerySet
from rest_framework.response import Response

from runs.models import RecoveryRequest, Run
from srbench.json_values import json_value_problem
from srbench.refusals import Refusal

IDEMPOTENCY_HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
BODY_FIELD = "idempotency_key"


def _column_length(model: type[Run] | type[RecoveryRequest]) -> int:
    length = model._meta.get_field("idempotency_key").max_length
    if length is None:  # a column without a limit cannot decide one
        raise TypeError(f"{model.__name__}.idempotency_key has no max_length")
    return length


IDEMPOTENCY_KEY_MAX = min(_column_length(Run), _column_length(RecoveryRequest))

Row = TypeVar("Row", bound=Model)


class InvalidIdempotencyKey(Refusal):
    """A key that cannot be stored: not a string, too long, NUL or invalid Unicode."""

    http_status = 400
    code = "invalid_idempotency_key"

    def __init__(self) -> None:
        super().__init__(
            f"the idempotency key must be a string of at most {IDEMPOTENCY_KEY_MAX} "
            "characters, valid Unicode without NUL",
            detail={"max_length": IDEMPOTENCY_KEY_MAX},
        )


class IdempotencyKeyReused(Refusal):
    """The key already made something else; ``run`` is the run it made (for a recovery, the
    child), which a page may name."""

    http_status = 422
    code = "idempotency_key_reused"

    def __init__(self, message: str, *, run: Run | None, detail: dict[str, Any]) -> None:
        self.run = run
        super().__init__(message, detail=detail)


@dataclass(frozen=True, slots=True)
class IdempotencyKey:
    value: str

    @classmethod
    def parse(cls, raw: object) -> IdempotencyKey | None:
        """The key, or None when there is none (absent or blank); InvalidIdempotencyKey for
        one that cannot be stored."""
        if raw is None or (isinstance(raw, str) and not raw.strip()):
            return None
        if not isinstance(raw, str) or len(raw) > IDEMPOTENCY_KEY_MAX or json_value_problem(raw):
            raise InvalidIdempotencyKey()
        return cls(raw)

    @classmethod
    def of_request(cls, headers: Mapping[str, str], body: object = None) -> IdempotencyKey | None:
        """The request's key: the header wins; else ``idempotency_key`` of a body that takes
        one (pass the body only then)."""
        raw: object = headers.get(IDEMPOTENCY_HEADER)
        if raw in (None, "") and isinstance(body, Mapping):
            raw = body.get(BODY_FIELD)
        return cls.parse(raw)

    def made(self, scope: QuerySet[Row]) -> Row | None:
        """The row this key already made within ``scope``, or None."""
        return scope.filter(idempotency_key=self.value).first()

    def replay(
        self,
        scope: QuerySet[Row],
        *,
        same: Callable[[Row], bool],
        reused: Callable[[Row], IdempotencyKeyReused],
    ) -> Row | None:
        """The row this key already made within ``scope`` when ``same`` says the request is
        the one that made it (the answer to a lost response: nothing is made or sent again);
        ``reused(row)`` raised when it is not; None when the key is new here."""
        existing = self.made(scope)
        if existing is None:
            return None
        if not same(existing):
            raise reused(existing)
        return existing


def key_value(key: IdempotencyKey | None) -> str | None:
    """What a column stores for a key: its text, or NULL for none."""
    return None if key is None else key.value


def replay_response(
    body: Any, *, created: bool, created_status: int = 201, replay_status: int = 200
) -> Response:
    """The answer of a write that may replay: ``created_status`` when it made something now,
    else ``replay_status`` and ``Idempotent-Replayed: true`` (run creation, recovery and
    re-judge answer through here)."""
    response = Response(body, status=created_status if created else replay_status)
    if not created:
        response[REPLAYED_HEADER] = "true"
    return response
