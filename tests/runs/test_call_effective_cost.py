"""A call shows the one cost the report counts for it (DESIGN §5, SPEC R1.2, R2.2, R13.1;
session 9, helper ld).

The report counts a call at its effective cost: a usage correction's figure (R2.2) when the
latest correction has an entry for it, a known $0 for an HTTP error answered before any stream
byte at a target that does not bill errors (`runs.ledger.accounting.known_failure_unbilled`),
else the ledger row's. Every per-call view — the API's calls list and call detail, the Calls
tab, the call page, the question page and `show --calls` — shows that figure with why it is not
the recorded one, and the recorded figure beside it (the ledger's evidence, never rewritten).
Before, they showed only the raw row: unknown for a call the report counts as $0.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal

import pytest
from django.utils.html import escape
from rest_framework.test import APIClient

import tests.runs.test_reconcile as rec
from runs.models import Call, Target
from runs.planning.services import run_create
from runs.reporting.effective import effective_call_sums
from runs.reporting.reconcile import usage_reconcile
from runs.reporting.report import run_report
from srbench.money import money_text, usd_text
from tests import factories as f
from tests.cli_support import bench
from tests.conftest import wait_until
from tests.runs import engine_support as es

FAST = {"ttft_s": 0.0, "tokens_per_second": 0.0}
ASSUMES = "assumes sim-strong does not bill error responses (errors_billed = false)"
COUNTED = "as the report counts it: "


def report_call_costs(run_id: int) -> dict[int, Decimal | None]:
    """What the report's own sums count for each call (each cell here has one call)."""
    by_cell = {
        r["cell_id"]: r["cost"] for r in effective_call_sums(run_ids=[run_id], group_by="cell_role")
    }
    calls = Call.objects.filter(cell__run_id=run_id).values_list("pk", "cell_id")
    assert len({cell for _, cell in calls}) == len(calls)
    return {pk: by_cell[cell] for pk, cell in calls}


def shown(api: APIClient, client, capsys, run_id: int, *, questions: bool = True):  # type: ignore[no-untyped-def]
    """Each call's cost and note as every per-call view shows them (``questions``: the
    question pages too; a builder's questions have no payload to render one)."""
    listed = api.get(f"/api/v1/runs/{run_id}/calls/").json()["results"]
    views: dict[str, dict[int, dict]] = {"list": {c["id"]: c for c in listed}}
    views["detail"] = {
        c["id"]: api.get(f"/api/v1/runs/{run_id}/calls/{c['id']}/").json() for c in listed
    }
    code, out, err = bench(capsys, "show", str(run_id), "--calls", "--user", "ops")
    assert code == 0, err
    views["cli"] = {int(line.split()[0]): {"line": line} for line in out.splitlines()[:-1]}
    html = client.get(f"/runs/{run_id}/?tab=calls").content.decode()
    link = rf'<tr><td class="num"><a href="/runs/{run_id}/calls/(\d+)/">(.*?)</tr>'
    rows = re.findall(link, html, re.S)
    views["tab"] = {int(pk): {"html": row} for pk, row in rows}
    views["page"] = {
        c["id"]: {"html": client.get(f"/runs/{run_id}/calls/{c['id']}/").content.decode()}
        for c in listed
    }
    views["question"] = {}
    for c in listed if questions else []:
        html = client.get(f"/runs/{run_id}/questions/{c['cell']}/").content.decode()
        row = re.search(rf'<a href="/runs/{run_id}/calls/{c["id"]}/">(.*?)</tr>', html, re.S)
        views["question"][c["id"]] = {"html": row.group(1)}
    return views


def assert_shown(
    views: dict[str, dict[int, dict]],
    pk: int,
    effective: Decimal | None,
    note: str | None,
    recorded: Decimal | None,
) -> None:
    """One call on every view: the effective cost, its note when there is one, and then the
    recorded cost beside it."""
    plain, dollars = money_text(effective), usd_text(effective)
    for name in ("list", "detail"):
        c = views[name][pk]
        assert c["effective_cost_usd"] == plain, (name, c)
        assert c["cost_usd"] == money_text(recorded), (name, c)  # the ledger's own, kept
        if note is None:
            assert c["effective_cost_note"] is None, (name, c)
        else:
            assert note in c["effective_cost_note"], (name, c)
    line = views["cli"][pk]["line"]
    if note is None:
        assert line.endswith(f"cost {dollars}"), line
    else:
        assert f"cost {dollars} ({COUNTED}" in line and note in line, line
        assert line.endswith(f"recorded {usd_text(recorded)})"), line
    unknown = '<span class="unknown">unknown</span>'
    figure = plain if effective is not None else unknown
    for name in ("tab", "question"):
        if pk not in views[name]:
            assert name == "question"
            continue
        row = views[name][pk]["html"]
        if note is None:
            assert f'<td class="num">{figure}</td>' in row, (name, row)
        else:
            recorded_text = money_text(recorded) if recorded is not None else unknown
            assert f'<td class="num">{figure} <span class="meta effective-cost-note">(' in row
            assert f"({COUNTED}" in row and escape(note) in row, (name, row)
            assert f"; recorded: {recorded_text})</span></td>" in row, (name, row)
    page = views["page"][pk]["html"]
    cost = re.search(
        r'<tr id="call-cost"><th>Cost \(USD\)</th><td class="num">(.*?)</td></tr>', page, re.S
    ).group(1)
    assert cost.startswith(figure), cost
    if note is None:
        assert "call-recorded-cost" not in page
    else:
        assert COUNTED in cost and escape(note) in cost, cost
        kept = re.search(
            r'<tr id="call-recorded-cost"><th>[^<]*</th><td class="num">(.*?)</td>', page, re.S
        )
        assert kept.group(1).startswith(money_text(recorded) if recorded is not None else unknown)


