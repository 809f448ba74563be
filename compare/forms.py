"""The Compare page's URL state (R11.3): the whole selection is in the query string, so a link
reproduces the comparison.

Run ids are written as sorted comma-separated ids with consecutive ids collapsed into ranges
(``3-42,57``): a "select all" over hundreds of runs stays a URL that proxies and servers with
a 4–8 KB request-line limit still accept. Both spellings are read.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from srbench.query_params import query_params_problems

# Bounds a hand-made URL ("1-999999999") rather than the product: a comparison of this many
# runs is already minutes of work.
MAX_SELECTION = 10_000
BIGINT_MAX = 2**63 - 1


def ids_parse(text: str) -> list[int]:
    """``"5,7-9"`` → ``[5, 7, 8, 9]`` (sorted, unique); ValueError on anything else."""
    out: set[int] = set()
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        low_text, sep, high_text = (t.strip() for t in part.partition("-"))
        # Digits only: int() would take "+5", " 5" or "٥" and says "invalid literal" otherwise.
        if (
            not low_text.isascii()
            or not low_text.isdigit()
            or (sep and not (high_text.isascii() and high_text.isdigit()))
        ):
            raise ValueError(f"{part!r} is not a run id or an ascending range of run ids")
        low = int(low_text)
        high = int(high_text) if sep else low
        if not 1 <= low <= high <= BIGINT_MAX:
            raise ValueError(f"{part!r} is not a run id or an ascending range of run ids")
        if high - low + len(out) >= MAX_SELECTION:
            raise ValueError(f"at most {MAX_SELECTION} runs can be selected")
        out.update(range(low, high + 1))
    return sorted(out)


def ids_format(ids: Iterable[int]) -> str:
    """The canonical spelling: sorted, unique, consecutive ids as ``a-b``."""
    parts: list[str] = []
    ordered = sorted(set(ids))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


class RunIdsField(forms.Field):
    def to_python(self, value: Any) -> list[int]:
        if value in (None, ""):
            return []
        try:
            return ids_parse(str(value))
        except ValueError as exc:
            raise ValidationError(str(exc)) from None


class TickedIdsField(forms.Field):
    """Repeated ``pick=ID`` parameters (one per ticked box)."""

    widget = forms.MultipleHiddenInput

    def to_python(self, value: Any) -> list[int]:
        try:
            ids = sorted({int(v) for v in value or []})
        except (TypeError, ValueError):
            raise ValidationError("ticked run ids are integers") from None
        if any(not 1 <= i <= BIGINT_MAX for i in ids):
            raise ValidationError("ticked run ids are positive")
        return ids


class CompareForm(forms.Form):
    """Every query parameter of ``/compare/``. ``op`` and the tick boxes describe a change of
    selection; the view applies it and redirects to the canonical URL."""

    OPS = (
        ("apply", "Update selection"),
        ("compare", "Compare runs"),
        ("select_all", "Select all matching"),
        ("deselect_all", "Deselect all matching"),
        ("clear", "Clear selection"),
    )

    baseline = forms.IntegerField(required=False, min_value=1, max_value=BIGINT_MAX)
    bt = forms.CharField(required=False, max_length=64)  # one of the tied strongest models
    candidates = RunIdsField(required=False)
    compare = forms.BooleanField(required=False)
    q = forms.CharField(required=False, max_length=200)
    bq = forms.CharField(required=False, max_length=200)
    page = forms.IntegerField(required=False, min_value=1)
    bpage = forms.IntegerField(required=False, min_value=1)
    rpage = forms.IntegerField(required=False, min_value=1)
    op = forms.ChoiceField(required=False, choices=(("", ""), *OPS))
    goto = forms.IntegerField(required=False, min_value=1)  # a pager button inside the form
    shown = RunIdsField(required=False)  # the ids whose boxes were on the submitted page
    pick = TickedIdsField(required=False)  # the ticked boxes of that page

    # The one parameter a page sends many times; any other given twice would be half read
    # (the last value kept), so a link naming one twice is refused by name, as the exports do.
    REPEATABLE = frozenset({"pick"})

    def clean(self) -> dict[str, Any]:
        """The API's query-string rule (srbench.query_params): a parameter the page does not
        read (`?baseline_target=` for `bt`, `?candidate=`) is refused by name with the ones it
        reads — it was dropped and the page compared without it — and one given twice too."""
        cleaned: dict[str, Any] = super().clean() or {}
        if hasattr(self.data, "getlist"):
            single = [name for name in self.fields if name not in self.REPEATABLE]
            for name, problem in query_params_problems(self.data, set(self.fields), single).items():
                # Named as given, also when it is no field of the form (add_error refuses those).
                self.errors.setdefault(name, self.error_class()).append(problem)
                cleaned.pop(name, None)
        return cleaned
