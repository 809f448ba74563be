"""The one refusal vocabulary of every write endpoint (issue 36 item 2).

A service that refuses a request raises a :class:`Refusal` (or a subclass naming one kind of
refusal): it carries its HTTP status, a stable code, a one-line message and an optional
detail. The one DRF exception handler (``srbench.api.exception_handler``) renders every one of
them as the same document, ``{error, code, detail}``, with its status; the CLI shows that
document as one ``error:`` line (``srbench.api_client.api_error_message``). No view maps a
refusal by hand. This module imports nothing of Django or DRF: services at the bottom raise
refusals without depending on the API layer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import islice
from typing import Any

# What a refusal echoes of what a client sent, at most: a 422 naming each of 200,000 selected
# cells answered 6.7 MB (an outside probe). Every refusal that names a client's items or repeats
# a client's text goes through `echo_items` / `echo_text`, the one rule.
ECHO_MAX_ITEMS = 10
ECHO_MAX_CHARS = 100


class Refusal(Exception):
    """A request refused; nothing was written and no model was called.

    A subclass states its kind's ``http_status`` and ``code`` once; one raise may give its own
    (a family of refusals with many codes, e.g. a recovery's). ``detail`` is a JSON value a
    client may act on (the conflicting run, the differences), or None."""

    http_status: int = 400
    code: str = "refused"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        http_status: int | None = None,
        detail: Any = None,
    ) -> None:
        self.message = message
        if code is not None:
            self.code = code
        if http_status is not None:
            self.http_status = http_status
        self.detail = detail
        super().__init__(message)

    def document(self) -> dict[str, Any]:
        """The error document every endpoint answers with (DESIGN §9): one line of text."""
        return {"error": " ".join(self.message.split()), "code": self.code, "detail": self.detail}


def echo_items(items: Mapping[Any, Any] | Sequence[Any]) -> dict[str, Any]:
    """What a refusal's detail says of many items a client sent (ids, cells with their reasons):
    how many (``count``), the first ``ECHO_MAX_ITEMS`` of them in the order given (``first``: a
    mapping's first entries, a sequence's first items) and how many were left out
    (``omitted``) — never all of them, whatever their number."""
    if isinstance(items, Mapping):
        first: Any = dict(islice(items.items(), ECHO_MAX_ITEMS))
    else:
        first = list(islice(items, ECHO_MAX_ITEMS))
    return {"count": len(items), "first": first, "omitted": len(items) - len(first)}


def echo_text(value: object) -> object:
    """A client's value repeated in a refusal: a number, boolean or null as it is, a string cut
    to ``ECHO_MAX_CHARS`` characters (saying how long it was), anything else by its JSON type
    only."""
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        if len(value) <= ECHO_MAX_CHARS:
            return value
        return f"{value[:ECHO_MAX_CHARS]}… ({len(value)} characters)"
    return f"(a JSON {'object' if isinstance(value, Mapping) else 'array'})"
