"""MMLU-Pro (TIGER-Lab/MMLU-Pro): HF parquet `data/test-*.parquet` or JSONL, same columns."""

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
    option_letters,
    read_jsonl,
    read_parquet_rows,
    require_int,
    require_path,
    require_str,
)
from datasets.grading import MCQ_GRADER_VERSION

COLUMNS = (
    "question_id",
    "question",
    "options",
    "answer",
    "answer_index",
    "cot_content",
    "category",
    "src",
)
MAX_OPTIONS = 10


def _question_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    parquet = sorted(path.glob("data/test-*.parquet"))
    if parquet:
        return parquet
    jsonl = sorted(path.glob("*.jsonl"))
    if jsonl:
        return jsonl
    raise LoaderError("no data/test-*.parquet or *.jsonl in directory", file=path)


class MMLUProAdapter(BenchmarkAdapter):
    key = "mmlu-pro"
    title = "MMLU-Pro"
    weight = Fraction(1, 10)
    kind = "mcq"
    grader_version = MCQ_GRADER_VERSION
    loader_version = "mmlu-pro/1"
    licence_note = (
        "MMLU-Pro, TIGER-Lab (HF TIGER-Lab/MMLU-Pro), MIT licence; cite Wang et al. 2024 "
        "(arXiv 2406.01574)."
    )
    fixture_relpath = ""

    def load_with_report(self, path: Path) -> LoadResult:
        require_path(path, what="MMLU-Pro data")
        files = _question_files(path)
        questions: list[LoadedQuestion] = []
        for file in files:
            rows = (
                read_parquet_rows(file, required=COLUMNS)
                if file.suffix == ".parquet"
                else read_jsonl(file)
            )
            for rownum, row in rows:
                questions.append(self._question(row, file=file, rownum=rownum))
            check_unique(questions, file=file)
        return LoadResult(questions=questions, files=files, synthetic=is_synthetic(path))

    def _question(self, row: dict[str, Any], *, file: Path, rownum: int) -> LoadedQuestion:
        qid = require_int(row, "question_id", file=file, rownum=rownum)
        text = require_str(row, "question", file=file, rownum=rownum)
        category = require_str(row, "category", file=file, rownum=rownum)
        options = row.get("options")
        if not isinstance(options, list) or not all(isinstance(o, str) for o in options):
            raise LoaderError("must be a list of strings", file=file, row=rownum, field="options")
        # The official preprocessing drops "N/A" padding options; the answer index refers to
        # the list after dropping, which we check below.
        options = [o for o in options if o != "N/A"]
        if not 2 <= len(options) <= MAX_OPTIONS:
            raise LoaderError(
                f"needs 2..{MAX_OPTIONS} options, got {len(options)}",
                file=file,
                row=rownum,
                field="options",
            )
        letters = option_letters(len(options))
        answer = require_str(row, "answer", file=file, rownum=rownum).strip()
        if answer not in letters:
            raise LoaderError(
                f"{answer!r} is not one of {''.join(letters)}",
                file=file,
                row=rownum,
                field="answer",
            )
        index = require_int(row, "answer_index", file=file, rownum=rownum)
        if index != letters.index(answer):
            raise LoaderError(
                f"{index} disagrees with answer {answer!r}",
                file=file,
                row=rownum,
                field="answer_index",
            )
        src = row.get("src")
        return LoadedQuestion(
            benchmark=self.key,
            native_id=str(qid),
            subject=category,
            payload={
                "question": text,
                "options": options,
                "category": category,
                "src": src if isinstance(src, str) else "",
            },
            secret={"answer": answer},
        )

    def messages(self, payload: dict[str, Any]) -> list[dict[str, Any]]:
        # Zero-shot form of the official CoT prompt, asking for the phrase the strict grader reads.
        options = "\n".join(
            f"{letter}. {text}"
            for letter, text in zip(
                option_letters(len(payload["options"])), payload["options"], strict=False
            )
        )
        prompt = (
            f"The following is a multiple choice question about {payload['category']}. Think "
            'step by step, then finish your answer with "The answer is (X)" where X is the '
            "letter of the correct option.\n\n"
            f"Question: {payload['question']}\nOptions:\n{options}\n"
            "Answer: Let's think step by step."
        )
        return [{"role": "user", "content": prompt}]


ADAPTER = MMLUProAdapter()
