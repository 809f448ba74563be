"""A real model server on the user's path (issue 37 item 1): SmolLM2-135M-Instruct served by
llama.cpp's OpenAI-compatible server (tests/real/conftest.py), registered as a priced target and
evaluated through the real engine and a real Celery worker, as a user would.

What the real server does that the simulator does not (docs/decisions.md, 2026-12-05): its
streams carry no usage chunk even with ``stream_options.include_usage``, so token counts and
subject cost stay unknown (null, never 0) and the report and the CLI say so; an answer cut by
``max_tokens`` ends with ``finish_reason: "length"`` and is recorded and graded as cut; a 135M
model answers with wrong and rambling text, which is graded, never crashed on; and a request that
arrives while another streams cuts that stream (role chunk, then ``[DONE]``, no finish_reason),
which the product must treat as a failed call, fail closed on, and never send again.

Every request the server received is counted in the server's own access log, and every
recorded answer is recomputed from the bytes the server sent (the call's evidence)."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.core.management import call_command

from runs.models import Call, CallEvidence, Cell, Run
from runs.planning.services import run_create
from runs.reporting.reconcile import usage_reconcile
from runs.reporting.report import run_report
from tests import factories as f
from tests.conftest import wait_until
from tests.real.conftest import LlamaServer
from tests.runs import engine_support as es

pytestmark = pytest.mark.worker

PRICE = {"input": "0.1", "cached_input": "0.01", "output": "0.2"}
RUN_S = 240  # a handful of questions at tens of tokens per second, on two busy cores


@dataclass(frozen=True)
class ServerStream:
    """One streamed answer as the server sent it, decoded here without the product's code."""

    content: str
    finish_reason: str | None
    usage_chunks: int
    done: int
    chunks: int


def server_stream(call: Call) -> ServerStream:
    """The call's evidence (the raw bytes of the server's response) read as plain SSE lines."""
    raw = zlib.decompress(bytes(CallEvidence.objects.get(call=call).body))
    content, finish, usage, done, chunks = [], None, 0, 0, 0
    for line in raw.decode("utf-8").splitlines():
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            done += 1
            continue
        chunk = json.loads(data)
        chunks += 1
        usage += chunk.get("usage") is not None
        for choice in chunk.get("choices") or []:
            content.append((choice.get("delta") or {}).get("content") or "")
            finish = choice.get("finish_reason") or finish
    return ServerStream("".join(content), finish, usage, done, chunks)


@dataclass
class Tap:
    """A loopback TCP relay in front of the server: every byte the server sent, per
    connection, recorded before it is passed on (so nothing the product read is missing)."""

    upstream: tuple[str, int]
    listener: socket.socket = field(default_factory=lambda: socket.create_server(("127.0.0.1", 0)))
    sent: list[bytearray] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}/v1"

    def serve(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed at the end of the test
            upstream = socket.create_connection(self.upstream)
            record = bytearray()
            self.sent.append(record)
            for src, dst, rec in ((client, upstream, None), (upstream, client, record)):
                threading.Thread(target=relay, args=(src, dst, rec), daemon=True).start()

    def event_streams(self) -> list[bytes]:
        """The body of every event-stream response the server sent, de-chunked."""
        return [body for record in self.sent for body in stream_bodies(bytes(record))]


def relay(src: socket.socket, dst: socket.socket, record: bytearray | None) -> None:
    with contextlib.suppress(OSError):
        while data := src.recv(65536):
            if record is not None:
                record.extend(data)
            dst.sendall(data)
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)


def stream_bodies(record: bytes) -> Iterator[bytes]:
    """The chunked bodies of the event-stream responses on one connection, in order."""
    pos = 0
    while pos < len(record):
        end = record.index(b"\r\n\r\n", pos)
        head, pos = record[pos:end].lower(), end + 4
        assert b"transfer-encoding: chunked" in head, head
        body = bytearray()
        while True:
            line_end = record.index(b"\r\n", pos)
            size = int(record[pos:line_end].split(b";")[0], 16)
            pos = line_end + 2
            if size == 0:
                pos = record.index(b"\r\n", pos) + 2  # the server sends no trailers
                break
            body += record[pos : pos + size]
            pos += size + 2
        if b"content-type: text/event-stream" in head:
            yield bytes(body)


@contextlib.contextmanager
def tapped(server: LlamaServer) -> Iterator[Tap]:
    url = urlsplit(server.base_url)
    tap = Tap((url.hostname or "127.0.0.1", url.port or 80))
    threading.Thread(target=tap.serve, daemon=True).start()
    try:
        yield tap
    finally:
        tap.listener.close()


def evidence_bytes(run: Run) -> list[bytes]:
    return [
        zlib.decompress(bytes(e.body)) for e in CallEvidence.objects.filter(call__cell__run=run)
    ]


def llama_target(server: LlamaServer, base_url: str | None = None) -> None:
    f.target_create(
        slug="llama-smollm2",
        name="SmolLM2 on llama.cpp",
        model=server.model,
        base_url=base_url or server.base_url,
        prices={server.model: PRICE},
    )


