"""A gateway's own re-sends, through the real engine and a real worker: LiteLLM's proxy
(requirements/gateway.txt, started as in tests/e2e/test_litellm_gateway.py) retries a failed
upstream call twice by default and answers once. Measured: one request with a parameter the
llama.cpp server refuses (its 500) reached that server three times; one that failed once and
then succeeded came back as one answer whose only trace of the first attempt is the response
header ``x-litellm-attempted-retries: 1``. The ledger must keep that header and say beside the
call's cost that it is the last attempt's only."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from runs.models import Call
from runs.planning.services import run_create, target_set_api_key
from runs.reporting.reconcile import usage_reconcile
from runs.reporting.report import run_report
from tests import factories as f
from tests.conftest import wait_until
from tests.e2e.test_litellm_gateway import GATEWAY_MODEL, litellm_proxy
from tests.runs import engine_support as es

pytestmark = pytest.mark.worker

PRICE = {"input": "3", "output": "15"}
USAGE = {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}


class FailsFirst(BaseHTTPRequestHandler):
    """An upstream that answers its first chat request with a 500 and every later one with a
    finished stream carrying USAGE; ``server.requests`` counts what it received."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        server = self.server
        server.requests += 1  # type: ignore[attr-defined]
        if server.requests == 1:  # type: ignore[attr-defined]
            body = b'{"error": {"message": "busy", "type": "server_error"}}'
            self.send_response(500)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        base = {"id": "up-1", "object": "chat.completion.chunk", "created": 1, "model": "up"}
        events = [
            {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "B"}}]},
            {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
            {**base, "choices": [], "usage": USAGE},
        ]
        data = b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in events)
        data += b"data: [DONE]\n\n"
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@contextlib.contextmanager
def fails_first() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), FailsFirst)
    server.requests = 0  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.timeout(600)
def test_a_call_the_gateway_resent_says_so_beside_its_cost(celery_worker, tmp_path):
    with fails_first() as upstream:
        api_base = f"http://127.0.0.1:{upstream.server_address[1]}/v1"
        route = {"model": "openai/up", "api_base": api_base, "api_key": "none"}
        with litellm_proxy(api_base, tmp_path, route) as gw:
            target = f.target_create(
                slug="gw-resend",
                model=GATEWAY_MODEL,
                base_url=f"{gw.url}/v1",
                prices={GATEWAY_MODEL: PRICE},
            )
            target_set_api_key(target=target, api_key=gw.key)
            dataset = es.fixture_dataset(["mmlu-pro"], per_benchmark=1)
            run, _ = run_create(
                owner=f.user_create(),
                plan={
                    "name": "gateway resend",
                    "dataset": dataset.pk,
                    "targets": [target.slug],
                    "limits": {"concurrency": 1},
                },
            )
            wait_until(lambda: es.terminal(run), timeout=300, interval=0.25)
            log = gw.log()
        received = upstream.requests  # type: ignore[attr-defined]

    assert run.status == "completed", (run.stop_reason, celery_worker.log()[-3000:], log)
    (call,) = Call.objects.filter(cell__run=run)
    # One call in the ledger; two requests reached the model behind the gateway.
    assert received == 2
    assert call.status == "completed"
    headers = {k.lower(): v for k, v in call.response_headers.items()}
    assert headers["x-litellm-attempted-retries"] == "1"
    expected = (Decimal(100) * 3 + Decimal(10) * 15) / Decimal(1_000_000)
    assert (call.input_tokens, call.output_tokens, call.cost_usd) == (100, 10, expected)
    assert call.cost_note.startswith(
        "the gateway re-sent this request 1 time(s) upstream: cost is of the last attempt "
        "only, what earlier attempts cost is unknown; priced as"
    ), call.cost_note
    # The run's cost is at least the known sum, not complete: the first attempt's is unknown.
    report = run_report(run=run)
    (target_report,) = report["targets"]
    assert target_report["subject_cost_usd"] is None
    assert Decimal(target_report["known_cost_usd"]) == expected
    assert report["spend"]["gateway_resent_calls"] == 1
    assert report["spend"]["total_spend_usd"] is None
    # LiteLLM answered and no check of the target was frozen: the report says what that means.
    assert target_report["usage_caution"].startswith(
        "1 of 1 subject calls were answered through a LiteLLM gateway"
    )
    # reconcile-usage verifies the call from its evidence and keeps the same words.
    (entry,) = usage_reconcile(run_id=run.pk).correction.corrections["calls"]
    assert (entry["outcome"], entry["reason"]) == ("verified", call.cost_note)
