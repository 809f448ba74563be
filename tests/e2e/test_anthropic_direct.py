"""A target that speaks Anthropic's Messages API directly (issue 37 item 4): a whole run through
the real engine, Celery worker, PostgreSQL and Redis against the simulator's ``/v1/messages``
(srbench/simulator/anthropic.py). Each call's four token buckets and cost must equal a
recomputation from the events the simulator itself sent (``message_start`` usage, replaced key
by key by ``message_delta``'s), and the bytes the ledger keeps must be those bytes."""

from __future__ import annotations

import json
import zlib
from decimal import Decimal
from typing import Any

import pytest

from runs.models import Call, CallEvidence, Cell
from runs.planning.services import run_create, target_set_api_key
from runs.reporting.report import run_report
from tests import factories as f
from tests.conftest import wait_until
from tests.e2e.simulator_tap import BENCHMARKS, tapped_simulator
from tests.runs import engine_support as es

MODEL = "sim-strong"
PRICE = {"input": "3", "cached_input": "0.3", "cache_write": "3.75", "output": "15"}
KEY = "sk-ant-test-" + "0" * 24
RUN_S = 300


def events(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for block in raw.decode("utf-8").split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "data" in lines:
            out.append((lines.get("event", ""), json.loads(lines["data"])))
    return out


@pytest.mark.worker
@pytest.mark.timeout(RUN_S + 120)
def test_a_run_against_the_messages_api_prices_anthropics_four_buckets(celery_worker):
    with tapped_simulator("/v1/messages") as (url, tap):
        target = f.target_create(
            slug="anthropic-direct",
            model=MODEL,
            base_url=f"{url}/v1",
            api="anthropic",
            prices={MODEL: PRICE},
        )
        target_set_api_key(target=target, api_key=KEY)
        dataset = es.fixture_dataset(BENCHMARKS)
        run, _ = run_create(
            owner=f.user_create(),
            plan={
                "name": "anthropic",
                "dataset": dataset.pk,
                "targets": [target.slug],
                "limits": {"concurrency": 2},
            },
        )
        wait_until(lambda: es.terminal(run), timeout=RUN_S)

    assert run.status == "completed", (run.stop_reason, celery_worker.log()[-3000:])
    assert run.manifest["targets"][0]["api"] == "anthropic"
    assert not Cell.objects.filter(run=run).exclude(status="completed").exists()
    calls = list(Call.objects.filter(cell__run=run).order_by("pk"))
    assert len(calls) == dataset.entries.count() == len(tap.exchanges)
    by_call = {int(e.headers["x-srbench-call-id"]): e for e in tap.exchanges}

    prices = {k: Decimal(v) for k, v in PRICE.items()}
    totals = dict.fromkeys(("input", "cached_input", "cache_write", "output"), 0)
    expected_cost = expected_neutral = Decimal(0)
    for call in calls:
        sent = by_call[call.pk]
        # Anthropic's authentication and version headers, no bearer token; the request in the
        # Messages API's shape (system apart, streamed, max_tokens given).
        assert sent.headers["x-api-key"] == KEY and "authorization" not in sent.headers
        assert sent.headers["anthropic-version"] == "2023-06-01"
        assert sent.request["stream"] is True and sent.request["model"] == MODEL
        assert isinstance(sent.request["max_tokens"], int) and "stream_options" not in sent.request
        assert all(m["role"] in ("user", "assistant") for m in sent.request["messages"])
        # The ledger keeps the bytes the simulator sent.
        assert zlib.decompress(bytes(CallEvidence.objects.get(call=call).body)) == sent.raw
        # The usage, recomputed from the events: message_start's, then message_delta's.
        usage: dict[str, int] = {}
        for name, data in events(sent.raw):
            if name == "message_start":
                usage.update(data["message"]["usage"])
            elif name == "message_delta":
                usage.update(data["usage"])
        want = (
            usage["input_tokens"],
            usage["cache_read_input_tokens"],
            usage["cache_creation_input_tokens"],
            usage["output_tokens"],
        )
        got = (
            call.input_tokens,
            call.cached_input_tokens,
            call.cache_write_tokens,
            call.output_tokens,
        )
        assert got == want, (call.usage_raw, usage)
        assert call.usage_raw == usage
        assert call.cached_reported is True and call.cache_write_reported is True
        # Anthropic reports no reasoning part of the output: unknown, never 0.
        assert call.reasoning_tokens is None
        assert call.reasoning.startswith("Let me work through")
        assert call.served_model == MODEL and call.finish_reason == "stop"
        cost = sum(n * prices[b] for n, b in zip(want, totals, strict=True)) / Decimal(10**6)
        assert call.cost_usd == cost
        expected_cost += cost
        expected_neutral += (
            (want[0] + want[1] + want[2]) * prices["input"] + want[3] * prices["output"]
        ) / Decimal(10**6)
        for bucket, n in zip(totals, want, strict=True):
            totals[bucket] += n

    # The simulator's prefix cache read and wrote part of the shared instructions.
    assert totals["cached_input"] > 0 and totals["cache_write"] > 0
    t = run_report(run=run)["targets"][0]
    assert t["tokens"] == totals
    assert Decimal(t["subject_cost_usd"]) == expected_cost
    assert Decimal(t["cache_neutral_cost_usd"]) == expected_neutral
