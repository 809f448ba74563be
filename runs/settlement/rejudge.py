"""Re-judging a finished run's judged answers (issue 22 point 4): a child run of judge calls.

A regrade (`runs.settlement.regrade`) makes no model call, so judged answers (SimpleQA, HLE) cannot be
re-graded there: their grade is a judge's verdict. A re-judge sends one judge call per judged
answer, and only when the caller confirmed the worst case `judge_cost_quote` stated. The calls
go through the engine like any run's — Call rows written before the request leaves, budget
reserved under the run lock, never re-sent — so a re-judge is a *child run* of the parent
(``Run.parent``, as a recovery child), never a change to the parent:

- its cells are the parent's `rejudge_cells` (same question, target and attempt slot); the
  episode (`runs.engine.episodes.rejudged`) reads the parent cell's stored final answer and
  never calls the subject target;
- its manifest is the parent's, cut to those cells, with ``limits.max_cost_usd`` set to the
  confirmed worst case: the budget refuses any call beyond what the user confirmed. The
  official scorer's second judge call is left out (the quote is one call per answer);
- ``manifest["rejudge"]`` records the parent, the re-judged cells and a hash of what was
  judged (``rejudge_sha256``: parent cells, their answers, the judges, the quote).

The same machinery completes a *judge-only recovery* (issue 34, runs/settlement/recovery.py mode
``judge_only``): a judged cell whose worker died between its answer and its judge call keeps the
answer in its completed subject call, and a child made here (``judge_only_child_create``, the
marker's ``judge_only: true``) sends that cell's one judge call over it, at a worst case quoted
per cell (`judge_call_worst_case`) and confirmed up front, never the subject call again.

Idempotent twice over: under the parent's row lock, a child with the same ``rejudge_sha256``
is returned instead of a second one (same answers, same judge, same quote: same child); and an
``Idempotency-Key`` is stored on the child (unique per owner in the database), so a key reused
for another re-judge is refused.
"""

from __future__ import annotations

import hashlib
from decimal import Decimal
from typing import Any

from django.db import IntegrityError, transaction

from runs.engine import doorbell
from runs.engine.exact_text import exact_answers
from runs.engine.judge_only import stored_answers
from runs.ledger.idempotency import IdempotencyKey, IdempotencyKeyReused, key_value
from runs.models import Cell, Run
from runs.planning import services
from runs.settlement.regrade import judge_cost_quote, regrade_checked_run, rejudge_cells
from srbench.canonical import sha256_hex
from srbench.refusals import Refusal

__all__ = [
    "REJUDGE_VERSION",
    "ChildRunRefused",
    "confirmation_check",
    "judge_call_worst_case",
    "judge_only_child_create",
    "judge_only_quotes",
    "quote_of",
    "rejudge_doc",
    "rejudge_submit",
]

REJUDGE_VERSION = 1


class ChildRunRefused(Refusal):
    """A re-judge or a recovery refused (both make a child run; one class for the two, issue
    36 item 2), with its stable code and HTTP status (400 unless the raise says otherwise);
    nothing was created and nothing was sent. Rendered by the API's one exception handler."""

    def __init__(
        self, code: str, message: str, *, http_status: int = 400, detail: Any = None
    ) -> None:
        super().__init__(message, code=code, http_status=http_status, detail=detail)


def confirmation_check(
    quote: dict[str, Any], confirmed: Decimal | None, *, what: str = "re-judging"
) -> Decimal:
    """The confirmed worst case, which must be the quote's, stated exactly. A quote without a
    worst case (a judge price is missing) cannot be confirmed: the run would be unbounded."""
    # Nothing to judge is said first: a quote of 0 to confirm, then refused, misled a user.
    if not quote["judged_cells"]:
        raise ChildRunRefused(
            "nothing_to_rejudge",
            "the run has no completed judged answer to re-judge",
            http_status=422,
            detail=quote,
        )
    worst = quote["worst_case_usd"]
    if worst is None:
        raise ChildRunRefused(
            "judge_cost_unconfirmed",
            "a judge price is missing, so no worst case can be stated or confirmed; "
            "nothing was sent",
            http_status=409,
            detail=quote,
        )
    if confirmed is None or Decimal(confirmed) != Decimal(worst):
        raise ChildRunRefused(
            "judge_cost_unconfirmed",
            f"{what} {quote['judged_cells']} answer(s) costs at most {worst} USD; "
            f"send confirm_judge_cost={worst} to proceed",
            http_status=409,
            detail=quote,
        )
    return Decimal(worst)


