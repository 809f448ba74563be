"""Words for what a failed call cost (issue 34): failed-mode recovery counts an HTTP 429/500 answer
(no usage, cost null in the ledger) as $0 only because the target's registry entry frozen into
the run says error responses are not billed (`Target.errors_billed`, migration runs/0005). The
figure says so where it is shown — API, recovery page, CLI — as "assumes <target> does not bill
error responses (errors_billed = false)", on a page that also says some calls have unknown cost;
a cost that is unknown stays unknown (null, "unknown"), never $0."""

from __future__ import annotations

import json
from html import escape
from typing import Any

import pytest
from django.core.management import call_command
from django.utils import timezone
from rest_framework.test import APIClient

from runs.models import Cell, Run, Target
from runs.planning.services import run_create
from runs.settlement.recovery import recovery_plan, recovery_submit
from runs.settlement.recovery_rules import REASONS
from srbench.refusals import Refusal
from tests import factories as f
from tests.runs import engine_support as es

pytestmark = pytest.mark.django_db

STRONG = "assumes sim-strong does not bill error responses (errors_billed = false)"


def failed_run(owner: Any) -> tuple[Run, dict[str, Cell]]:
    """A failed MMLU-Pro run on sim-strong (errors not billed) and sim-weak (billed), frozen so;
    its cells ended as the engine ends them: sim-strong 429 and 500 answers before any stream
    byte, a sim-strong stream cut mid-way (cost unknown), a sim-weak 500 (its target bills
    errors), and a sim-strong call that completed with a known cost but failed the cell."""
    strong = f.target_create(
        slug="sim-strong", model="sim-strong", prices={"sim-strong": es.PRICES["sim-strong"]}
    )
    weak = f.target_create(
        slug="sim-weak",
        model="sim-weak",
        prices={"sim-weak": es.PRICES["sim-weak"]},
        errors_billed=True,
    )
    run, _ = run_create(
        owner=owner,
        plan={
            "name": "billing words",
            "dataset": es.fixture_dataset(["mmlu-pro"]).pk,
            "targets": ["sim-strong", "sim-weak"],
        },
    )
    # A later registry change alters nothing: the plan froze the rule.
    Target.objects.filter(pk=strong.pk).update(errors_billed=True)
    s = list(Cell.objects.filter(run=run, target=strong).order_by("pk"))
    w = list(Cell.objects.filter(run=run, target=weak).order_by("pk"))
    cells = {"s429": s[0], "s500": s[1], "cut": s[2], "known": s[3], "w500": w[0]}
    Cell.objects.filter(pk__in=[c.pk for c in cells.values()]).update(status="failed")
    Cell.objects.filter(run=run).exclude(pk__in=[c.pk for c in cells.values()]).update(
        status="cancelled"
    )
    for name, status in (("s429", 429), ("s500", 500)):
        f.call_create(
            cell=cells[name],
            target=strong,
            status="failed",
            http_status=status,
            error_code=f"http_{status}",
            bytes_received=90,
        )
    f.call_create(
        cell=cells["cut"],
        target=strong,
        status="failed",
        http_status=200,
        error_code="stream_disconnected",
        bytes_received=400,
    )
    f.call_create(
        cell=cells["known"],
        target=strong,
        status="failed",
        error_code="malformed_chunk",
        input_tokens=10,
        output_tokens=5,
        cost_usd="0.0002",
    )
    f.call_create(
        cell=cells["w500"],
        target=weak,
        status="failed",
        http_status=500,
        error_code="http_500",
        bytes_received=90,
    )
    Run.objects.filter(pk=run.pk).update(status="failed", finished_at=timezone.now())
    run.refresh_from_db()
    return run, cells


def test_the_api_states_the_billing_assumption_beside_each_zero_and_keeps_unknown_null(client):
    owner = f.user_create()
    client.force_login(owner)
    run, cells = failed_run(owner)
    plan = client.get(f"/api/v1/runs/{run.pk}/recovery-plan/", {"mode": "failed"}).json()

    eligible = {e["cell"]: e for e in plan["eligible_cells"]}
    assert set(eligible) == {cells["s429"].pk, cells["s500"].pk, cells["known"].pk}
    for name in ("s429", "s500"):
        entry = eligible[cells[name].pk]
        assert entry["previous_attempt_cost_usd"] == "0"
        assert entry["previous_attempt_cost_assumes"] == STRONG
    # A known cost needs no assumption.
    known = eligible[cells["known"].pk]
    assert known["previous_attempt_cost_usd"] == "0.0002"
    assert known["previous_attempt_cost_assumes"] is None
    assert plan["previous_attempt_cost_assumptions"] == [STRONG]

    # Unknown stays unknown: no figure, never "0", and no assumption words for it.
    excluded = {
        e["cell"]: e for e in plan["excluded"] if e["cell"] in {c.pk for c in cells.values()}
    }
    assert excluded[cells["cut"].pk]["reason"] == "ambiguous_saved_result_requires_reconciliation"
    assert excluded[cells["w500"].pk]["reason"] == "error_responses_billed"
    for entry in excluded.values():
        assert entry.get("previous_attempt_cost_usd") is None
        assert "previous_attempt_cost_assumes" not in entry
    assert "sim-weak" not in json.dumps(plan["previous_attempt_cost_assumptions"])
    # The parent's spend is incomplete (the error answers' cost is null in the ledger).
    assert plan["parent"]["spend_complete"] is False


