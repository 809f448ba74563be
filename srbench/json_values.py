"""What a JSON value may not hold to go further (issue 19), in plain Python: the API's body
parser (srbench/parsers.py) and the CLI's JSON files (srbench/api_client.py) read it, and the
CLI's remote path runs without Django or DRF (an outside probe: `recover --plan FILE --url …`
imported DRF through the parser and died unconfigured)."""

from __future__ import annotations

import math
from typing import Any

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


def refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")
