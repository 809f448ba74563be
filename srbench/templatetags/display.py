"""The page's one set of figure filters (issue 24): unknown, USD and percent, so every template
writes an unknown figure, an amount of money and a rate the same way (srbench.money holds the
rules; the CLIs use the same functions as text).

``{{ value|unknown }}``: the value, or ``<span class="unknown">unknown</span>`` when it is None
(``{{ value|unknown:reason }}`` adds the reason beside the marker).
``{% unknown %}``: the marker itself, where a template has already decided the figure is
unknown; ``{% unknown "not scored" title="…" reason=… %}`` names what is missing and why. No
template spells the marker (tests/srbench/test_unknown_marker.py); srbench/presenters.py builds it.
``{{ bounds|interval }}``: ``[lower, upper]`` to 3 places (``interval:4`` to 4), or unknown.
``{{ verdict|verdict_class }}``: a comparison verdict's CSS class.
``{{ amount|money }}``: a ledger amount's exact decimal text (no ``$``, for USD columns).
``{{ amount|usd }}``: ``$`` and the exact text. ``{{ rate|percent }}``: a percent to 0.1.
``{{ entry|not_run_reason }}``: a "not run here" entry's reason without its benchmark's name.
Each figure filter shows the unknown marker for None, never 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from django import template
from django.utils.safestring import SafeString

from runs.vocabulary.not_run import not_run_reason
from srbench import presenters
from srbench.money import UNKNOWN_TEXT, money_text
from srbench.presenters import UNKNOWN_HTML

register = template.Library()


@register.filter(name="unknown")
def unknown(value: Any, reason: str | None = None) -> Any:
    return presenters.known_or_unknown(value, reason=reason)


@register.simple_tag(name="unknown")
def unknown_marker(
    text: str = UNKNOWN_TEXT, title: str | None = None, reason: str | None = None
) -> SafeString:
    return presenters.unknown_html(text, title=title, reason=reason)


@register.filter(name="interval")
def interval(bounds: Any, digits: int = 3) -> Any:
    return presenters.interval_text(bounds, digits)


@register.filter(name="verdict_class")
def verdict_class(verdict: str) -> str:
    return presenters.verdict_class(verdict)


@register.filter(name="money")
def money(value: Decimal | str | None) -> str:
    """The exact text of a ledger amount; a string already made by ``money_text`` (a report or
    comparison field) passes through."""
    if value is None:
        return UNKNOWN_HTML
    return value if isinstance(value, str) else str(money_text(value))


@register.filter(name="usd")
def usd(value: Decimal | str | None) -> str:
    return presenters.usd_html(value)


@register.filter(name="percent")
def percent(value: Decimal | float | str | None) -> str:
    return presenters.percent_html(value)


@register.filter(name="not_run_reason")
def not_run_reason_filter(entry: Mapping[str, Any]) -> str:
    """A "not run here" entry's reason without its benchmark's name (the line names it)."""
    return not_run_reason(entry)
