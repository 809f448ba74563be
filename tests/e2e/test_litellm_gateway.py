"""A real gateway in front of the simulator (issue 22 point 7): LiteLLM's proxy, installed from
PyPI into its own hash-checked venv (scripts/ensure_gateway.sh, requirements/gateway.txt), runs
as a subprocess on loopback and forwards a model name to the simulator. A run through it must
come back with the four token buckets the simulator itself reported, read from the gateway's
own re-encoding of the stream and its usage, and cost what those buckets cost."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import httpx
import pytest

from runs.ledger.usage import usage_buckets, usage_buckets_explained
from runs.models import Call, CallEvidence, Cell
from runs.models.evidence import evidence_raw
from runs.planning.services import run_create, target_set_api_key
from runs.reporting.report import run_report
from tests import factories as f
from tests.conftest import ROOT, wait_until
from tests.e2e.simulator_tap import BENCHMARKS, sse_chunks, tapped_simulator
from tests.runs import engine_support as es

GATEWAY_VENV = Path(os.environ.get("SRBENCH_GATEWAY_VENV", ROOT / "var" / "gateway-venv"))
LOCK = ROOT / "requirements" / "gateway.txt"
# The proxy's model group; LiteLLM names it, not the upstream model, in every chunk it sends.
GATEWAY_MODEL = "gw-strong"
PRICE = {"input": "3", "cached_input": "0.3", "cache_write": "3.75", "output": "15"}
# Budgets for a machine at load 10: LiteLLM's proxy imports a few hundred modules before it
# listens (about 25 s at load 6 on this machine's two cores).
GATEWAY_START_S = 300
RUN_S = 300


# --------------------------------------------------------------------------------------------
# The simulator, with a tap on what it sends


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --------------------------------------------------------------------------------------------
# LiteLLM's proxy as a subprocess


@dataclass
class Gateway:
    url: str
    key: str
    log_path: Path
    process: subprocess.Popen[bytes]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]


@contextlib.contextmanager
def litellm_proxy(
    upstream: str, tmp_path: Path, route: dict[str, str] | None = None
) -> Iterator[Gateway]:
    litellm = GATEWAY_VENV / "bin" / "litellm"
    if not litellm.exists():
        pytest.fail(f"{litellm} is missing: run scripts/ensure_gateway.sh (make install does)")
    port = free_port()
    key = "sk-gw-" + secrets.token_hex(16)
    config = tmp_path / "litellm.yaml"
    # YAML is a superset of JSON: the config is written with json.dumps, no YAML writer needed.
    config.write_text(
        json.dumps(
            {
                "model_list": [
                    {
                        "model_name": GATEWAY_MODEL,
                        "litellm_params": route
                        or {
                            "model": "openai/sim-strong",
                            "api_base": f"{upstream}/v1",
                            "api_key": "sim-has-no-key",
                        },
                    }
                ],
                "litellm_settings": {"telemetry": False},
            }
        )
    )
    # A clean environment: none of the test's DATABASE_URL or broker settings (LiteLLM would
    # try to use them), no telemetry, and the bundled model cost map instead of a download.
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "LANG": "C.UTF-8",
        "NO_PROXY": "127.0.0.1,localhost",
        "LITELLM_TELEMETRY": "False",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_MASTER_KEY": key,
        "DISABLE_ADMIN_UI": "True",
    }
    log_path = tmp_path / "litellm.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [litellm, "--config", config, "--host", "127.0.0.1", "--port", str(port)],
            cwd=tmp_path,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    gateway = Gateway(f"http://127.0.0.1:{port}", key, log_path, process)
    try:
        deadline = time.monotonic() + GATEWAY_START_S
        while True:
            if process.poll() is not None:
                pytest.fail(f"LiteLLM's proxy exited with {process.returncode}:\n{gateway.log()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{gateway.url}/health/liveliness", timeout=5).status_code == 200:
                    break
            if time.monotonic() > deadline:
                pytest.fail(f"LiteLLM's proxy not up in {GATEWAY_START_S}s:\n{gateway.log()}")
            time.sleep(0.5)
        yield gateway
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)


# --------------------------------------------------------------------------------------------
# Tests


def test_the_gateway_extra_and_the_hash_lock_pin_the_same_litellm():
    import tomllib

    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]["gateway"]
    lock = LOCK.read_text()
    pins = re.findall(r"^([A-Za-z0-9_.-]+)==(\S+) \\\n\s+--hash=sha256:[0-9a-f]{64}$", lock, re.M)
    requirements = [line for line in lock.splitlines() if line and line[0] not in "# "]
    assert len(pins) == len(requirements), "every locked requirement carries a sha256"
    assert [f"litellm=={v}" for n, v in pins if n == "litellm"] == extra


@pytest.mark.worker
@pytest.mark.timeout(GATEWAY_START_S + RUN_S + 120)
def test_a_run_through_litellm_reports_the_simulators_four_token_buckets(celery_worker, tmp_path):
    from datasets.benchmarks import get_adapter
    from srbench.simulator import tokens

    with tapped_simulator() as (sim_url, tap), litellm_proxy(sim_url, tmp_path) as gateway:
        # The gateway authenticates: without its key nothing reaches the simulator.
        refused = httpx.post(
            f"{gateway.url}/v1/chat/completions",
            json={"model": GATEWAY_MODEL, "messages": [{"role": "user", "content": "hi"}]},
            timeout=60,
        )
        assert refused.status_code in (400, 401, 403), refused.text
        assert tap.exchanges == []

        target = f.target_create(
            slug="litellm-gw",
            model=GATEWAY_MODEL,
            base_url=f"{gateway.url}/v1",
            prices={GATEWAY_MODEL: PRICE},
        )
        target_set_api_key(target=target, api_key=gateway.key)
        dataset = es.fixture_dataset(BENCHMARKS)
        run, _ = run_create(
            owner=f.user_create(),
            plan={
                "name": "gateway",
                "dataset": dataset.pk,
                "targets": [target.slug],
                "limits": {"concurrency": 2},
            },
        )
        wait_until(lambda: es.terminal(run), timeout=RUN_S)
        gateway_log = gateway.log()

    assert run.status == "completed", (run.stop_reason, celery_worker.log()[-3000:], gateway_log)
    assert not Cell.objects.filter(run=run).exclude(status="completed").exists()
    calls = list(Call.objects.filter(cell__run=run).order_by("pk"))
    assert len(calls) == dataset.entries.count()
    assert all(c.status == "completed" for c in calls)

    # Every call reached the simulator once, streamed with usage requested, through LiteLLM.
    by_id = {e.response_id: e for e in tap.exchanges}
    assert len(by_id) == len(tap.exchanges) == len(calls)
    for e in tap.exchanges:
        assert e.request["model"] == "sim-strong"
        assert e.request["stream"] is True
        assert e.usage is not None and e.events > 3

    expected_cost = expected_neutral = Decimal(0)
    totals = dict.fromkeys(("input", "cached_input", "cache_write", "output"), 0)
    prices = {k: Decimal(v) for k, v in PRICE.items()}
    for call in calls:
        raw = evidence_raw(CallEvidence.objects.get(call=call))
        received = list(sse_chunks(raw))
        sent = by_id[received[0]["id"]]
        # The gateway's own encoding: LiteLLM rebuilt every chunk (its model name, its field
        # order), so the bytes the engine parsed are not the simulator's...
        assert raw != sent.raw
        assert {c["model"] for c in received} == {GATEWAY_MODEL}
        assert call.served_model == GATEWAY_MODEL
        assert call.first_token_at is not None and len(received) > 3
        assert call.usage_raw == [c for c in received if c.get("usage")][-1]["usage"]
        # ... and the buckets read from it are the simulator's, computed here from what the
        # simulator sent (OpenAI shape: the prompt includes the cached tokens; no cache writes).
        u = sent.usage
        cached = u["prompt_tokens_details"]["cached_tokens"]
        want = (u["prompt_tokens"] - cached, cached, 0, u["completion_tokens"])
        got = (
            call.input_tokens,
            call.cached_input_tokens,
            call.cache_write_tokens,
            call.output_tokens,
        )
        assert got == want, (call.usage_raw, u)
        assert call.cached_reported is True
        # Reasoning (issue 37 item 4): LiteLLM passes completion_tokens_details through, and
        # the ledger keeps it as its own count inside the output, never added to it.
        reasoning = u["completion_tokens_details"]["reasoning_tokens"]
        assert reasoning > 0 and call.usage_raw["completion_tokens_details"]["reasoning_tokens"]
        assert call.reasoning_tokens == reasoning <= call.output_tokens
        for bucket, n in zip(totals, want, strict=True):
            totals[bucket] += n
        cost = (
            want[0] * prices["input"]
            + want[1] * prices["cached_input"]
            + want[2] * prices["cache_write"]
            + want[3] * prices["output"]
        ) / Decimal(10**6)
        assert call.cost_usd == cost
        expected_cost += cost
        expected_neutral += (
            u["prompt_tokens"] * prices["input"] + want[3] * prices["output"]
        ) / Decimal(10**6)

    # The simulator's prefix cache answered part of the shared instructions from cache.
    assert totals["cached_input"] > 0
    # The prompts reached the simulator unchanged: their size by the stated tokenisation.
    prompt_tokens = 0
    for b in BENCHMARKS:
        adapter = get_adapter(b)
        for q in adapter.load(adapter.fixture_path()):
            messages = adapter.messages(q.payload)
            prompt_tokens += sum(4 + tokens.count_tokens(m["content"]) for m in messages) + 2
    assert totals["input"] + totals["cached_input"] == prompt_tokens

    t = run_report(run=run)["targets"][0]
    assert t["tokens"] == totals
    assert Decimal(t["subject_cost_usd"]) == expected_cost
    assert Decimal(t["cache_neutral_cost_usd"]) == expected_neutral
    assert expected_neutral > expected_cost


# The shape of the usage LiteLLM 1.110.2's proxy sends when its upstream reports cache writes:
# seen in front of the simulator's Anthropic-style model, where the write comes back under three
# aliases (nested cache_write_tokens and cache_creation_tokens, top-level
# cache_creation_input_tokens). The counts here are made consistent (59-token prompt); what the
# proxy really sent for that model is the next test's case.
LITELLM_CACHE_WRITE = {
    "completion_tokens": 36,
    "prompt_tokens": 59,
    "total_tokens": 95,
    "completion_tokens_details": {"reasoning_tokens": 10, "text_tokens": 26},
    "prompt_tokens_details": {
        "cache_write_tokens": 48,
        "cached_tokens": 0,
        "cache_creation_tokens": 48,
    },
    "cache_creation_input_tokens": 48,
    "cache_read_input_tokens": 0,
}


def test_litellms_cache_write_aliases_are_one_bucket():
    b = usage_buckets(LITELLM_CACHE_WRITE)
    assert b is not None
    assert (b.input, b.cached_input, b.cache_write, b.output) == (11, 0, 48, 36)
    assert b.cache_write_reported and b.cached_reported


def test_litellms_zero_prompt_with_cache_tokens_is_invalid_not_free():
    # What the proxy really sent for that model: prompt_tokens 0 beside 48 cache-write tokens.
    # The prompt cannot be smaller than its cached part, so the usage is unknown (null cost),
    # never priced as 0 input tokens.
    mangled = {
        **LITELLM_CACHE_WRITE,
        "completion_tokens": 0,
        "prompt_tokens": 0,
        "total_tokens": 0,
    }
    outcome = usage_buckets_explained(mangled)
    assert outcome.buckets is None and outcome.problem == "invalid", outcome


@pytest.mark.worker
@pytest.mark.timeout(GATEWAY_START_S + RUN_S + 120)
def test_litellms_anthropic_route_keeps_the_messages_apis_four_buckets(celery_worker, tmp_path):
    """LiteLLM's `anthropic/` route in front of the simulator's Messages API (issue 37 item 4):
    the proxy turns Anthropic's usage into OpenAI's shape (prompt = fresh + cache read + cache
    write); the buckets the ledger reads from it must be the ones the simulator sent. What the
    proxy adds that the upstream never sent (a reasoning count) is recorded as the proxy's."""
    from tests.e2e.test_anthropic_direct import events

    with tapped_simulator("/v1/messages") as (sim_url, tap):
        route = {"model": "anthropic/sim-strong", "api_base": sim_url, "api_key": "sim-no-key"}
        with litellm_proxy(sim_url, tmp_path, route) as gateway:
            target = f.target_create(
                slug="litellm-anthropic",
                model=GATEWAY_MODEL,
                base_url=f"{gateway.url}/v1",
                prices={GATEWAY_MODEL: PRICE},
            )
            target_set_api_key(target=target, api_key=gateway.key)
            dataset = es.fixture_dataset(BENCHMARKS)
            # One call at a time: the proxy mints its own response ids, so calls and upstream
            # exchanges are matched by order.
            run, _ = run_create(
                owner=f.user_create(),
                plan={
                    "name": "gateway-anthropic",
                    "dataset": dataset.pk,
                    "targets": [target.slug],
                    "limits": {"concurrency": 1},
                },
            )
            wait_until(lambda: es.terminal(run), timeout=RUN_S)
            gateway_log = gateway.log()

    assert run.status == "completed", (run.stop_reason, celery_worker.log()[-3000:], gateway_log)
    calls = list(Call.objects.filter(cell__run=run).order_by("sent_at", "pk"))
    assert len(calls) == len(tap.exchanges) == dataset.entries.count()
    prices = {k: Decimal(v) for k, v in PRICE.items()}
    totals = dict.fromkeys(("input", "cached_input", "cache_write", "output"), 0)
    for call, sent in zip(calls, tap.exchanges, strict=True):
        assert sent.request["stream"] is True and sent.request["model"] == "sim-strong"
        usage: dict[str, int] = {}
        for name, data in events(sent.raw):
            if name == "message_start":
                usage.update(data["message"]["usage"])
            elif name == "message_delta":
                usage.update(data["usage"])
        assert "reasoning_tokens" not in json.dumps(usage)  # Anthropic reports none
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
        cost = sum(n * prices[b] for n, b in zip(want, totals, strict=True)) / Decimal(10**6)
        assert call.cost_usd == cost
        # The proxy's own count of the thinking text, not the upstream's: kept as it says.
        assert (
            call.reasoning_tokens == call.usage_raw["completion_tokens_details"]["reasoning_tokens"]
        )
        for bucket, n in zip(totals, want, strict=True):
            totals[bucket] += n
    assert totals["cached_input"] > 0 and totals["cache_write"] > 0
    assert run_report(run=run)["targets"][0]["tokens"] == totals
