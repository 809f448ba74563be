"""What people expect of money words (issue 35 item 7): a cancelled run whose calls are all
priced states its total spend (cells never dispatched cost nothing), an unknown call cost still
keeps it unknown, and the CLI never prints "subject cost unknown (known unknown)"."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.core.management import call_command

from runs.models import Cell
from runs.reporting.report import run_report
from tests import factories as f
from tests.compare import builders as b

pytestmark = pytest.mark.django_db

D = Decimal


def bench(capsys, *args: str) -> str:  # type: ignore[no-untyped-def]
    capsys.readouterr()
    try:
        call_command("benchmark", *args, "--user", "ops")
    except SystemExit as exc:
        assert not exc.code, capsys.readouterr()
    return capsys.readouterr()[0]


@pytest.fixture
def ops():  # type: ignore[no-untyped-def]
    return f.user_create(username="ops", staff=True)


def cancelled_run(costs):  # type: ignore[no-untyped-def]
    """Four planned cells: two answered with one priced call each, two cancelled before any
    call was dispatched."""
    qs = b.questions({"mmlu-pro": 4})
    t = b.target("stopped")
    planned = b.manifest(qs, [t])  # the plan had four cases
    r = b.run(
        qs[:2],
        {t: [True, False]},
        costs={t: costs},
        status="cancelled",
        cases=planned["cases"],
        benchmarks=planned["benchmarks"],
    )
    for q in qs[2:]:
        Cell.objects.create(run=r, question=q, target=t, benchmark=q.benchmark, status="cancelled")
    assert Cell.objects.filter(run=r, calls__isnull=True).count() == 2
    return r


def test_a_cancelled_run_whose_calls_are_all_priced_states_its_total_spend(ops, client, capsys):
    r = cancelled_run([D("0.0011407"), D("0.00042")])

    report = run_report(run=r)
    assert report["counts"]["cancelled"] == 2
    assert report["spend"]["total_spend_usd"] == "0.0015607"
    assert report["spend"]["known_total_spend_usd"] == "0.0015607"
    # The target's own costs still cover its plan: 2 of 4 cells have no result.
    assert report["targets"][0]["subject_cost_usd"] is None

    client.force_login(ops)
    page = client.get(f"/runs/{r.pk}/").content.decode()
    assert '<dd class="num" id="run-total-spend">0.0015607</dd>' in page

    out = bench(capsys, "report", str(r.pk))
    assert "total spend $0.0015607  waste $0 on 0 failed" in out
    assert "total spend unknown" not in out


def test_a_call_of_unknown_cost_keeps_the_cancelled_runs_total_unknown(ops, client, capsys):
    r = cancelled_run([D("0.0011407"), None])

    spend = run_report(run=r)["spend"]
    assert spend["total_spend_usd"] is None
    assert spend["known_total_spend_usd"] == "0.0011407"

    client.force_login(ops)
    page = client.get(f"/runs/{r.pk}/").content.decode()
    assert (
        '<dd class="num" id="run-total-spend"><span class="unknown">unknown</span> '
        '<span class="meta">(known: 0.0011407)</span></dd>'
    ) in page
    assert "total spend unknown (known $0.0011407)" in bench(capsys, "report", str(r.pk))


def test_a_running_run_has_no_total_spend_yet():
    qs = b.questions({"mmlu-pro": 2})
    t = b.target("busy")
    planned = b.manifest(qs, [t])
    r = b.run(
        qs[:1],
        {t: [True]},
        costs={t: D("0.25")},
        status="running",
        cases=planned["cases"],
        benchmarks=planned["benchmarks"],
    )
    Cell.objects.create(run=r, question=qs[1], target=t, benchmark=qs[1].benchmark)
    spend = run_report(run=r)["spend"]
    assert spend["total_spend_usd"] is None and spend["known_total_spend_usd"] == "0.25"


def test_cli_subject_cost_says_what_is_known_never_known_unknown(ops, capsys):
    qs = b.questions({"mmlu-pro": 2})
    unpriced = b.target("unpriced", prices={})
    half = b.target("half")
    whole = b.target("whole")
    r = b.run(
        qs,
        {unpriced: [True, True], half: [True, False], whole: [True, True]},
        costs={unpriced: None, half: [D("0.25"), None], whole: D("0.5")},
    )
    lines = {
        line.split()[0]: line
        for line in bench(capsys, "report", str(r.pk)).splitlines()
        if line.startswith("  ") and not line.startswith("    ")
    }
    assert "subject cost unknown: no subject call has a known cost  " in lines["unpriced"]
    assert "subject cost unknown (known $0.25)  " in lines["half"]
    assert "subject cost $1 (known $1)  " in lines["whole"]
    assert not any("known unknown" in line for line in lines.values())
