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

from typing import Any


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
