"""The API's request body parser: JSON only, bounded in size and depth, every string storable
(issue 19). Set as the only DEFAULT_PARSER_CLASSES entry in settings.REST_FRAMEWORK.

Its own module because DRF reads DEFAULT_PARSER_CLASSES while its views module loads, which
srbench/api.py itself imports (through drf-spectacular).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import IO, Any

from rest_framework import exceptions
from rest_framework.parsers import BaseParser

from srbench.json_values import (
    MAX_JSON_BODY_BYTES,
    MAX_JSON_DEPTH,
    json_value_problem,
    refuse_constant,
)


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
            value = json.loads(text, parse_constant=refuse_constant)
        except RecursionError:
            raise exceptions.ParseError(
                f"The JSON is nested more than {MAX_JSON_DEPTH} levels deep.", code="too_deep"
            ) from None
        except ValueError as exc:
            raise exceptions.ParseError(f"JSON parse error - {exc}", code="parse_error") from None
        if problem := json_value_problem(value):
            raise exceptions.ParseError(problem[1], code=problem[0])
        return value
