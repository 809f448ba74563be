"""A million calls (issue 38 item 5): what each call costs at rest and what users wait for.

Builds a ledger of `--calls` calls (1,000,000 by default) in `--runs` ended runs of one subject
call per cell (MMLU-Pro shape: 100,000 cells each), two events per call and the evidence of the
simulator's 50-chunk call, plus small runs up to `--list-runs` (10,000) runs in all. The rows
are written by bulk SQL (INSERT … SELECT over template rows made through the ORM), not by
running the engine. Then it prints:

- the evidence codecs measured on real SSE (the simulator's 50-chunk call, a varied-text
  50-chunk and 1,000-chunk stream, random bytes): bytes at rest, ratio, CPU per call to encode
  and to decode — what runs/models/evidence.py chose from;
- bytes per call at rest: pg_total_relation_size of every ledger table (table, TOAST, indexes)
  over the calls;
- the time of what users wait for at that size: the API poll of a run, every run-detail tab,
  the API report, a comparison of runs, and the Runs list over 10,000 runs (median of
  `--repeat`, through Django's test client: middleware, auth, rendering).

Use a scratch database (`make bench` makes one and drops it): the rows are committed.

    DATABASE_URL=postgres://…/scratch .venv/bin/python bench/million.py [--calls 1000000]
"""

from __future__ import annotations

import argparse
import bz2
import hashlib
import json
import lzma
import os
import random
import statistics
import sys
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "srbench.settings_test")

import django  # noqa: E402

django.setup()

import httpx  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.db import connection  # noqa: E402
from django.db.models import Max  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import setup_test_environment  # noqa: E402
from django.utils import timezone  # noqa: E402

from bench.pages import PRICE, manifest  # noqa: E402
from compare.plan_cases import plan_cases  # noqa: E402
from compare.services import comparison_build  # noqa: E402
from compare.views import compare_url  # noqa: E402
from datasets.models import FrozenDataset, Question  # noqa: E402
from runs.engine.finish import run_report_keep  # noqa: E402
from runs.models import Call, CallEvidence, Cell, Run, RunEvent, Target  # noqa: E402
from runs.models.evidence import evidence_decode, evidence_encode, evidence_fields  # noqa: E402
from srbench.canonical import sha256_hex  # noqa: E402
from srbench.simulator.testing import running_simulator  # noqa: E402

LEDGER = ("runs_cell", "runs_call", "runs_callevidence", "runs_runevent")
SUMMARIES = ("runs_runsummary", "runs_livecellsums", "runs_livecallsums")
STEPS: dict[str, float] = {}  # seconds spent inserting into each table
TABS = ("results", "questions", "calls", "evidence", "recipe")


def load() -> str:
    return "load " + " ".join(f"{x:.2f}" for x in os.getloadavg())


# --- evidence samples and codecs -------------------------------------------------------------


def simulator_stream() -> bytes:
    """The raw bytes the simulator sends for its 50-chunk call (TTFT 0, as the engine bench's
    model: a 46-token reasoning text, then the answer)."""
    model = {
        "accuracy": 0.8,
        "ttft_s": 0,
        "tokens_per_second": 100_000,
        "chunk_tokens": 1,
        "prefix_cache": False,
        "reasoning": " ".join(["step"] * 46),
    }
    body = {
        "model": "bench",
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": "Question: 2 + 2? Options: A) 3 B) 4"}],
    }
    with running_simulator(models={"bench": model}) as root:
        reply = httpx.post(f"{root}/v1/chat/completions", json=body, timeout=30)
    reply.raise_for_status()
    return reply.content


