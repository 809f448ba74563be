"""The MoM router: x-vsr-* headers, usage receipts, config hashes, ETag and routing preview."""

from __future__ import annotations

import json
import re

import httpx

from tests.simulator.conftest import MCQ_PROMPT, chat_body
from tests.simulator.sse import sse_chunks, usage_of

HEX64 = re.compile(r"[0-9a-f]{64}")


def stream(sim: httpx.Client, body: dict, **headers: str) -> tuple[httpx.Response, bytes]:
    with sim.stream("POST", "/v1/chat/completions", json=body, headers=headers) as response:
        return response, response.read()


def test_routed_stream_names_the_served_member_and_its_receipt_matches_the_usage(sim):
    response, raw = stream(sim, chat_body("auto", "Please prove that 2+2=4."))
    assert response.status_code == 200
    assert response.headers["x-vsr-selected-model"] == "sim-strong"
    assert response.headers["x-vsr-selected-decision"] == "reasoning"
    assert response.headers["x-vsr-inference-call-count"] == "1"
    chunks = sse_chunks(raw)
    assert {c["model"] for c in chunks} == {"sim-strong"}
    receipt = json.loads(response.headers["x-vsr-model-usage"])
    assert receipt["complete"] is True and len(receipt["calls"]) == 1
    call = receipt["calls"][0]
    usage = usage_of(chunks)
    assert call["model"] == "sim-strong"
    assert call["usage"]["prompt_tokens"] == usage["prompt_tokens"]
    assert call["usage"]["completion_tokens"] == usage["completion_tokens"]
    assert call["usage"]["cached_input_tokens"] == usage["prompt_tokens_details"]["cached_tokens"]


def test_unmatched_prompt_goes_to_the_default_member(sim):
    response, raw = stream(sim, chat_body("vllm-sr/auto", MCQ_PROMPT))
    assert response.headers["x-vsr-selected-model"] == "sim-weak"
    assert response.headers["x-vsr-selected-decision"] == "simple"
    assert {c["model"] for c in sse_chunks(raw)} == {"sim-weak"}


def test_fanout_decision_makes_several_internal_calls_all_listed_in_the_receipt(sim):
    response, raw = stream(
        sim, chat_body("auto", "Please review this answer."), **{"x-srbench-call-id": "fan-1"}
    )
    assert response.headers["x-vsr-inference-call-count"] == "2"
    receipt = json.loads(response.headers["x-vsr-model-usage"])
    assert [c["model"] for c in receipt["calls"]] == ["sim-weak", "sim-strong"]
    assert receipt["complete"] is True
    # The stream is the final call's; only the receipt shows the earlier one.
    assert response.headers["x-vsr-selected-model"] == "sim-strong"
    assert (
        usage_of(sse_chunks(raw))["completion_tokens"]
        == (receipt["calls"][1]["usage"]["completion_tokens"])
    )
    stats = sim.get("/_sim/stats").json()
    assert stats["chat_requests"] == 1 and stats["model_calls"] == 2
    assert stats["by_call_id"] == {"fan-1": 1}


def test_router_acknowledges_the_expected_config_hash(sim):
    active = sim.get("/api/v1/config/hash").json()["active_runtime_hash"]
    response, _ = stream(
        sim, chat_body("auto", MCQ_PROMPT), **{"x-sr-bench-expected-config-hash": active}
    )
    assert response.status_code == 200
    assert response.headers["x-vsr-config-hash"] == active


def test_stale_expected_config_hash_is_refused_before_any_model_call(sim):
    response, _ = stream(
        sim, chat_body("auto", MCQ_PROMPT), **{"x-sr-bench-expected-config-hash": "0" * 64}
    )
    assert response.status_code == 409
    assert sim.get("/_sim/stats").json()["model_calls"] == 0


def test_max_inference_calls_below_the_fanout_is_refused(sim):
    response, _ = stream(
        sim, chat_body("auto", "review please"), **{"x-sr-bench-max-inference-calls": "1"}
    )
    assert response.status_code == 409
    assert sim.get("/_sim/stats").json()["model_calls"] == 0


def test_single_model_responses_carry_no_router_headers(sim):
    response, _ = stream(sim, chat_body("sim-weak", MCQ_PROMPT))
    assert not [h for h in response.headers if h.startswith("x-vsr-")]