def evaluate(benchmarks: list[str], per_benchmark: int, **plan: Any) -> Run:
    """A run of the first `per_benchmark` fixture questions of each benchmark on the llama
    target, at temperature 0, to its end."""
    dataset = es.fixture_dataset(benchmarks, per_benchmark=per_benchmark)
    f.user_create(username="ops", staff=True)
    run, _ = run_create(
        owner=f.user_create(),
        plan={
            "name": "real server",
            "dataset": dataset.pk,
            "targets": ["llama-smollm2"],
            "sampling": {"temperature": 0},
            **plan,
        },
    )
    wait_until(lambda: es.terminal(run), timeout=RUN_S, interval=0.25)
    return run


def cli_report(capsys: pytest.CaptureFixture[str], run: Run) -> str:
    capsys.readouterr()
    call_command("benchmark", "report", str(run.pk), "--user", "ops")
    return capsys.readouterr().out


def subject_calls(run: Run) -> list[Call]:
    return list(Call.objects.filter(cell__run=run, role="subject").order_by("pk"))


@pytest.mark.timeout(RUN_S + 200)
def test_cut_answers_are_recorded_as_cut_and_missing_usage_stays_unknown(
    celery_worker, llama_server, capsys
):
    """issue 37 item 1: at concurrency 1 with max_tokens 4 every answer is cut; the server
    says finish_reason "length" and sends no usage chunk although include_usage was asked.
    Each call is recorded with that finish_reason, no token count and no cost (null, with the
    reason), each cell is graded wrong as truncated, and the report and the CLI say unknown.
    The ledger's evidence is byte for byte what the server sent (a tap in front of it)."""
    with tapped(llama_server) as tap:
        llama_target(llama_server, tap.base_url)
        since = llama_server.log_size()
        run = evaluate(["mmlu-pro"], 3, limits={"concurrency": 1, "max_output_tokens": 4})
    assert run.status == "completed", (run.stop_reason, celery_worker.log()[-3000:])
    assert sorted(evidence_bytes(run)) == sorted(tap.event_streams())

    calls = subject_calls(run)
    assert len(calls) == 3
    # Three requests reached the server, each answered 200: one per call, none re-sent.
    assert llama_server.chat_requests(since) == [200, 200, 200]
    for call in calls:
        sent = server_stream(call)
        assert call.request["stream_options"] == {"include_usage": True}
        assert call.request["max_tokens"] == 4
        assert sent.usage_chunks == 0 and sent.done == 1
        assert sent.finish_reason == "length"
        assert (call.status, call.finish_reason, call.content) == (
            "completed",
            "length",
            sent.content,
        )
        assert call.served_model == llama_server.model
        assert call.usage_raw is None
        assert [call.input_tokens, call.cached_input_tokens, call.output_tokens] == [None] * 3
        assert call.cost_usd is None and call.cache_neutral_cost_usd is None
        assert call.cost_note == "usage missing: no usage object"

    for cell in Cell.objects.filter(run=run):
        assert cell.status == "completed" and cell.correct is False
        assert cell.grade == {"grader": "truncated", "finish_reason": "length"}

    t = run_report(run=run)["targets"][0]
    assert t["benchmarks"]["mmlu-pro"]["correct"] == 0
    assert t["benchmarks"]["mmlu-pro"]["planned"] == 3
    assert t["subject_cost_usd"] is None and t["known_cost_usd"] is None
    assert t["cache_neutral_cost_usd"] is None
    assert set(t["tokens"].values()) == {None}
    assert t["total_spend_usd"] is None
    # Said once for the target, with why (issue 39 item 3): the real server sends no usage.
    assert t["usage_unknown_reason"].startswith(
        "this server reports no usage when streaming: 3 of 3 subject calls carried no usage"
    )

    out = cli_report(capsys, run)
    assert "subject cost unknown: no subject call has a known cost" in out
    assert out.count("this server reports no usage when streaming") == 1
    # The reconcile path names what evidence would make the usage known, call by call.
    entries = usage_reconcile(run_id=run.pk).correction.corrections["calls"]
    assert len(entries) == 3 and all(
        e["cost_usd"] is None and "only a server that sends usage" in e["reason"] for e in entries
    ), entries
    assert "tokens: input unknown  cached_input unknown  cache_write unknown  output unknown" in out
    # Nothing was spent on evaluation (no judge), a known $0; the subject's cost is not $0.
    assert "total spend unknown" in out and "subject cost $0" not in out


