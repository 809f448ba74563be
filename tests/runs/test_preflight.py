"""A target's preflight against the simulator configured with each quirk (issue 39 item 1).

Every quirk is detected and worded with what it will do to a run; the preflight's own calls are
in its ledger with their usage and cost (checked against a recomputation from the prices here);
no call is ever sent twice (counted at the server, by the call id each request carries).
"""

from __future__ import annotations

import http.server
import json
import re
import threading
from decimal import Decimal

import httpx
import pytest

from runs.ledger.accounting import HTTP_ERROR_BODY_CAP
from runs.models.preflight import PreflightCall, TargetPreflight
from runs.preflight.checks import PreflightRefused, preflight_quote, target_preflight
from runs.preflight.findings import NO_STREAM_USAGE
from runs.preflight.wire import stated_context
from srbench.simulator.testing import running_simulator
from tests import factories as f

pytestmark = pytest.mark.django_db(transaction=True)

PRICE = {"input": "3", "cached_input": "0.3", "output": "15"}
# Slow enough that a stream is still open when the next request of the probe arrives.
SLOW = {"ttft_s": 0.5, "tokens_per_second": 40.0}


def _stats(url: str) -> dict:
    return httpx.get(f"{url}/_sim/stats").json()


def _target(url: str, model: str = "sim-weak", prices: dict | None = None):
    return f.target_create(
        model=model,
        base_url=f"{url}/v1",
        prices=prices if prices is not None else {model: PRICE},
    )


def _run(target) -> TargetPreflight:
    quote = preflight_quote(target=target)
    return target_preflight(target=target, confirm_worst_case_usd=quote["worst_case_usd"])


def _finding(preflight: TargetPreflight, key: str) -> dict:
    return next(x for x in preflight.findings if x["key"] == key)


def _sent_once(url: str, preflight: TargetPreflight) -> None:
    """Every row's request reached the server exactly once, and nothing else was sent."""
    stats = _stats(url)
    rows = list(preflight.calls.all())
    ids = {f"preflight-{preflight.pk}-{row.sequence}" for row in rows}
    assert {k: v for k, v in stats["by_call_id"].items() if k in ids} == dict.fromkeys(ids, 1)
    assert stats["chat_requests"] == len(rows)


def _expected_cost(row: PreflightCall) -> Decimal:
    """tokens × USD per 1M tokens, recomputed from the usage as the server sent it."""
    usage = row.usage_raw
    cached = usage.get("prompt_tokens_details", {}).get("cached_tokens", 0)
    fresh = usage["prompt_tokens"] - cached
    return (
        Decimal(fresh) * 3
        + Decimal(cached) * Decimal("0.3")
        + Decimal(usage["completion_tokens"]) * 15
    ) / Decimal(1_000_000)


def test_a_well_behaved_server_shows_no_quirk_and_every_call_is_costed():
    """issue 39 item 1: usage in the stream, cached fields, a priced served model, "length" on
    a max_tokens cut, streams whole at 4, and a context probe that fitted; the ledger's costs
    equal a recomputation."""
    with running_simulator(models={"sim-weak": SLOW}) as url:
        target = _target(url)
        preflight = _run(target)
        _sent_once(url, preflight)
    assert preflight.status == "completed", preflight.error
    assert (preflight.stream_usage, preflight.plain_usage, preflight.cached_fields) == (
        True,
        True,
        True,
    )
    assert preflight.served_model == "sim-weak" and preflight.served_model_priced is True
    assert preflight.length_finish_reason == "length"
    assert (preflight.max_whole_streams, preflight.cuts_at) == (4, None)
    assert preflight.context_tokens is None
    assert _finding(preflight, "context")["verdict"] == "ok"
    assert all(x["verdict"] == "ok" for x in preflight.findings), preflight.findings
    rows = list(preflight.calls.all())
    # 2 usage calls, 2 + 4 concurrent streams, 1 context probe: all sent, all answered.
    assert [r.purpose for r in rows].count("concurrency-4") == 4 and len(rows) == 9
    for row in rows:
        assert row.status == "completed" and row.cost_usd == _expected_cost(row), row
    assert preflight.cost_usd == sum((_expected_cost(r) for r in rows), Decimal(0))
    assert preflight.cost_usd <= preflight.worst_case_usd