@pytest.mark.worker
def test_a_429_the_target_does_not_bill_shows_the_reports_0_on_every_call_view(
    celery_worker, client, capsys
):
    ops = f.user_create(username="ops", staff=True)
    models = {"sim-strong": {**FAST, "faults": ["429"]}, "sim-weak": FAST}
    with es.simulator(["mmlu-pro"], models=models) as url:
        es.sim_targets(url)
        assert not Target.objects.get(slug="sim-strong").errors_billed  # the registry's default
        run, _ = run_create(
            owner=ops,
            plan={
                "name": "rate limited",
                "dataset": es.fixture_dataset(["mmlu-pro"]).pk,
                "targets": ["sim-strong", "sim-weak"],
                "failure_policy": "continue",
                "limits": {"concurrency": 2, "idle_timeout_s": 5, "total_timeout_s": 20},
            },
        )
        wait_until(lambda: es.terminal(run), timeout=90)

    strong = list(Call.objects.filter(cell__run=run, target__slug="sim-strong"))
    weak = list(Call.objects.filter(cell__run=run, target__slug="sim-weak"))
    assert strong and weak
    assert {(c.http_status, c.error_code, c.cost_usd) for c in strong} == {(429, "http_429", None)}
    assert all(c.status == "completed" and c.cost_usd is not None for c in weak)

    counted = report_call_costs(run.pk)
    report = {t["slug"]: t for t in run_report(run=run)["targets"]}
    assert Decimal(report["sim-strong"]["known_cost_usd"]) == 0
    assert ASSUMES in report["sim-strong"]["usage_unknown_reason"]
    assert sum(counted[c.pk] for c in weak) == Decimal(report["sim-weak"]["subject_cost_usd"])

    api = APIClient()
    api.force_authenticate(ops)
    client.force_login(ops)
    views = shown(api, client, capsys, run.pk)
    assert set(views["tab"]) == {c.pk for c in strong + weak}
    for call in strong:
        assert counted[call.pk] == 0
        assert_shown(views, call.pk, Decimal(0), ASSUMES, None)
    for call in weak:
        assert counted[call.pk] == call.cost_usd
        assert_shown(views, call.pk, call.cost_usd, None, call.cost_usd)
    # The recorded row keeps its own note as evidence, beside the figure counted.
    page = views["page"][strong[0].pk]["html"]
    assert escape(strong[0].cost_note) in page


@pytest.mark.django_db
def test_a_usage_correction_shows_its_corrected_cost_on_every_call_view(client, capsys):
    ops = f.user_create(username="ops", staff=True)
    run, valid, truncated, conflicting, missing = rec.damaged_run()
    correction = usage_reconcile(run_id=run.pk).correction
    entries = {e["call_id"]: e for e in correction.corrections["calls"]}
    counted = report_call_costs(run.pk)
    report = run_report(run=run)["targets"][0]
    assert Decimal(report["known_cost_usd"]) == sum(v for v in counted.values() if v is not None)

    api = APIClient()
    api.force_authenticate(ops)
    client.force_login(ops)
    views = shown(api, client, capsys, run.pk, questions=False)
    assert counted[valid.pk] == rec.EXPECTED_COST
    assert_shown(
        views,
        valid.pk,
        rec.EXPECTED_COST,
        f"corrected by usage correction v1 ({entries[valid.pk]['reason']})",
        Decimal("0.5"),
    )
    for call in (truncated, conflicting, missing):
        assert counted[call.pk] is None
        assert_shown(
            views,
            call.pk,
            None,
            f"corrected by usage correction v1 ({entries[call.pk]['reason']})",
            Decimal("0.5"),
        )
    assert json.dumps(views["list"])  # plain JSON, nothing else
