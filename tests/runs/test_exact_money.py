"""Exact money on every surface (issue 18 point 3, DESIGN §5): prices that binary floating point
cannot hold (1.1 and 2.2 USD per 1M tokens, 0.1 + 0.2 style judge prices) over a few hundred
calls, so that a float sum anywhere would show digits the ledger never had. Every amount is
computed here, independently, in Decimal and compared exactly with what the report, the API,
the pages, the CLI, the comparison and the exports say; no output may hold a run of nine or
more identical digits (the mark of a float such as 0.0048200000000000005)."""

from __future__ import annotations

import csv
import io
import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pytest
from django.core.management import call_command
from django.utils import timezone
from rest_framework.test import APIClient

from compare.views import compare_url
from runs.models import Call, Cell, Run, Target
from runs.reporting.report import run_report
from tests import factories as f
from tests.compare import builders as b

pytestmark = pytest.mark.django_db(transaction=True)

FLOAT_ARTEFACT = re.compile(r"(\d)\1{8,}")
PER_MILLION = Decimal(1_000_000)
BENCHMARKS = {"mmlu-pro": 20, "gpqa": 20}
CASES = sum(BENCHMARKS.values())
SUBJECT_CALLS_PER_CELL = 3  # a multi-turn case: several subject calls add up per cell

# USD per 1M tokens. None of 1.1, 0.11, 3.3, 2.2, 0.22, 6.6, 0.1, 0.2 is a binary fraction.
PRICES = {
    "base": ("m-base", {"input": "2.2", "cached_input": "0.22", "output": "6.6"}),
    "cand": ("m-cand", {"input": "1.1", "cached_input": "0.11", "output": "3.3"}),
    "judge": ("m-judge", {"input": "0.1", "output": "0.2"}),
}
# The candidate's judge reads half the tokens, so every savings rate is exactly 50 %.
JUDGE_SCALE = {"base": 2, "cand": 1}


def plain(amount: Decimal) -> str:
    """The exact decimal text a person should read: every digit, no exponent, no padding."""
    text = f"{amount:f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def subject_tokens(case: int, turn: int) -> dict[str, int]:
    return {
        "input_tokens": 1000 + 37 * case + 101 * turn,
        "cached_input_tokens": 200 + 11 * case,
        "cache_write_tokens": 0,
        "output_tokens": 100 + 7 * case + 13 * turn,
    }


def judge_tokens(case: int, scale: int) -> dict[str, int]:
    return {
        "input_tokens": scale * (300 + 13 * case),
        "cached_input_tokens": 0,
        "cache_write_tokens": 0,
        "output_tokens": scale * (5 + case),
    }


def cost(tokens: dict[str, int], price: dict[str, str]) -> Decimal:
    """Σ bucket × price / 1e6, written out here rather than imported from runs.ledger.accounting."""
    total = tokens["input_tokens"] * Decimal(price["input"])
    total += tokens["output_tokens"] * Decimal(price["output"])
    if tokens["cached_input_tokens"]:
        total += tokens["cached_input_tokens"] * Decimal(price["cached_input"])
    return total / PER_MILLION


def neutral(tokens: dict[str, int], price: dict[str, str]) -> Decimal:
    prompt = tokens["input_tokens"] + tokens["cached_input_tokens"] + tokens["cache_write_tokens"]
    return (
        prompt * Decimal(price["input"]) + tokens["output_tokens"] * Decimal(price["output"])
    ) / PER_MILLION


@dataclass
class Expected:
    """What one target's run must show, from the test's own Decimal arithmetic."""

    subject: list[Decimal] = field(default_factory=list)
    neutral: list[Decimal] = field(default_factory=list)
    judge: list[Decimal] = field(default_factory=list)
    per_case: dict[int, Decimal] = field(default_factory=lambda: defaultdict(Decimal))

    @property
    def subject_total(self) -> Decimal:
        return sum(self.subject, Decimal(0))

    @property
    def neutral_total(self) -> Decimal:
        return sum(self.neutral, Decimal(0))

    @property
    def judge_total(self) -> Decimal:
        return sum(self.judge, Decimal(0))

    @property
    def spend_total(self) -> Decimal:
        return self.subject_total + self.judge_total