def test_config_hash_etag_and_a_config_change_between_two_reads(sim):
    before = sim.get("/api/v1/config/hash").json()
    assert all(
        HEX64.fullmatch(before[k])
        for k in ("source_config_hash", "generated_runtime_hash", "active_runtime_hash")
    )
    assert before["generated_runtime_hash"] == before["active_runtime_hash"]
    config = sim.get("/api/v1/config")
    assert config.headers["etag"] == f'"{before["source_config_hash"]}"'
    assert (
        sim.get("/api/v1/config", headers={"if-none-match": config.headers["etag"]}).status_code
        == 304
    )

    document = config.json()
    document["routers"]["auto"]["default_model"] = "sim-strong"
    try:
        assert sim.put("/api/v1/config", json=document).status_code == 200
        after = sim.get("/api/v1/config/hash").json()
        assert after["source_config_hash"] != before["source_config_hash"]
        assert after["active_runtime_hash"] != before["active_runtime_hash"]
        assert sim.get("/api/v1/config").headers["etag"] == f'"{after["source_config_hash"]}"'
        response, _ = stream(sim, chat_body("auto", MCQ_PROMPT))
        assert response.headers["x-vsr-selected-model"] == "sim-strong"
        assert response.headers["x-vsr-config-hash"] == after["active_runtime_hash"]
    finally:
        original = config.json()
        sim.put("/api/v1/config", json=original).raise_for_status()
    assert sim.get("/api/v1/config/hash").json() == before


def test_staged_config_changes_source_hashes_but_not_the_active_one_until_activated(sim):
    before = sim.get("/api/v1/config/hash").json()
    original = sim.get("/api/v1/config").json()
    document = json.loads(json.dumps(original))
    document["seed"] = 1
    try:
        sim.put("/api/v1/config", params={"activate": "false"}, json=document).raise_for_status()
        staged = sim.get("/api/v1/config/hash").json()
        assert staged["activation_status"] == "pending"
        assert staged["generated_runtime_hash"] != staged["active_runtime_hash"]
        assert staged["active_runtime_hash"] == before["active_runtime_hash"]
        activated = sim.post("/api/v1/config/activate").json()
        assert activated["activation_status"] == "active"
        assert activated["active_runtime_hash"] == staged["generated_runtime_hash"]
    finally:
        sim.put("/api/v1/config", json=original).raise_for_status()


def test_invalid_config_is_refused_and_the_active_one_kept(sim):
    before = sim.get("/api/v1/config/hash").json()
    bad = {"routers": {"auto": {"default_model": "missing"}}}
    assert sim.put("/api/v1/config", json=bad).status_code == 400
    assert sim.get("/api/v1/config/hash").json() == before


def preview(sim: httpx.Client, text: str, session_id: str | None = None) -> dict:
    response = sim.post(
        "/api/v1/routing/preview",
        json={
            "model": "auto",
            "text": text,
            "options": {"trace": True},
            "preview_context": {
                "session_id": session_id,
                "conversation_id": "c1",
                "sampling_seed": 5,
            },
        },
    )
    assert response.status_code == 200, response.text
    return response.json()


def test_preview_predicts_the_served_model_and_makes_no_model_call(sim):
    result = preview(sim, "Derive the formula step by step.")
    assert result["selected_model"] == "sim-strong"
    assert result["decision_result"]["decision_name"] == "reasoning"
    assert result["config_hash"] == sim.get("/api/v1/config/hash").json()["active_runtime_hash"]
    assert result["selection_provenance"]["seed"] == 5
    stats = sim.get("/_sim/stats").json()
    assert stats["preview_requests"] == 1
    assert stats["chat_requests"] == 0 and stats["model_calls"] == 0


def test_routing_depends_on_the_session_in_preview_and_chat_alike(sim):
    by_session = {f"s{i}": preview(sim, MCQ_PROMPT, f"s{i}")["selected_model"] for i in range(12)}
    assert set(by_session.values()) == {"sim-strong", "sim-weak"}
    assert preview(sim, MCQ_PROMPT)["selected_model"] == "sim-weak"  # no session: default
    for session, model in list(by_session.items())[:4]:
        response, _ = stream(sim, chat_body("auto", MCQ_PROMPT), **{"x-session-id": session})
        assert response.headers["x-vsr-selected-model"] == model


def test_preview_rejects_fields_that_are_not_part_of_the_envelope(sim):
    response = sim.post(
        "/api/v1/routing/preview", json={"model": "auto", "text": "hi", "temperature": 0.2}
    )
    assert response.status_code == 400


def test_call_ids_are_counted_per_request(sim):
    for call_id in ("a", "a", "b"):
        sim.post(
            "/v1/chat/completions",
            json=chat_body("sim-weak", "hi", stream=False),
            headers={"x-srbench-call-id": call_id},
        )
    stats = sim.get("/_sim/stats").json()
    assert stats["by_call_id"] == {"a": 2, "b": 1}
    assert stats["total_requests"] == 3 and stats["chat_requests"] == 3
