"""Humanity's Last Exam (cais/hle), text-only: HF parquet `data/test-*.parquet` or JSONL.

Rows with an image are skipped and counted in `LoadResult.skipped["image"]`: the suite runs the
text-only subset, the way the text-only leaderboard does.
"""

from __future__ import annotations

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
    optional_str,
    read_jsonl,
    read_parquet_rows,
    require_path,
    require_str,
)
from datasets.grading import JUDGE_PROTOCOL_VERSION

REQUIRED = ("id", "question", "image", "answer", "answer_type", "category")
OPTIONAL = ("raw_subject", "rationale")
ANSWER_TYPES = ("exactMatch", "multipleChoice")

# The format instruction every subject gets (HLE's leaderboard sends the multiple-choice form
# to every question); the judge reads the whole reply, so it only helps the model be concise.
SYSTEM_PROMPT = (
    "Format your reply as three lines:\n"
    "Explanation: <why you chose this answer>\n"
    "Answer: <your final answer>\n"
    "Confidence: <0% to 100%>"
)


def _question_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    found = sorted(path.glob("data/test-*.parquet")) or sorted(path.glob("*.jsonl"))
    if not found:
        raise LoaderError("no data/test-*.parquet or *.jsonl in directory", file=path)
    return found


class HLEAdapter(BenchmarkAdapter):
    key = "hle"
    title = "Humanity's Last Exam (text-only)"
    weight = Fraction(3, 20)
    kind = "judge"
    grader_version = JUDGE_PROTOCOL_VERSION
    loader_version = "hle/1"
    licence_note = (
        "Humanity's Last Exam, CAIS & Scale AI (HF cais/hle, gated), MIT tag; the authors ask "
        "that it not be re-shared or redistributed. Read from a user-supplied local copy only."
    )
    fixture_relpath = ""

    def load_with_report(self, path: Path) -> LoadResult:
        require_path(path, what="HLE data")
        files = _question_files(path)
        questions: list[LoadedQuestion] = []
        skipped_images = 0
        for file in files:
            rows = (
                read_parquet_rows(file, required=REQUIRED, optional=OPTIONAL)
                if file.suffix == ".parquet"
                else read_jsonl(file)
            )
            for rownum, row in rows:
                image = optional_str(row, "image", file=file, rownum=rownum)
                if image.strip():
                    skipped_images += 1
                    continue
                questions.append(self._question(row, file=file, rownum=rownum))
            check_unique(questions, file=file)
        return LoadResult(
            questions=questions,
            files=files,
            skipped={"image": skipped_images},
            synthetic=is_synthetic(path),
        )

    def _question(self, row: dict[str, Any], *, file: Path, rownum: int) -> LoadedQuestion:
        qid = require_str(row, "id", file=file, rownum=rownum).strip()
        answer_type = require_str(row, "answer_type", file=file, rownum=rownum)
        if answer_type not in ANSWER_TYPES:
            raise LoaderError(
                f"{answer_type!r} is not one of {ANSWER_TYPES}",
                file=file,
                row=rownum,
                field="answer_type",
            )
        category = require_str(row, "category", file=file, rownum=rownum)
        return LoadedQuestion(
            benchmark=self.key,
            native_id=qid,
            subject=category,
            payload={
                "question": require_str(row, "question", file=file, rownum=rownum),
                "answer_type": answer_type,
                "category": category,
                "raw_subject": optional_str(row, "raw_subject", file=file, rownum=rownum),
            },
            # Multiple-choice items keep their judged reference text (the letter as written).
            secret={
                "answer": require_str(row, "answer", file=file, rownum=rownum).strip(),
                "rationale": optional_str(row, "rationale", file=file, rownum=rownum),
            },
        )

    def messages(self, payload: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": payload["question"]},
        ]


ADAPTER = HLEAdapter()