def expected_for(role: str) -> Expected:
    _model, price = PRICES[role]
    _judge_model, judge_price = PRICES["judge"]
    out = Expected()
    for case in range(CASES):
        for turn in range(SUBJECT_CALLS_PER_CELL):
            tokens = subject_tokens(case, turn)
            out.subject.append(cost(tokens, price))
            out.neutral.append(neutral(tokens, price))
            out.per_case[case] += cost(tokens, price)
        out.judge.append(cost(judge_tokens(case, JUDGE_SCALE[role]), judge_price))
    return out


def float_sum(amounts: list[Decimal]) -> float:
    total = 0.0
    for amount in amounts:
        total += float(amount)
    return total


def test_the_prices_defeat_a_float_sum():
    """The data can catch the defect: summed as floats, every total a surface shows differs
    from the Decimal total, and some float totals carry the artefact the regex looks for."""
    seen_artefacts = []
    for role in ("base", "cand"):
        e = expected_for(role)
        for amounts in (e.subject, e.neutral, e.judge, e.subject + e.judge):
            as_float = repr(float_sum(amounts))
            assert as_float != plain(sum(amounts, Decimal(0)))
            assert Decimal(as_float) != sum(amounts, Decimal(0))
            seen_artefacts += FLOAT_ARTEFACT.findall(as_float)
    assert seen_artefacts  # e.g. 0.0048200000000000005 and 0.6896867999999999
    # Savings are exact: the candidate pays half of everything the baseline pays.
    base, cand = expected_for("base"), expected_for("cand")
    assert cand.subject_total * 2 == base.subject_total
    assert cand.spend_total * 2 == base.spend_total
    assert cand.neutral_total * 2 == base.neutral_total


# --- the ledger ---------------------------------------------------------------------------------


@dataclass
class World:
    runs: dict[str, Run]
    targets: dict[str, Target]
    expected: dict[str, Expected]
    call_costs: dict[int, tuple[Decimal, Decimal]]  # call id → (cost, cache-neutral cost)
    case_of_cell: dict[int, int]  # cell id → case index


def _call(cell: Cell, target: Target, role: str, turn: int, tokens: dict[str, int], **money: Any):
    now = timezone.now()
    return Call(
        cell=cell,
        target=target,
        role=role,
        sequence=turn,
        request={"model": target.model},
        status="completed",
        sent_at=now,
        finished_at=now,
        served_model=target.model,
        finish_reason="stop",
        duration_ms=100.0,
        ttft_ms=10.0,
        **tokens,
        **money,
    )


