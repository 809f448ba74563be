"""A real gateway in front of the real model server: LiteLLM's proxy (requirements/gateway.txt,
started as in tests/e2e/test_litellm_gateway.py) routing to llama.cpp's server (the suite's
`llama_server`). llama.cpp sends no usage in a stream; LiteLLM then counts the tokens itself and
sends its own estimate as the stream's usage chunk, shaped exactly like a usage it passed through
(measured: 9 prompt tokens for a prompt the server counted as 32, its chat template left out).
Its plain answers pass the server's own usage through. The target check must say that the
stream's usage is not the server's count instead of calling the costs known."""

from __future__ import annotations

import httpx
import pytest

from runs.planning.services import target_set_api_key
from runs.preflight.checks import PROMPT, preflight_quote, target_preflight
from runs.preflight.plan import plan_preflight_review
from tests import factories as f
from tests.e2e.test_litellm_gateway import GATEWAY_MODEL, litellm_proxy

pytestmark = pytest.mark.django_db

PRICE = {"input": "0.1", "output": "0.2"}


def _usage(gateway_url: str, key: str, *, stream: bool) -> dict:
    body = {
        "model": GATEWAY_MODEL,
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": 1,
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    headers = {"authorization": f"Bearer {key}"}
    url = f"{gateway_url}/v1/chat/completions"
    resp = httpx.post(url, json=body, headers=headers, timeout=120)
    assert resp.status_code == 200, resp.text
    if not stream:
        return resp.json()["usage"]
    chunks = [line[5:].strip() for line in resp.text.splitlines() if line.startswith("data:")]
    usages = [httpx.Response(200, content=c).json().get("usage") for c in chunks[:-1]]
    found = [u for u in usages if u]
    assert len(found) == 1 and chunks[-1] == "[DONE]", resp.text
    return found[0]


def test_a_gateways_own_token_estimate_in_a_stream_is_not_called_a_known_cost(
    llama_server, tmp_path
):
    route = {"model": f"openai/{llama_server.model}", "api_base": llama_server.base_url}
    with litellm_proxy(llama_server.base_url, tmp_path, {**route, "api_key": "none"}) as gw:
        # What the wire says, read without the product: the server's count (plain) and the
        # gateway's own (streamed) for the same prompt differ.
        plain = _usage(gw.url, gw.key, stream=False)
        streamed = _usage(gw.url, gw.key, stream=True)
        assert plain["prompt_tokens"] != streamed["prompt_tokens"], (plain, streamed)

        target = f.target_create(
            slug="gw-llama",
            model=GATEWAY_MODEL,
            base_url=f"{gw.url}/v1",
            prices={GATEWAY_MODEL: PRICE},
        )
        target_set_api_key(target=target, api_key=gw.key)
        quote = preflight_quote(target=target)
        preflight = target_preflight(target=target, confirm_worst_case_usd=quote["worst_case_usd"])
        log = gw.log()

    assert preflight.status == "completed", (preflight.error, log)
    rows = {r.purpose: r for r in preflight.calls.all()}
    stream_in = rows["stream-usage"].usage_raw["prompt_tokens"]
    plain_in = rows["plain-usage"].usage_raw["prompt_tokens"]
    assert (stream_in, plain_in) == (streamed["prompt_tokens"], plain["prompt_tokens"])
    finding = next(x for x in preflight.findings if x["key"] == "stream_usage")
    assert finding["verdict"] == "quirk", finding
    assert finding["observed"].startswith(
        f"the stream's usage counts {stream_in:,} prompt tokens where the plain answer to the "
        f"same prompt counts {plain_in:,}"
    )
    assert "not the server's own count" in finding["effect"]
    # The plan review says it before any call of a run (issue 39's warnings).
    manifest = {
        "targets": [{"slug": target.slug, "fixed_params": {}}],
        "limits": {"concurrency": 1, "max_output_tokens": 64},
        "cases": [],
    }
    (review,) = plan_preflight_review(manifest)
    assert any(w.startswith(finding["observed"]) for w in review["warnings"]), review["warnings"]
