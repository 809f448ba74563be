"""Display filters that keep Python's own notation off the pages (issue 23, SPEC R14).

``{{ value|pretty }}``: a dict or list as indented JSON, an SSE stream one event per line, any
other text as is. ``{{ value|inline_json }}``: a short value on one line (JSON for structures,
so a page never shows ``{'key': …}`` or ``Decimal('…')``).
"""

from __future__ import annotations

import json
import re
from decimal import Decimal
from typing import Any

from django import template

register = template.Library()

_SSE_LINE = re.compile(r"^(data|event|id|retry):", re.M)


def _default(value: Any) -> Any:
    if isinstance(value, Decimal):
        return format(value, "f")
    return str(value)


def sse_lines(text: str) -> str | None:
    """An SSE stream, one event per line (its `data:` payload, the field names dropped when it
    is only data); None when the text is not an SSE stream."""
    if not _SSE_LINE.match(text.lstrip()):
        return None
    events = []
    for block in re.split(r"\r?\n\r?\n", text.strip()):
        fields = [line for line in block.splitlines() if line.strip()]
        if not fields:
            continue
        if all(f.startswith("data:") for f in fields):
            events.append("data: " + " ".join(f[5:].strip() for f in fields))
        else:
            events.append(" | ".join(f.strip() for f in fields))
    return "\n".join(events)


def _events_split(value: Any) -> Any:
    """Inside a structure, an SSE stream becomes the list of its events (one a line)."""
    if isinstance(value, str):
        lines = sse_lines(value)
        return value if lines is None else lines.split("\n")
    if isinstance(value, dict):
        return {k: _events_split(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_events_split(v) for v in value]
    return value


@register.filter(name="pretty")
def pretty(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return sse_lines(value) or value
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(_events_split(value), indent=2, ensure_ascii=False, default=_default)
    if isinstance(value, Decimal):
        return format(value, "f")
    return str(value)


@register.filter(name="inline_json")
def inline_json(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, (dict, list, tuple, bool)):
        return json.dumps(value, ensure_ascii=False, default=_default)
    if isinstance(value, Decimal):
        return format(value, "f")
    return str(value)


def _rank(name: Any) -> tuple[int, str]:
    from datasets.benchmarks import ADAPTERS

    order = {key: i for i, key in enumerate(ADAPTERS)}
    return (order.get(str(name), len(order)), str(name))


def _benchmark_of(item: Any) -> Any:
    if isinstance(item, dict):
        return item.get("benchmark", item.get("key", ""))
    if isinstance(item, (tuple, list)) and item:
        return item[0]
    return getattr(item, "benchmark", "")


@register.filter(name="canonical")
def canonical(value: Any) -> list[Any]:
    """Benchmarks in the spec's fixed order (datasets.benchmarks.ADAPTERS), whatever order
    the database gave: a mapping keyed by benchmark becomes its (key, value) items, a list of
    rows (objects or dicts with a `benchmark`) is sorted."""
    if value is None:
        return []
    if isinstance(value, dict):
        return sorted(value.items(), key=lambda kv: _rank(kv[0]))
    return sorted(value, key=lambda item: _rank(_benchmark_of(item)))
