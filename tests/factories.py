"""Factories: plain functions that create valid ledger rows with overridable fields."""

from __future__ import annotations

import contextlib
import hashlib
import itertools
from collections.abc import Callable, Iterator
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from datasets.models import FrozenDataset, Question, QuestionSecret
from runs.models import OPEN_CALL_STATUSES, Call, Cell, CellStatus, Run, Target
from srbench.canonical import sha256_hex

_seq = itertools.count(1)
HASH_A = "a" * 64


def user_create(*, username: str | None = None, staff: bool = False, password: str = "pw-123456"):  # type: ignore[no-untyped-def]
    username = username or f"user{next(_seq)}"
    return get_user_model().objects.create_user(
        username=username, password=password, is_staff=staff, is_superuser=staff
    )


def target_create(**fields: Any) -> Target:
    n = next(_seq)
    defaults: dict[str, Any] = {
        "slug": f"target-{n}",
        "name": f"Target {n}",
        "kind": "single",
        "base_url": "http://127.0.0.1:8100/v1",
        "model": "sim-strong",
        "prices": {"sim-strong": {"input": "3", "cached_input": "0.3", "output": "15"}},
    }
    defaults.update(fields)
    return Target.objects.create(**defaults)


def question_create(
    *, benchmark: str = "mmlu-pro", secret: dict | None = None, **fields: Any
) -> Question:
    n = next(_seq)
    payload = fields.pop("payload", {"question": f"Q{n}?", "options": ["a", "b", "c", "d"]})
    q = Question.objects.create(
        benchmark=benchmark,
        native_id=fields.pop("native_id", f"q{n}"),
        subject=fields.pop("subject", "math"),
        payload=payload,
        content_sha256=fields.pop("content_sha256", hashlib.sha256(f"q{n}".encode()).hexdigest()),
        **fields,
    )
    QuestionSecret.objects.create(question=q, data=secret or {"answer": "B"})
    return q


def dataset_create(**fields: Any) -> FrozenDataset:
    n = next(_seq)
    defaults: dict[str, Any] = {
        "identity_sha256": hashlib.sha256(f"ds{n}".encode()).hexdigest(),
        "name": f"dataset {n}",
        "profile": "smoke",
        "seed": 20260918,
        "split": "dev",
        "selection": {"benchmarks": ["mmlu-pro"]},
    }
    defaults.update(fields)
    return FrozenDataset.objects.create(**defaults)


def run_create(**fields: Any) -> Run:
    manifest = fields.pop("manifest", {"plan": next(_seq)})
    defaults: dict[str, Any] = {
        "name": "run",
        "manifest": manifest,
        "plan_sha256": sha256_hex(manifest),
        "profile": "smoke",
    }
    defaults.update(fields)
    if "dataset" not in defaults:
        defaults["dataset"] = dataset_create()
    if "owner" not in defaults:
        defaults["owner"] = user_create()
    return Run.objects.create(**defaults)


def cell_create(**fields: Any) -> Cell:
    run = fields.pop("run", None) or run_create()
    question = fields.pop("question", None) or question_create()
    target = fields.pop("target", None) or target_create()
    return Cell.objects.create(
        run=run, question=question, target=target, benchmark=question.benchmark, **fields
    )


@contextlib.contextmanager
def _opened_under_claim(cell_ids: list[int]) -> Iterator[dict[int, int]]:
    """Open calls are written as a worker writes them: while their cell runs under its claim
    (the database's fencing refuses anything else, migration runs/0015). A fixture that wants
    an open call on a cell in another state (a crashed worker's ledger) gets the cell back in
    that state afterwards. Yields each cell's claim token."""
    with transaction.atomic():
        before = dict(Cell.objects.filter(pk__in=cell_ids).values_list("pk", "status"))
        idle = [pk for pk, status in before.items() if status != CellStatus.RUNNING]
        Cell.objects.filter(pk__in=idle).update(status=CellStatus.RUNNING)
        yield dict(Cell.objects.filter(pk__in=cell_ids).values_list("pk", "claim_token"))
        for pk in idle:
            Cell.objects.filter(pk=pk).update(status=before[pk])


@contextlib.contextmanager
def written_before_fencing() -> Iterator[None]:
    """Rows only a ledger written before the fencing triggers (migration runs/0015) can hold,
    e.g. an open call in a run that has ended: the triggers are off while the block writes.
    For tests whose writes commit (django_db(transaction=True)); DDL waits for the tables."""
    from django.db import connection

    from srbench.dbguards import FENCING_TRIGGERS

    def switch(state: str) -> None:
        with connection.cursor() as cursor:
            for table, suffix in FENCING_TRIGGERS:
                cursor.execute(f"ALTER TABLE {table} {state} TRIGGER {table}_{suffix}")

    switch("DISABLE")
    try:
        yield
    finally:
        switch("ENABLE")


def calls_insert(calls: list[Call]) -> list[Call]:
    """bulk_create these Call objects; the open ones are written as a worker writes them,
    under their cell's claim (`_opened_under_claim`)."""
    opened = [c for c in calls if c.status in OPEN_CALL_STATUSES and c.claim_token is None]
    with _opened_under_claim(sorted({c.cell_id for c in opened})) as tokens:
        for c in opened:
            c.claim_token = tokens[c.cell_id]
        return Call.objects.bulk_create(calls, batch_size=5000)


def call_create(**fields: Any) -> Call:
    cell = fields.pop("cell", None) or cell_create()
    defaults: dict[str, Any] = {
        "role": "subject",
        "sequence": 0,
        "target": cell.target,
        "request": {"model": cell.target.model, "messages": []},
        "sent_at": timezone.now(),
    }
    defaults.update(fields)
    if defaults.get("status", Call.status.field.default) not in OPEN_CALL_STATUSES:
        return Call.objects.create(cell=cell, **defaults)
    with _opened_under_claim([cell.pk]) as tokens:
        defaults.setdefault("claim_token", tokens[cell.pk])
        return Call.objects.create(cell=cell, **defaults)


def calls_bulk_create(
    cells: Any, *, target: Target, status: Callable[[int], str] | None = None
) -> list[Call]:
    """One subject call per cell, in bulk, in the cells' order (large ledgers for plan tests);
    `status(i)` gives the i-th call's status (else the model's default)."""
    now = timezone.now()
    cells = list(cells)
    extra = (lambda i: {}) if status is None else (lambda i: {"status": status(i)})
    with _opened_under_claim([c.pk for c in cells]) as tokens:
        return Call.objects.bulk_create(
            (
                Call(
                    cell=c,
                    role="subject",
                    sequence=0,
                    target=target,
                    request={},
                    sent_at=now,
                    claim_token=tokens[c.pk],
                    **extra(i),
                )
                for i, c in enumerate(cells)
            ),
            batch_size=5000,
        )
