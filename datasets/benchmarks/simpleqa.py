"""SimpleQA (openai/simple-evals `simple_qa_test_set.csv`): metadata, problem, answer."""

from __future__ import annotations

import ast
import hashlib
from fractions import Fraction
from pathlib import Path
from typing import Any

from datasets.benchmarks.base import (
    BenchmarkAdapter,
    LoadedQuestion,
    LoaderError,
    LoadResult,
    is_synthetic,
    read_csv,
    require_path,
    require_str,
)
from datasets.grading import JUDGE_PROTOCOL_VERSION

REQUIRED_COLUMNS = ("metadata", "problem", "answer")


def simpleqa_native_id(problem: str) -> str:
    """The CSV has no id column. Hash the problem only: a hash over problem + answer would let
    anyone recover a short answer (a year, a number) by brute force from a public id."""
    return "sqa-" + hashlib.sha256(problem.strip().encode()).hexdigest()[:16]


class SimpleQAAdapter(BenchmarkAdapter):
    key = "simpleqa"
    title = "SimpleQA"
    weight = Fraction(1, 10)
    kind = "judge"
    grader_version = JUDGE_PROTOCOL_VERSION
    loader_version = "simpleqa/1"
    licence_note = "SimpleQA, OpenAI simple-evals (Wei et al. 2024), MIT licence; attribution kept."
    fixture_relpath = "simple_qa_test_set.csv"

    def load_with_report(self, path: Path) -> LoadResult:
        require_path(path, what="SimpleQA CSV")
        file = path / "simple_qa_test_set.csv" if path.is_dir() else path
        require_path(file, what="simple_qa_test_set.csv")
        questions: list[LoadedQuestion] = []
        seen: set[str] = set()
        for rownum, row in read_csv(file, required=REQUIRED_COLUMNS):
            question = self._question(row, file=file, rownum=rownum)
            if question.native_id in seen:
                # Identical problem text twice: keep both, disambiguated by record number so the
                # id stays deterministic for this file.
                question = LoadedQuestion(
                    benchmark=question.benchmark,
                    native_id=f"{question.native_id}-r{rownum}",
                    subject=question.subject,
                    payload=question.payload,
                    secret=question.secret,
                )
            seen.add(question.native_id)
            questions.append(question)
        return LoadResult(questions=questions, files=[file], synthetic=is_synthetic(path))

    def _question(self, row: dict[str, Any], *, file: Path, rownum: int) -> LoadedQuestion:
        raw_meta = require_str(row, "metadata", file=file, rownum=rownum)
        try:
            # The column is a Python literal (single quotes), not JSON; literal_eval evaluates
            # literals only, never code.
            meta = ast.literal_eval(raw_meta)
        except (ValueError, SyntaxError) as exc:
            raise LoaderError(
                f"not a Python literal dict: {exc}", file=file, row=rownum, field="metadata"
            ) from exc
        if not isinstance(meta, dict):
            raise LoaderError("must be a dict literal", file=file, row=rownum, field="metadata")
        topic = meta.get("topic")
        if not isinstance(topic, str) or not topic.strip():
            raise LoaderError(
                "metadata has no topic", file=file, row=rownum, field="metadata.topic"
            )
        problem = require_str(row, "problem", file=file, rownum=rownum).strip()
        answer = require_str(row, "answer", file=file, rownum=rownum).strip()
        answer_type = meta.get("answer_type")
        return LoadedQuestion(
            benchmark=self.key,
            native_id=simpleqa_native_id(problem),
            subject=topic,
            payload={
                "question": problem,
                "topic": topic,
                "answer_type": answer_type if isinstance(answer_type, str) else "",
            },
            # urls point at the pages that hold the answer, so they stay with the reference.
            secret={
                "answer": answer,
                "urls": [u for u in meta.get("urls", []) if isinstance(u, str)],
            },
        )

    def messages(self, payload: dict[str, Any]) -> list[dict[str, Any]]:
        # Upstream sends the bare question as the only message, no system prompt.
        return [{"role": "user", "content": payload["question"]}]


ADAPTER = SimpleQAAdapter()
