"""The answer a judge-only completion judges (issue 34; runs/settlement/recovery.py mode ``judge_only``).

A judged cell (SimpleQA, HLE) whose worker died after its subject call completed and before its
judge call was sent is settled `failed` as `episode_interrupted` with that answer kept in its
completed subject call (runs/engine/finish.py `cell_settlement`). A judge-only recovery child
judges that stored answer: the re-judge episode (`episodes.rejudged`, the child's manifest
carries a ``rejudge`` marker with ``judge_only: true``) reads it here and never calls the
subject. The plan (which answer is quoted and hashed) and the episode (which answer is judged)
read it through this one rule. Reads only.
"""

from __future__ import annotations

from runs.engine.exact_text import exact_answers
from runs.models import Call, CallStatus, Cell


def stored_answers(cell_ids: list[int]) -> dict[int, str]:
    """{cell: the content of its completed, untruncated first subject call} for those of these
    cells that have one: the complete answer the cell's judge call would have judged (a
    truncated answer is wrong without a judge, as in the engine, and is left out), as the model
    sent it (`exact_text.exact_answers`)."""
    stored: dict[int, str | None] = dict(
        Call.objects.filter(
            cell_id__in=cell_ids,
            role=Call.Role.SUBJECT,
            sequence=0,
            status=CallStatus.COMPLETED,
        )
        .exclude(finish_reason="length")
        .values_list("cell_id", "content")
    )
    return {c: a for c, a in exact_answers(stored).items() if a is not None}


def judge_only_answers(parent_of_cell: dict[int, int]) -> dict[int, str | None]:
    """{child cell: the stored answer (`stored_answers`) of its parent run's cell with the same
    question, target and slot (the same attempt), or None}. Two queries for any number of
    cells."""
    if not parent_of_cell:
        return {}
    rows = list(
        Cell.objects.filter(pk__in=parent_of_cell).values_list(
            "pk", "question_id", "target_id", "slot"
        )
    )
    parents = {
        (run_id, qid, tid, slot): pk
        for pk, run_id, qid, tid, slot in Cell.objects.filter(
            run_id__in=set(parent_of_cell.values()),
            question_id__in={r[1] for r in rows},
        ).values_list("pk", "run_id", "question_id", "target_id", "slot")
    }
    parent_cell = {
        pk: parents.get((parent_of_cell[pk], qid, tid, slot)) for pk, qid, tid, slot in rows
    }
    answers = stored_answers([p for p in parent_cell.values() if p is not None])
    return {pk: answers.get(p) if p is not None else None for pk, p in parent_cell.items()}


def judge_only_answer(*, cell_id: int, parent_run_id: int) -> str | None:
    """What this judge-only cell is judged on. Runs on the driver's database thread."""
    return judge_only_answers({cell_id: parent_run_id}).get(cell_id)
