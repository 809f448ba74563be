"""The page's one set of figure filters (issue 24): unknown, USD and percent, so every template
writes an unknown figure, an amount of money and a rate the same way (srbench.money holds the
rules; the CLIs use the same functions as text).

``{{ value|unknown }}``: the value, or ``<span class="unknown">unknown</span>`` when it is None.
``{{ amount|money }}``: a ledger amount's exact decimal text (no ``$``, for USD columns).
``{{ amount|usd }}``: ``$`` and the exact text. ``{{ rate|percent }}``: a percent to 0.1.
Each shows the unknown marker for None, never 0.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString

from srbench.money import UNKNOWN_TEXT, money_text, percent_text, usd_text

register = template.Library()

UNKNOWN_HTML: SafeString = format_html('<span class="unknown">{}</span>', UNKNOWN_TEXT)


@register.filter(name="unknown")
def unknown(value: Any) -> Any:
    return UNKNOWN_HTML if value is None else value


@register.filter(name="money")
def money(value: Decimal | str | None) -> str:
    """The exact text of a ledger amount; a string already made by ``money_text`` (a report or
    comparison field) passes through."""
    if value is None:
        return UNKNOWN_HTML
    return value if isinstance(value, str) else str(money_text(value))


@register.filter(name="usd")
def usd(value: Decimal | str | None) -> str:
    return UNKNOWN_HTML if value is None else usd_text(value)


@register.filter(name="percent")
def percent(value: Decimal | float | str | None) -> str:
    return UNKNOWN_HTML if value is None else percent_text(value)
