"""Raw SSE decoding for tests: lines split on CR/LF only (never ``iter_lines``/``splitlines``,
which also split on U+2028), events end at a blank line, ``data:`` lines are joined."""

from __future__ import annotations

import json
import re
from typing import Any

_LINE_BREAK = re.compile(rb"\r\n|\r|\n")


def sse_data(raw: bytes) -> list[str]:
    events: list[str] = []
    data: list[str] = []
    for line in _LINE_BREAK.split(raw):
        if not line:
            if data:
                events.append("\n".join(data))
                data = []
            continue
        if line.startswith(b"data:"):
            data.append(line[5:].removeprefix(b" ").decode("utf-8"))
    if data:
        events.append("\n".join(data))
    return events


def sse_chunks(raw: bytes) -> list[dict[str, Any]]:
    """The JSON chunks before ``[DONE]``."""
    return [json.loads(e) for e in sse_data(raw) if e != "[DONE]"]


def streamed_content(chunks: list[dict[str, Any]]) -> str:
    return "".join(
        c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices")
    )


def usage_of(chunks: list[dict[str, Any]]) -> dict[str, Any] | None:
    usages = [c["usage"] for c in chunks if c.get("usage")]
    return usages[-1] if usages else None
