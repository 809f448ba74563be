"""A difference and its interval as plain text: the one wording of the pages (through
srbench/presenters.py, which adds the unknown marker), the headline and the CLI's comparison
table (issue 36 item 3). Plain Python (no Django), so the remote CLI may import it; money and
percent text are srbench/money.py's.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

from srbench.money import UNKNOWN_TEXT

# The digits a run's figures are shown with, on the run page (templates/runs/_results.html:
# `floatformat:4`, `floatformat:3`, `floatformat:1`) and in the CLI's report text (runs/interfaces/cli.py);
# JSON answers keep the full value.
SCORE_DIGITS = 4
ACCURACY_DIGITS = 3  # a benchmark's accuracy over planned cases
WALL_SECONDS_DIGITS = 1


def signed_figure(value: float | None, digits: int = 4) -> str:
    """A difference with its sign (``+0.1250``), or ``unknown``."""
    return UNKNOWN_TEXT if value is None else f"{value:+.{digits}f}"


def signed_interval_text(lower: float, upper: float, digits: int = 4) -> str:
    """A difference's interval with the sign of each bound: ``[-0.1250, +0.0625]``."""
    return f"[{lower:+.{digits}f}, {upper:+.{digits}f}]"


def level_text(level: float) -> str:
    """An interval's level as every comparison text writes it — 95%, 97.5% or 98.33%: at most
    two decimals, no trailing zeros (the verdict's reason, the card, the headline, the CLI)."""
    return f"{level * 100:.2f}".rstrip("0").rstrip(".") + "%"


def figure_text(value: float | None, digits: int) -> str:
    """A measured figure to `digits` decimals as the pages write it — Django's `floatformat`:
    the value's shortest decimal form rounded half up (0.03125 → ``0.0313``, where Python's
    format would say 0.0312) — or ``unknown``."""
    if value is None:
        return UNKNOWN_TEXT
    exact = Decimal(repr(float(value)))
    return f"{exact.quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP):f}"
