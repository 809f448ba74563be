"""The one rule for a GET's query string, of the API and of the pages: a parameter the address
does not read is refused by name, with the names it does read, and so is one it reads once
given twice. A typo (`?benchmrk=arc`) silently dropped answered the whole list, which a reader
took for the filtered one; a repeated `candidates=` kept its last value.

`srbench.api.query_params_check` raises the API's 400 from it; a page's form (the Compare
page's, compare/forms.py) adds the same words as its errors. Plain Python: no Django, no DRF.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

from srbench.refusals import ECHO_MAX_ITEMS, echo_text


def query_params_problems(
    params: Any, known: Collection[str], single: Iterable[str] = ()
) -> dict[str, str]:
    """``{name: what is wrong}`` for each parameter of ``params`` (a QueryDict: ``getlist``)
    that ``known`` does not hold — at most ``ECHO_MAX_ITEMS`` named, each cut by ``echo_text``,
    and how many more — and for each of ``single`` given more than once. Empty: nothing wrong."""
    reads = ", ".join(sorted(known)) or "no parameter"
    unknown = sorted(set(params) - set(known))
    problems = {
        str(echo_text(name)): f"not a parameter of this address; it reads {reads}"
        for name in unknown[:ECHO_MAX_ITEMS]
    }
    if len(unknown) > ECHO_MAX_ITEMS:
        problems["…"] = f"and {len(unknown) - ECHO_MAX_ITEMS:,} more unknown parameters"
    for name in single:
        given = len(params.getlist(name))
        if given > 1:
            problems[name] = f"given more than once ({given} times); give it once"
    return problems
