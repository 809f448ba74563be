"""Factories for prepared sources, built through the real services where that is cheap."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from datasets.benchmarks import LoadedQuestion
from datasets.models import Question, QuestionSecret, Source, SourceQuestion
from datasets.profiles import PROFILES
from datasets.services import question_content_sha256, source_content_sha256

_seq = itertools.count(1)


def source_with_questions(
    *,
    benchmark: str = "mmlu-pro",
    profile: str = "smoke",
    seed: int = 1,
    split: str | None = None,
    native_ids: list[str] | None = None,
    subject: str = "math",
) -> Source:
    """A Source at any coordinate without reading files: for composition edge cases that a
    real prepare cannot produce on its own (e.g. two sources sharing a question)."""
    split = split or ("holdout" if profile == "standard" else "dev")
    n = next(_seq)
    native_ids = native_ids or [f"fq{n}-{i}" for i in range(3)]
    loaded = [
        LoadedQuestion(
            benchmark=benchmark,
            native_id=native_id,
            subject=subject,
            payload={"question": f"Factory question {native_id}?", "options": ["1", "2"]},
            secret={"answer": "A"},
        )
        for native_id in native_ids
    ]
    hashes = [question_content_sha256(q) for q in loaded]
    requested = max(PROFILES[benchmark].count(profile), len(loaded))  # type: ignore[arg-type]
    source = Source.objects.create(
        benchmark=benchmark,
        profile=profile,
        seed=seed,
        split=split,
        content_sha256=source_content_sha256(
            benchmark=benchmark,
            profile=profile,
            seed=seed,
            split=split,
            requested_count=requested,
            question_hashes=hashes,
        ),
        provenance={"factory": True},
        requested_count=requested,
        count=len(loaded),
    )
    for position, (h, q) in enumerate(zip(hashes, loaded, strict=True)):
        question = question_stored(q, h)
        SourceQuestion.objects.create(source=source, question=question, position=position)
    return source


def question_stored(q: LoadedQuestion, content_sha256: str) -> Question:
    """A loaded question stored once under its content address, with its secret (as
    `benchmark prepare` stores it); an existing row is reused."""
    question, created = Question.objects.get_or_create(
        content_sha256=content_sha256,
        defaults={
            "benchmark": q.benchmark,
            "native_id": q.native_id,
            "subject": q.subject,
            "payload": q.payload,
        },
    )
    if created:
        QuestionSecret.objects.create(question=question, data=q.secret)
    return question


def copy_tree(src: Path, dst: Path) -> Path:
    import shutil

    if src.is_dir():
        shutil.copytree(src, dst)
    else:
        dst.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst / src.name)
        return dst / src.name
    return dst


def login(client: Any, user: Any) -> Any:
    client.force_login(user)
    return client
