"""Money as text: the one place an amount of USD becomes a string (DESIGN §5, issue 18).

Every surface — report, comparison, export, API, CLI, templates — shows the exact ``Decimal``
the ledger holds: no exponent (``1.1E-7``), no binary-float noise (``0.04768559999999997``), no
re-rounding to a fixed number of places (``floatformat:6`` turned 0.0000011 into 0.000001), no
zero padding of the column's scale (``0.0011000000``). Unknown stays ``None``; it never becomes
0 here, and a float is refused rather than formatted, so a float that reaches money fails loudly.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal, InvalidOperation, localcontext

__all__ = [
    "LEDGER_MONEY_DIGITS",
    "LEDGER_MONEY_PLACES",
    "PRICE_MAX_PLACES",
    "UNKNOWN_TEXT",
    "MoneyPrecisionError",
    "decimal_places",
    "money_stored",
    "money_text",
    "percent_text",
    "price_error",
    "price_places_error",
    "usd_text",
]

# What every text surface (CLI, page) shows for an unknown figure: never 0, never "$unknown".
UNKNOWN_TEXT = "unknown"

# The scale of every money column of the ledger (DecimalField(max_digits=40, decimal_places=18),
# runs/0016, docs/decisions.md "Exact money"): a call's cost is tokens × price / 10^6, so a
# price with p decimals per 1M tokens makes a cost of at most p + 6 decimals. Prices are
# accepted with at most PRICE_MAX_PLACES decimals, so every cost, reservation and sum of them
# fits the columns exactly and nothing is ever rounded on its way into the ledger.
LEDGER_MONEY_PLACES = 18
LEDGER_MONEY_DIGITS = 40
PRICE_MAX_PLACES = LEDGER_MONEY_PLACES - 6
_LEDGER_QUANTUM = Decimal(1).scaleb(-LEDGER_MONEY_PLACES)
# Enough digits to quantise any amount a column can hold without an InvalidOperation.
_CHECK_PRECISION = 2 * LEDGER_MONEY_DIGITS


class MoneyPrecisionError(ValueError):
    """An amount has more decimal places than the ledger stores: storing it would round it."""


def money_stored(value: Decimal | None) -> Decimal | None:
    """``value`` as a ledger money column stores it — unchanged, since the column holds
    LEDGER_MONEY_PLACES decimals and every price is refused beyond PRICE_MAX_PLACES (issue 35
    item 5). An amount with more places is refused (:class:`MoneyPrecisionError`) rather than
    rounded: PostgreSQL would round it silently on the way in, and every sum would then differ
    from the exact one. Every cost written to the ledger or to a correction goes through here,
    so what is summed is what was computed."""
    if value is None:
        return None
    with localcontext() as ctx:
        ctx.prec = _CHECK_PRECISION
        fits = value.quantize(_LEDGER_QUANTUM, rounding=ROUND_HALF_UP) == value
    if not fits:
        raise MoneyPrecisionError(
            f"{money_text(value)} USD has more than {LEDGER_MONEY_PLACES} decimal places; the ledger "
            "stores money exactly and does not round it"
        )
    return value


def decimal_places(value: Decimal) -> int:
    """How many decimal places ``value`` needs (trailing zeros do not count): 0.01875 → 5,
    1.50 → 1, 100 → 0. Read from its digits, so no context precision can round it first."""
    _sign, digits, exponent = value.as_tuple()
    significant = "".join(map(str, digits)).rstrip("0")
    if not isinstance(exponent, int) or exponent >= 0 or not significant:
        return 0
    return max(0, -exponent - (len(digits) - len(significant)))


def price_places_error(price: Decimal) -> str | None:
    """Why a price (USD per 1M tokens) cannot be accepted exactly, or None: beyond
    PRICE_MAX_PLACES decimals its costs would not fit the ledger's scale without rounding."""
    if decimal_places(price) > PRICE_MAX_PLACES:
        return (
            f"{money_text(price)} has more than {PRICE_MAX_PLACES} decimal places per 1M tokens; costs are "
            f"kept exactly to {LEDGER_MONEY_PLACES} places, so at most {PRICE_MAX_PLACES} are "
            "supported"
        )
    return None


def price_error(value: object) -> str | None:
    """Why ``value`` is not an acceptable price (USD per 1M tokens, given as a decimal string
    or an integer, finite, ≥ 0, at most PRICE_MAX_PLACES decimals), or None. A float is refused:
    its binary value is not the price the operator wrote."""
    if isinstance(value, (bool, float)) or not isinstance(value, (str, int)):
        return "give the price as a decimal string."
    try:
        price = Decimal(str(value))
    except InvalidOperation:
        return f"{value!r} is not a decimal number."
    if not price.is_finite() or price < 0:
        return "must be a finite price ≥ 0."
    too_precise = price_places_error(price)
    return None if too_precise is None else f"{too_precise}."


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
