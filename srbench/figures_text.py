"""A difference and its interval as plain text: the one wording of the pages (through
srbench/presenters.py, which adds the unknown marker), the headline and the CLI's comparison
table (issue 36 item 3). Plain Python (no Django), so the remote CLI may import it; money and
percent text are srbench/money.py's.
"""

from __future__ import annotations

from srbench.money import UNKNOWN_TEXT


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
