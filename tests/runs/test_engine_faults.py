"""Every simulator fault ends in a documented call state, with a readable error, and usage
and cost stay null where they are unknown (issue 5, DESIGN §4–5)."""

from __future__ import annotations

import pytest

from runs.models import Call, Cell
from runs.models.evidence import evidence_raw
from runs.planning.services import run_create, target_set_api_key
from runs.reporting.report import run_report
from tests import factories as f
from tests.conftest import wait_until
from tests.runs import engine_support as es

pytestmark = pytest.mark.worker
BENCHMARKS = ["mmlu-pro"]


def run_with(url: str, target: str, **plan) -> object:
    dataset = es.fixture_dataset(BENCHMARKS)
    run, _ = run_create(
        owner=f.user_create(),
        plan={
            "name": "fault",
            "dataset": dataset.pk,
            "targets": [target],
            "limits": {"concurrency": 2, "idle_timeout_s": 1, "total_timeout_s": 20},
            **plan,
        },
    )
    wait_until(lambda: es.terminal(run), timeout=90)
    return run


FAILING = [
    ("429", "http_429", "Too Many"),
    ("500", "http_500", ""),
    ("stall-first-byte", "idle_timeout", "no bytes for 1"),
    ("stall-mid", "idle_timeout", "no bytes for 1"),
    ("disconnect", "stream_disconnected", ""),
    ("no-done", "incomplete_stream", "DONE"),
    ("malformed-chunk", "incomplete_stream", "JSON"),
]


@pytest.mark.parametrize(("fault", "code", "message"), FAILING)
def test_a_transport_fault_fails_the_call_keeps_usage_unknown_and_stops_dispatch(
    celery_worker, fault, code, message
):
    with es.simulator(BENCHMARKS, models={"sim-strong": {"faults": [fault]}}) as url:
        es.sim_targets(url)
        run = run_with(url, "sim-strong")
        stats = es.sim_stats(url)
    call = Call.objects.filter(cell__run=run).order_by("id").first()
    assert call.status == "failed"
    assert call.error_code == code, (call.error_code, call.error)
    assert message.lower() in call.error.lower()
    assert call.output_tokens is None and call.cost_usd is None
    assert call.evidence.raw_size >= 0  # evidence kept even for a failure
    # Fail closed: the first transport failure stopped new dispatch for the run.
    assert run.status == "failed" and "fail closed" in run.stop_reason
    assert Cell.objects.filter(run=run, status="pending").exists()
    assert all(n == 1 for n in stats["by_call_id"].values())
    report = run_report(run=run)
    assert report["complete"] is False
    assert report["targets"][0]["subject_cost_usd"] is None


def test_continue_policy_keeps_dispatching_after_a_failure(celery_worker):
    with es.simulator(BENCHMARKS, models={"sim-strong": {"faults": ["500"]}}) as url:
        es.sim_targets(url)
        run = run_with(url, "sim-strong", failure_policy="continue")
    assert run.status == "failed" and run.stop_reason == ""
    assert not Cell.objects.filter(run=run, status="pending").exists()
    assert (
        Cell.objects.filter(run=run, status="failed").count()
        == Cell.objects.filter(run=run).count()
    )


def test_missing_usage_chunk_completes_the_answer_with_unknown_usage_and_cost(celery_worker):
    with es.simulator(BENCHMARKS, models={"sim-strong": {"faults": ["no-usage"]}}) as url:
        es.sim_targets(url)
        run = run_with(url, "sim-strong")
    assert run.status == "completed"
    calls = Call.objects.filter(cell__run=run)
    assert not calls.exclude(status="completed").exists()
    assert not calls.filter(output_tokens__isnull=False).exists()
    assert not calls.filter(cost_usd__isnull=False).exists()
    target = run_report(run=run)["targets"][0]
    assert target["subject_cost_usd"] is None and target["tokens"]["output"] is None
    assert target["known_cost_usd"] is None  # no call has a known cost: unknown, not $0
    assert target["correct"] > 0  # the answers themselves were graded


def test_u2028_inside_content_is_content_not_a_line_break(celery_worker):
    with es.simulator(BENCHMARKS, models={"sim-strong": {"faults": ["u2028"]}}) as url:
        es.sim_targets(url)
        run = run_with(url, "sim-strong")
    assert run.status == "completed"
    calls = Call.objects.filter(cell__run=run)
    assert all("\u2028" in c.content for c in calls)
    assert not calls.filter(cost_usd__isnull=True).exists()


def test_unstorable_characters_in_content_are_kept_as_replacement_characters(celery_worker):
    """Model output is hostile input: U+0000 and a lone surrogate cannot be stored in
    PostgreSQL text, so the call's text columns get U+FFFD in their place and the evidence keeps
    the exact bytes."""
    with es.simulator(BENCHMARKS, models={"sim-strong": {"faults": ["unstorable"]}}) as url:
        es.sim_targets(url)
        run = run_with(url, "sim-strong")
    assert run.status == "completed"
    calls = list(Call.objects.filter(cell__run=run))
    assert calls and all(c.status == "completed" for c in calls)
    for call in calls:
        assert "\x00" not in call.content and "\ufffd\ufffd" in call.content
        raw = evidence_raw(call.evidence)
        assert b"\\u0000" in raw and b"\\ud800" in raw and "\ufffd".encode() not in raw
    assert not Cell.objects.filter(run=run).exclude(status="completed").exists()


