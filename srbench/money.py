"""Money as text: the one place an amount of USD becomes a string (DESIGN §5, issue 18).

Every surface — report, comparison, export, API, CLI, templates — shows the exact ``Decimal``
the ledger holds: no exponent (``1.1E-7``), no binary-float noise (``0.04768559999999997``), no
re-rounding to a fixed number of places (``floatformat:6`` turned 0.0000011 into 0.000001), no
zero padding of the column's scale (``0.0011000000``). Unknown stays ``None``; it never becomes
0 here, and a float is refused rather than formatted, so a float that reaches money fails loudly.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

__all__ = [
    "LEDGER_MONEY_PLACES",
    "UNKNOWN_TEXT",
    "money_stored",
    "money_text",
    "percent_text",
    "usd_text",
]

# What every text surface (CLI, page) shows for an unknown figure: never 0, never "$unknown".
UNKNOWN_TEXT = "unknown"

# The scale of every money column of the ledger (DecimalField(max_digits=20, decimal_places=10)).
LEDGER_MONEY_PLACES = 10
_LEDGER_QUANTUM = Decimal(1).scaleb(-LEDGER_MONEY_PLACES)


def money_stored(value: Decimal | None) -> Decimal | None:
    """``value`` exactly as a ledger money column stores it: 10 places, ties away from zero as
    PostgreSQL's numeric rounds (Django's ``format_number`` rounds ties to even, which differs by
    1E-10 on a tie). Every cost written to the ledger or to a correction goes through here, so
    what is summed is what is stored (issue 21: a 1.5e-8 USD gap between two screens)."""
    if value is None:
        return None
    return value.quantize(_LEDGER_QUANTUM, rounding=ROUND_HALF_UP)


def money_text(value: Decimal | int | None) -> str | None:
    """The exact decimal string of ``value``, or None when it is unknown.

    ``Decimal("0.0000011000")`` → ``"0.0000011"``, ``Decimal("1E+2")`` → ``"100"``,
    ``Decimal("0E-10")`` → ``"0"``. Nothing is rounded: every digit the value has is shown.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (Decimal, int)):
        raise TypeError(f"money must be a Decimal, not {type(value).__name__}: {value!r}")
    amount = Decimal(value)
    if not amount.is_finite():
        raise ValueError(f"money must be finite: {value!r}")
    text = format(amount, "f")  # fixed-point, every digit, never an exponent
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def usd_text(value: Decimal | int | str | None) -> str:
    """An amount of USD for a reader: ``$`` and its exact text (:func:`money_text`; a string
    already made by it passes through), or ``unknown`` — never ``$unknown``, never ``$0``."""
    if value is None:
        return UNKNOWN_TEXT
    return "$" + (value if isinstance(value, str) else str(money_text(value)))


def percent_text(value: Decimal | float | str | None) -> str:
    """A rate already in percent (a savings rate's exact text) to one decimal, or ``unknown``.
    A display rounding only: the exact rate stays in the API and the exports."""
    return UNKNOWN_TEXT if value is None else f"{float(value):.1f}%"
