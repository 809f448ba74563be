"""What the recovery-plan tests share: a parent run built in the ledger (no model is called) and
a count of plan computations."""

from __future__ import annotations

import hashlib
import uuid

import pytest
from django.utils import timezone

from datasets.models import Question
from runs.models import Cell, CellStatus, Run
from runs.settlement import recovery
from tests import factories as f
from tests.compare import builders as b


def plan_computations(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The run id of every plan computation from now on in this process: each reads the run's
    cells once (`recovery_rules.cell_rows`); the real function runs, only counted."""
    seen: list[int] = []
    real = recovery.cell_rows

    def counted(run: Run):  # type: ignore[no-untyped-def]
        seen.append(run.pk)
        return real(run)

    monkeypatch.setattr(recovery, "cell_rows", counted)
    return seen


def recovery_parent(
    owner,  # type: ignore[no-untyped-def]
    *,
    questions: int,
    status: str = "interrupted",
    cell_status: str = CellStatus.PENDING,
    mode: str = "live",
    slots: int = 1,
) -> Run:
    """A run of `questions` MMLU-Pro questions × `slots` attempt slots on a target of its own,
    each cell in `cell_status` (by default never dispatched: eligible for an undispatched
    recovery); `run.target` is set."""
    stem = f"parent-{uuid.uuid4().hex[:12]}"
    target = b.target(f"m-{stem}")
    qs = Question.objects.bulk_create(
        Question(
            benchmark="mmlu-pro",
            native_id=f"{stem}-{i}",
            subject="s",
            payload={"question": f"Q{i}?", "options": ["a", "b", "c", "d"]},
            content_sha256=hashlib.sha256(f"{stem}-{i}".encode()).hexdigest(),
        )
        for i in range(questions)
    )
    ended = status not in ("queued", "running")
    run = f.run_create(
        manifest=b.manifest(qs, [target], slots=slots, name="parent"),
        status=status,
        mode=mode,
        owner=owner,
        started_at=timezone.now(),
        finished_at=timezone.now() if ended else None,
    )
    Cell.objects.bulk_create(
        (
            Cell(
                run=run,
                question=q,
                target=target,
                benchmark=q.benchmark,
                slot=s,
                status=cell_status,
            )
            for q in qs
            for s in range(slots)
        ),
        batch_size=5000,
    )
    run.target = target
    return run
