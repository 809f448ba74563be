"""The preflight against the real llama.cpp server the suite starts (issue 39 acceptance).

SmolLM2-135M on `llama-cpp-python`'s server (tests/real/conftest.py): its streams carry no usage,
a new request cuts the stream in progress, its plain answers carry usage without cached-token
fields, a max_tokens cut ends with "length", and a prompt longer than its 4,096-token context is
refused (non-streamed) with the limit stated. Each is found and worded; each call is counted at
the server once (its own access log) and kept in the preflight's ledger with its usage and cost.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from runs.preflight.checks import preflight_quote, target_preflight
from runs.preflight.findings import NO_STREAM_USAGE
from tests import factories as f
from tests.real.conftest import N_CTX

pytestmark = pytest.mark.django_db

PRICE = {"input": "0.1", "output": "0.2"}


def test_preflight_finds_and_words_each_quirk_of_the_llama_server(llama_server):
    """issue 39 acceptance: every quirk detected and worded; the calls in the ledger with their
    cost; no call sent twice (counted at the server)."""
    target = f.target_create(
        slug="smollm2",
        model=llama_server.model,
        base_url=llama_server.base_url,
        prices={llama_server.model: PRICE},
    )
    quote = preflight_quote(target=target)
    since = llama_server.log_size()
    preflight = target_preflight(target=target, confirm_worst_case_usd=quote["worst_case_usd"])
    logged = llama_server.chat_requests(since)
    rows = list(preflight.calls.order_by("sequence"))
    assert preflight.status == "completed", preflight.error
    # Every row reached the server exactly once, in order, and nothing else was sent.
    assert logged == [r.http_status for r in rows], [(r.purpose, r.error) for r in rows]

    findings = {x["key"]: x for x in preflight.findings}
    assert preflight.stream_usage is False and preflight.plain_usage is True
    assert findings["stream_usage"]["observed"] == NO_STREAM_USAGE
    assert "non-streamed answers do carry usage" in findings["stream_usage"]["effect"]
    assert (preflight.cuts_at, preflight.max_whole_streams) == (2, 1)
    assert "use concurrency ≤ 1" in findings["concurrency"]["effect"]
    assert preflight.length_finish_reason == "length"
    assert preflight.cached_fields is False
    assert (preflight.context_tokens, preflight.context_source) == (
        N_CTX,
        "the refusal of the context probe",
    )
    assert rows[-1].purpose == "context-probe" and rows[-1].http_status == 400

    # The plain call's cost from its usage at this test's prices; the streamed ones unknown.
    plain = next(r for r in rows if r.purpose == "plain-usage")
    usage = plain.usage_raw
    expected = (
        Decimal(usage["prompt_tokens"]) * Decimal("0.1")
        + Decimal(usage["completion_tokens"]) * Decimal("0.2")
    ) / Decimal(1_000_000)
    assert plain.cost_usd == expected and plain.output_tokens == usage["completion_tokens"]
    assert all(r.cost_usd is None for r in rows if r.stream)
    assert preflight.cost_usd is None and preflight.known_cost_usd == expected