@pytest.mark.timeout(RUN_S + 200)
def test_wrong_and_rambling_answers_are_graded_and_only_the_judges_cost_is_known(
    celery_worker, llama_server, capsys
):
    """issue 37 item 1: a 135M model's answers (wrong, verbose, in no expected format) go
    through the real graders — MMLU-Pro's answer extraction, SimpleQA's judge (the simulator)
    — and are graded, not crashed on. The subject's cost stays unknown while the judge's,
    whose server reports usage, is known: the total is unknown with its known part beside it,
    never the judge's cost passed off as the total."""
    benchmarks = ["mmlu-pro", "simpleqa"]
    with es.simulator(benchmarks) as sim_url:
        es.sim_targets(sim_url)
        llama_target(llama_server)
        since = llama_server.log_size()
        run = evaluate(
            benchmarks,
            2,
            judges={"simpleqa": "sim-judge"},
            limits={"concurrency": 1, "max_output_tokens": 48},
        )
        judge_requests = es.sim_stats(sim_url)["chat_requests"]
    assert run.status == "completed", (run.stop_reason, celery_worker.log()[-3000:])

    calls = subject_calls(run)
    assert len(calls) == 4
    assert llama_server.chat_requests(since) == [200] * 4
    finished = []
    for call in calls:
        sent = server_stream(call)
        assert sent.usage_chunks == 0 and sent.finish_reason in ("stop", "length")
        assert (call.finish_reason, call.content) == (sent.finish_reason, sent.content)
        assert call.cost_usd is None and call.output_tokens is None
        cell = call.cell
        assert cell.status == "completed" and isinstance(cell.correct, bool)
        if sent.finish_reason == "length":
            assert cell.grade["grader"] == "truncated" and cell.correct is False
        else:
            assert cell.grade.get("grader") != "truncated"
            finished.append(cell)
    # At least one answer ran to its end and went through a real grader.
    assert finished, [c.content for c in calls]

    judges = Call.objects.filter(cell__run=run, role="judge")
    # One judge call per SimpleQA answer that was not cut, all answered by the simulator.
    assert (
        judges.count()
        == judge_requests
        == sum(c.question.benchmark == "simpleqa" for c in finished)
    )
    assert all(j.cost_usd is not None for j in judges)

    report = run_report(run=run)
    t = report["targets"][0]
    for benchmark in benchmarks:
        cells = Cell.objects.filter(run=run, question__benchmark=benchmark)
        assert t["benchmarks"][benchmark]["correct"] == sum(bool(c.correct) for c in cells)
    assert t["subject_cost_usd"] is None and t["known_cost_usd"] is None
    assert t["total_spend_usd"] is None
    if judges.exists():
        assert t["known_total_spend_usd"] == t["known_evaluation_cost_usd"] != "0"
    out = cli_report(capsys, run)
    assert "subject cost unknown: no subject call has a known cost" in out


@pytest.mark.timeout(RUN_S + 200)
def test_a_stream_cut_by_the_next_request_fails_closed_and_is_never_sent_again(
    celery_worker, llama_server, capsys
):
    """issue 37 item 1: at concurrency 4 the server cuts every stream in progress when the
    next request arrives: the cut stream is a role chunk and ``[DONE]`` with no finish_reason.
    The product records each cut call as failed (incomplete stream) with the server's bytes as
    evidence, stops the run on the first such failure (fail closed, the default policy), prices
    nothing it cannot prove, and sends no request twice: the server logs exactly as many
    requests as the ledger has calls, and the evidence is byte for byte what it sent."""
    with tapped(llama_server) as tap:
        llama_target(llama_server, tap.base_url)
        since = llama_server.log_size()
        run = evaluate(["mmlu-pro"], 4, limits={"concurrency": 4, "max_output_tokens": 32})
    assert sorted(evidence_bytes(run)) == sorted(tap.event_streams())

    calls = subject_calls(run)
    received = llama_server.chat_requests(since)
    assert len(received) == len(calls) and set(received) == {200}, (received, len(calls))
    # One call per cell: nothing was retried or sent again.
    assert len({c.cell_id for c in calls}) == len(calls)

    cut = [c for c in calls if c.error_code == "incomplete_stream"]
    assert cut, [(c.status, c.finish_reason, c.error) for c in calls]
    for call in cut:
        sent = server_stream(call)
        assert sent.done == 1 and sent.finish_reason is None
        assert call.status == "failed" and call.error == "no finish_reason"
        assert call.finish_reason == "" and call.content == sent.content
        assert call.cost_usd is None
        assert call.cost_note == "stream incomplete: usage unverified"
    assert run.status == "failed"
    assert run.stop_reason == "first transport failure (fail closed): incomplete_stream"

    report = run_report(run=run)
    assert report["complete"] is False
    t = report["targets"][0]
    assert t["subject_cost_usd"] is None and t["known_cost_usd"] is None
    failed = Cell.objects.filter(run=run, status="failed").count()
    assert failed >= len(cut)
    assert t["benchmarks"]["mmlu-pro"]["failed"] == failed
    out = cli_report(capsys, run)
    assert (
        "not a complete evaluation: run is failed; first transport failure (fail closed): "
        "incomplete_stream" in out
    )
    assert f"waste unknown on {len(cut)} failed or unknown-outcome calls" in out