def build_world() -> World:
    """Two comparable dev-split runs on the same 40 questions: the baseline run with one
    single model, the candidate run with a model at half its prices. Each cell has three
    subject calls (costs add up per cell) and one judge call (evaluation cost)."""
    qs = b.questions(BENCHMARKS)
    judge_model, judge_price = PRICES["judge"]
    judge = b.target("exact-judge", model=judge_model, prices={judge_model: judge_price})
    targets, runs, expected = {}, {}, {}
    call_costs: dict[int, tuple[Decimal, Decimal]] = {}
    case_of_cell: dict[int, int] = {}
    # Per benchmark, base answers 15 of 20 right (0.75) and cand 10 of 20 (0.5): the base is
    # the baseline, and every quality figure is a short binary fraction.
    right = {"base": lambda j: j % 4 != 3, "cand": lambda j: j % 2 == 0}
    for role in ("base", "cand"):
        model, price = PRICES[role]
        t = b.target(f"exact-{role}", model=model, prices={model: price})
        position: dict[str, int] = defaultdict(int)
        outcomes = []
        for q in qs:
            outcomes.append(right[role](position[q.benchmark]))
            position[q.benchmark] += 1
        first_turn = [
            {
                **subject_tokens(i, 0),
                "cost_usd": cost(subject_tokens(i, 0), price),
                "cache_neutral_cost_usd": neutral(subject_tokens(i, 0), price),
            }
            for i in range(CASES)
        ]
        run = b.run(qs, {t: outcomes}, call_fields={t: first_turn})
        Run.objects.filter(pk=run.pk).update(name=f"exact {role}")
        run.refresh_from_db()
        calls = []
        for cell in Cell.objects.filter(run=run):
            i = qs.index(next(q for q in qs if q.pk == cell.question_id))
            case_of_cell[cell.pk] = i
            for turn in range(1, SUBJECT_CALLS_PER_CELL):
                tokens = subject_tokens(i, turn)
                calls.append(
                    _call(
                        cell,
                        t,
                        "subject",
                        turn,
                        tokens,
                        cost_usd=cost(tokens, price),
                        cache_neutral_cost_usd=neutral(tokens, price),
                    )
                )
            tokens = judge_tokens(i, JUDGE_SCALE[role])
            calls.append(
                _call(
                    cell,
                    judge,
                    "judge",
                    0,
                    tokens,
                    cost_usd=cost(tokens, judge_price),
                    cache_neutral_cost_usd=None,
                )
            )
        f.calls_insert(calls)
        for c in Call.objects.filter(cell__run=run):
            i = case_of_cell[c.cell_id]
            if c.role == "judge":
                tokens, priced_at = judge_tokens(i, JUDGE_SCALE[role]), judge_price
            else:
                tokens, priced_at = subject_tokens(i, c.sequence), price
            want = (cost(tokens, priced_at), neutral(tokens, priced_at))
            # The ledger holds every digit (10 decimal places are enough for these prices).
            assert c.cost_usd == want[0], (c.pk, c.cost_usd, want[0])
            call_costs[c.pk] = (want[0], c.cache_neutral_cost_usd)
        targets[role], runs[role], expected[role] = t, run, expected_for(role)
    return World(runs, targets, expected, call_costs, case_of_cell)


@pytest.fixture
def world() -> World:
    return build_world()


@pytest.fixture
def ops():
    return f.user_create(username="ops", staff=True)


@pytest.fixture
def api(ops) -> APIClient:
    client = APIClient()
    client.force_authenticate(ops)
    return client


def no_float_artefact(text: str, where: str) -> None:
    match = FLOAT_ARTEFACT.search(text)
    context = "" if match is None else text[max(0, match.start() - 60) : match.end() + 20]
    assert match is None, f"{where}: float artefact {match.group(0)!r} in …{context}…"


def assert_target_money(t: dict[str, Any], e: Expected, where: str) -> None:
    """A report's (or comparison usage block's) amounts of one target, as exact text."""
    want = {
        "subject_cost_usd": e.subject_total,
        "known_cost_usd": e.subject_total,
        "total_spend_usd": e.spend_total,
        "cache_neutral_cost_usd": e.neutral_total,
    }
    if "evaluation_cost_usd" in t:
        want |= {
            "evaluation_cost_usd": e.judge_total,
            "known_evaluation_cost_usd": e.judge_total,
            "known_total_spend_usd": e.spend_total,
        }
    for key, amount in want.items():
        assert t[key] == plain(amount), (where, key, t[key], plain(amount))


# --- surfaces ----------------------------------------------------------------------------------


def test_run_report_function_and_api_are_exact(world, api):
    for role, run in world.runs.items():
        report = run_report(run=run)
        (t,) = report["targets"]
        assert_target_money(t, world.expected[role], f"run_report {role}")
        no_float_artefact(json.dumps(report), f"run_report {role}")

        response = api.get(f"/api/v1/runs/{run.pk}/report/")
        assert response.status_code == 200
        no_float_artefact(response.content.decode(), f"report API {role}")
        (t,) = response.json()["targets"]
        assert_target_money(t, world.expected[role], f"report API {role}")