def test_unstorable_characters_from_an_anthropic_model_are_kept_as_replacement_characters(
    celery_worker,
):
    """The same on the Messages API: the simulator sends JSON's escapes (it failed to encode
    the reply before, a 500), the engine stores U+FFFD and the evidence keeps the escapes."""
    with es.simulator(BENCHMARKS, models={"sim-strong": {"faults": ["unstorable"]}}) as url:
        target = f.target_create(
            slug="sim-anthropic-unstorable",
            model="sim-strong",
            base_url=f"{url}/v1",
            api="anthropic",
            prices={"sim-strong": es.PRICES["sim-strong"]},
        )
        target_set_api_key(target=target, api_key="sk-ant-test")
        run = run_with(url, target.slug)
    assert run.status == "completed", run.stop_reason
    calls = list(Call.objects.filter(cell__run=run))
    assert calls and all(c.status == "completed" and c.cost_usd is not None for c in calls)
    for call in calls:
        assert "\x00" not in call.content and "\ufffd\ufffd" in call.content
        raw = evidence_raw(call.evidence)
        assert b"\\u0000" in raw and b"\\ud800" in raw and "\ufffd".encode() not in raw


def test_wrong_config_hash_acknowledgement_fails_the_mom_call(celery_worker):
    with es.simulator(BENCHMARKS, routers={"auto": {"faults": ["wrong-config-hash"]}}) as url:
        targets = es.sim_targets(url)
        run = run_with(url, "sim-router")
    call = Call.objects.filter(cell__run=run).order_by("id").first()
    assert call.status == "failed" and call.error_code == "config_hash_mismatch"
    assert targets["router"].config_hash in call.error
    assert call.config_hash_ack and call.config_hash_ack != targets["router"].config_hash
    assert run.status == "failed"


def test_router_call_with_receipt_is_priced_per_member_and_records_the_route(celery_worker):
    with es.simulator(BENCHMARKS) as url:
        targets = es.sim_targets(url)
        run = run_with(url, "sim-router")
    assert run.status == "completed"
    for call in Call.objects.filter(cell__run=run):
        assert call.selected_model in ("sim-strong", "sim-weak")
        assert call.selected_decision
        assert call.config_hash_ack == targets["router"].config_hash
        assert call.cost_usd is not None and "receipt" in call.cost_note
    report = run_report(run=run)["targets"][0]
    assert sum(report["selected_models"].values()) == report["planned"]


def test_hostile_routing_headers_are_cut_or_unknown_and_the_call_completes(celery_worker):
    """A router's names longer than their columns are kept cut (whole in the call's headers);
    a count int() refuses ("²", a digit to str.isdigit) is unknown, never an exception."""
    members = {"faults": ["hostile-headers"]}
    with es.simulator(BENCHMARKS, models={"sim-strong": members, "sim-weak": members}) as url:
        es.sim_targets(url)
        run = run_with(url, "sim-router")
    calls = list(Call.objects.filter(cell__run=run))
    assert run.status == "completed", [(c.status, c.error_code, c.error) for c in calls]
    assert calls and all(c.status == "completed" for c in calls)
    for call in calls:
        assert len(call.selected_model) == 200 and call.selected_model.startswith("sim-")
        assert len(call.selected_decision) == 200 and call.inference_call_count is None
        sent = {k.lower(): v for k, v in call.response_headers.items()}
        assert sent["x-vsr-selected-model"].startswith(call.selected_model)
        assert len(sent["x-vsr-selected-model"]) > 300


def test_missing_receipt_on_a_direct_route_is_priced_as_a_proven_direct_call(celery_worker):
    with es.simulator(BENCHMARKS, routers={"auto": {"faults": ["no-receipt"]}}) as url:
        es.sim_targets(url)
        run = run_with(url, "sim-router")
    assert run.status == "completed"
    for call in Call.objects.filter(cell__run=run):
        assert "x-vsr-model-usage" not in {k.lower() for k in call.response_headers}
        assert call.inference_call_count == 1
        assert call.cost_usd is not None and "proven direct" in call.cost_note


def test_a_reply_with_unstorable_characters_goes_back_to_the_model_as_it_came(celery_worker):
    """Multi-turn (R15): the model's reply holds U+0000 and a lone surrogate (JSON's
    `\\u0000`, `\\ud800`); the next request of its conversation carries them back as the same
    JSON escapes — UTF-8 cannot carry a lone surrogate, and building that request raised
    before, failing the call before it left and the episode with it."""
    benchmarks = ["tau3"]
    with es.simulator(benchmarks, models={"sim-strong": {"faults": ["unstorable"]}}) as url:
        run = es.agents_run(url, benchmarks)
    calls = Call.objects.filter(cell__run=run)
    assert not calls.exclude(status="completed").exists(), list(
        calls.exclude(status="completed").values_list("error_code", "error")
    )
    # The replies went back: later calls of each conversation exist and were answered.
    assert calls.filter(role="subject", sequence__gt=0).exists()
    assert all("\ufffd" in c.content for c in calls.filter(role="subject") if c.content)
    for cell in Cell.objects.filter(run=run):
        assert cell.status == "completed" or "not evaluate" in cell.error, cell.error
