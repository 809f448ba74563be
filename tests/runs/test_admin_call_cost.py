"""The admin's calls show the cost the run's report counts for each call, the recorded one
beside it (session 10's left-open, helper rc: the list showed the recorded cost only, so after
a usage correction an operator read $0.5 on a call the report counts at $0.000756, and a price
on calls whose evidence proves nothing, which the report counts as unknown)."""

from __future__ import annotations

import re

import pytest

import tests.runs.test_reconcile as rec
from runs.reporting.reconcile import usage_reconcile
from srbench.money import money_text
from tests import factories as f


def cells(page: str, column: str) -> list[str]:
    return re.findall(rf'<td class="field-{column}">(.*?)</td>', page)


@pytest.mark.django_db
def test_the_call_list_and_page_show_the_counted_cost_beside_the_recorded_one(client):
    run, valid, truncated, conflicting, missing = rec.damaged_run()
    usage_reconcile(run_id=run.pk)
    client.force_login(f.user_create(username="op", staff=True))

    page = client.get("/admin/runs/call/?o=1").content.decode()  # by id: the calls in order
    ids = [int(i) for i in re.findall(r'<th class="field-id"><a [^>]*>(\d+)</a>', page)]
    assert ids == sorted(c.pk for c in (valid, truncated, conflicting, missing))
    counted = dict(zip(ids, cells(page, "counted_cost"), strict=True))
    recorded = dict(zip(ids, cells(page, "recorded_cost"), strict=True))
    # Independently (tests/runs/test_reconcile.py): the evidence's usage priced by hand.
    expected = f"${money_text(rec.EXPECTED_COST)}"
    assert counted[valid.pk].startswith(expected), counted[valid.pk]
    for call in (truncated, conflicting, missing):
        assert counted[call.pk].startswith("unknown"), counted[call.pk]
    assert set(recorded.values()) == {"$0.5"}  # the ledger row, unchanged

    detail = client.get(f"/admin/runs/call/{valid.pk}/change/").content.decode()
    assert expected in detail