def test_calls_and_results_api_show_each_recorded_amount_exactly(world, api):
    for run in world.runs.values():
        seen, after = 0, 0
        while True:
            response = api.get(f"/api/v1/runs/{run.pk}/calls/?limit=100&after={after}")
            assert response.status_code == 200
            no_float_artefact(response.content.decode(), "calls API")
            page = response.json()
            if not page["results"]:
                break
            for c in page["results"]:
                want_cost, want_neutral = world.call_costs[c["id"]]
                # The column's scale is 10 places; the API shows the amount, not the padding.
                assert c["cost_usd"] == plain(want_cost), c
                assert c["cache_neutral_cost_usd"] == (
                    None if want_neutral is None else plain(want_neutral)
                )
            seen += len(page["results"])
            after = page["next_after"]
        assert seen == CASES * (SUBJECT_CALLS_PER_CELL + 1)

        one = Call.objects.filter(cell__run=run, role="subject").order_by("pk").last()
        detail = api.get(f"/api/v1/runs/{run.pk}/calls/{one.pk}/")
        no_float_artefact(detail.content.decode(), "call API")
        assert detail.json()["cost_usd"] == plain(world.call_costs[one.pk][0])
        assert detail.json()["cache_neutral_cost_usd"] == plain(world.call_costs[one.pk][1])

        response = api.get(f"/api/v1/runs/{run.pk}/results/?limit=100")
        assert response.status_code == 200
        no_float_artefact(response.content.decode(), "results API")


def test_run_pages_show_exact_amounts(world, client, ops):
    client.force_login(ops)
    for role, run in world.runs.items():
        e = world.expected[role]
        html = client.get(f"/runs/{run.pk}/").content.decode()
        no_float_artefact(html, f"run page {role}")
        costs = re.search(r'<table class="compact costs">(.*?)</table>', html, re.S).group(1)
        for label, amount in (
            ("Subject cost", e.subject_total),
            ("Judge / simulator cost", e.judge_total),
            ("Known total spend", e.spend_total),
            ("Cache-neutral cost", e.neutral_total),
        ):
            assert f'<th>{label}</th><td class="num">{plain(amount)}</td>' in costs, label

        # The Calls tab, a call page and a question page: each call's own amount, every digit
        # (floatformat:6 used to show 0.0011407 as 0.001141).
        html = client.get(f"/runs/{run.pk}/?tab=calls").content.decode()
        no_float_artefact(html, f"calls tab {role}")
        shown = re.findall(
            rf'(<tr><td class="num"><a href="/runs/{run.pk}/calls/(\d+)/">.*?</tr>)', html, re.S
        )
        assert len(shown) >= 20
        for row, call_id in shown:
            assert f'<td class="num">{plain(world.call_costs[int(call_id)][0])}</td>' in row, row

        call = Call.objects.filter(cell__run=run, role="subject").order_by("pk").last()
        html = client.get(f"/runs/{run.pk}/calls/{call.pk}/").content.decode()
        no_float_artefact(html, f"call page {role}")
        want_cost, want_neutral = world.call_costs[call.pk]
        assert f'<th>Cost (USD)</th><td class="num">{plain(want_cost)}' in html
        assert f'<th>Cache-neutral cost</th><td class="num">{plain(want_neutral)}</td>' in html

        html = client.get(f"/runs/{run.pk}/questions/{call.cell_id}/").content.decode()
        no_float_artefact(html, f"question page {role}")
        for c in Call.objects.filter(cell_id=call.cell_id):
            assert f'<td class="num">{plain(world.call_costs[c.pk][0])}</td>' in html


def bench(capsys, *args: str) -> str:
    capsys.readouterr()
    try:
        call_command("benchmark", *args, "--user", "ops")
    except SystemExit as exc:
        assert not exc.code, capsys.readouterr()
    out, _err = capsys.readouterr()
    no_float_artefact(out, f"benchmark {' '.join(args)}")
    return out


