"""Exact money whatever the price's precision (issue 35 item 5): prices with 9 decimals per 1M
tokens make per-call costs of up to 15 decimals, which the ledger once rounded to 10 before
every surface summed them (a run total of 0.4404555586 for an exact 0.440455548384894).

A real run — the simulator on loopback, a real Celery worker, single models, a router priced
from its usage receipts and a judge — and every amount computed here, independently, in Decimal
from what the simulator reported (each call's raw usage, or a router's receipt entries) and the
prices: each call in the ledger, the report (API and function), the live sums, the budget, the
run's stored spend (API run detail), the CLI report, the CSV export and the comparison's
savings must equal the exact Decimal sum. Prices beyond the ledger's scale are refused with a
clear error, never rounded."""

from __future__ import annotations

import csv
import io
import json
from collections import defaultdict
from decimal import ROUND_HALF_UP, Decimal, localcontext
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from rest_framework.test import APIClient

from compare.services import comparison_build
from runs.ledger.accounting import Price, PriceError
from runs.models import Call, Cell, LiveCallSums, Run, Target
from runs.planning.plans import PlanError
from runs.planning.services import run_create
from runs.reporting.live_report import run_report_live_compute
from runs.reporting.report_types import report_doc
from srbench.money import MoneyPrecisionError, money_stored
from tests import factories as f
from tests.conftest import wait_until
from tests.runs import engine_support as es

PER_MILLION = Decimal(1_000_000)
BENCHMARKS = ["mmlu-pro", "simpleqa"]
PER_BENCHMARK = 6
SLOTS = 2  # the second attempt of a question repeats its prompt: the prefix cache serves it

# USD per 1M tokens, 9 decimals each (real lists reach 5+, e.g. 0.01875).
PRICES = {
    "sim-strong": {
        "input": "3.000000007",
        "cached_input": "0.300000011",
        "cache_write": "3.750000013",
        "output": "15.000000017",
    },
    "sim-weak": {
        "input": "0.018750019",
        "cached_input": "0.001875023",
        "cache_write": "0.600000029",
        "output": "1.500000031",
    },
    "sim-judge": {"input": "1.000000037", "cached_input": "0.100000041", "output": "2.000000043"},
}
TARGETS = ["sim-strong", "sim-weak", "sim-router"]


def plain(amount: Decimal) -> str:
    """Every digit, no exponent, no padding: the text a person should read."""
    text = f"{amount:f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def dec(value: str) -> Decimal:
    return Decimal(value)


def priced(model: str, uncached: int, cached: int, written: int, output: int) -> Decimal:
    """Σ bucket × price / 1e6, written out here rather than imported from runs.ledger.accounting."""
    p = PRICES[model]
    with localcontext() as ctx:
        ctx.prec = 80
        total = uncached * dec(p["input"]) + output * dec(p["output"])
        if cached:
            total += cached * dec(p["cached_input"])
        if written:
            total += written * dec(p["cache_write"])
        return total / PER_MILLION


def neutral(model: str, prompt: int, output: int) -> Decimal:
    p = PRICES[model]
    with localcontext() as ctx:
        ctx.prec = 80
        return (prompt * dec(p["input"]) + output * dec(p["output"])) / PER_MILLION


