"""``{{ amount|money }}``: a USD amount as its exact decimal text (srbench.money)."""

from __future__ import annotations

from decimal import Decimal

from django import template

from srbench.money import money_text

register = template.Library()


@register.filter(name="money")
def money(value: Decimal | str | None) -> str | None:
    """The exact text of a ledger amount; a string already made by ``money_text`` (a report or
    comparison field) passes through. Templates test for None first and show "unknown"."""
    if value is None or isinstance(value, str):
        return value
    return money_text(value)
