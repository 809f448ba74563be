"""One cost for a call everywhere (DESIGN §5, SPEC R1.2, R15.3; session 9 decision).

A call the server refused with a complete HTTP 429 before any stream byte has no usage; its
target's registry entry, frozen into the plan, says error responses are not billed
(`errors_billed = false`), so by `runs.ledger.accounting.known_failure_unbilled` it cost a known
$0 — in the run report (API, page, CLI), the live results, the comparison's cell costs and the
failed-mode recovery plan alike, the assumption said beside the figure; its tokens stay unknown.
Before, the recovery plan said $0 and the report said unknown.

And nothing sent costs nothing: a target no call was sent to has a known $0, with words.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from compare.figures import cells_pack
from runs.models import Call, Cell, Run, Target
from runs.planning.services import run_create
from runs.reporting.live_report import run_report_live_compute
from runs.reporting.report import run_report
from runs.settlement.recovery import recovery_plan
from tests import factories as f
from tests.compare import builders as b
from tests.conftest import wait_until
from tests.runs import engine_support as es

BENCHMARKS = ["mmlu-pro"]
FAST = {"ttft_s": 0.0, "tokens_per_second": 0.0}
ASSUMES = "assumes sim-strong does not bill error responses (errors_billed = false)"


def bench(capsys, *args: str) -> str:
    capsys.readouterr()
    try:
        call_command("benchmark", *args, "--user", "ops")
    except SystemExit as exc:
        assert not exc.code, capsys.readouterr()
    return capsys.readouterr()[0]


def priced(call: Call, price: dict[str, str]) -> Decimal:
    """A completed call's cost from its tokens and the simulator's price list, computed here
    rather than read from the ledger's cost column."""
    return (
        call.input_tokens * Decimal(price["input"])
        + call.cached_input_tokens * Decimal(price["cached_input"])
        + call.cache_write_tokens * Decimal(price["cache_write"])
        + call.output_tokens * Decimal(price["output"])
    ) / Decimal(1_000_000)