def expected_call(call: Call) -> tuple[Decimal, Decimal]:
    """(cost, cache-neutral cost) of one call from what the simulator sent: an OpenAI-style
    usage object for a single model or the judge, each receipt entry at its own model's price
    for the router."""
    headers = {k.lower(): v for k, v in call.response_headers.items()}
    if call.cell.target.slug == "sim-router" and call.role == "subject":
        entries = json.loads(headers["x-vsr-model-usage"])["calls"]
        cost, cn = Decimal(0), Decimal(0)
        for e in entries:
            u = e["usage"]
            cached, written = u["cached_input_tokens"], u["cache_write_tokens"]
            uncached = u["prompt_tokens"] - cached - written
            cost += priced(e["model"], uncached, cached, written, u["completion_tokens"])
            cn += neutral(e["model"], u["prompt_tokens"], u["completion_tokens"])
        return cost, cn
    u = call.usage_raw
    cached = (u.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    prompt, output = u["prompt_tokens"], u["completion_tokens"]
    return (
        priced(call.served_model, prompt - cached, cached, 0, output),
        neutral(call.served_model, prompt, output),
    )


def rounded_10(amount: Decimal) -> Decimal:
    return amount.quantize(Decimal("1E-10"), rounding=ROUND_HALF_UP)


class Expected:
    """Every amount of the run, summed here from the per-call amounts."""

    def __init__(self, run: Run) -> None:
        self.calls: dict[int, tuple[Decimal, Decimal]] = {}
        self.subject: dict[str, Decimal] = defaultdict(Decimal)
        self.neutral: dict[str, Decimal] = defaultdict(Decimal)
        self.judge: dict[str, Decimal] = defaultdict(Decimal)
        self.cell: dict[tuple[int, int, str], Decimal] = defaultdict(Decimal)
        calls = Call.objects.filter(cell__run=run).select_related("cell__target")
        for call in calls:
            cost, cn = expected_call(call)
            slug = call.cell.target.slug
            self.calls[call.pk] = (cost, cn)
            if call.role == "subject":
                self.subject[slug] += cost
                self.neutral[slug] += cn
                self.cell[(call.cell.question_id, call.cell.slot, slug)] += cost
            else:
                self.judge[slug] += cost

    def spend(self, slug: str) -> Decimal:
        return self.subject[slug] + self.judge[slug]

    @property
    def run_spend(self) -> Decimal:
        return sum((self.spend(s) for s in TARGETS), Decimal(0))


def assert_target(t: dict[str, Any], e: Expected, where: str) -> None:
    """One target's amounts in a report (or a comparison's usage block), as exact text."""
    slug = t["slug"] if "slug" in t else t["target"]
    want = {
        "subject_cost_usd": e.subject[slug],
        "known_cost_usd": e.subject[slug],
        "total_spend_usd": e.spend(slug),
        "cache_neutral_cost_usd": e.neutral[slug],
    }
    if "evaluation_cost_usd" in t:
        want["evaluation_cost_usd"] = e.judge[slug]
        want["known_total_spend_usd"] = e.spend(slug)
    for key, amount in want.items():
        assert t[key] == plain(amount), (where, slug, key, t[key], plain(amount))


def nine_decimal_targets(url: str) -> None:
    """The simulator's targets, priced at 9 decimals: each table passes the model's own
    validation (Target.full_clean) before it is saved."""
    targets = es.sim_targets(url)
    for key, model_names in (
        ("strong", ["sim-strong"]),
        ("weak", ["sim-weak"]),
        ("router", ["sim-strong", "sim-weak"]),
        ("judge", ["sim-judge"]),
    ):
        t = targets[key]
        t.prices = {m: PRICES[m] for m in model_names}
        t.full_clean()
        t.save()


@pytest.fixture
def ops():
    return f.user_create(username="ops", staff=True)


@pytest.fixture
def api(ops) -> APIClient:
    client = APIClient()
    client.force_authenticate(ops)
    return client


def cli(capsys, *args: str) -> str:
    capsys.readouterr()
    try:
        call_command("benchmark", *args, "--user", "ops")
    except SystemExit as exc:
        assert not exc.code, capsys.readouterr()
    return capsys.readouterr()[0]


@pytest.mark.worker
def test_a_run_at_nine_decimal_prices_is_exact_on_every_surface(celery_worker, ops, api, capsys):
    """issue 35 item 5: every surface equals the exact Decimal sum computed here."""
    with es.simulator(BENCHMARKS) as url:
        nine_decimal_targets(url)
        dataset = es.fixture_dataset(BENCHMARKS, per_benchmark=PER_BENCHMARK)
        run, _ = run_create(
            owner=ops,
            plan={
                "name": "exact money at 9 decimals",
                "dataset": dataset.pk,
                "targets": TARGETS,
                "judges": {"simpleqa": "sim-judge"},
                "slots": SLOTS,
                # A budget, so every call reserves its worst case and the run commits its cost.
                "limits": {"concurrency": 8, "max_cost_usd": "100"},
            },
        )
        wait_until(lambda: es.terminal(run), timeout=240)
    assert run.status == "completed", (run.stop_reason, celery_worker.log()[-3000:])
    e = Expected(run)

    # The data can catch the defect: costs have more than 10 decimals, and the 10-place
    # rounding the ledger once did changes the sums every surface shows.
    assert any(rounded_10(cost) != cost for cost, _ in e.calls.values())
    assert any(rounded_10(cn) != cn for _, cn in e.calls.values())
    assert len(e.calls) == len(BENCHMARKS) * PER_BENCHMARK * SLOTS * len(TARGETS) + (
        PER_BENCHMARK * SLOTS * len(TARGETS)  # a judge call per simpleqa answer
    )
    rounded_sum = sum((rounded_10(c) for c, _ in e.calls.values()), Decimal(0))
    assert rounded_sum != e.run_spend
    assert sum(e.judge.values()) > 0 and all(e.neutral[s] > e.subject[s] for s in TARGETS[:2])

    # The ledger: each call's amount with every digit.
    for call in Call.objects.filter(cell__run=run):
        assert (call.cost_usd, call.cache_neutral_cost_usd) == e.calls[call.pk], call.pk
        assert call.reserved_cost_usd is not None and call.reserved_cost_usd >= call.cost_usd

    # The budget: each call's reservation moved to its known cost, so it commits the spend.
    run.refresh_from_db()
    assert run.budget_committed_usd == e.run_spend

    # The live sums the trigger keeps, and the live report read from them.
    live = defaultdict(Decimal)
    for row in LiveCallSums.objects.filter(run=run).select_related("target"):
        live[(row.target.slug, row.role)] += row.cost_usd
    for slug in TARGETS:
        assert live[(slug, "subject")] == e.subject[slug]
        assert live[(slug, "judge")] == e.judge[slug]
    live_report = report_doc(run_report_live_compute(run=run).report)
    for t in live_report["targets"]:
        assert_target(t, e, "live report")

    # The report through the API, per target (subject, judge, spend, cache-neutral).
    response = api.get(f"/api/v1/runs/{run.pk}/report/")
    assert response.status_code == 200
    report = response.json()
    assert sorted(t["slug"] for t in report["targets"]) == sorted(TARGETS)
    for t in report["targets"]:
        assert_target(t, e, "report API")

    # The run detail: the stored report's known spend of the whole run.
    detail = api.get(f"/api/v1/runs/{run.pk}/").json()
    assert detail["result"]["known_spend_usd"] == plain(e.run_spend)
    assert detail["result"]["spend_complete"] is True

    # The CLI report's text and JSON.
    out = cli(capsys, "report", str(run.pk))
    for slug in TARGETS:
        subject = plain(e.subject[slug])
        assert f"subject cost ${subject} (known ${subject})" in out, slug
        assert f"judge ${plain(e.judge[slug])}" in out, slug
        assert f"cache-neutral ${plain(e.neutral[slug])}" in out, slug
    for t in json.loads(cli(capsys, "report", str(run.pk), "--json"))["targets"]:
        assert_target(t, e, "report --json")

    # The CSV export: each case's subject cost.
    response = api.get(f"/api/v1/runs/{run.pk}/export/?as=csv")
    assert response.status_code == 200
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert len(rows) == len(BENCHMARKS) * PER_BENCHMARK * SLOTS
    for row in rows:
        for slug in TARGETS:
            key = (int(row["question_id"]), int(row["slot"]), slug)
            assert row[f"{slug}.subject_cost_usd"] == plain(e.cell[key]), (row, slug)

    # The comparison: exact usage, and savings from the exact sums.
    doc = comparison_build(baseline_run_id=run.pk, candidate_run_ids=[run.pk])
    base = doc["baseline"]["target"]
    assert doc["baseline"]["subject_cost_usd"] == plain(e.subject[base])
    assert_target({**doc["baseline"]["usage"], "target": base}, e, "comparison baseline")
    assert len(doc["comparisons"]) == len(TARGETS) - 1
    for c in doc["comparisons"]:
        slug = c["target"]
        assert_target({**c["usage"], "target": slug}, e, "comparison")
        with localcontext() as ctx:
            ctx.prec = 34
            want = {
                "subject_cost_pct": 100 * (1 - e.subject[slug] / e.subject[base]),
                "total_spend_pct": 100 * (1 - e.spend(slug) / e.spend(base)),
                "cache_neutral_pct": 100 * (1 - e.neutral[slug] / e.neutral[base]),
            }
        for key, pct in want.items():
            assert c["savings"][key] == plain(pct), (slug, key, c["savings"][key], pct)


# --- prices beyond the ledger's scale are refused, never rounded ----------------------------


@pytest.mark.django_db
def test_a_price_beyond_twelve_decimals_is_refused_with_a_clear_error():
    """issue 35 item 5: a price with 12 decimals is kept; 13 cannot be stored exactly as a
    cost (13 + 6 > 18 places), so the target, the price table and a plan refuse it."""
    fine = {"m": {"input": "0.000000000001", "output": "1.123456789"}}
    t = f.target_create(slug="twelve", prices=fine)
    t.full_clean()
    assert Price.from_mapping(fine["m"]).input == Decimal("1E-12")

    too_fine = {"m": {"input": "0.0000000000001", "output": "1"}}
    t.prices = too_fine
    with pytest.raises(ValidationError) as refused:
        t.full_clean()
    (message,) = refused.value.message_dict["prices"]
    assert message == (
        "m.input: 0.0000000000001 has more than 12 decimal places per 1M tokens; costs are "
        "kept exactly to 18 places, so at most 12 are supported."
    )
    with pytest.raises(PriceError, match="more than 12 decimal places"):
        Price.from_mapping(too_fine["m"])
    # Trailing zeros are not decimals: 1.5000000000000 is 1.5.
    assert Price.from_mapping({"input": "1.5000000000000", "output": "2"}).input == Decimal("1.5")

    # A target stored before the rule (a raw update) cannot be frozen into a plan.
    Target.objects.filter(pk=t.pk).update(prices=too_fine)
    dataset = es.fixture_dataset(["mmlu-pro"], per_benchmark=1)
    with pytest.raises(PlanError) as plan_refused:
        run_create(
            owner=f.user_create(),
            plan={"name": "too fine", "dataset": dataset.pk, "targets": ["twelve"]},
        )
    assert "more than 12 decimal places" in plan_refused.value.errors["prices"]["twelve"][0]


def test_an_amount_beyond_the_ledger_scale_is_refused_not_rounded():
    """issue 35 item 5: what goes into a money column is the amount itself; one with more
    places than the column would be rounded by PostgreSQL, so it is refused instead."""
    eighteen = Decimal("0.123456789012345678")
    assert money_stored(eighteen) is eighteen
    assert money_stored(Decimal("2.50000000000000000000")) == Decimal("2.5")
    assert money_stored(None) is None
    with pytest.raises(MoneyPrecisionError, match="more than 18 decimal places"):
        money_stored(Decimal("0.1234567890123456789"))


@pytest.mark.django_db
def test_the_ledger_keeps_eighteen_places_through_the_database():
    """issue 35 item 5: a cost with 18 decimals is read back with every digit (the column was
    numeric(20, 10), which rounded it), and PostgreSQL sums such costs exactly."""
    from django.db.models import Sum

    from tests.compare import builders as b

    qs = b.questions({"mmlu-pro": 3})
    t = b.target("eighteen")
    costs = [Decimal("0.000000123456789012"), Decimal("0.000000000000000001"), Decimal("7")]
    run = b.run(qs, {t: [True] * 3}, costs={t: costs})
    stored = sorted(Call.objects.filter(cell__run=run).values_list("cost_usd", flat=True))
    assert stored == sorted(costs)
    total = Call.objects.filter(cell__run=run).aggregate(s=Sum("cost_usd"))["s"]
    assert total == sum(costs, Decimal(0)) == Decimal("7.000000123456789013")
    assert Cell.objects.filter(run=run).count() == 3
