"""Turning a subject's final answer into a grade, per benchmark kind (DESIGN §7).

One dispatch for the engine and for re-grading saved answers: the graders themselves live in
`datasets.grading`; this module only knows which one a kind uses.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from datasets.benchmarks import get_adapter
from datasets.grading import (
    GRID_GRADER_VERSION,
    MCQ_GRADER_VERSION,
    MCQGrade,
    grade_grid,
    grade_mcq,
    judge_messages,
    parse_verdict,
)
from datasets.mcq_grader_v1 import MCQ_STRICT_V1_VERSION, grade_mcq_strict_v1
from datasets.official import OfficialTemplate, TemplateUnavailable, load_template, not_graded


@dataclass(frozen=True)
class Grade:
    correct: bool
    detail: dict[str, Any]


# Every MCQ grader version this build can apply, so a run is graded by the version its
# manifest froze even when the current one has moved on (a run resumed across an upgrade).
MCQ_GRADERS: dict[str, Callable[[str, str, int], MCQGrade]] = {
    MCQ_GRADER_VERSION: grade_mcq,
    MCQ_STRICT_V1_VERSION: grade_mcq_strict_v1,
}


def grade_direct(
    *, benchmark: str, payload: dict, secret: dict, answer: str, grader_version: str | None = None
) -> Grade:
    """Kinds graded without another model call: mcq and grid.

    `grader_version` is the version the run's manifest froze; None means today's (regrade).
    A version this build does not have raises GradingUnavailable: a guess would mix graders."""
    adapter = get_adapter(benchmark)
    version = grader_version or adapter.grader_version
    if adapter.kind == "mcq":
        grader = MCQ_GRADERS.get(version)
        if grader is None:
            raise GradingUnavailable(f"MCQ grader {version!r} is not in this build")
        g = grader(answer, secret["answer"], len(payload["options"]))
        return Grade(g.correct, {"grader": "mcq", "version": version, **asdict(g)})
    if adapter.kind == "grid":
        if version != GRID_GRADER_VERSION:
            raise GradingUnavailable(f"grid grader {version!r} is not in this build")
        g = grade_grid(answer, secret["outputs"])
        return Grade(
            g.correct,
            {
                "grader": "grid",
                "status": g.status,
                "pairs_correct": g.pairs_correct,
                "pairs_total": g.pairs_total,
                "outputs_correct": list(g.outputs_correct),
            },
        )
    raise ValueError(f"{benchmark} ({adapter.kind}) is not graded directly")


class GradingUnavailable(Exception):
    """The grader cannot run here (e.g. SciCode's test data is not configured): the cell fails
    with this message; it is not a wrong answer."""


def grade_code(*, benchmark: str, payload: dict, secret: dict, answers: list[str | None]) -> Grade:
    """Code benchmarks: the hidden tests run in the sandbox (runs.engine.sandbox)."""
    from django.conf import settings

    from runs.engine import code_grading

    if benchmark == "livecodebench":
        detail = code_grading.grade_livecodebench(answer=answers[0], payload=payload, secret=secret)
        return Grade(bool(detail["correct"]), detail)
    if benchmark == "scicode":
        h5 = settings.SRBENCH_SCICODE_H5
        try:
            detail = code_grading.grade_scicode(
                step_replies=answers, payload=payload, secret=secret, h5_path=h5
            )
        except code_grading.TargetsUnavailable as exc:
            raise GradingUnavailable(
                f"{exc}; set SRBENCH_SCICODE_H5 to the official test_data.h5"
            ) from exc
        return Grade(bool(detail["correct"]), detail)
    raise ValueError(f"{benchmark} is not a code benchmark")


def needs_judge(benchmark: str) -> bool:
    return get_adapter(benchmark).kind == "judge"


def judge_request_messages(*, payload: dict, secret: dict, answer: str) -> list[dict[str, str]]:
    return judge_messages(payload["question"], secret["answer"], answer)


def judge_messages_for(*, question: str, reference: str, response: str) -> list[dict[str, str]]:
    """The judge protocol for anything else a judge grades (e.g. τ³ assertions)."""
    return judge_messages(question, reference, response)


def grade_from_verdict(verdict_text: str) -> Grade:
    """Raises datasets.grading.MalformedVerdict, which fails the cell (never a guessed grade)."""
    verdict = parse_verdict(verdict_text)
    return Grade(verdict == "correct", {"grader": "judge", "verdict": verdict})


def official_judge(
    benchmark: str, frozen: dict[str, Any] | None
) -> tuple[OfficialTemplate | None, dict[str, Any] | None]:
    """The official scorer a plan froze for a judged benchmark (issue 22 point 5).

    (template, None): make the official judge call with it. (None, detail): it was asked for
    but cannot run here — the detail (with its reason) goes into `grade["official"]`.
    (None, None): the plan did not ask for it. The template is read from the installed package
    and used only if its hash is the one the plan froze: a changed template is not official for
    this run."""
    if not frozen:
        return None, None
    if not frozen.get("available"):
        return None, not_graded(frozen.get("reason") or "official scoring not available here")
    try:
        template = load_template(benchmark)
    except TemplateUnavailable as exc:
        return None, not_graded(str(exc))
    if template.sha256 != frozen.get("template_sha256"):
        return None, not_graded(
            f"the installed {template.package} {template.version} template "
            f"({template.sha256[:12]}) is not the one the plan froze "
            f"({str(frozen.get('template_sha256'))[:12]})"
        )
    return template, None
