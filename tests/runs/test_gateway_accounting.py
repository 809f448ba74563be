"""A gateway between srbench and the model server (cost accounting, runs/ledger/accounting.py):
its own token estimate in a stream, frozen from the target check into the plan, makes a call's
tokens and cost unknown; its re-sends of a request upstream make the run's cost a lower bound.
Measured against real LiteLLM in tests/real/test_gateway_llama.py and test_gateway_resend.py;
here the rules through the real engine, worker, database and reconcile-usage, without them."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.core.management import call_command

from runs.ledger.accounting import (
    GATEWAY_ESTIMATE_NOTE,
    STREAM_USAGE_CHECKED_KEY,
    STREAM_USAGE_ESTIMATE_KEY,
    call_accounting,
    gateway_resent_note,
)
from runs.models import Call
from runs.models.preflight import TargetPreflight
from runs.planning.plans import plan_freeze
from runs.planning.services import run_create
from runs.reporting.reconcile import usage_reconcile
from runs.reporting.report import run_report
from tests import factories as f
from tests.compare import builders as b
from tests.conftest import wait_until
from tests.runs import engine_support as es
from tests.runs.test_accounting import CHILD_A, CHILD_B, PRICES, STREAM_USAGE, receipt
from tests.runs.test_reconcile import USAGE, attach, stream

D = Decimal
# What the target check stores when a stream's usage disagrees with the plain answer's
# (runs.preflight.findings.usage_findings; LiteLLM before llama.cpp, measured).
OBSERVED = (
    "the stream's usage counts 9 prompt tokens where the plain answer to the same prompt "
    "counts 32: the stream's usage is not the server's own count (a gateway in front of the "
    "server estimating tokens itself)"
)
QUIRK = {"key": "stream_usage", "verdict": "quirk", "observed": OBSERVED, "effect": "…"}


def bench(capsys, *args: str) -> str:
    capsys.readouterr()
    f.user_create(username="ops", staff=True)
    try:
        call_command("benchmark", *args, "--user", "ops")
    except SystemExit as exc:
        assert not exc.code, capsys.readouterr()
    return capsys.readouterr()[0]


def checked(target, findings: list[dict]) -> TargetPreflight:
    """A completed target check of the target's current endpoint and model."""
    return TargetPreflight.objects.create(
        target=target,
        status="completed",
        base_url=target.base_url,
        model=target.model,
        planned_calls=9,
        stream_usage=True,
        findings=findings,
    )


# --------------------------------------------------------------------------------------------
# A gateway's own estimate


@pytest.mark.django_db
def test_the_checks_finding_of_a_gateways_estimate_is_frozen_into_the_plans_target():
    dataset = es.fixture_dataset(["mmlu-pro"], per_benchmark=1)
    target = f.target_create(slug="gw", model="gw", prices={"gw": {"input": "1", "output": "2"}})
    plan = {"name": "gw", "dataset": dataset.pk, "targets": ["gw"]}
    before = plan_freeze(data=plan)
    assert STREAM_USAGE_ESTIMATE_KEY not in before.manifest["targets"][0]

    check = checked(target, [QUIRK])
    after = plan_freeze(data=plan)

    assert after.manifest["targets"][0][STREAM_USAGE_ESTIMATE_KEY] == (
        f"target check #{check.pk}: {OBSERVED}"
    )
    assert after.plan_sha256 != before.plan_sha256
    # A later check that finds the server's own count in the stream is the one a plan reads.
    ok = checked(target, [{"key": "stream_usage", "verdict": "ok", "observed": "", "effect": ""}])
    snapshot = plan_freeze(data=plan).manifest["targets"][0]
    assert STREAM_USAGE_ESTIMATE_KEY not in snapshot
    assert snapshot[STREAM_USAGE_CHECKED_KEY] == f"target check #{ok.pk}"


