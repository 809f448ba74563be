"""A real server given prompts that are slow or too long (the probe left open since issue 37).

What llama.cpp's server (llama-cpp-python 0.3, sse-starlette) does, seen here first by hand:
- it answers a streamed request with its 200 and event-stream headers at once, before the
  prompt is evaluated; while the prompt is evaluated nothing comes but an SSE comment
  (``: ping - <time>``) every 15 seconds, and the prompt's evaluation goes on after the
  client has gone (no check between batches);
- a prompt longer than its context window is refused *after* those headers: the handler
  raises (``Requested tokens (4130) exceed context window of 4096``), and the client reads a
  200 event stream with no event at all;
- LiteLLM's proxy before it turns that empty stream into a finished empty answer
  (finish_reason "stop", a chunk without usage, ``[DONE]``): a completed call, graded wrong,
  which the report must count and explain (`empty_answers`).

The product must record both as failed calls — never re-sent, never priced, the run stopped on
the first (fail closed) — and say what happened in words a user can act on."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from django.core.management import call_command

from datasets.benchmarks import get_adapter
from runs.models import Call, CallEvidence, Cell, Run
from runs.models.evidence import evidence_raw
from runs.planning.services import run_create, target_set_api_key
from runs.reporting.report import run_report
from runs.vocabulary.stream_reasons import EMPTY_STREAM
from tests import factories as f
from tests.conftest import wait_until
from tests.e2e.test_litellm_gateway import GATEWAY_MODEL, litellm_proxy
from tests.real.conftest import LlamaServer, llama_running
from tests.runs import engine_support as es

pytestmark = pytest.mark.worker

PRICE = {"input": "0.1", "cached_input": "0.01", "output": "0.2"}
RUN_S = 240


def long_question(items: int) -> Any:
    """The first MMLU-Pro fixture question behind `items` sentences of notes (about 14
    tokens each for SmolLM2's tokenizer)."""
    adapter = get_adapter("mmlu-pro")
    q = adapter.load(adapter.fixture_path())[0]
    notes = " ".join(f"The item number {i} is stored on shelf {i % 7}." for i in range(items))
    payload = {**q.payload, "question": f"Notes: {notes}\n\n{q.payload['question']}"}
    return dataclasses.replace(q, native_id=f"{q.native_id}-long{items}", payload=payload)


def llama_target(server: LlamaServer) -> None:
    f.target_create(
        slug="llama-long",
        name="SmolLM2 on llama.cpp",
        model=server.model,
        base_url=server.base_url,
        prices={server.model: PRICE},
    )


def run_on(questions: list[Any], target: str = "llama-long", **limits: Any) -> Run:
    dataset = es.questions_dataset(questions, name="long prompts", benchmarks=["mmlu-pro"])
    run, _ = run_create(
        owner=f.user_create(),
        plan={
            "name": f"long prompts {Run.objects.count()}",
            "dataset": dataset.pk,
            "targets": [target],
            "sampling": {"temperature": 0},
            "limits": {"concurrency": 1, "max_output_tokens": 8, **limits},
        },
    )
    wait_until(lambda: es.terminal(run), timeout=RUN_S, interval=0.25)
    run.refresh_from_db()
    return run


def only_call(run: Run) -> Call:
    calls = list(Call.objects.filter(cell__run=run))
    assert len(calls) == 1, [(c.status, c.error) for c in calls]
    return calls[0]


def assert_failed_closed_and_unpriced(run: Run, call: Call, code: str) -> None:
    """One call sent and failed; the run stopped there; nothing priced; the other cell never
    dispatched (so never sent)."""
    assert call.status == "failed" and call.error_code == code
    assert [call.input_tokens, call.output_tokens, call.cost_usd] == [None, None, None]
    assert call.cost_note == "stream incomplete: usage unverified"
    assert (run.status, run.stop_reason) == (
        "failed",
        f"first transport failure (fail closed): {code}",
    )
    assert Cell.objects.filter(run=run, status="failed").count() == 1
    t = run_report(run=run)["targets"][0]
    assert t["subject_cost_usd"] is None and t["total_spend_usd"] is None


@pytest.mark.timeout(2 * RUN_S + 200)
def test_a_prompt_past_the_context_window_and_a_slow_first_token_fail_closed_unpriced(
    celery_worker, tmp_path, capsys
):
    """Two runs on a server of the test's own (its prompt evaluation goes on after the
    client leaves, and is stopped with the server at the end).

    A prompt past the 4,096-token window: the server's 200 and headers, then an empty body —
    recorded as a failed call whose error says the stream was empty and what that may mean,
    with the (empty) body as evidence. A prompt of about 3,500 tokens with an idle timeout of
    0.5 s: the headers come at once, then nothing while the prompt is evaluated — recorded as
    an idle timeout. Both: one request at the server per run (nothing re-sent), no token count
    and no cost (the server may have computed; nothing is proven), the run stopped fail closed
    before its second question."""
    with llama_running(tmp_path) as server:
        f.user_create(username="ops", staff=True)
        llama_target(server)
        since = server.log_size()
        too_long = run_on([long_question(300), long_question(2)])
        assert server.chat_requests(since) == [200]
        call = only_call(too_long)
        assert_failed_closed_and_unpriced(too_long, call, "incomplete_stream")
        assert call.error == EMPTY_STREAM
        assert evidence_raw(CallEvidence.objects.get(call=call)) == b""
        assert "Requested tokens" in server.log() and "exceed context window" in server.log()

        since = server.log_size()
        slow = run_on([long_question(250), long_question(3)], idle_timeout_s=0.5)
        assert server.chat_requests(since) == [200]
        call = only_call(slow)
        assert_failed_closed_and_unpriced(slow, call, "idle_timeout")
        assert call.error == "no bytes for 0.5s"
        # The headers came, no event did: the server was still evaluating the prompt.
        assert evidence_raw(CallEvidence.objects.get(call=call)) == b""
        assert call.http_status == 200, call.http_status

    capsys.readouterr()
    call_command("benchmark", "report", str(slow.pk), "--user", "ops")
    out = capsys.readouterr().out
    assert "first transport failure (fail closed): idle_timeout" in out
    assert "waste unknown on 1 failed or unknown-outcome calls" in out


@pytest.mark.timeout(RUN_S + 200)
def test_a_gateways_empty_answer_for_a_refused_prompt_is_graded_and_counted(
    celery_worker, tmp_path, capsys
):
    """Through LiteLLM, the server's refusal (a prompt past its context window) comes back as
    a finished, empty answer: the call is completed (the wire says so), the cell graded wrong
    as given, nothing re-sent (one request at the server), and the report and the CLI count
    the empty answer and say what it may mean."""
    with llama_running(tmp_path) as server:
        route = {"model": f"openai/{server.model}", "api_base": server.base_url, "api_key": "x"}
        with litellm_proxy(server.base_url, tmp_path, route) as gw:
            target = f.target_create(
                slug="gw-llama",
                model=GATEWAY_MODEL,
                base_url=f"{gw.url}/v1",
                prices={GATEWAY_MODEL: PRICE},
            )
            target_set_api_key(target=target, api_key=gw.key)
            f.user_create(username="ops", staff=True)
            since = server.log_size()
            run = run_on([long_question(300), long_question(4)], target="gw-llama")
        received = server.chat_requests(since)
    assert run.status == "completed", run.stop_reason
    calls = list(Call.objects.filter(cell__run=run).order_by("pk"))
    assert len(received) == len(calls) == 2, (received, calls)
    refused = calls[0]
    assert (refused.status, refused.finish_reason, refused.content) == ("completed", "stop", "")
    assert refused.cost_usd is None  # no usage came back
    assert Cell.objects.get(pk=refused.cell_id).correct is False
    assert calls[1].content.strip(), calls[1].content  # the short prompt was answered

    t = run_report(run=run)["targets"][0]
    assert t["empty_answers"] == 1
    assert t["empty_answers_note"].startswith("1 completed subject call came back empty")
    capsys.readouterr()
    call_command("benchmark", "report", str(run.pk), "--user", "ops")
    assert "answers: 1 completed subject call came back empty" in capsys.readouterr().out
