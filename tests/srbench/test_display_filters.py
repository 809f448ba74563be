"""The page's one set of figure filters (srbench/templatetags/display.py): unknown stays
unknown (never 0, never "$unknown"), money is its exact decimal text, a rate is a percent."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.template import Context, Template

from srbench.money import percent_text, usd_text

UNKNOWN = '<span class="unknown">unknown</span>'


def render(text: str, **context: object) -> str:
    return Template("{% load display %}" + text).render(Context(context))


@pytest.mark.parametrize(
    ("value", "money", "usd"),
    [
        (None, UNKNOWN, UNKNOWN),
        (Decimal("0.0000011000"), "0.0000011", "$0.0000011"),
        (Decimal("1E+2"), "100", "$100"),
        (Decimal("0E-10"), "0", "$0"),
        ("0.004", "0.004", "$0.004"),  # a report's text passes through
    ],
)
def test_money_and_usd(value: object, money: str, usd: str) -> None:
    assert render("{{ v|money }}", v=value) == money
    assert render("{{ v|usd }}", v=value) == usd


def test_unknown_marks_none_only() -> None:
    assert render("{{ v|unknown }}", v=None) == UNKNOWN
    assert render("{{ v|unknown }}", v=0) == "0"  # a known zero stays a zero
    assert render("{{ v|unknown }}", v="<b>") == "&lt;b&gt;"  # values are still escaped


def test_percent() -> None:
    assert render("{{ v|percent }}", v=None) == UNKNOWN
    assert render("{{ v|percent }}", v="12.34") == "12.3%"
    assert render("{{ v|percent }}", v="-5") == "-5.0%"


def test_the_cli_text_is_the_same_rule() -> None:
    assert usd_text(None) == "unknown" and usd_text(Decimal("2.50")) == "$2.5"
    assert percent_text(None) == "unknown" and percent_text("33.333") == "33.3%"
    with pytest.raises(TypeError):
        usd_text(0.1)  # type: ignore[arg-type]  # a float never reaches money
