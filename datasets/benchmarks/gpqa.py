"""GPQA Diamond: the official `gpqa_diamond.csv` layout (HF or GitHub), read from a local path.

The raw data always lists the correct answer first, so choices are shuffled per question by an
RNG seeded from the Record ID: the order is the same on every machine and every prepare, yet
differs between questions.
"""

from __future__ import annotations

import hashlib
import random
from fractions import Fraction
from pathlib import Path
from typing import Any

from datasets.benchmarks.base import (
    BenchmarkAdapter,
    LoadedQuestion,
    LoaderError,
    LoadResult,
    check_unique,
    is_synthetic,
    option_letters,
    read_csv,
    require_path,
    require_str,
)
from datasets.grading import MCQ_GRADER_VERSION

REQUIRED_COLUMNS = (
    "Question",
    "Correct Answer",
    "Incorrect Answer 1",
    "Incorrect Answer 2",
    "Incorrect Answer 3",
    "Subdomain",
    "High-level domain",
    "Record ID",
)
SHUFFLE_VERSION = "gpqa-shuffle/1"


def shuffle_choices(record_id: str, correct: str, incorrect: list[str]) -> tuple[list[str], str]:
    """Return (options, correct letter). The seed hashes the Record ID with a version tag so a
    deliberate change of scheme changes `loader_version` rather than silently reordering."""
    digest = hashlib.sha256(f"{SHUFFLE_VERSION}\x00{record_id}".encode()).digest()
    rng = random.Random(int.from_bytes(digest[:8], "big"))
    options = [correct, *incorrect]
    order = list(range(len(options)))
    rng.shuffle(order)
    shuffled = [options[i] for i in order]
    return shuffled, option_letters(len(options))[order.index(0)]


class GPQAAdapter(BenchmarkAdapter):
    key = "gpqa"
    title = "GPQA Diamond"
    weight = Fraction(3, 20)
    kind = "mcq"
    grader_version = MCQ_GRADER_VERSION
    loader_version = "gpqa/1+" + SHUFFLE_VERSION
    licence_note = (
        "GPQA (Rein et al. 2023), CC BY 4.0; the authors ask that examples not be revealed online. "
        "Read from a user-supplied local file only; never published or bundled."
    )
    fixture_relpath = "gpqa_diamond.csv"

    def load_with_report(self, path: Path) -> LoadResult:
        require_path(path, what="GPQA CSV")
        file = path / "gpqa_diamond.csv" if path.is_dir() else path
        require_path(file, what="gpqa_diamond.csv")
        questions = []
        for rownum, row in read_csv(file, required=REQUIRED_COLUMNS):
            questions.append(self._question(row, file=file, rownum=rownum))
        check_unique(questions, file=file)
        return LoadResult(questions=questions, files=[file], synthetic=is_synthetic(path))

    def _question(self, row: dict[str, Any], *, file: Path, rownum: int) -> LoadedQuestion:
        record_id = require_str(row, "Record ID", file=file, rownum=rownum).strip()
        text = require_str(row, "Question", file=file, rownum=rownum).strip()
        correct = require_str(row, "Correct Answer", file=file, rownum=rownum).strip()
        incorrect = [
            require_str(row, f"Incorrect Answer {i}", file=file, rownum=rownum).strip()
            for i in (1, 2, 3)
        ]
        if correct in incorrect:
            raise LoaderError(
                "correct answer repeats an incorrect one",
                file=file,
                row=rownum,
                field="Correct Answer",
            )
        domain = require_str(row, "High-level domain", file=file, rownum=rownum).strip()
        subdomain = row.get("Subdomain", "").strip()
        options, letter = shuffle_choices(record_id, correct, incorrect)
        return LoadedQuestion(
            benchmark=self.key,
            native_id=record_id,
            subject=domain,
            payload={
                "question": text,
                "options": options,
                "domain": domain,
                "subdomain": subdomain,
            },
            secret={"answer": letter},
        )

    def messages(self, payload: dict[str, Any]) -> list[dict[str, Any]]:
        letters = option_letters(len(payload["options"]))
        options = "\n".join(
            f"{ltr}) {text}" for ltr, text in zip(letters, payload["options"], strict=False)
        )
        prompt = (
            "Answer the multiple choice question below. Reason step by step first. Make the last "
            f"line of your reply 'Answer: X', where X is one of {''.join(letters)}.\n\n"
            f"{payload['question']}\n\n{options}"
        )
        return [{"role": "user", "content": prompt}]


ADAPTER = GPQAAdapter()
