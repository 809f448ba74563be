"""Constructed runs for comparison, reconciliation and export tests: questions, a frozen-looking
manifest, cells with chosen outcomes and subject calls with chosen costs, in bulk."""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from django.utils import timezone

from datasets.benchmarks import get_adapter
from datasets.models import Question, QuestionSecret
from runs.models import Call, Cell, Run, Target
from tests import factories as f

_seq = itertools.count(1)
PRICES = {"m-strong": {"input": "3", "cached_input": "0.3", "output": "15"}}


def questions(counts: dict[str, int]) -> list[Question]:
    """``counts`` benchmark → how many questions, each with a secret answer "B"."""
    made = []
    for benchmark, n in counts.items():
        for _ in range(n):
            i = next(_seq)
            q = Question.objects.create(
                benchmark=benchmark,
                native_id=f"c{i}",
                subject="s",
                payload={"question": f"Q{i}?", "options": ["a", "b", "c", "d"]},
                content_sha256=hashlib.sha256(f"compare-q{i}".encode()).hexdigest(),
            )
            QuestionSecret.objects.create(question=q, data={"answer": "B"})
            made.append(q)
    return made


def target(slug: str, kind: str = "single", **fields: Any) -> Target:
    if kind == "mom":
        fields.setdefault("config_hash", "c" * 64)
    return f.target_create(slug=slug, kind=kind, prices=fields.pop("prices", PRICES), **fields)


def manifest(
    qs: Sequence[Question], targets: Sequence[Target], *, split: str = "dev", **overrides: Any
) -> dict[str, Any]:
    benchmarks = list(dict.fromkeys(q.benchmark for q in qs))
    doc: dict[str, Any] = {
        "version": 1,
        "name": "constructed",
        "mode": "live",
        "dataset": {"split": split},
        "benchmarks": {
            b: {
                "weight": str(get_adapter(b).weight),
                "kind": get_adapter(b).kind,
                "grader_version": get_adapter(b).grader_version,
                "cases": sum(1 for q in qs if q.benchmark == b),
            }
            for b in benchmarks
        },
        "cases": [[q.pk, q.content_sha256, q.benchmark] for q in qs],
        "targets": [
            {"slug": t.slug, "kind": t.kind, "model": t.model, "config_hash": None} for t in targets
        ],
        "judges": {},
        "prices": {t.slug: t.prices for t in targets},
        "sampling": {"temperature": 0},
        "limits": {"concurrency": 8, "max_output_tokens": 4096},
        "failure_policy": "stop",
        "slots": 1,
    }
    doc.update(overrides)
    return doc


def run(
    qs: Sequence[Question],
    outcomes: dict[Target, Sequence[bool | str | None]],
    *,
    costs: dict[Target, Sequence[Decimal | None] | Decimal | None] | None = None,
    neutral: dict[Target, Decimal] | None = None,
    call_fields: dict[Target, Sequence[dict[str, Any]] | dict[str, Any]] | None = None,
    status: str = "completed",
    split: str = "dev",
    mode: str = "live",
    dataset: Any = None,
    **overrides: Any,
) -> Run:
    """A terminal run. ``outcomes[t][i]``: True/False is a completed cell, None a failed one,
    ``"cancelled"`` a cell that never ended (no outcome, no call).
    ``costs[t]`` is a per-case list or one cost for every case (None: unknown); each cell gets
    one subject call carrying it (and ``neutral[t]`` as its cache-neutral cost). ``call_fields``
    sets further call columns (per case or for all) at insert time: a finished call cannot be
    updated afterwards (ledger trigger)."""
    targets = list(outcomes)
    doc = manifest(qs, targets, split=split, **overrides)
    r = f.run_create(
        manifest=doc,
        status=status,
        mode=mode,
        dataset=dataset if dataset is not None else f.dataset_create(split=split),
        started_at=timezone.now(),
        finished_at=timezone.now() if status != "running" else None,
    )
    cells = Cell.objects.bulk_create(
        Cell(
            run=r,
            question=q,
            target=t,
            benchmark=q.benchmark,
            status=_cell_status(outcomes[t][i]),
            correct=outcomes[t][i] if isinstance(outcomes[t][i], bool) else None,
            scored=isinstance(outcomes[t][i], bool),
            final_answer="The answer is B" if outcomes[t][i] is True else "The answer is A",
        )
        for t in targets
        for i, q in enumerate(qs)
    )
    costs = costs or {}
    neutral = neutral or {}
    now = timezone.now()
    calls = []
    for cell in cells:
        if cell.status == "cancelled":
            continue
        i = qs.index(cell.question)
        spec = costs.get(cell.target, Decimal("0.001"))
        cost = spec[i] if isinstance(spec, (list, tuple)) else spec
        extra = (call_fields or {}).get(cell.target, {})
        extra = extra[i] if isinstance(extra, (list, tuple)) else extra
        fields: dict[str, Any] = {
            "role": "subject",
            "sequence": 0,
            "request": {"model": cell.target.model},
            "status": "completed",
            "sent_at": now,
            "served_model": cell.target.model,
            "finish_reason": "stop",
            "input_tokens": 100,
            "cached_input_tokens": 0,
            "cache_write_tokens": 0,
            "output_tokens": 10,
            "cost_usd": cost,
            "cache_neutral_cost_usd": neutral.get(cell.target, cost),
            "duration_ms": 100.0,
            "ttft_ms": 10.0,
        }
        calls.append(Call(cell=cell, target=cell.target, **{**fields, **extra}))
    f.calls_insert(calls)
    return r


def _cell_status(outcome: bool | str | None) -> str:
    if outcome == "cancelled":
        return "cancelled"
    return "failed" if outcome is None else "completed"
