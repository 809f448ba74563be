"""The run's total spend and its waste (issue 21 point 5): what failed and unknown-outcome calls
cost, beside the total, on the report, API, page and CLI; unknown costs shown as unknown."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from runs.models import Cell
from runs.reporting.report import run_report
from tests import factories as f
from tests.compare import builders as b

pytestmark = pytest.mark.django_db

D = Decimal
COSTS = [D("0.0011407"), D("0.0000013"), D("0.0210001"), D("0.00042"), D("0.0000099")]
# Per case: a completed call, a failed one, a sent-but-unknown one, a completed, a failed one.
STATUSES = ["completed", "failed", "sent_unknown", "completed", "failed"]


def bench(capsys, *args: str) -> str:
    capsys.readouterr()
    try:
        call_command("benchmark", *args, "--user", "ops")
    except SystemExit as exc:
        assert not exc.code, capsys.readouterr()
    return capsys.readouterr()[0]


@pytest.fixture
def ops():
    return f.user_create(username="ops", staff=True)


def wasteful_run(costs=COSTS):  # type: ignore[no-untyped-def]
    qs = b.questions({"mmlu-pro": 5})
    t = b.target("wasteful")
    return b.run(
        qs,
        {t: [True, None, None, False, None]},
        costs={t: list(costs)},
        call_fields={t: [{"status": s} for s in STATUSES]},
        status="failed",
    )


def test_waste_is_the_known_cost_of_failed_and_unknown_outcome_calls_beside_total_spend():
    r = wasteful_run()
    # Independently: every call's cost, and those of the failed and sent-unknown calls.
    total = sum(COSTS, D(0))
    waste = sum((c for c, s in zip(COSTS, STATUSES, strict=True) if s != "completed"), D(0))
    assert waste == D("0.0210113")

    spend = run_report(run=r)["spend"]

    assert D(spend["known_total_spend_usd"]) == total
    # The run has ended and every call made has a known cost: the total is known (issue 35).
    assert D(spend["total_spend_usd"]) == total
    assert D(spend["waste_usd"]) == D(spend["known_waste_usd"]) == waste
    assert (spend["waste_calls"], spend["waste_calls_cost_unknown"]) == (3, 0)


def test_a_failed_call_of_unknown_cost_leaves_the_waste_unknown_with_its_known_part():
    r = wasteful_run([*COSTS[:4], None])
    spend = run_report(run=r)["spend"]
    assert spend["waste_usd"] is None
    assert D(spend["known_waste_usd"]) == COSTS[1] + COSTS[2]
    assert spend["waste_calls_cost_unknown"] == 1


def test_a_run_without_failures_wastes_a_known_zero():
    qs = b.questions({"mmlu-pro": 2})
    t = b.target("clean")
    r = b.run(qs, {t: [True, False]}, costs={t: D("0.25")})
    spend = run_report(run=r)["spend"]
    assert (spend["total_spend_usd"], spend["waste_usd"], spend["waste_calls"]) == ("0.5", "0", 0)


def test_api_page_and_cli_show_the_same_total_and_waste(ops, client, capsys):
    r = wasteful_run()
    api = APIClient()
    api.force_authenticate(ops)
    spend = api.get(f"/api/v1/runs/{r.pk}/report/").json()["spend"]
    assert spend["total_spend_usd"] == spend["known_total_spend_usd"] == "0.022572"
    assert spend["waste_usd"] == "0.0210113"

    client.force_login(ops)
    html = client.get(f"/runs/{r.pk}/").content.decode()
    assert (
        '<dd class="num" id="run-waste">0.0210113 <span class="meta">on 3 failed or '
        "unknown-outcome calls</span></dd>"
    ) in html
    assert '<dd class="num" id="run-total-spend">0.022572</dd>' in html

    out = bench(capsys, "report", str(r.pk))
    assert ("total spend $0.022572  waste $0.0210113 on 3 failed or unknown-outcome calls") in out


def test_a_target_without_prices_shows_unknown_cost_never_a_known_zero(ops, client, capsys):
    qs = b.questions({"mmlu-pro": 2})
    t = b.target("unpriced", prices={})
    r = b.run(qs, {t: [True, True]}, costs={t: None})

    report = run_report(run=r)
    target = report["targets"][0]
    assert target["known_cost_usd"] is None and target["known_total_spend_usd"] is None
    assert report["spend"]["known_total_spend_usd"] is None

    out = bench(capsys, "report", str(r.pk))
    assert "subject cost unknown: no subject call has a known cost" in out
    assert "known $0" not in out and "known unknown" not in out
    assert "total spend unknown  waste $0 on 0 failed" in out  # nothing failed: a known 0
    client.force_login(ops)
    html = client.get(f"/runs/{r.pk}/").content.decode()
    assert "known: 0" not in html and "known $0" not in html
    assert (
        '<tr><th>Known total spend</th><td class="num"><span class="unknown">unknown</span> '
        '<span class="meta">(incomplete)</span></td></tr>'
    ) in html


def test_cli_report_names_cancelled_cells_and_the_usage_correction(ops, capsys):
    qs = b.questions({"mmlu-pro": 4})
    t = b.target("stopped")
    r = b.run(qs, {t: [True, True, None, None]}, status="cancelled")
    Cell.objects.filter(run=r, status="failed").update(status="cancelled")
    r.usage_corrections.create(
        version=1,
        evidence_sha256="e" * 64,
        verified_count=4,
        changed_count=1,
        unverifiable_count=0,
        old_known_cost_usd=D("0.004"),
        new_known_cost_usd=D("0.0039"),
        corrections={"rules_version": "test", "calls": []},
    )

    out = bench(capsys, "report", str(r.pk))

    counts_line = next(line for line in out.splitlines() if line.startswith("denominator"))
    assert "  cancelled 2  " in counts_line
    bench_line = next(line for line in out.splitlines() if line.strip().startswith("mmlu-pro"))
    assert "failed 0  pending 0  cancelled 2  data: " in bench_line
    assert (
        f"usage correction v1 (evidence sha256 {'e' * 64}): verified 4  changed 1  "
        "unverifiable 0  known cost $0.004 → $0.0039"
    ) in out
    assert json.loads(bench(capsys, "report", str(r.pk), "--json"))["counts"]["cancelled"] == 2