def _content(parent: Run, quote: dict[str, Any]) -> dict[str, Any]:
    """What a re-judge judges, hashed into its identity: each parent cell with the hash of its
    answer, the judges the parent froze, and the quote."""
    rows = list(
        rejudge_cells(parent).values_list(
            "pk", "question_id", "target__slug", "slot", "benchmark", "final_answer"
        )
    )
    # The answer as the model sent it, as the episode judges it (`finish.parent_answers`).
    exact = exact_answers({r[0]: r[5] for r in rows})
    return _judged_content(parent, [(*r[:5], exact[r[0]] or r[5]) for r in rows], quote)


def _judged_content(
    parent: Run, rows: list[tuple[int, int, str, int, str, str]], quote: dict[str, Any]
) -> dict[str, Any]:
    """The identity of a child of judge calls: (cell, question, target slug, slot, benchmark,
    answer) per parent cell, each answer by its hash (a lone surrogate a model sent by its
    surrogatepass bytes), with the judges and the quote."""
    cells = [
        [
            pk,
            qid,
            slug,
            slot,
            benchmark,
            hashlib.sha256(answer.encode("utf-8", "surrogatepass")).hexdigest(),
        ]
        for pk, qid, slug, slot, benchmark, answer in rows
    ]
    benchmarks = {c[4] for c in cells}
    return {
        "version": REJUDGE_VERSION,
        "parent_run": parent.pk,
        "parent_plan_sha256": parent.plan_sha256,
        "cells": cells,
        "judges": {b: j for b, j in parent.manifest["judges"].items() if b in benchmarks},
        "judge_cost_quote": quote,
    }


def _child_manifest(parent: Run, content: dict[str, Any], worst: Decimal) -> dict[str, Any]:
    """The parent's frozen manifest cut to the re-judged cells; targets, judges, prices,
    sampling and limits are kept so the verdicts are comparable, and the budget is the
    confirmed worst case. A parent's own recovery/re-judge marker is not inherited."""
    m = parent.manifest
    cells = content["cells"]
    questions = {c[1] for c in cells}
    benchmarks = {c[4] for c in cells}
    slugs = {c[2] for c in cells}
    cases = [c for c in m["cases"] if c[0] in questions and c[2] in benchmarks]
    inherited = {k: v for k, v in m.items() if k not in ("recovery", "rejudge")}
    return {
        **inherited,
        "name": f"{m['name']} · re-judge",
        "benchmarks": {
            # No official scorer here: its second judge call is not in the confirmed quote.
            b: {
                **{k: v for k, v in spec.items() if k != "official_scoring"},
                "cases": sum(1 for c in cases if c[2] == b),
            }
            for b, spec in m["benchmarks"].items()
            if b in benchmarks
        },
        "cases": cases,
        "targets": [t for t in m["targets"] if t["slug"] in slugs],
        "judges": content["judges"],
        "simulators": {},
        "limits": {**m["limits"], "max_cost_usd": str(worst)},
        "rejudge": {
            "parent_run": parent.pk,
            "parent_plan_sha256": parent.plan_sha256,
            "parent_cells": [c[0] for c in cells],
            "judge_calls": len(cells),
            "confirmed_judge_cost_usd": content["judge_cost_quote"]["worst_case_usd"],
            "rejudge_sha256": sha256_hex(content),
        },
    }


def _child_create(
    parent: Run, content: dict[str, Any], worst: Decimal, user: Any, key: str | None
) -> Run:
    manifest = _child_manifest(parent, content, worst)
    created = {
        "rejudge": {
            "parent": parent.pk,
            "max_cost_usd": manifest["limits"]["max_cost_usd"],
            "rejudge_sha256": manifest["rejudge"]["rejudge_sha256"],
        }
    }
    return _insert(parent, manifest, content, user, key, created)