def test_cli_report_show_compare_and_lineage_print_exact_amounts(world, ops, capsys):
    for role, run in world.runs.items():
        e = world.expected[role]
        out = bench(capsys, "report", str(run.pk))
        assert (
            f"subject cost ${plain(e.subject_total)} (known ${plain(e.subject_total)})  "
            f"judge ${plain(e.judge_total)}  cache-neutral ${plain(e.neutral_total)}"
        ) in out
        (t,) = json.loads(bench(capsys, "report", str(run.pk), "--json"))["targets"]
        assert_target_money(t, e, f"report --json {role}")

        out = bench(capsys, "show", str(run.pk), "--calls", "--limit", "100")
        lines = [line for line in out.splitlines() if "cost $" in line]
        assert len(lines) == 100
        for line in lines:
            call_id = int(line.split()[0])
            assert line.endswith(f"cost ${plain(world.call_costs[call_id][0])}"), line

        out = bench(capsys, "lineage", str(run.pk))
        assert f"known cost ${plain(e.spend_total)}  " in out

    base, cand = world.runs["base"], world.runs["cand"]
    out = bench(capsys, "compare", str(base.pk), str(cand.pk))
    assert f"subject cost ${plain(world.expected['base'].subject_total)}  tied" in out
    doc = json.loads(bench(capsys, "compare", str(base.pk), str(cand.pk), "--json"))
    assert_target_money(doc["baseline"]["usage"], world.expected["base"], "compare --json")
    assert_target_money(doc["comparisons"][0]["usage"], world.expected["cand"], "compare --json")

    out = bench(capsys, "export", str(cand.pk))
    assert_export_csv(out, world, "cand", "benchmark export")


def assert_comparison(doc: dict[str, Any], world: World, where: str) -> None:
    base_e, cand_e = world.expected["base"], world.expected["cand"]
    assert doc["baseline"]["target"] == "exact-base"
    assert doc["baseline"]["subject_cost_usd"] == plain(base_e.subject_total), where
    assert_target_money(doc["baseline"]["usage"], base_e, where)
    (c,) = doc["comparisons"]
    assert_target_money(c["usage"], cand_e, where)
    # Exact ratios of exact sums: half the cost is 50 % saved, not 49.99999999999999.
    s = c["savings"]
    assert (s["subject_cost_pct"], s["total_spend_pct"], s["cache_neutral_pct"]) == ("50",) * 3
    assert (c["savings_interval"]["lower"], c["savings_interval"]["upper"]) == (50.0, 50.0)


def test_comparison_api_page_and_exports_are_exact(world, api, client, ops):
    base, cand = world.runs["base"], world.runs["cand"]
    response = api.get(f"/api/v1/comparisons/?baseline={base.pk}&candidate={cand.pk}")
    assert response.status_code == 200
    no_float_artefact(response.content.decode(), "comparisons API")
    assert_comparison(response.json(), world, "comparisons API")

    response = api.post(
        "/api/v1/compare/", {"baseline": base.pk, "candidates": [cand.pk]}, format="json"
    )
    assert response.status_code == 200
    no_float_artefact(response.content.decode(), "compare API")
    assert_comparison(response.json(), world, "compare API")

    selection = f"baseline={base.pk}&candidates={cand.pk}"
    response = api.get(f"/api/v1/compare/export.json?{selection}")
    no_float_artefact(response.content.decode(), "compare export.json")
    assert_comparison(json.loads(response.content), world, "compare export.json")

    response = api.get(f"/api/v1/compare/export.csv?{selection}")
    text = response.content.decode()
    no_float_artefact(text, "compare export.csv")
    rows = {r["row"]: r for r in csv.DictReader(io.StringIO(text))}
    for row, role in (("baseline", "base"), ("candidate", "cand")):
        e = world.expected[role]
        assert rows[row]["subject_cost_usd"] == plain(e.subject_total)
        assert rows[row]["total_spend_usd"] == plain(e.spend_total)
        assert rows[row]["cache_neutral_cost_usd"] == plain(e.neutral_total)
    assert rows["candidate"]["subject_savings_pct"] == "50"

    client.force_login(ops)
    html = client.get(compare_url(baseline=base.pk, candidates=[cand.pk], compare=True))
    html = html.content.decode()
    no_float_artefact(html, "compare page")
    base_e, cand_e = world.expected["base"], world.expected["cand"]
    assert f"<dd>${plain(base_e.subject_total)}</dd>" in html
    for b_amount, c_amount in (
        (base_e.subject_total, cand_e.subject_total),
        (base_e.spend_total, cand_e.spend_total),
        (base_e.neutral_total, cand_e.neutral_total),
    ):
        assert (
            f'<td class="num" data-label="Baseline">${plain(b_amount)}</td>'
            f'<td class="num" data-label="Candidate">${plain(c_amount)}</td>'
        ) in html