@pytest.mark.worker
def test_a_429_refused_before_any_byte_costs_the_same_known_0_on_every_surface(
    celery_worker, client, capsys
):
    ops = f.user_create(username="ops", staff=True)
    models = {"sim-strong": {**FAST, "faults": ["429"]}, "sim-weak": FAST}
    with es.simulator(BENCHMARKS, models=models) as url:
        es.sim_targets(url)
        assert not Target.objects.get(slug="sim-strong").errors_billed  # the registry's default
        run, _ = run_create(
            owner=ops,
            plan={
                "name": "rate limited",
                "dataset": es.fixture_dataset(BENCHMARKS).pk,
                "targets": ["sim-strong", "sim-weak"],
                "failure_policy": "continue",
                "limits": {"concurrency": 2, "idle_timeout_s": 5, "total_timeout_s": 20},
            },
        )
        wait_until(lambda: es.terminal(run), timeout=90)

    strong_calls = Call.objects.filter(cell__run=run, target__slug="sim-strong")
    weak_calls = list(Call.objects.filter(cell__run=run, target__slug="sim-weak"))
    # The simulator refused every sim-strong call with a whole 429 before any stream byte; the
    # raw ledger keeps what the server said: no usage, no cost.
    assert strong_calls.count() == Cell.objects.filter(run=run, target__slug="sim-strong").count()
    assert set(strong_calls.values_list("http_status", "error_code", "status")) == {
        (429, "http_429", "failed")
    }
    assert not strong_calls.filter(cost_usd__isnull=False).exists()
    assert not strong_calls.filter(output_tokens__isnull=False).exists()
    assert weak_calls and all(c.status == "completed" for c in weak_calls)

    # Computed here: sim-weak's calls at their price, sim-strong's refusals at $0.
    weak = sum((priced(c, es.PRICES["sim-weak"]) for c in weak_calls), Decimal(0))
    total = weak + sum((Decimal(0) for _ in strong_calls), Decimal(0))
    assert weak > 0

    # The run report (API).
    api = APIClient()
    api.force_authenticate(ops)
    report = api.get(f"/api/v1/runs/{run.pk}/report/").json()
    by_slug = {t["slug"]: t for t in report["targets"]}
    strong = by_slug["sim-strong"]
    assert Decimal(strong["known_cost_usd"]) == 0
    assert Decimal(strong["known_total_spend_usd"]) == 0
    assert strong["subject_cost_usd"] is None  # no cell answered: the cost of the plan is unknown
    assert strong["tokens"]["output"] is None  # the refusals reported no tokens
    assert ASSUMES in strong["usage_unknown_reason"]
    assert Decimal(by_slug["sim-weak"]["subject_cost_usd"]) == weak
    assert Decimal(report["spend"]["total_spend_usd"]) == total
    assert Decimal(report["spend"]["waste_usd"]) == 0  # the failed calls cost nothing
    assert report["spend"]["waste_calls"] == strong_calls.count()
    assert report["spend"]["waste_calls_cost_unknown"] == 0

    # The same sums while a run runs (the trigger-kept live sums).
    live = run_report_live_compute(run=run).report
    live_strong = next(t for t in live.targets if t.slug == "sim-strong")
    assert live_strong.known_cost_usd == 0 and ASSUMES in live_strong.usage_unknown_reason
    assert live.spend.total_spend_usd == total and live.spend.waste_usd == 0

    # The comparison's per-cell subject costs.
    strong_id = Target.objects.get(slug="sim-strong").pk
    packed = cells_pack([run.pk])[run.pk]
    assert {float(r["cost"]) for r in packed if r["target"] == strong_id} == {0.0}

    # The failed-mode recovery plan.
    plan = recovery_plan(run=run, mode="failed")
    strong_cells = Cell.objects.filter(run=run, target__slug="sim-strong")
    offered = {e["cell"]: e for e in plan["eligible_cells"]}
    assert set(offered) == set(strong_cells.values_list("pk", flat=True))
    assert {Decimal(e["previous_attempt_cost_usd"]) for e in offered.values()} == {Decimal(0)}
    assert {e["previous_attempt_cost_assumes"] for e in offered.values()} == {ASSUMES}

    # The CLI's report and the run page.
    out = bench(capsys, "report", str(run.pk))
    assert "subject cost unknown (known $0)" in out
    assert ASSUMES in out
    assert f"total spend ${total}" in out
    client.force_login(ops)
    html = client.get(f"/runs/{run.pk}/").content.decode()
    assert f'<dd class="num" id="run-total-spend">{total}</dd>' in html
    assert "(known: 0)" in html
    assert ASSUMES in html


@pytest.mark.worker
def test_a_429_at_a_target_that_bills_errors_stays_unknown_on_every_surface(celery_worker):
    ops = f.user_create(username="ops", staff=True)
    models = {"sim-strong": {**FAST, "faults": ["429"]}}
    with es.simulator(BENCHMARKS, models=models) as url:
        es.sim_targets(url)
        Target.objects.filter(slug="sim-strong").update(errors_billed=True)
        run, _ = run_create(
            owner=ops,
            plan={
                "name": "billed errors",
                "dataset": es.fixture_dataset(BENCHMARKS).pk,
                "targets": ["sim-strong"],
                "failure_policy": "continue",
                "limits": {"concurrency": 2, "idle_timeout_s": 5, "total_timeout_s": 20},
            },
        )
        wait_until(lambda: es.terminal(run), timeout=90)

    report = run_report(run=run)
    strong = report["targets"][0]
    assert strong["known_cost_usd"] is None and report["spend"]["known_total_spend_usd"] is None
    assert "errors_billed" not in (strong["usage_unknown_reason"] or "")
    live = run_report_live_compute(run=run).report
    assert live.targets[0].known_cost_usd is None and live.spend.waste_usd is None
    packed = cells_pack([run.pk])[run.pk]
    assert all(r["cost"] != r["cost"] for r in packed)  # NaN: unknown
    plan = recovery_plan(run=run, mode="failed")
    assert plan["eligible_cells"] == []
    assert {e["reason"] for e in plan["excluded"]} == {"error_responses_billed"}


