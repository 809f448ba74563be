"""Turning a subject's final answer into a grade, per benchmark kind (DESIGN §7).

One dispatch for the engine and for re-grading saved answers: the graders themselves live in
`datasets.grading`; this module only knows which one a kind uses.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from datasets.benchmarks import get_adapter
from datasets.grading import grade_grid, grade_mcq, judge_messages, parse_verdict


@dataclass(frozen=True)
class Grade:
    correct: bool
    detail: dict[str, Any]


def grade_direct(*, benchmark: str, payload: dict, secret: dict, answer: str) -> Grade:
    """Kinds graded without another model call: mcq and grid."""
    kind = get_adapter(benchmark).kind
    if kind == "mcq":
        g = grade_mcq(answer, secret["answer"], len(payload["options"]))
        return Grade(g.correct, {"grader": "mcq", **asdict(g)})
    if kind == "grid":
        g = grade_grid(answer, secret["outputs"])
        return Grade(
            g.correct,
            {
                "grader": "grid",
                "status": g.status,
                "pairs_correct": g.pairs_correct,
                "pairs_total": g.pairs_total,
            },
        )
    raise ValueError(f"{benchmark} ({kind}) is not graded directly")


def needs_judge(benchmark: str) -> bool:
    return get_adapter(benchmark).kind == "judge"


def judge_request_messages(*, payload: dict, secret: dict, answer: str) -> list[dict[str, str]]:
    return judge_messages(payload["question"], secret["answer"], answer)


def grade_from_verdict(verdict_text: str) -> Grade:
    """Raises datasets.grading.MalformedVerdict, which fails the cell (never a guessed grade)."""
    verdict = parse_verdict(verdict_text)
    return Grade(verdict == "correct", {"grader": "judge", "verdict": verdict})