def test_a_run_after_the_check_records_the_gateways_estimate_as_unknown_not_as_a_cost(
    celery_worker, capsys
):
    with es.simulator(["mmlu-pro"]) as url:
        targets = es.sim_targets(url)
        checked(targets["strong"], [QUIRK])
        dataset = es.fixture_dataset(["mmlu-pro"], per_benchmark=2)
        run, _ = run_create(
            owner=f.user_create(),
            plan={"name": "estimate", "dataset": dataset.pk, "targets": ["sim-strong"]},
        )
        wait_until(lambda: es.terminal(run), timeout=120)
    assert run.status == "completed", (run.stop_reason, celery_worker.log()[-2000:])
    calls = list(Call.objects.filter(cell__run=run))
    assert len(calls) == 2
    for call in calls:
        # The stream carried a usage object, shaped like a receipt; it is kept as evidence.
        assert call.usage_raw and call.usage_raw["prompt_tokens"] > 0
        assert (call.input_tokens, call.output_tokens, call.cost_usd) == (None, None, None)
        assert call.cache_neutral_cost_usd is None
        assert call.cost_note == GATEWAY_ESTIMATE_NOTE
    target = run_report(run=run)["targets"][0]
    assert target["subject_cost_usd"] is None and target["known_cost_usd"] is None
    assert target["tokens"]["input"] is None
    assert target["usage_caution"] is None  # no gateway answered the simulator's calls
    assert target["usage_unknown_reason"].startswith(
        f"2 of 2 subject calls carried usage that is not the server's own count (target check "
        f"#{TargetPreflight.objects.get().pk}: {OBSERVED}): their tokens and cost are unknown"
    )
    # reconcile-usage applies the frozen finding too: the evidence verifies, the cost stays
    # unknown and each call's reason says why.
    correction = usage_reconcile(run_id=run.pk).correction
    assert (correction.verified_count, correction.changed_count) == (2, 0)
    assert {e["reason"] for e in correction.corrections["calls"]} == {GATEWAY_ESTIMATE_NOTE}
    assert {e["cost_usd"] for e in correction.corrections["calls"]} == {None}
    # The call as a member reads it (API and CLI): usage unknown, the reason beside it.
    shown = bench(capsys, "show", str(run.pk), "--calls", "--json")
    assert GATEWAY_ESTIMATE_NOTE in shown


# --------------------------------------------------------------------------------------------
# A gateway's re-sends


def resent_run(retries: str = "1"):  # type: ignore[no-untyped-def]
    """Two completed subject calls priced from their evidence; the gateway says it re-sent the
    first one upstream ``retries`` times."""
    qs = b.questions({"mmlu-pro": 2})
    t = b.target("gw-resend")
    headers = {"x-litellm-attempted-retries": retries}
    note = f"{gateway_resent_note(headers)}; priced as m-strong"
    cost = (D(100) * 3 + D(20) * D("0.3") + D(30) * 15) / D(1_000_000)
    neutral = (D(120) * 3 + D(30) * 15) / D(1_000_000)
    r = b.run(
        qs,
        {t: [True, True]},
        costs={t: cost},
        neutral={t: neutral},
        call_fields={
            t: [
                {
                    "usage_raw": USAGE,
                    "served_model": "m-strong",
                    "response_headers": headers,
                    "cost_note": note,
                    "input_tokens": 100,
                    "cached_input_tokens": 20,
                    "output_tokens": 30,
                },
                {
                    "usage_raw": USAGE,
                    "served_model": "m-strong",
                    "cost_note": "priced as m-strong",
                    "input_tokens": 100,
                    "cached_input_tokens": 20,
                    "output_tokens": 30,
                },
            ]
        },
    )
    calls = list(Call.objects.filter(cell__run=r).order_by("cell__question_id"))
    for call in calls:
        attach(call, stream())
    return r, calls, cost


@pytest.mark.django_db
def test_reconcile_usage_keeps_the_gateways_resent_words_in_the_calls_note():
    r, (resent, plain), _cost = resent_run()

    entries = {
        e["call_id"]: e for e in usage_reconcile(run_id=r.pk).correction.corrections["calls"]
    }

    assert entries[resent.pk]["outcome"] == "verified"
    assert entries[resent.pk]["reason"] == resent.cost_note
    assert entries[resent.pk]["reason"].startswith(
        "the gateway re-sent this request 1 time(s) upstream: cost is of the last attempt only"
    )
    assert entries[plain.pk]["reason"] == "priced as m-strong"


