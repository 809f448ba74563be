"""A run's CSV export holds the model's answers: text a model chose, opened in spreadsheets.
An answer ``=HYPERLINK(…)`` or ``@SUM(…)`` was written as is, and a spreadsheet runs a cell
starting with ``= + - @`` as a formula (helper he's finding about the comparison CSV, the same
here). Such a cell is written after an apostrophe (srbench.spreadsheet); a plain number such as
``-5`` stays as it is; unknown stays empty; the JSON export keeps every answer exactly."""

from __future__ import annotations

import csv
import html as htmllib
import io
import re

import pytest

from runs.models import Cell
from srbench.spreadsheet import spreadsheet_text
from tests.runs.test_question_views import member, two_target_run  # noqa: F401

pytestmark = pytest.mark.django_db

HOSTILE = {
    '=HYPERLINK("http://example.invalid","x")': '\'=HYPERLINK("http://example.invalid","x")',
    "@SUM(1+1)": "'@SUM(1+1)",
    "+cmd|' /C calc'!A0": "'+cmd|' /C calc'!A0",
    "-2+3": "'-2+3",
    "\t=1+1": "'\t=1+1",
    "-5": "-5",
    "+0.25": "+0.25",
    "1e-3": "1e-3",
    "the answer is B": "the answer is B",
}


def test_the_model_answers_in_a_runs_csv_are_written_as_text_a_spreadsheet_does_not_run(
    client,
    member,  # noqa: F811
):
    run = two_target_run(member, questions=len(HOSTILE))
    strong = list(Cell.objects.filter(run=run, target__slug="strong").order_by("pk"))
    for cell, answer in zip(strong, HOSTILE, strict=False):
        Cell.objects.filter(pk=cell.pk).update(final_answer=answer)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    csv_url = htmllib.unescape(re.search(r'id="export-csv" href="([^"]+)"', page).group(1))
    rows = list(csv.DictReader(io.StringIO(client.get(csv_url).content.decode())))
    written = {r["native_id"]: r["strong.answer"] for r in rows}
    for cell, (answer, expected) in zip(strong, HOSTILE.items(), strict=False):
        assert written[cell.question.native_id] == expected, answer
    # A failed cell's unknown answer stays empty, never a value.
    failed = Cell.objects.filter(run=run, target__slug="weak", status="failed").first()
    assert {r["native_id"]: r["weak.correct"] for r in rows}[failed.question.native_id] == ""
    json_url = htmllib.unescape(re.search(r'id="export-json" href="([^"]+)"', page).group(1))
    answers = {r["targets"]["strong"]["answer"] for r in client.get(json_url).json()["rows"]}
    assert set(HOSTILE) <= answers


def test_the_rule_leaves_numbers_and_plain_text_alone():
    assert spreadsheet_text(None) == ""
    assert spreadsheet_text(-0.5) == -0.5
    assert spreadsheet_text("-17/35") == "'-17/35"  # text, not a number: a formula in a sheet
    assert spreadsheet_text("-1.5E+3") == "-1.5E+3"
    assert spreadsheet_text("=") == "'="