@pytest.mark.django_db
def test_a_target_no_call_was_sent_to_has_a_known_0_with_words(client, capsys):
    ops = f.user_create(username="ops", staff=True)
    qs = b.questions({"mmlu-pro": 2})
    answered, idle = b.target("answered"), b.target("idle")
    cost = Decimal("0.0011407")
    run = b.run(
        qs,
        {answered: [True, True], idle: ["cancelled", "cancelled"]},
        costs={answered: cost},
        status="cancelled",
    )
    assert not Call.objects.filter(cell__run=run, cell__target=idle).exists()

    report = run_report(run=run)
    by_slug = {t["slug"]: t for t in report["targets"]}
    target = by_slug["idle"]
    assert Decimal(target["known_cost_usd"]) == 0
    assert Decimal(target["known_total_spend_usd"]) == 0
    assert target["subject_cost_usd"] is None  # nothing answered: the plan's cost is unknown
    assert target["tokens"]["output"] is None
    assert target["usage_unknown_reason"].startswith("no call was sent to this target")
    assert Decimal(report["spend"]["known_total_spend_usd"]) == 2 * cost

    out = bench(capsys, "report", str(run.pk))
    assert "subject cost unknown (known $0)" in out
    assert "no call was sent to this target" in out
    client.force_login(ops)
    html = client.get(f"/runs/{run.pk}/").content.decode()
    assert "no call was sent to this target" in html


@pytest.mark.django_db
def test_a_run_that_sent_no_call_spent_a_known_0_and_a_preview_gives_no_figure():
    qs = b.questions({"mmlu-pro": 2})
    idle = b.target("idle")
    run = b.run(qs, {idle: ["cancelled", "cancelled"]}, status="cancelled")
    report = run_report(run=run)
    assert Decimal(report["targets"][0]["known_cost_usd"]) == 0
    assert Decimal(report["spend"]["total_spend_usd"]) == 0  # ended: nothing more can be sent
    assert Decimal(report["spend"]["waste_usd"]) == 0

    Run.objects.filter(pk=run.pk).update(mode=Run.Mode.PREVIEW)
    run.refresh_from_db()
    preview = run_report(run=run)
    assert preview["targets"][0]["known_cost_usd"] is None
    assert preview["spend"]["known_total_spend_usd"] is None
    assert not (preview["targets"][0]["usage_unknown_reason"] or "").startswith("no call")


@pytest.mark.worker
def test_the_budget_releases_the_reservation_of_a_failure_that_cost_a_known_0(celery_worker):
    """The budget counts what the report counts: a 429 before any byte at a target that does not
    bill errors reserved its worst case before it was sent and, once known to cost $0, gives the
    reservation back: the run's committed budget is the known spend (SPEC R1.2, R5)."""
    ops = f.user_create(username="ops", staff=True)
    models = {"sim-strong": {**FAST, "faults": ["429"]}, "sim-weak": FAST}
    with es.simulator(BENCHMARKS, models=models) as url:
        es.sim_targets(url)
        run, _ = run_create(
            owner=ops,
            plan={
                "name": "rate limited on a budget",
                "dataset": es.fixture_dataset(BENCHMARKS).pk,
                "targets": ["sim-strong", "sim-weak"],
                "failure_policy": "continue",
                "limits": {
                    "concurrency": 1,
                    "idle_timeout_s": 5,
                    "total_timeout_s": 20,
                    "max_cost_usd": "100",
                },
            },
        )
        wait_until(lambda: es.terminal(run), timeout=90)

    run.refresh_from_db()
    strong_calls = Call.objects.filter(cell__run=run, target__slug="sim-strong")
    weak_calls = list(Call.objects.filter(cell__run=run, target__slug="sim-weak"))
    assert strong_calls.exists() and set(strong_calls.values_list("error_code", flat=True)) == {
        "http_429"
    }
    # Each refusal reserved its worst case before it left (the ledger keeps what it reserved).
    assert all(c.reserved_cost_usd and c.reserved_cost_usd > 0 for c in strong_calls)
    assert weak_calls and all(c.status == "completed" for c in weak_calls)
    weak = sum((priced(c, es.PRICES["sim-weak"]) for c in weak_calls), Decimal(0))
    # Computed here: the known spend is sim-weak's calls; the refusals cost $0.
    assert run.budget_committed_usd == weak