def _insert(
    parent: Run,
    manifest: dict[str, Any],
    content: dict[str, Any],
    user: Any,
    key: str | None,
    created: dict[str, Any],
) -> Run:
    """The child run and its cells, in the caller's transaction; dispatch is the caller's."""
    targets = dict(
        Cell.objects.filter(pk__in=manifest["rejudge"]["parent_cells"]).values_list(
            "pk", "target_id"
        )
    )
    # The same (question, target, slot) as the parent cell: the same attempt, judged again.
    return services.child_run_insert(
        parent=parent,
        manifest=manifest,
        cells=[
            services.NewCell(question_id=qid, target_id=targets[pk], slot=slot, benchmark=benchmark)
            for pk, qid, _slug, slot, benchmark, _sha in content["cells"]
        ],
        owner=user,
        created=created,
        idempotency_key=key,
    )


# --- judge-only completion (issue 34) ------------------------------------------------------------


def judge_call_worst_case(
    manifest: dict[str, Any],
    benchmark: str,
    *,
    payload: dict[str, Any],
    secret: dict[str, Any],
    answer: str,
) -> Decimal | None:
    """The worst case of one judge call over `answer` at the judge the manifest froze, by the
    rule `judge_cost_quote` applies per answer and the engine reserves per call
    (`runs.ledger.accounting.worst_case_call_cost`); None when the judge or its price is missing."""
    from runs.engine.scoring import judge_request_messages
    from runs.ledger.accounting import sent_max_tokens, worst_case_call_cost

    judge = manifest["judges"].get(benchmark)
    if judge is None:
        return None
    return worst_case_call_cost(
        manifest["prices"].get(judge["slug"], {}),
        kind=judge["kind"],
        model=judge["model"],
        messages=judge_request_messages(payload=payload, secret=secret, answer=answer),
        max_tokens=sent_max_tokens(judge["fixed_params"], manifest["limits"]),
        max_inference_calls=judge.get("max_inference_calls"),
    )


def judge_only_quotes(run: Run, cell_ids: list[int]) -> dict[int, Decimal | None]:
    """{cell: the worst case of judging its stored answer once} for cells of `run` awaiting
    their judge call (runs/settlement/recovery_rules.py `awaits_judge`); None: no answer or no price."""
    answers = stored_answers(cell_ids)
    rows = Cell.objects.filter(pk__in=cell_ids).values_list(
        "pk", "benchmark", "question__payload", "question__secret__data"
    )
    return {
        pk: None
        if pk not in answers
        else judge_call_worst_case(
            run.manifest, benchmark, payload=payload, secret=secret or {}, answer=answers[pk]
        )
        for pk, benchmark, payload, secret in rows
    }


def quote_of(costs: list[Decimal | None]) -> dict[str, Any]:
    """A quote in `judge_cost_quote`'s shape: one judge call per answer, the worst case their
    sum, unknown (None) when any is."""
    from srbench.money import money_text

    total: Decimal | None = Decimal(0)
    for cost in costs:
        total = None if cost is None or total is None else total + cost
    return {
        "judged_cells": len(costs),
        "judge_calls": len(costs),
        "worst_case_usd": money_text(total),
    }


def judge_only_child_create(
    parent: Run,
    *,
    cell_ids: list[int],
    quote: dict[str, Any],
    worst: Decimal,
    user: Any,
    recovery: dict[str, Any],
) -> Run:
    """The child of a judge-only recovery, in the caller's transaction (runs/settlement/recovery.py, which
    claims the parent cells and dispatches after commit): a re-judge child of these parent
    cells — one judge call each over the answer their subject call stored, the budget the
    confirmed worst case, no official second judge call — whose ``rejudge`` marker says
    ``judge_only`` (the episode reads the stored answer, `runs.engine.judge_only`) and which
    carries the recovery's own ``recovery`` marker."""
    answers = stored_answers(cell_ids)
    rows = Cell.objects.filter(pk__in=cell_ids).order_by("pk")
    content = _judged_content(
        parent,
        [
            (pk, qid, slug, slot, benchmark, answers[pk])
            for pk, qid, slug, slot, benchmark in rows.values_list(
                "pk", "question_id", "target__slug", "slot", "benchmark"
            )
        ],
        quote,
    )
    manifest = _child_manifest(parent, content, worst)
    manifest["name"] = f"{parent.manifest['name']} · recovery (judge only)"
    manifest["rejudge"]["judge_only"] = True
    manifest["recovery"] = recovery
    created = {
        "recovery": {
            "parent": parent.pk,
            "mode": recovery["mode"],
            "recovery_plan_sha256": recovery["recovery_plan_sha256"],
            "max_cost_usd": manifest["limits"]["max_cost_usd"],
        }
    }
    return _insert(parent, manifest, content, user, None, created)