def varied_stream(chunks: int, seed: int) -> bytes:
    """An OpenAI-format stream of `chunks` content deltas of varied English (words of the
    standard library's docstrings drawn at random), as a real model's answer compresses worse
    than the simulator's repeated token."""
    words = sorted(
        {w for m in (json, argparse, zlib, lzma, random) for w in (m.__doc__ or "").split()}
    )
    rng = random.Random(seed)
    head = {"id": "chatcmpl-8f2d1c", "object": "chat.completion.chunk", "created": 1764900000}
    head |= {"model": "qwen3-8b", "system_fingerprint": "b6527-aa1b2c3d"}
    out = [{**head, "choices": [{"index": 0, "delta": {"role": "assistant"}}]}]
    for _ in range(chunks):
        delta = {"content": " " + rng.choice(words)}
        out.append({**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
    usage = {"prompt_tokens": 412, "completion_tokens": chunks, "total_tokens": 412 + chunks}
    out.append({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    out.append({**head, "choices": [], "usage": usage})
    lines = [b"data: " + json.dumps(c, separators=(",", ":")).encode() + b"\n\n" for c in out]
    return b"".join(lines) + b"data: [DONE]\n\n"


def codecs() -> dict[str, tuple[Callable[[bytes], bytes], Callable[[bytes], bytes]]]:
    table: dict[str, tuple[Callable[[bytes], bytes], Callable[[bytes], bytes]]] = {
        f"zlib-{n}": (lambda b, n=n: zlib.compress(b, n), zlib.decompress) for n in (1, 6, 9)
    }
    table["bz2-9"] = (bz2.compress, bz2.decompress)
    table["lzma-6"] = (lzma.compress, lzma.decompress)
    try:
        import zstandard  # type: ignore[import-not-found]  # measured where installed
    except ImportError:
        return table
    for n in (3, 19):
        table[f"zstd-{n}"] = (
            zstandard.ZstdCompressor(level=n).compress,
            zstandard.ZstdDecompressor().decompress,
        )
    return table


def cpu_ms(fn: Callable[[], Any], rounds: int) -> float:
    start = time.process_time()
    for _ in range(rounds):
        fn()
    return (time.process_time() - start) / rounds * 1000


def codec_report(samples: dict[str, bytes], rounds: int) -> None:
    print(f"\nevidence codecs ({load()}): bytes at rest (ratio), CPU per call encode / decode ms")
    for label, raw in samples.items():
        print(f"  {label}: {len(raw):,} B raw")
        for name, (pack, unpack) in codecs().items():
            packed = pack(raw)
            assert unpack(packed) == raw
            enc = cpu_ms(lambda: pack(raw), rounds)  # noqa: B023
            dec = cpu_ms(lambda: unpack(packed), rounds)  # noqa: B023
            print(
                f"    {name:8} {len(packed):>9,} B ({len(packed) / len(raw):.3f}) "
                f"{enc:7.3f} / {dec:6.3f} ms"
            )
        codec, body = evidence_encode(raw)
        assert evidence_decode(codec, body) == raw
        print(f"    stored by runs.models.evidence: {codec}, {len(body):,} B")


# --- the ledger, by bulk SQL ------------------------------------------------------------------


def columns(table: str) -> list[str]:
    with connection.cursor() as cur:
        rows = cur.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = %s "
            "AND column_name <> 'id' ORDER BY ordinal_position",
            [table],
        ).fetchall()
    return [c for (c,) in rows]


def clone(table: str, template_sql: str, source: str, values: dict[str, str]) -> None:
    """INSERT into `table` one row per row of `source`, every column copied from the template
    row (`template_sql` selects it as `t`) except those `values` computes."""
    cols = columns(table)
    exprs = ", ".join(values.get(c, f"t.{c}") for c in cols)
    start = time.perf_counter()
    with connection.cursor() as cur:
        cur.execute(
            f"INSERT INTO {table} ({', '.join(cols)}) "
            f"SELECT {exprs} FROM ({template_sql}) t, {source}"
        )
        # What autovacuum would do before long on a live database: without it the next clone's
        # statement triggers (the live sums', which join the new rows with runs_cell) are planned
        # on statistics that still see these tables empty — a nested loop over 100,000 cells per
        # call row, over 20 minutes for one run's calls instead of about a second.
        cur.execute(f"ANALYZE {table}")
    STEPS[table] = STEPS.get(table, 0.0) + time.perf_counter() - start


def fk_checks(enabled: bool) -> None:
    """Turn the foreign-key checks of the ledger tables' inserts off for the bulk build (each
    clone takes its ids from the parent rows it joins, so every reference holds) or back on.
    They cost as much as the insert itself (a row lock on the parent per row)."""
    verb = "ENABLE" if enabled else "DISABLE"
    with connection.cursor() as cur:
        for table in LEDGER:
            names = cur.execute(
                "SELECT tgname FROM pg_trigger WHERE tgrelid = %s::regclass AND tgisinternal "
                "AND tgfoid = 'pg_catalog.\"RI_FKey_check_ins\"'::regproc",
                [table],
            ).fetchall()
            for (name,) in names:
                cur.execute(f'ALTER TABLE {table} {verb} TRIGGER "{name}"')


def templates(run: Run, question: Question, target: Target, raw: bytes) -> tuple[int, int]:
    """One cell, call, evidence row and its two events, as the engine leaves them for a
    completed 50-chunk MMLU-Pro call; (cell id, call id)."""
    now = timezone.now()
    cell = Cell.objects.create(
        run=run, question=question, target=target, benchmark="mmlu-pro", status="completed"
    )
    Cell.objects.filter(pk=cell.pk).update(
        scored=True, correct=True, final_answer="B", started_at=now, finished_at=now
    )
    payload = question.payload
    prompt = f"{payload['question']}\n" + "\n".join(
        f"{chr(65 + i)}. {o}" for i, o in enumerate(payload["options"])
    )
    call = Call.objects.create(
        cell=cell,
        role="subject",
        sequence=0,
        target=target,
        status="completed",
        request={
            "model": "m",
            "messages": [{"role": "user", "content": prompt}],
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": 4096,
        },
        worker="celery@bench-host-1:4711",
        claim_token=1,
        served_model="m",
        response_headers={"content-type": "text/event-stream", "x-request-id": "r" * 32},
        http_status=200,
        finish_reason="stop",
        content="The answer is (B).",
        reasoning=" ".join(["step"] * 46),
        usage_raw={"prompt_tokens": 412, "completion_tokens": 50, "total_tokens": 462},
        input_tokens=412,
        cached_input_tokens=0,
        cache_write_tokens=0,
        output_tokens=50,
        cached_reported=False,
        cache_write_reported=False,
        cost_usd="0.001986",
        cache_neutral_cost_usd="0.001986",
        reserved_cost_usd="0.0624",
        stage="done",
        sent_at=now,
        first_token_at=now,
        last_activity_at=now,
        finished_at=now,
        ttft_ms=212.5,
        duration_ms=731.9,
        bytes_received=len(raw),
    )
    CallEvidence.objects.create(call=call, **evidence_fields(raw))
    RunEvent.objects.create(
        run=run,
        seq=1,
        type="call.sent",
        payload={"call": call.pk, "cell": cell.pk, "role": "subject"},
    )
    RunEvent.objects.create(
        run=run, seq=2, type="cell.completed", payload={"cell": cell.pk, "correct": True}
    )
    return cell.pk, call.pk


def questions_build(n: int) -> list[Question]:
    """`n` MMLU-Pro-shaped questions: one made through the ORM, the rest cloned by SQL."""
    first = Question.objects.create(
        benchmark="mmlu-pro",
        native_id="million-0",
        subject="physics",
        payload={
            "question": "A 2.0 kg block slides down a frictionless incline of 30 degrees from "
            "a height of 5.0 m. What is its speed at the bottom of the incline?",
            "options": [f"{v} m/s" for v in (4.9, 7.0, 9.9, 12.1, 14.0, 3.1, 5.5, 8.4, 10.6, 11.2)],
            "answer_index": 2,
            "cot_content": "",
            "category": "physics",
            "src": "ori_mmlu-high_school_physics",
        },
        content_sha256=sha256_hex(["million", 0]),
    )
    clone(
        "datasets_question",
        f"SELECT * FROM datasets_question WHERE id = {first.pk}",
        f"generate_series(1, {n - 1}) g",
        {
            "native_id": "'million-' || g",
            "content_sha256": "encode(sha256(('million-' || g)::bytea), 'hex')",
        },
    )
    return list(Question.objects.filter(native_id__startswith="million-").order_by("pk"))


def run_build(k: int, questions: list[Question], dataset: Any, owner: Any, raw: bytes) -> Run:
    """An ended run of one subject call per question: the template rows, then the rest
    cloned from them by SQL (cells, calls, evidence, two events per call)."""
    target = Target.objects.create(
        slug=f"million-t{k}", name=f"t{k}", model="m", base_url="http://x/v1", prices=PRICE
    )
    doc = manifest(questions, target, concurrency=64)
    now = timezone.now()
    # As run_create sets it: the calls' id the run's own calls come after (the calls tab's
    # scan starts there).
    after = Call.objects.aggregate(last=Max("id"))["last"] or 0
    run = Run.objects.create(
        calls_after_id=after,
        name=f"million {k}",
        manifest=doc,
        plan_sha256=sha256_hex(doc),
        dataset=dataset,
        owner=owner,
        status="running",
        started_at=now,
    )
    cell_id, call_id = templates(run, questions[0], target, raw)
    rest = f"(SELECT id FROM datasets_question WHERE native_id LIKE 'million-%%' AND id <> {questions[0].pk}) q"
    rest = rest.replace("%%", "%")
    clone(
        "runs_cell",
        f"SELECT * FROM runs_cell WHERE id = {cell_id}",
        rest,
        {"question_id": "q.id", "correct": f"(hashtext(q.id::text || '{k}') % 5) < 3"},
    )
    cells = f"(SELECT id FROM runs_cell WHERE run_id = {run.pk} AND id <> {cell_id}) c"
    tokens = "(50 + c.id % 450)"
    cost = f"(({tokens} * 3 + 50 * 15)::numeric / 1000000)"
    clone(
        "runs_call",
        f"SELECT * FROM runs_call WHERE id = {call_id}",
        cells,
        {
            "cell_id": "c.id",
            "input_tokens": tokens,
            "cost_usd": cost,
            "cache_neutral_cost_usd": cost,
        },
    )
    calls = (
        f"(SELECT k.id, k.cell_id, row_number() OVER (ORDER BY k.id) AS n FROM runs_call k "
        f"JOIN runs_cell c ON c.id = k.cell_id WHERE c.run_id = {run.pk} AND k.id <> {call_id}) s"
    )
    clone(
        "runs_callevidence",
        f"SELECT * FROM runs_callevidence WHERE call_id = {call_id}",
        calls,
        {"call_id": "s.id"},
    )
    for seq, event in ((1, 1), (2, 2)):
        payload = (
            "jsonb_build_object('call', s.id, 'cell', s.cell_id, 'role', 'subject')"
            if event == 1
            else "jsonb_build_object('cell', s.cell_id, 'correct', true)"
        )
        clone(
            "runs_runevent",
            f"SELECT * FROM runs_runevent WHERE run_id = {run.pk} AND seq = {seq}",
            calls,
            {"seq": f"s.n * 2 + {seq}", "payload": payload},
        )
    events = 2 * len(questions)
    Run.objects.filter(pk=run.pk).update(
        status="completed", finished_at=timezone.now(), last_event_seq=events
    )
    run.refresh_from_db()
    return run


def small_runs(n: int, owner: Any, dataset: Any, questions: list[Question]) -> None:
    """The rest of the Runs list: `n` ended runs of three cells and two events each."""
    target = Target.objects.create(
        slug="million-small", name="small", model="m", base_url="http://x/v1", prices=PRICE
    )
    doc = manifest(questions[:3], target, concurrency=64)
    now = timezone.now()
    runs = Run.objects.bulk_create(
        Run(
            name=f"small {i}",
            status="completed" if i % 10 else "failed",
            manifest=doc,
            plan_sha256=sha256_hex(["small", i]),
            dataset=dataset,
            owner=owner,
            started_at=now,
            finished_at=now,
            last_event_seq=2,
        )
        for i in range(n)
    )
    Cell.objects.bulk_create(
        Cell(run=r, question=q, target=target, benchmark="mmlu-pro", status="completed")
        for r in runs
        for q in questions[:3]
    )
    RunEvent.objects.bulk_create(
        RunEvent(run=r, seq=s, type=t, payload={})
        for r in runs
        for s, t in ((1, "run.created"), (2, "run.started"))
    )
    # What each one's run end keeps for comparisons (the compare hook packs a run's cases).
    plan_cases(list(Run.objects.defer("manifest").filter(pk__in=[r.pk for r in runs])))


def vacuum(tables: tuple[str, ...]) -> None:
    with connection.cursor() as cur:
        cur.execute(f"VACUUM ANALYZE {', '.join(tables)}")


def sizes_report(n_calls: int) -> None:
    """Bytes per call at rest: every ledger table's heap, TOAST and indexes over the calls."""
    print(f"\nbytes per call at rest over {n_calls:,} calls (pg_total_relation_size; {load()})")
    print(f"  {'table':22} {'rows/call':>9} {'heap':>7} {'toast':>7} {'indexes':>8} {'total':>8}")
    total = 0.0
    with connection.cursor() as cur:
        for table in (*LEDGER, *SUMMARIES):
            rows = cur.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            heap, indexes, whole = cur.execute(
                "SELECT pg_relation_size(%s), pg_indexes_size(%s), pg_total_relation_size(%s)",
                [table] * 3,
            ).fetchone()
            toast = whole - heap - indexes
            total += whole
            print(
                f"  {table:22} {rows / n_calls:9.2f} {heap / n_calls:7,.0f} "
                f"{toast / n_calls:7,.0f} {indexes / n_calls:8,.0f} {whole / n_calls:8,.0f}"
            )
        stored, raw = cur.execute(
            "SELECT sum(length(body)), sum(raw_size) FROM runs_callevidence"
        ).fetchone()
        database = cur.execute("SELECT pg_database_size(current_database())").fetchone()[0]
    print(f"  {'ledger in all':22} {'':9} {'':7} {'':7} {'':8} {total / n_calls:8,.0f}")
    print(
        f"  evidence body {stored / n_calls:,.0f} B per call of {raw / n_calls:,.0f} B raw SSE; "
        f"the whole database {database / 2**30:.2f} GiB ({database / n_calls:,.0f} B per call)"
    )


def timed(label: str, fn: Callable[[], Any], repeat: int) -> None:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    median, worst = statistics.median(times), max(times)
    verdict = "ok" if median <= 0.1 else "OVER 100 ms"
    print(
        f"  {label:52} {median * 1000:8.1f} ms median {worst * 1000:8.1f} max  {verdict}",
        flush=True,
    )


def get(client: Client, url: str, **headers: str) -> Callable[[], Any]:
    def fetch() -> None:
        response = client.get(url, **headers)
        assert response.status_code == 200, (url, response.status_code)

    return fetch


def pages_report(owner: Any, runs: list[Run], repeat: int) -> None:
    client = Client(SERVER_NAME="localhost")
    client.force_login(owner)
    run = runs[-1]
    cells = Cell.objects.filter(run=run).count()
    print(
        f"\nwhat users wait for at this size (run of {cells:,} "
        f"cells; {Run.objects.count():,} runs; {load()})"
    )
    timed("API poll (GET /api/v1/runs/ID/)", get(client, f"/api/v1/runs/{run.pk}/"), repeat)
    for tab in TABS:
        timed(f"Run detail: {tab}", get(client, f"/runs/{run.pk}/?tab={tab}"), repeat)
    timed("API report (GET …/report/)", get(client, f"/api/v1/runs/{run.pk}/report/"), repeat)
    timed("Runs list, page 1", get(client, "/"), repeat)
    timed("Runs list, page 200", get(client, "/?page=200"), repeat)
    timed("Runs list, htmx poll", get(client, "/", HTTP_HX_REQUEST="true"), repeat)
    # One candidate: what a comparison reads grows with its cases (the packed case lists, the
    # cells' figures, the savings bootstrap's kept sums). The runs' end-of-run work kept all of
    # them (run_report_keep above), as the engine's run end does, so the first read is a read.
    label = f"comparison, 1 candidate × {cells:,} cases"

    def compare() -> None:
        comparison_build(baseline_run_id=runs[0].pk, candidate_run_ids=[runs[1].pk])

    timed(f"{label}, first read", compare, 1)
    timed(f"{label}, later reads", compare, repeat)
    timed("Compare page, step 1 (choose a baseline)", get(client, compare_url()), repeat)
    page = compare_url(baseline=runs[0].pk, candidates=[runs[1].pk], compare=True)
    timed("Compare page, 1 candidate compared", get(client, page), repeat)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=10, help="runs sharing the calls")
    parser.add_argument("--list-runs", type=int, default=10_000, help="runs in the Runs list")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--codec-rounds", type=int, default=200)
    args = parser.parse_args()
    setup_test_environment()
    sim = simulator_stream()
    samples = {
        "simulator, 50 chunks": sim,
        "varied text, 50 chunks": varied_stream(50, 1),
        "varied text, 1,000 chunks": varied_stream(1000, 2),
        "random bytes, 16 KiB": random.Random(3).randbytes(16384),
    }
    codec_report(samples, args.codec_rounds)
    started = time.perf_counter()
    owner = get_user_model().objects.create_user(username="million")
    dataset = FrozenDataset.objects.create(
        identity_sha256=hashlib.sha256(b"million").hexdigest(),
        name="million",
        profile="standard",
        seed=1,
        split="holdout",
        selection={},
    )
    per_run = args.calls // args.runs
    questions = questions_build(per_run)
    runs = []
    fk_checks(False)
    try:
        for k in range(args.runs):
            runs.append(run_build(k, questions, dataset, owner, sim))
            print(
                f"  run {k + 1}/{args.runs}: {per_run:,} calls "
                f"({time.perf_counter() - started:.0f} s; {load()})",
                flush=True,
            )
    finally:
        fk_checks(True)
    vacuum((*LEDGER, *SUMMARIES, "runs_run", "datasets_question"))
    n_calls = Call.objects.count()
    print(
        f"built {n_calls:,} calls in {args.runs} runs by bulk SQL in "
        f"{time.perf_counter() - started:.0f} s ({load()})"
    )
    sizes_report(n_calls)
    started = time.perf_counter()
    for run in runs:
        run_report_keep(run_id=run.pk)  # the end-of-run work the engine does once per run
    print(
        f"\nend-of-run work (report kept) of {args.runs} runs: "
        f"{(time.perf_counter() - started) / args.runs * 1000:.0f} ms per run"
    )
    small_runs(args.list_runs - args.runs, owner, dataset, questions)
    vacuum(("runs_run", "runs_cell", "runs_runevent", "runs_runsummary"))
    pages_report(owner, runs, args.repeat)


if __name__ == "__main__":
    main()
