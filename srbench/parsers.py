"""The API's request body parser: JSON only, bounded in size and depth, every string storable
(issue 19). Set as the only DEFAULT_PARSER_CLASSES entry in settings.REST_FRAMEWORK.

Its own module because DRF reads DEFAULT_PARSER_CLASSES while its views module loads, which
srbench/api.py itself imports (through drf-spectacular).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import IO, Any

from rest_framework import exceptions
from rest_framework.parsers import BaseParser

# The largest honest body is a recovery's `selected_cells` for a very large run (about 8 bytes
# a cell: half a million cells) or a route preview's 200,000-character prompt; the deepest is a
# route preview's chat messages (about six levels). 64 levels stays far below the interpreter's
# recursion limit, which json.loads and every recursive step after it (serializers, canonical
# hashing, jsonb) would otherwise reach as a 500.
MAX_JSON_BODY_BYTES = 4 * 1024 * 1024
MAX_JSON_DEPTH = 64


def _text_problem(text: str) -> tuple[str, str] | None:
    if "\x00" in text:
        # PostgreSQL text and jsonb cannot hold U+0000: it would fail as a database error.
        return "nul_character", "A string holds a NUL character (\\u0000), which is not allowed."
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            # An escape such as "\ud800" decodes to a lone surrogate, which no UTF-8 output
            # (database, response, log) can encode.
            return "invalid_unicode", "A string holds a lone surrogate: it is not valid Unicode."
    return None


def json_value_problem(value: Any, *, max_depth: int = MAX_JSON_DEPTH) -> tuple[str, str] | None:
    """Why a decoded JSON value may go no further, as (code, message); None when it may.

    Refused: nesting deeper than `max_depth`, a string or key that is not valid Unicode or
    holds NUL, a number that is not finite (`1e999` decodes to infinity). Iterative, so no
    input can exhaust the stack. Shared by the API's parser and the CLI's JSON files."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth >= max_depth:
                return "too_deep", f"The JSON is nested more than {max_depth} levels deep."
            if isinstance(item, dict):
                for key in item:
                    if isinstance(key, str) and (problem := _text_problem(key)):
                        return problem
                stack.extend((child, depth + 1) for child in item.values())
            else:
                stack.extend((child, depth + 1) for child in item)
        elif isinstance(item, str):
            if problem := _text_problem(item):
                return problem
        elif isinstance(item, float) and not math.isfinite(item):
            return "invalid_number", "A number is too large to be represented."
    return None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


class BoundedJSONParser(BaseParser):
    """The API's only request parser (settings.REST_FRAMEWORK): a JSON body of at most
    MAX_JSON_BODY_BYTES, strict UTF-8, without NaN or Infinity, that json_value_problem
    accepts. Each refusal is a 400 in the house error shape whose code names the limit.

    Not a JSONParser subclass on purpose: DRF copies those bodies whole into memory first
    (request.body); this one reads at most one byte past the limit from the stream."""

    media_type = "application/json"

    def parse(
        self,
        stream: IO[bytes] | None,
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        raw = stream.read(MAX_JSON_BODY_BYTES + 1) if stream is not None else b""
        if len(raw) > MAX_JSON_BODY_BYTES:
            raise exceptions.ParseError(
                f"The body is larger than {MAX_JSON_BODY_BYTES} bytes.", code="too_large"
            )
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise exceptions.ParseError(
                f"The body is not valid UTF-8 (byte {exc.start}).", code="invalid_unicode"
            ) from None
        try:
            value = json.loads(text, parse_constant=_refuse_constant)
        except RecursionError:
            raise exceptions.ParseError(
                f"The JSON is nested more than {MAX_JSON_DEPTH} levels deep.", code="too_deep"
            ) from None
        except ValueError as exc:
            raise exceptions.ParseError(f"JSON parse error - {exc}", code="parse_error") from None
        if problem := json_value_problem(value):
            raise exceptions.ParseError(problem[1], code=problem[0])
        return value
