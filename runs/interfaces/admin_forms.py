"""The operator's price table as a form (issue 23): one row per served model, the four buckets
as decimal inputs, so nobody types JSON to say what a million tokens cost.

Rows are plain inputs (`prices-N-model`, `prices-N-input`, …) plus empty rows to add models,
so the form works without JavaScript. A blank cache bucket stays absent (its cost is then
unknown, never 0); `runs.models.validate_price_table` stays the one rule for what is valid.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.template.loader import render_to_string
from django.utils.safestring import SafeString, mark_safe

from runs.models import PRICE_BUCKETS, validate_price_table

BLANK_ROWS = 2
MAX_ROWS = 200
BUCKET_LABELS = {
    "input": "input",
    "cached_input": "cached input",
    "cache_write": "cache write",
    "output": "output",
}


class PriceTableWidget(forms.Widget):
    template_name = "admin/runs/target/price_table.html"

    def format_value(self, value: Any) -> list[dict[str, str]]:
        if isinstance(value, list):  # the rows as submitted, shown again with the errors
            rows = [dict(row) for row in value]
        else:
            table = value if isinstance(value, dict) else {}
            rows = [
                {"model": str(model), **{b: str(row.get(b, "")) for b in PRICE_BUCKETS}}
                for model, row in sorted(table.items())
                if isinstance(row, dict)
            ]
        blank = {"model": "", **dict.fromkeys(PRICE_BUCKETS, "")}
        return rows + [dict(blank) for _ in range(BLANK_ROWS)]

    def get_context(self, name: str, value: Any, attrs: dict[str, Any] | None) -> dict[str, Any]:
        context = super().get_context(name, value, attrs)
        context["widget"]["rows"] = [
            {
                "index": i,
                "model": row.get("model", ""),
                "buckets": [(b, BUCKET_LABELS[b], row.get(b, "")) for b in PRICE_BUCKETS],
            }
            for i, row in enumerate(context["widget"]["value"])
        ]
        context["widget"]["labels"] = [BUCKET_LABELS[b] for b in PRICE_BUCKETS]
        return context

    def render(
        self, name: str, value: Any, attrs: dict[str, Any] | None = None, renderer: Any = None
    ) -> SafeString:
        # The project's template engine (templates/), not the forms renderer's own.
        return mark_safe(render_to_string(self.template_name, self.get_context(name, value, attrs)))

    def value_from_datadict(self, data: Any, files: Any, name: str) -> list[dict[str, str]]:
        try:
            count = min(int(data.get(f"{name}-rows", 0)), MAX_ROWS)
        except (TypeError, ValueError):
            count = 0
        return [
            {
                key: str(data.get(f"{name}-{i}-{key}", "")).strip()
                for key in ("model", *PRICE_BUCKETS)
            }
            for i in range(max(count, 0))
        ]

    def value_omitted_from_data(self, data: Any, files: Any, name: str) -> bool:
        return f"{name}-rows" not in data


class PriceTableField(forms.Field):
    widget = PriceTableWidget

    def to_python(self, value: Any) -> dict[str, dict[str, str]]:
        if isinstance(value, dict):
            return value
        table: dict[str, dict[str, str]] = {}
        errors: list[str] = []
        for number, row in enumerate(value or [], start=1):
            model = row.get("model", "")
            prices = {b: row.get(b, "") for b in PRICE_BUCKETS if row.get(b, "")}
            if not model and not prices:
                continue  # an empty row
            if not model:
                errors.append(f"row {number}: name the served model these prices are for.")
                continue
            if model in table:
                errors.append(f"{model}: listed twice.")
                continue
            for bucket, text in prices.items():
                try:
                    Decimal(text)
                except InvalidOperation:
                    errors.append(f"{model}.{bucket}: {text!r} is not a decimal number.")
            table[model] = prices
        if errors:
            raise ValidationError(errors)
        return table

    def validate(self, value: dict[str, dict[str, str]]) -> None:
        super().validate(value)
        errors = validate_price_table(value)
        if errors:
            raise ValidationError(errors)

    def has_changed(self, initial: Any, data: Any) -> bool:
        try:
            return self.to_python(data) != (initial or {})
        except ValidationError:
            return True