def test_the_page_says_the_assumption_next_to_the_figure_and_unknown_cost_in_words(client):
    owner = f.user_create()
    client.force_login(owner)
    run, cells = failed_run(owner)
    html = client.get(f"/runs/{run.pk}/recovery/", {"mode": "failed"}).content.decode()

    assert "some calls have unknown cost" in html
    rows = {
        name: html[html.index(f'id="cell-{cells[name].pk}"') :].split("</tr>", 1)[0]
        for name in ("s429", "s500", "known")
    }
    for name in ("s429", "s500"):
        assert "$0" in rows[name] and f"({STRONG})" in rows[name], rows[name]
    assert "$0.0002" in rows["known"] and "errors_billed" not in rows["known"]
    extra = html[html.index('id="extra-cost"') :].split("</p>", 1)[0]
    assert "$0.0002 in total" in extra and STRONG in extra
    assert "the ledger keeps its cost unknown" in extra
    # The excluded cells carry their reasons, not a figure.
    reasons = html[html.index('id="exclusion-reasons"') :].split("</ul>", 1)[0]
    assert escape(REASONS["error_responses_billed"]) in reasons
    assert "sim-weak does not bill" not in html


def test_the_cli_prints_the_assumption_under_the_total_and_keeps_it_in_json(capsys):
    ops = f.user_create(username="ops", staff=True)
    run, cells = failed_run(ops)

    call_command("benchmark", "recover-plan", str(run.pk), "--mode", "failed", "--user", "ops")
    out = capsys.readouterr().out
    lines = out.splitlines()
    total = lines.index("previous attempts of the cells to run cost $0.0002 in total")
    assert lines[total + 1] == f"  {STRONG}"
    assert "sim-weak does not bill" not in out
    assert "(incomplete: some costs are unknown)" in out

    call_command(
        "benchmark", "recover-plan", str(run.pk), "--mode", "failed", "--user", "ops", "--json"
    )
    plan = json.loads(capsys.readouterr().out)
    assert plan["previous_attempt_cost_assumptions"] == [STRONG]
    by_cell = {e["cell"]: e for e in plan["eligible_cells"]}
    assert by_cell[cells["s429"].pk]["previous_attempt_cost_assumes"] == STRONG


def test_the_failed_mode_refusal_says_what_the_selected_cells_cost_not_that_they_cost_money():
    """An unacknowledged failed-mode submission is refused in words taken from the plan's known
    spend on the selected cells: $0 (with its billing assumption) when the plan says $0 — never
    "cells that already cost money" —, the amount when known, "unknown" when it is not. The
    API answers the same words; nothing is created."""
    owner = f.user_create()
    run, cells = failed_run(owner)
    plan = recovery_plan(run=run, mode="failed")

    def refusal(names: list[str]) -> Refusal:
        with pytest.raises(Refusal) as refused:
            recovery_submit(
                run=run,
                plan={**plan, "selected_cells": [cells[n].pk for n in names]},
                idempotency_key="words",
                user=owner,
            )
        assert refused.value.code == "acknowledgement_required"
        assert refused.value.http_status == 422
        return refused.value

    free = refusal(["s429", "s500"])
    assert "already cost money" not in free.message
    assert f"2 selected cell(s); their earlier attempts cost $0 ({STRONG})" in free.message
    assert free.detail == {
        "selected_cells": 2,
        "previous_attempts_cost_usd": "0",
        "previous_attempt_cost_assumptions": [STRONG],
    }
    paid = refusal(["known", "s500"])
    assert f"their earlier attempts cost $0.0002 ({STRONG})" in paid.message
    assert paid.detail["previous_attempts_cost_usd"] == "0.0002"
    unknown = refusal(["cut"])  # its stream broke mid-way: its cost is unknown, never $0
    assert "what their earlier attempts cost is unknown" in unknown.message
    assert unknown.detail["previous_attempts_cost_usd"] is None
    assert "$0" not in unknown.message

    api = APIClient()
    api.force_authenticate(owner)
    answer = api.post(
        f"/api/v1/runs/{run.pk}/recover/",
        {
            "plan_sha256": plan["plan_sha256"],
            "mode": "failed",
            "selected_cells": [cells["s429"].pk],
        },
        format="json",
        HTTP_IDEMPOTENCY_KEY="words-api",
    )
    assert answer.status_code == 422, answer.json()
    assert "their earlier attempts cost $0" in answer.json()["error"]
    assert "already cost money" not in answer.json()["error"]
    assert not Run.objects.filter(parent=run).exists()
