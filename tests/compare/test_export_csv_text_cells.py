"""The comparison CSV is opened in spreadsheets; a run's name is free text (up to 200
characters, any first character). A name like ``=HYPERLINK("http://x","y")`` was written as is,
and a spreadsheet runs a cell that starts with ``=``, ``+``, ``-`` or ``@`` as a formula (outside
probe). Free-text cells that start so are written with a leading apostrophe, which spreadsheets
show as text; numbers and exact fractions (``-17/35``, a negative savings rate) are untouched,
and the JSON export keeps the name exactly."""

from __future__ import annotations

import csv
import io
from decimal import Decimal

import pytest
from rest_framework.test import APIClient

from runs.models import Run
from tests import factories as f
from tests.compare import builders as b

pytestmark = pytest.mark.django_db


def test_a_run_name_that_looks_like_a_formula_is_written_as_text() -> None:
    api = APIClient()
    api.force_authenticate(f.user_create())
    qs = b.questions({"mmlu-pro": 4})
    base, router = b.target("csv-base"), b.target("csv-router", kind="mom")
    baseline = b.run(qs, {base: [True, True, False, False]}, costs={base: Decimal("0.001")})
    candidate = b.run(qs, {router: [False] * 4}, costs={router: Decimal("0.002")})
    name = '=HYPERLINK("http://example.invalid","open")'
    Run.objects.filter(pk=candidate.pk).update(name=name)
    Run.objects.filter(pk=baseline.pk).update(name="@sum(A1)")
    query = f"baseline={baseline.pk}&candidates={candidate.pk}"

    text = api.get(f"/api/v1/compare/export.csv?{query}").content.decode()
    rows = {r["row"]: r for r in csv.DictReader(io.StringIO(text))}

    assert rows["candidate"]["run_name"] == "'" + name
    assert rows["baseline"]["run_name"] == "'@sum(A1)"
    # Figures keep their sign: Δ = (0 − 2) / 4, savings 100 × (1 − 2) = −100 %.
    assert rows["candidate"]["delta_exact"] == "-1/2"
    assert Decimal(rows["candidate"]["subject_savings_pct"]) == Decimal(-100)
    assert float(rows["candidate"]["delta"]) == -0.5
    doc = api.get(f"/api/v1/compare/export.json?{query}").json()
    assert doc["comparisons"][0]["run_name"] == name