@pytest.mark.django_db
def test_a_run_with_a_call_the_gateway_resent_has_a_cost_of_at_least_its_known_sum(client):
    r, _calls, cost = resent_run()

    report = run_report(run=r)

    target = report["targets"][0]
    # Each call keeps the known cost of the answer that came back ...
    assert D(target["known_cost_usd"]) == 2 * cost
    # ... but what the first call's earlier attempt cost is unknown: no complete total.
    assert target["subject_cost_usd"] is None and target["total_spend_usd"] is None
    assert target["tokens"]["input"] is None and target["tokens_known_partial"]["input"] == 200
    assert "the gateway re-sent 1 of 2 subject calls upstream" in target["usage_unknown_reason"]
    spend = report["spend"]
    assert spend["total_spend_usd"] is None and D(spend["known_total_spend_usd"]) == 2 * cost
    assert spend["gateway_resent_calls"] == 1
    # The run's page says it: at least the known sum, and why.
    client.force_login(r.owner)
    page = client.get(f"/runs/{r.pk}/").content.decode()
    assert '<span id="run-spend-at-least">at least' in page
    assert "a gateway re-sent 1 call upstream" in page
    assert "the gateway re-sent 1 of 2 subject calls upstream" in page


@pytest.mark.django_db
def test_the_cli_report_says_the_spend_is_at_least_the_known_sum(capsys):
    r, _calls, cost = resent_run("2")
    out = bench(capsys, "report", str(r.pk))
    assert "a gateway re-sent 1 calls upstream, their earlier attempts' cost unknown" in out
    assert "total spend unknown" in out


@pytest.mark.django_db
def test_known_costs_answered_by_a_gateway_no_check_looked_at_carry_a_caution(client, capsys):
    """A run cannot tell a LiteLLM gateway's estimate from the server's count (the headers and
    the usage chunk are the same); it can tell that LiteLLM answered, and says what that means
    when the plan froze no check of the target's stream usage. The costs stay as recorded."""
    qs = b.questions({"mmlu-pro": 2})
    t = b.target("gw-unchecked")
    answered = {"response_headers": {"x-litellm-version": "1.110.2"}}
    r = b.run(qs, {t: [True, True]}, call_fields={t: [answered, {}]})

    target = run_report(run=r)["targets"][0]

    assert D(target["subject_cost_usd"]) == D("0.002")  # as recorded, not made unknown
    assert target["usage_caution"].startswith(
        "1 of 2 subject calls were answered through a LiteLLM gateway and the plan froze no "
        "target check of it"
    )
    client.force_login(r.owner)
    page = client.get(f"/runs/{r.pk}/").content.decode()
    assert 'id="usage-caution-gw-unchecked"' in page
    assert "were answered through a LiteLLM gateway" in bench(capsys, "report", str(r.pk))


def test_a_frozen_estimate_unprices_stream_usage_never_a_routers_receipt():
    """The finding is about the stream's usage: a router's complete per-call receipt is not
    that and still prices; a proven direct call, priced from the stream, does not."""
    receipted = {
        "x-vsr-model-usage": receipt([CHILD_A, CHILD_B]),
        "x-vsr-inference-call-count": "2",
    }
    direct = {"x-vsr-inference-call-count": "1", "x-vsr-selected-model": "small-b"}
    for kind, headers, served in (("mom", receipted, "auto"), ("mom", direct, "auto")):
        plain = call_accounting(
            kind=kind, usage=STREAM_USAGE, served_model=served, headers=headers, price_table=PRICES
        )
        assert plain.cost is not None
    known = call_accounting(
        kind="mom",
        usage=STREAM_USAGE,
        served_model="auto",
        headers=receipted,
        price_table=PRICES,
        usage_estimated=True,
    )
    assert known.cost == D("0.00028") and known.buckets is not None
    for kind, headers in (("mom", direct), ("single", {})):
        unknown = call_accounting(
            kind=kind,
            usage=STREAM_USAGE,
            served_model="small-b",
            headers=headers,
            price_table=PRICES,
            usage_estimated=True,
        )
        assert (unknown.buckets, unknown.cost, unknown.cache_neutral) == (None, None, None)
        assert unknown.note == GATEWAY_ESTIMATE_NOTE
