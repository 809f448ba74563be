"""Columns of text from outside — a model's answer and reasoning, a server's headers and error
bodies, a sandbox's output — which PostgreSQL must be able to store whatever they hold.

PostgreSQL's text and jsonb cannot hold U+0000: a model that streams ``\\u0000`` in its answer
made the call's close fail (psycopg: "PostgreSQL text fields cannot contain NUL (0x00) bytes";
jsonb: "unsupported Unicode escape sequence"), and its cell and run with it. These fields store
U+FFFD (the replacement character) in its place, on every write path (the ORM, bulk_create
and `runs.ledger.bulk_sql`, which prepare values through the field). The exact bytes stay in the
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


def without_nul(text: str) -> str:
    return text.replace(NUL, REPLACEMENT) if NUL in text else text


class StoredJSONEncoder(json.JSONEncoder):
    """json's encoder, with U+0000 in any string (key or value) encoded as U+FFFD."""

    def encode(self, o: Any) -> str:
        text = super().encode(o)
        # json always writes U+0000 as the escape \u0000, so a text without one holds none.
        return _NUL_ESCAPE.sub(r"\1\\ufffd", text) if "\\u0000" in text else text


class StoredTextField(models.TextField):
    """A TextField whose stored text has U+FFFD for U+0000."""

    def get_prep_value(self, value: Any) -> Any:
        value = super().get_prep_value(value)
        return without_nul(value) if isinstance(value, str) else value


class StoredCharField(models.CharField):
    """A CharField whose stored text has U+FFFD for U+0000 (one character for one: the length
    is unchanged)."""

    def get_prep_value(self, value: Any) -> Any:
        value = super().get_prep_value(value)
        return without_nul(value) if isinstance(value, str) else value


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
