"""Text a user or a model chose, written into a CSV that people open in spreadsheets.

A spreadsheet runs a cell that starts with ``=``, ``+``, ``-`` or ``@`` (or a tab or carriage
return before one) as a formula: a run named ``=HYPERLINK(…)`` or a model that answers
``=WEBSERVICE(…)`` would run in the reader's spreadsheet. Such a cell is written after an
apostrophe, which spreadsheets show as text. A plain number (``-5``, ``+0.25``) is left as it
is: a spreadsheet reads it as that number, and an answer ``-5`` must stay ``-5``. The JSON
exports keep every text exactly. Plain Python (no Django).
"""

from __future__ import annotations

import re
from typing import Any

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_PLAIN_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def spreadsheet_text(value: Any) -> Any:
    """``value`` as a CSV cell: None as empty (unknown, never 0), a text that a spreadsheet
    would run as a formula after an apostrophe, anything else as it is."""
    if value is None:
        return ""
    if (
        isinstance(value, str)
        and value.startswith(FORMULA_STARTS)
        and not _PLAIN_NUMBER.fullmatch(value)
    ):
        return "'" + value
    return value