def assert_export_csv(text: str, world: World, role: str, where: str) -> None:
    slug = f"exact-{role}"
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) == CASES, where
    e = world.expected[role]
    by_question = {c.question_id: c.pk for c in Cell.objects.filter(run=world.runs[role])}
    for row in rows:
        case = world.case_of_cell[by_question[int(row["question_id"])]]
        assert row[f"{slug}.subject_cost_usd"] == plain(e.per_case[case]), (where, row)


def test_run_export_json_and_csv_are_exact(world, api):
    for role, run in world.runs.items():
        e = world.expected[role]
        response = api.get(f"/api/v1/runs/{run.pk}/export/?as=json")
        assert response.status_code == 200
        text = response.content.decode()
        no_float_artefact(text, f"export json {role}")
        matrix = json.loads(text)
        by_question = {c.question_id: c.pk for c in Cell.objects.filter(run=run)}
        for row in matrix["rows"]:
            case = world.case_of_cell[by_question[row["question_id"]]]
            cell = row["targets"][f"exact-{role}"]
            assert cell["subject_cost_usd"] == plain(e.per_case[case])
        assert len({r["targets"][f"exact-{role}"]["subject_cost_usd"] for r in matrix["rows"]}) > 1

        response = api.get(f"/api/v1/runs/{run.pk}/export/?as=csv")
        assert response.status_code == 200
        text = response.content.decode()
        no_float_artefact(text, f"export csv {role}")
        assert_export_csv(text, world, role, f"export csv {role}")


def test_usage_correction_states_the_exact_known_costs(world, api, client, ops, capsys):
    """Reconciling calls that kept no evidence leaves them unknown: the correction states the
    exact known cost before (every recorded amount) and after (0), on every surface."""
    run, e = world.runs["base"], world.expected["base"]
    out = bench(capsys, "reconcile-usage", str(run.pk))
    assert f"known cost {plain(e.spend_total)} → 0 USD" in out
    doc = json.loads(bench(capsys, "reconcile-usage", str(run.pk), "--json"))
    assert (doc["old_known_cost_usd"], doc["new_known_cost_usd"]) == (plain(e.spend_total), "0")

    correction = run_report(run=run)["usage_correction"]
    assert correction["old_known_cost_usd"] == plain(e.spend_total)
    response = api.get(f"/api/v1/runs/{run.pk}/events/?type=usage.reconciled")
    no_float_artefact(response.content.decode(), "events API")
    (event,) = response.json()["results"]
    assert event["payload"]["old_known_cost_usd"] == plain(e.spend_total)

    client.force_login(ops)
    html = client.get(f"/runs/{run.pk}/").content.decode()
    no_float_artefact(html, "run page after reconcile")
    assert f'<dt>Known cost before</dt><dd class="num">${plain(e.spend_total)}</dd>' in html
