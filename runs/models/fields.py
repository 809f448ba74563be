"""Columns of text from outside — a model's answer and reasoning, a server's headers and error
bodies, a sandbox's output — which PostgreSQL must be able to store whatever they hold.

PostgreSQL's text and jsonb cannot hold U+0000, UTF-8 cannot carry a lone surrogate (JSON's
``\\ud800`` without its pair, which Python's json decodes into the string), and a name longer than
its column does not fit: a model or server that sent any of them made the call's close fail
(psycopg: "PostgreSQL text fields cannot contain NUL (0x00) bytes", "surrogates not allowed";
jsonb: "unsupported Unicode escape sequence"; "value too long"), and its cell and run with it.
These fields store U+FFFD (the replacement character) for U+0000 and surrogates, and
`StoredCharField` cuts a name to its column, on every write path (the ORM, bulk_create and
`runs.ledger.bulk_sql`, which prepare values through the field). The exact bytes stay in the
call's evidence (bytea). Everything else is the parent field's own behaviour.
"""

from __future__ import annotations

import json
import re
from typing import Any

from django.db import models

NUL = "\x00"
REPLACEMENT = "\ufffd"
# A \u0000 escape in JSON text: preceded by an even number of backslashes (each pair an escaped
# backslash), so that a literal backslash followed by "u0000" is left as it is.
_NUL_ESCAPE = re.compile(r"(?<!\\)((?:\\\\)*)\\u0000")
_SURROGATE = re.compile("[\ud800-\udfff]")


def storable(text: str) -> str:
    """The text with U+FFFD for each U+0000 and each surrogate code point."""
    if NUL in text:
        text = text.replace(NUL, REPLACEMENT)
    if not text.isascii() and _SURROGATE.search(text):
        text = _SURROGATE.sub(REPLACEMENT, text)
    return text


class StoredJSONEncoder(json.JSONEncoder):
    """json's encoder, with U+FFFD for U+0000 and for surrogate code points in any string (key
    or value). Characters past ASCII are written as themselves: the same JSON value, and a
    surrogate code point is then a character of the text rather than an escape that could be
    half of a valid pair."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs["ensure_ascii"] = False
        super().__init__(**kwargs)

    def encode(self, o: Any) -> str:
        text = super().encode(o)
        # json always writes U+0000 as the escape \u0000, so a text without one holds none.
        if "\\u0000" in text:
            text = _NUL_ESCAPE.sub(r"\1\\ufffd", text)
        if not text.isascii() and _SURROGATE.search(text):
            text = _SURROGATE.sub(REPLACEMENT, text)
        return text


class StoredTextField(models.TextField):
    """A TextField whose stored text has U+FFFD for U+0000."""

    def get_prep_value(self, value: Any) -> Any:
        value = super().get_prep_value(value)
        return storable(value) if isinstance(value, str) else value


class StoredCharField(models.CharField):
    """A CharField whose stored text has U+FFFD for U+0000, cut to the column's length: a name
    a server sends (a served model, a finish reason, a router's selected model) longer than the
    column made the write fail, and with it the call's close. The evidence keeps it whole."""

    def get_prep_value(self, value: Any) -> Any:
        value = super().get_prep_value(value)
        if not isinstance(value, str):
            return value
        value = storable(value)
        return value[: self.max_length] if self.max_length is not None else value


class StoredJSONField(models.JSONField):
    """A JSONField whose stored strings have U+FFFD for U+0000 (`StoredJSONEncoder`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("encoder", StoredJSONEncoder)
        super().__init__(*args, **kwargs)

    def deconstruct(self) -> Any:
        name, path, args, kwargs = super().deconstruct()
        if kwargs.get("encoder") is StoredJSONEncoder:
            del kwargs["encoder"]
        return name, path, args, kwargs
