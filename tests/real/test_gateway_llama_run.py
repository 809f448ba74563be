"""A run through a real gateway in front of the real model server, after the target check found
the gateway's own token estimate in its streams (tests/real/test_gateway_llama.py): LiteLLM's
proxy before llama.cpp, the real engine and a real Celery worker. The plan freezes the check's
finding; each call keeps the gateway's usage as evidence and records tokens and cost as
unknown, never the estimate's price. The server's own count of the same request, asked
directly, shows what pricing the estimate would have got wrong."""

from __future__ import annotations

import httpx
import pytest

from runs.ledger.accounting import GATEWAY_ESTIMATE_NOTE, STREAM_USAGE_ESTIMATE_KEY
from runs.models import Call
from runs.planning.services import run_create, target_set_api_key
from runs.preflight.checks import preflight_quote, target_preflight
from runs.reporting.report import run_report
from tests import factories as f
from tests.conftest import wait_until
from tests.e2e.test_litellm_gateway import GATEWAY_MODEL, litellm_proxy
from tests.runs import engine_support as es

pytestmark = pytest.mark.worker

PRICE = {"input": "3", "output": "15"}


def server_prompt_tokens(llama_server, request: dict) -> int:
    """The server's own prompt count of the request a call sent, asked without the gateway."""
    body = {
        "model": llama_server.model,
        "messages": request["messages"],
        "max_tokens": 1,
        "stream": False,
    }
    resp = httpx.post(f"{llama_server.base_url}/chat/completions", json=body, timeout=120)
    assert resp.status_code == 200, resp.text
    return resp.json()["usage"]["prompt_tokens"]


@pytest.mark.timeout(900)
def test_a_run_after_the_check_keeps_the_gateways_estimate_out_of_its_cost(
    llama_server, celery_worker, tmp_path
):
    route = {"model": f"openai/{llama_server.model}", "api_base": llama_server.base_url}
    with litellm_proxy(llama_server.base_url, tmp_path, {**route, "api_key": "none"}) as gw:
        target = f.target_create(
            slug="gw-llama",
            model=GATEWAY_MODEL,
            base_url=f"{gw.url}/v1",
            prices={GATEWAY_MODEL: PRICE},
        )
        target_set_api_key(target=target, api_key=gw.key)
        quote = preflight_quote(target=target)
        check = target_preflight(target=target, confirm_worst_case_usd=quote["worst_case_usd"])
        assert check.status == "completed", check.error
        dataset = es.fixture_dataset(["mmlu-pro"], per_benchmark=2)
        run, _ = run_create(
            owner=f.user_create(),
            plan={
                "name": "gateway estimate",
                "dataset": dataset.pk,
                "targets": [target.slug],
                "limits": {"concurrency": 1, "max_output_tokens": 8},
            },
        )
        wait_until(lambda: es.terminal(run), timeout=600, interval=0.5)
        log = gw.log()
    assert run.status == "completed", (run.stop_reason, celery_worker.log()[-3000:], log)
    frozen = run.manifest["targets"][0][STREAM_USAGE_ESTIMATE_KEY]
    assert frozen.startswith(f"target check #{check.pk}: the stream's usage counts ")

    calls = list(Call.objects.filter(cell__run=run, role="subject").order_by("pk"))
    assert len(calls) == 2
    for call in calls:
        estimate = call.usage_raw["prompt_tokens"]
        counted = server_prompt_tokens(llama_server, call.request)
        # The gateway's stream says fewer prompt tokens than the server counts for the request.
        assert estimate < counted, (estimate, counted)
        assert (call.input_tokens, call.output_tokens) == (None, None)
        assert call.cost_usd is None and call.cache_neutral_cost_usd is None
        assert call.cost_note == GATEWAY_ESTIMATE_NOTE
    (t,) = run_report(run=run)["targets"]
    assert t["subject_cost_usd"] is None and t["known_cost_usd"] is None
    assert t["usage_caution"] is None  # the check looked: its finding is the reason above
    assert t["usage_unknown_reason"].startswith(
        "2 of 2 subject calls carried usage that is not the server's own count (target check "
        f"#{check.pk}: the stream's usage counts "
    )
