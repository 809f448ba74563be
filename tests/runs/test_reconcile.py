"""reconcile-usage (R2): usage rebuilt from saved SSE evidence into an appended correction."""

from __future__ import annotations

import hashlib
import json
import zlib
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.db import IntegrityError, transaction

from runs.models import Call, CallEvidence, Run, UsageCorrection
from runs.planning.services import run_create
from runs.reporting.reconcile import ReconcileRefused, usage_reconcile
from runs.reporting.report import run_report
from srbench.canonical import sha256_bytes
from tests import factories as f
from tests.compare import builders as b
from tests.conftest import wait_until
from tests.runs import engine_support as es

D = Decimal
USAGE = {
    "prompt_tokens": 120,
    "completion_tokens": 30,
    "prompt_tokens_details": {"cached_tokens": 20},
}


def sse(*chunks: dict | str) -> bytes:
    return b"".join(
        f"data: {c if isinstance(c, str) else json.dumps(c)}\n\n".encode() for c in chunks
    )


def stream(model: str = "m-strong", usage: dict | None = None, done: bool = True) -> bytes:
    parts: list[dict | str] = [
        {"model": model, "choices": [{"index": 0, "delta": {"content": "The answer is B"}}]},
        {"model": model, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {"model": model, "choices": [], "usage": usage or USAGE},
    ]
    if done:
        parts.append("[DONE]")
    return sse(*parts)


def attach(call: Call, raw: bytes) -> None:
    CallEvidence.objects.create(
        call=call, body=zlib.compress(raw), raw_size=len(raw), sha256=sha256_bytes(raw)
    )


def checksum() -> str:
    """Every stored byte of calls, evidence and manifests, in a fixed order."""
    calls = list(Call.objects.order_by("pk").values())
    evidence = [
        (e.call_id, bytes(e.body).hex(), e.sha256, e.raw_size)
        for e in CallEvidence.objects.order_by("call_id")
    ]
    manifests = list(Run.objects.order_by("pk").values_list("pk", "manifest", "plan_sha256"))
    blob = json.dumps([calls, evidence, manifests], default=str, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def damaged_run():  # type: ignore[no-untyped-def]
    """Four subject calls whose recorded buckets and costs are wrong, each with different
    evidence: valid, truncated (no [DONE]), conflicting usage, none at all."""
    qs = b.questions({"mmlu-pro": 4})
    t = b.target("single")
    # The receipt (raw usage) is right; the derived buckets and cost are damaged.
    r = b.run(
        qs,
        {t: [True, True, False, True]},
        costs={t: D("0.5")},
        call_fields={t: {"usage_raw": USAGE, "served_model": "m-strong"}},
        status="failed",
    )
    calls = list(Call.objects.filter(cell__run=r).order_by("cell__question_id"))
    valid, truncated, conflicting, missing = calls
    attach(valid, stream())
    attach(truncated, stream(done=False))
    attach(conflicting, stream(usage={**USAGE, "completion_tokens": 31}))
    return r, valid, truncated, conflicting, missing


# Independently: input = 120 − 20 cached; cost at 3 / 0.3 / 15 USD per 1M tokens.
EXPECTED_COST = (D(100) * 3 + D(20) * D("0.3") + D(30) * 15) / D(1_000_000)
EXPECTED_NEUTRAL = (D(120) * 3 + D(30) * 15) / D(1_000_000)


@pytest.mark.django_db
def test_damaged_usage_is_corrected_from_evidence_and_broken_evidence_stays_unknown():
    r, valid, truncated, conflicting, missing = damaged_run()
    before = checksum()

    result = usage_reconcile(run_id=r.pk)

    c = result.correction
    assert result.created and c.version == 1
    assert (c.verified_count, c.changed_count, c.unverifiable_count) == (1, 1, 3)
    assert c.old_known_cost_usd == D("2.0")  # four recorded costs of 0.5
    assert c.new_known_cost_usd == EXPECTED_COST
    entries = {e["call_id"]: e for e in c.corrections["calls"]}
    fixed = entries[valid.pk]
    assert fixed["outcome"] == "changed"
    assert (fixed["input_tokens"], fixed["cached_input_tokens"], fixed["output_tokens"]) == (
        100,
        20,
        30,
    )
    assert D(fixed["cost_usd"]) == EXPECTED_COST
    assert D(fixed["cache_neutral_cost_usd"]) == EXPECTED_NEUTRAL
    assert "[DONE]" in entries[truncated.pk]["reason"]
    assert "usage in evidence differs" in entries[conflicting.pk]["reason"]
    assert entries[missing.pk]["reason"] == "no saved evidence"
    for pk in (truncated.pk, conflicting.pk, missing.pk):
        assert entries[pk]["cost_usd"] is None and entries[pk]["output_tokens"] is None
    assert checksum() == before  # calls, evidence and manifest byte-identical


@pytest.mark.django_db
def test_report_reads_the_corrected_usage_and_shows_the_correction():
    r, *_ = damaged_run()
    t = run_report(run=r)["targets"][0]
    assert D(t["known_cost_usd"]) == D("2.0") and D(t["subject_cost_usd"]) == D("2.0")

    c = usage_reconcile(run_id=r.pk).correction
    report = run_report(run=r)

    t = report["targets"][0]
    assert D(t["known_cost_usd"]) == EXPECTED_COST
    assert t["subject_cost_usd"] is None  # three calls are unknown now
    assert t["tokens"]["input"] is None and t["tokens_known_partial"]["input"] == 100
    block = report["usage_correction"]
    assert block["evidence_sha256"] == c.evidence_sha256
    assert block["created_at"] == c.created_at.isoformat()
    assert (block["verified"], block["changed"], block["unverifiable"]) == (1, 1, 3)
    assert (D(block["old_known_cost_usd"]), D(block["new_known_cost_usd"])) == (
        D(2),
        EXPECTED_COST,
    )


@pytest.mark.django_db
def test_a_second_reconcile_returns_the_same_correction_without_a_new_version():
    r, *_ = damaged_run()
    first = usage_reconcile(run_id=r.pk)
    second = usage_reconcile(run_id=r.pk)
    assert second.created is False
    assert second.correction.pk == first.correction.pk
    assert UsageCorrection.objects.filter(run=r).count() == 1


@pytest.mark.django_db
def test_corrections_cannot_be_changed_or_deleted():
    r, *_ = damaged_run()
    c = usage_reconcile(run_id=r.pk).correction
    from django.db import connection

    with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("UPDATE runs_usagecorrection SET changed_count = 0 WHERE id = %s", [c.pk])


@pytest.mark.django_db
def test_mom_calls_verify_only_as_proven_direct_calls_or_with_a_complete_receipt():
    qs = b.questions({"mmlu-pro": 3})
    router = b.target(
        "router",
        kind="mom",
        prices={"m-strong": {"input": "3", "cached_input": "0.3", "output": "15"}},
    )
    receipt = {
        "version": 1,
        "complete": True,
        "calls": [{"model": "m-strong", "usage": USAGE}, {"model": "m-strong", "usage": USAGE}],
    }
    headers = [
        {"x-vsr-inference-call-count": "1", "x-vsr-selected-model": "m-strong"},
        {"x-vsr-inference-call-count": "2", "x-vsr-model-usage": json.dumps(receipt)},
        {"x-vsr-inference-call-count": "2", "x-vsr-selected-model": "m-strong"},
    ]
    r = b.run(
        qs,
        {router: [True, True, True]},
        costs={router: None},
        call_fields={
            router: [
                {"usage_raw": USAGE, "served_model": "m-strong", "response_headers": h}
                for h in headers
            ]
        },
    )
    direct, receipted, unproven = Call.objects.filter(cell__run=r).order_by("cell__question_id")
    for c in (direct, receipted, unproven):
        attach(c, stream())

    entries = {
        e["call_id"]: e for e in usage_reconcile(run_id=r.pk).correction.corrections["calls"]
    }

    assert D(entries[direct.pk]["cost_usd"]) == EXPECTED_COST
    assert D(entries[receipted.pk]["cost_usd"]) == 2 * EXPECTED_COST  # each child priced
    assert entries[receipted.pk]["output_tokens"] == 60
    assert entries[unproven.pk]["outcome"] == "unverifiable"
    assert entries[unproven.pk]["cost_usd"] is None


@pytest.mark.django_db
def test_only_terminal_live_runs_are_reconciled():
    qs = b.questions({"arc": 1})
    running = b.run(qs, {b.target("x"): [True]}, status="running")
    with pytest.raises(ReconcileRefused, match="once it has ended"):
        usage_reconcile(run_id=running.pk)
    preview = b.run(qs, {b.target("y"): [True]}, mode="preview")
    with pytest.raises(ReconcileRefused, match="preview"):
        usage_reconcile(run_id=preview.pk)


@pytest.mark.django_db
def test_cli_reconcile_usage_reports_counts_and_costs(capsys):
    r, *_ = damaged_run()
    call_command("benchmark", "reconcile-usage", str(r.pk), "--json")
    doc = json.loads(capsys.readouterr().out)
    assert (doc["verified"], doc["changed"], doc["unverifiable"]) == (1, 1, 3)
    assert doc["created"] is True and doc["model_requests"] == 0

    call_command("benchmark", "reconcile-usage", str(r.pk))
    out = capsys.readouterr().out
    assert out.startswith("unchanged (same evidence)  correction v1")

    with pytest.raises(SystemExit) as exited:
        call_command("benchmark", "reconcile-usage", "999999")
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip() == "error: run 999999 does not exist (not_found)"


# --- a real run: simulator + real worker --------------------------------------------------------


@pytest.mark.worker
def test_a_real_run_reconciles_from_its_own_evidence_with_no_model_call(celery_worker):
    benchmarks = ["mmlu-pro", "arc"]
    with es.simulator(benchmarks) as url:
        es.sim_targets(url)
        dataset = es.fixture_dataset(benchmarks)
        run, _ = run_create(
            owner=f.user_create(),
            plan={
                "name": "reconcile",
                "dataset": dataset.pk,
                "targets": ["sim-strong", "sim-router"],
                "limits": {"concurrency": 8},
            },
        )
        wait_until(lambda: es.terminal(run), timeout=120)
        assert run.status == "completed", (run.stop_reason, celery_worker.log()[-2000:])
        calls = Call.objects.filter(cell__run=run)
        victim = calls.filter(target__slug="sim-strong").order_by("pk").first()
        assert victim is not None
        # The ledger trigger protects cost and the input/output counts of a finished call, but
        # not the cache buckets: damage those, as a buggy writer could.
        Call.objects.filter(pk=victim.pk).update(
            cached_input_tokens=(victim.cached_input_tokens or 0) + 7,
            cache_neutral_cost_usd=D("9"),
        )
        old_known = sum((c for c in calls.values_list("cost_usd", flat=True) if c), D(0))
        before = checksum()
        sim_before = es.sim_stats(url)["total_requests"]

        first = usage_reconcile(run_id=run.pk)
        second = usage_reconcile(run_id=run.pk)

        assert es.sim_stats(url)["total_requests"] == sim_before  # zero model calls
    c = first.correction
    assert c.verified_count == calls.count() and c.unverifiable_count == 0
    assert c.changed_count == 1
    entry = next(e for e in c.corrections["calls"] if e["call_id"] == victim.pk)
    assert entry["cached_input_tokens"] == victim.cached_input_tokens
    assert D(entry["cache_neutral_cost_usd"]) == victim.cache_neutral_cost_usd
    assert c.old_known_cost_usd == old_known == c.new_known_cost_usd
    assert second.created is False and second.correction.pk == c.pk
    assert checksum() == before
    report = run_report(run=run)
    strong = next(t for t in report["targets"] if t["slug"] == "sim-strong")
    # The report's cache-neutral cost is the sum of the per-call values the evidence proves.
    expected = sum(
        (
            D(e["cache_neutral_cost_usd"])
            for e in c.corrections["calls"]
            if e["call_id"]
            in set(
                calls.filter(target__slug="sim-strong", role="subject").values_list("pk", flat=True)
            )
        ),
        D(0),
    )
    assert D(strong["cache_neutral_cost_usd"]) == expected


# 1 input token at 0.00025 USD per 1M is 2.5E-10: a tie at the 10 places the ledger once kept
# (issue 35 item 5: now stored with every digit).
TIE_PRICES = {"m-strong": {"input": "0.00025", "cached_input": "0.00025", "output": "15"}}
TIE_USAGE = {"prompt_tokens": 1, "completion_tokens": 0}


@pytest.mark.django_db
def test_reconciled_costs_are_the_stored_costs_so_every_screen_sums_the_same_amount():
    qs = b.questions({"mmlu-pro": 6})
    t = b.target("tie", prices=TIE_PRICES)
    tie = D("0.00025") / D(1_000_000)
    r = b.run(
        qs,
        {t: [True] * 6},
        # Inserted unrounded, as the engine computes it; the numeric(40, 18) column keeps it.
        costs={t: tie},
        call_fields={
            t: {
                "usage_raw": TIE_USAGE,
                "served_model": "m-strong",
                "input_tokens": 1,
                "cached_input_tokens": 0,
                "cache_write_tokens": 0,
                "output_tokens": 0,
            }
        },
    )
    for call in Call.objects.filter(cell__run=r):
        attach(call, stream(usage=TIE_USAGE))
    stored = Call.objects.filter(cell__run=r).values_list("cost_usd", flat=True)
    assert set(stored) == {D("0.00000000025")}  # every digit: nothing rounds the tie

    c = usage_reconcile(run_id=r.pk).correction

    assert (c.verified_count, c.changed_count) == (6, 0)
    assert {D(e["cost_usd"]) for e in c.corrections["calls"]} == {D("0.00000000025")}
    assert c.old_known_cost_usd == c.new_known_cost_usd == D("0.0000000015")
    t_report = run_report(run=r)["targets"][0]
    assert D(t_report["known_cost_usd"]) == c.new_known_cost_usd
    assert D(t_report["subject_cost_usd"]) == D("0.0000000015")
