"""The one presentation layer's words (issue 36 item 3): how an unknown figure, an interval, a
signed difference and a verdict are shown, for the page filters (srbench/templatetags/display.py)
and the views that format figures in Python (compare/cards.py). Money and percent text stay in
srbench/money.py, a difference's text in srbench/figures_text.py (both Django-free, for the CLI),
which these use.

Unknown is shown as the one marker ``<span class="unknown">unknown</span>`` — with a title or a
reason beside it where one is known — never as 0, never as an empty cell. A template never spells
the marker itself (tests/srbench/test_unknown_marker.py): it writes ``{{ value|unknown }}`` or
``{% unknown %}``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.template.defaultfilters import floatformat
from django.utils.html import format_html
from django.utils.safestring import SafeString

from srbench.figures_text import signed_figure
from srbench.money import UNKNOWN_TEXT, percent_text, usd_text

__all__ = [
    "UNKNOWN_HTML",
    "VERDICT_CLASS",
    "interval_text",
    "known_or_unknown",
    "percent_html",
    "signed_text",
    "unknown_html",
    "usd_html",
    "verdict_class",
]

UNKNOWN_HTML: SafeString = format_html('<span class="unknown">{}</span>', UNKNOWN_TEXT)

# A comparison verdict's CSS class (compare.verdict's labels, SPEC R11.5).
VERDICT_CLASS = {"better": "ok", "non_inferior": "ok", "inconclusive": "warning", "worse": "bad"}


def unknown_html(
    text: str = UNKNOWN_TEXT, *, title: str | None = None, reason: str | None = None
) -> SafeString:
    """The unknown marker: ``text`` (``unknown`` unless the page says what is missing, such as
    ``not scored``), its ``title`` as a tooltip, its ``reason`` beside it in a meta span."""
    if title:
        marker = format_html('<span class="unknown" title="{}">{}</span>', title, text)
    else:
        marker = format_html('<span class="unknown">{}</span>', text)
    return format_html('{} <span class="meta">{}</span>', marker, reason) if reason else marker


def known_or_unknown(value: Any, text: str | None = None, *, reason: str | None = None) -> Any:
    """``text`` (or the value itself) when the value is known; the unknown marker for None."""
    if value is None:
        return unknown_html(reason=reason)
    return value if text is None else text


def usd_html(value: Any) -> str | SafeString:
    """``$`` and the exact amount (srbench.money.usd_text), or the unknown marker."""
    return known_or_unknown(value, None if value is None else usd_text(value))


def percent_html(value: Any) -> str | SafeString:
    """A rate already in percent to one decimal (srbench.money.percent_text), or unknown."""
    return known_or_unknown(value, None if value is None else percent_text(value))


def signed_text(value: float | None, digits: int = 4) -> str | SafeString:
    """A difference with its sign (srbench.figures_text.signed_figure), or the unknown marker."""
    return known_or_unknown(value, None if value is None else signed_figure(value, digits))


def interval_text(bounds: Sequence[Any] | None, digits: int = 3) -> str | SafeString:
    """``[lower, upper]`` to ``digits`` places, rounded as the pages' ``floatformat`` rounds (half
    up on the shortest decimal), or the unknown marker when there is no interval."""
    if not bounds:
        return UNKNOWN_HTML
    lo, hi = (floatformat(b, digits) for b in bounds[:2])
    return f"[{lo}, {hi}]"


def verdict_class(verdict: str) -> str:
    """The CSS class of a comparison verdict (``ok``, ``warning``, ``bad``)."""
    return VERDICT_CLASS[verdict]