def test_a_llama_like_server_is_found_out_and_worded():
    """issue 39 item 1: no usage, no cached fields, a second request cutting the stream in
    progress, an unpriced served model and a context the refusal states — each worded with
    what it will do to a run; unknown costs stay unknown, never 0."""
    quirky = {**SLOW, "faults": ["no-usage", "cut-on-concurrent"], "context_tokens": 600}
    with running_simulator(models={"sim-weak": quirky}) as url:
        target = _target(url, prices={"smollm2": PRICE})
        preflight = _run(target)
        _sent_once(url, preflight)
    assert preflight.status == "completed", preflight.error
    usage = _finding(preflight, "stream_usage")
    assert usage["verdict"] == "quirk" and usage["observed"] == NO_STREAM_USAGE
    assert "every token count and cost of a run will be unknown" in usage["effect"]
    assert preflight.stream_usage is False and preflight.cached_fields is None
    assert (preflight.max_whole_streams, preflight.cuts_at) == (1, 2)
    concurrency = _finding(preflight, "concurrency")
    assert "use concurrency ≤ 1" in concurrency["effect"]
    assert "no finish_reason" in concurrency["observed"]
    served = _finding(preflight, "served_model")
    assert served["verdict"] == "quirk" and "every cost will be unknown" in served["effect"]
    assert (preflight.context_tokens, preflight.context_source) == (
        600,
        "the refusal of the context probe",
    )
    assert "600 tokens will not fit" in _finding(preflight, "context")["effect"].replace(",", "")
    rows = list(preflight.calls.all())
    # Level 4 is not tried once level 2 cut a stream: 2 + 2 + 1 calls.
    assert [r.purpose for r in rows] == [
        "stream-usage",
        "plain-usage",
        "concurrency-2",
        "concurrency-2",
        "context-probe",
    ]
    assert all(r.cost_usd is None and r.input_tokens is None for r in rows)
    assert rows[-1].http_status == 400
    assert preflight.cost_usd is None and preflight.known_cost_usd == 0


def test_props_context_length_as_stop_and_streams_whole_up_to_two():
    """issue 39 item 1: a context said on /props needs no probe; a max_tokens cut reported as
    "stop" is a quirk; streams whole at 2 but cut at 4 give "use concurrency ≤ 2"."""
    model = {
        **SLOW,
        "faults": ["length-as-stop", "no-cache-details"],
        "max_whole_streams": 2,
        "context_tokens": 2048,
        "context_advertise": "props",
    }
    with running_simulator(models={"sim-weak": model}) as url:
        preflight = _run(_target(url))
        _sent_once(url, preflight)
    assert (preflight.context_tokens, preflight.context_source) == (2048, f"{url}/props (n_ctx)")
    assert "context-probe" not in [c.purpose for c in preflight.calls.all()]
    assert preflight.length_finish_reason == "stop"
    assert "look finished" in _finding(preflight, "length_finish_reason")["effect"]
    assert preflight.cached_fields is False
    # Cache buckets the server did not report are unknown on every call, never 0 (an outside
    # probe read 0 beside the finding "usage has no cached-token field").
    priced = [c for c in preflight.calls.all() if c.output_tokens is not None]
    assert priced and all(
        c.cached_input_tokens is None and c.cache_write_tokens is None for c in priced
    )
    assert (preflight.max_whole_streams, preflight.cuts_at) == (2, 4)
    assert "use concurrency ≤ 2" in _finding(preflight, "concurrency")["effect"]


def test_a_context_said_on_the_model_list_is_read():
    """issue 39 item 1: vLLM's max_model_len on GET /v1/models."""
    model = {**SLOW, "context_tokens": 1000, "context_advertise": "models"}
    with running_simulator(models={"sim-weak": model}) as url:
        preflight = _run(_target(url))
    assert preflight.context_tokens == 1000
    assert preflight.context_source.endswith("/v1/models (max_model_len)")


def test_nothing_is_sent_without_the_quoted_worst_case():
    """issue 39 item 1: the worst case is quoted first; a wrong confirmation sends nothing and
    writes no row; a repeated key returns the same preflight and sends nothing again."""
    with running_simulator(models={"sim-weak": SLOW}) as url:
        target = _target(url)
        quote = preflight_quote(target=target)
        with pytest.raises(PreflightRefused) as refused:
            target_preflight(target=target, confirm_worst_case_usd="0.000001")
        assert refused.value.code == "cost_not_confirmed"
        assert _stats(url)["chat_requests"] == 0 and not TargetPreflight.objects.exists()
        first = target_preflight(
            target=target, confirm_worst_case_usd=quote["worst_case_usd"], idempotency_key="k1"
        )
        sent = _stats(url)["chat_requests"]
        again = target_preflight(
            target=target, confirm_worst_case_usd=quote["worst_case_usd"], idempotency_key="k1"
        )
        assert again.pk == first.pk and _stats(url)["chat_requests"] == sent
    # The quote is the sum of each planned call's bound; each is positive and exact.
    per_call = [Decimal(c["worst_case_usd"]) for c in quote["calls"]]
    assert Decimal(quote["worst_case_usd"]) == sum(per_call) and all(c > 0 for c in per_call)
    assert quote["planned_calls"] == 9