def _replay(parent: Run, key: IdempotencyKey, user: Any) -> Run | None:
    """The child an earlier re-judge of this parent stored under this key (the one replay
    helper, runs/ledger/idempotency.py); refused when the key belongs to anything else (another
    run, another re-judge)."""

    def same(existing: Run) -> bool:
        marker = existing.manifest.get("rejudge") or {}
        return existing.parent_id == parent.pk and marker.get("parent_run") == parent.pk

    def reused(existing: Run) -> IdempotencyKeyReused:
        return IdempotencyKeyReused(
            f"idempotency key {key.value!r} was already used for run {existing.pk}, which is "
            f"not this re-judge of run {parent.pk}",
            run=existing,
            detail={"run": existing.pk},
        )

    return key.replay(Run.objects.filter(owner=user), same=same, reused=reused)


def rejudge_submit(
    *, run: Run, confirm_judge_cost: Decimal | None, user: Any, idempotency_key: str | None = None
) -> tuple[Run, bool]:
    """Create (once) the re-judge child of a finished live run; returns (child, created).

    Refused (ChildRunRefused, nothing created or sent) unless ``confirm_judge_cost`` is exactly
    the worst case `judge_cost_quote` states now; a quote with an unknown price is never
    runnable. Idempotent: the same answers, judges and quote return the existing child
    (created=False, nothing dispatched again), whoever confirms; the same idempotency key with
    anything else is refused. The child is written in one durable transaction under the
    parent's row lock and dispatched after commit. The parent is never modified."""
    key = IdempotencyKey.parse(idempotency_key)
    regrade_checked_run(run.pk)  # RegradeRefused: 409 regrade_refused
    if key is not None and (child := _replay(run, key, user)) is not None:
        # Same key, same parent: the answer to a lost response; nothing is sent again.
        return child, False
    try:
        with transaction.atomic(durable=True):
            # One re-judge submission per parent at a time: the lookup of an equal child and
            # the creation below are one step.
            parent = Run.objects.select_for_update().get(pk=run.pk)
            quote = judge_cost_quote(parent)
            worst = confirmation_check(quote, confirm_judge_cost)
            content = _content(parent, quote)
            sha = sha256_hex(content)
            same = Run.objects.filter(parent=parent, manifest__rejudge__rejudge_sha256=sha)
            if (existing := same.order_by("pk").first()) is not None:
                return existing, False
            child = _child_create(parent, content, worst, user, key_value(key))
            transaction.on_commit(lambda: doorbell.run_dispatch(run_id=child.pk))
            return child, True
    except IntegrityError:
        # Another request with this owner's key won the race (the key's unique constraint).
        if key is not None and (child := _replay(run, key, user)) is not None:
            return child, False
        raise


def rejudge_doc(child: Run, *, created: bool, quote: dict[str, Any]) -> dict[str, Any]:
    """A re-judge as the API (202) and the CLI show it: the child run to follow."""
    marker = child.manifest["rejudge"]
    return {
        "run": marker["parent_run"],
        "rejudge": True,
        "child_run": child.pk,
        "created": created,
        "status": child.status,
        "judge_calls": marker["judge_calls"],
        "max_cost_usd": child.manifest["limits"]["max_cost_usd"],
        "rejudge_sha256": marker["rejudge_sha256"],
        "judge_cost_quote": quote,
        "follow": f"/api/v1/runs/{child.pk}/",
        "report": f"/api/v1/runs/{child.pk}/report/",
        "subject_requests": 0,
    }