def test_an_unpriced_target_quotes_an_unknown_worst_case():
    """issue 39 item 1: no price, no bound: the quote says unknown (None), never 0."""
    target = f.target_create(prices={})
    quote = preflight_quote(target=target)
    assert quote["worst_case_usd"] is None and "unknown" in quote["words"]


@pytest.mark.parametrize(
    ("error", "stated"),
    [
        ("This model's maximum context length is 4096 tokens", 4096),
        ("maximum context length is 2147483647", 2**31 - 1),
        # Past the preflight's column: writing it failed the preflight; now unknown.
        ("maximum context length is 99999999999", None),
        ("maximum context length is 0", None),
        ("maximum context length is ٤٠٩٦", None),  # digits of another script
    ],
)
def test_a_stated_context_is_a_size_the_column_holds_or_unknown(error, stated):
    assert stated_context(error) == stated


class _Refusing(http.server.BaseHTTPRequestHandler):
    """Refuses every chat request with a whole HTTP 429 JSON answer before any stream byte;
    ``padding`` bytes make its body longer, ``headers`` are added to it."""

    padding = 0
    extra: dict[str, str] = {}  # noqa: RUF012 (set per test on a subclass)

    def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
        self.rfile.read(int(self.headers.get("content-length") or 0))
        body = json.dumps(
            {"error": {"message": "rate limited", "padding": "x" * self.padding}}
        ).encode()
        self.send_response(429)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        for name, value in self.extra.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 (no /props, no /models)
        self.send_error(404)

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize(
    ("padding", "extra", "known"),
    [
        (0, {}, True),  # a whole refusal at a target that does not bill errors: a known 0
        (HTTP_ERROR_BODY_CAP, {}, False),  # past the engine's error body cap: not a known failure
        (0, {"x-vsr-inference-call-count": "2"}, False),  # a router that did work
    ],
)
def test_the_preflight_counts_a_refusal_by_the_one_rule_of_an_unbilled_error(padding, extra, known):
    """session 9 (helper ld): the preflight's total counts a call answered by an HTTP error
    before any stream byte at a target whose errors_billed is false as a known 0 only by
    `runs.ledger.accounting.known_failure_unbilled`, the rule of a run's calls; before, any
    non-200 without usage counted 0, a refusal the run's report calls unknown among them."""
    handler = type("Handler", (_Refusing,), {"padding": padding, "extra": extra})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        target = _target(url)
        assert target.errors_billed is False
        preflight = _run(target)
    finally:
        server.shutdown()
        server.server_close()
    rows = list(preflight.calls.all())
    assert rows and {(r.http_status, r.cost_usd) for r in rows} == {(429, None)}
    if known:
        assert (preflight.cost_usd, preflight.known_cost_usd) == (0, 0)
        assert all("errors_billed = false" in r.cost_note for r in rows)
    else:
        assert (preflight.cost_usd, preflight.known_cost_usd) == (None, 0)
        assert not any("errors_billed" in r.cost_note for r in rows)


def test_the_admin_preflight_page_shows_each_call_at_the_cost_its_total_counts(client):
    """session 9 (helper rc): the admin's preflight page listed a refused call's recorded cost
    ("unknown") under a total that counted it a known 0 by `known_failure_unbilled`, where the
    run's per-call views show the 0 (`call_effective_costs`). Each row now shows the cost the
    total counts, the recorded one beside it; the API's preflight says both too."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Refusing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        target = _target(f"http://127.0.0.1:{server.server_address[1]}")
        preflight = _run(target)
    finally:
        server.shutdown()
        server.server_close()
    rows = list(preflight.calls.order_by("sequence"))
    assert rows and {(r.http_status, r.cost_usd) for r in rows} == {(429, None)}
    assert (preflight.cost_usd, preflight.known_cost_usd) == (0, 0)

    client.force_login(f.user_create(username="op", staff=True))
    page = client.get(f"/admin/runs/target/{target.pk}/preflight/").content.decode()
    cells = re.findall(r'<td class="preflight-call-cost">(.*?)</td>', page)
    assert len(cells) == len(rows)
    for cell in cells:
        assert cell == "0 (counted as the total counts it; recorded: unknown)", cell
    read = client.get(f"/api/v1/targets/{target.slug}/preflight/").json()["latest"]
    assert [(c["effective_cost_usd"], c["cost_usd"]) for c in read["calls"]] == [("0", None)] * len(
        rows
    )
