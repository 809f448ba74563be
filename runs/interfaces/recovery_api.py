"""Recovery API (R15): review a plan, submit it under an idempotency key, read the lineage.

Thin views over runs.settlement.recovery; every refusal is a `srbench.refusals.Refusal` the service (or
this module) raises, rendered by the API's one exception handler as {error, code, detail} with
the status it carries (400 invalid, 409 ledger conflicts, 422 key reuse or unmet conditions).
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from runs.interfaces.api import RUN_WRITE_PERMISSIONS
from runs.interfaces.serializers import RunSerializer
from runs.ledger import selectors
from runs.ledger.idempotency import IDEMPOTENCY_HEADER, IdempotencyKey, key_value, replay_response
from runs.models import Run
from runs.settlement.lineage import run_lineage
from runs.settlement.recovery import recovery_plan_read, recovery_submit
from runs.settlement.recovery_child import recovery_child_doc
from runs.settlement.recovery_pages import MAX_RECOVERY_PAGE
from runs.vocabulary.recovery_modes import RecoveryPlanMode
from srbench.api import (
    FORMAT_PARAM,
    ApiSchema,
    Keyset,
    error_responses,
    query_params_check,
    refuse_unknown_fields,
    require_object,
)
from srbench.refusals import Refusal, echo_text

RECOVERY_MODES = [str(mode) for mode in RecoveryPlanMode]
# The recovery lists read their cursors and limit by the API's one keyset rule (srbench.api).
ELIGIBLE_PAGE = Keyset(
    "after",
    cursor_param="eligible_after",
    default_limit=MAX_RECOVERY_PAGE,
    max_limit=MAX_RECOVERY_PAGE,
    tail=False,
)
EXCLUDED_PAGE = Keyset(
    "after",
    cursor_param="excluded_after",
    default_limit=MAX_RECOVERY_PAGE,
    max_limit=MAX_RECOVERY_PAGE,
    tail=False,
)
CHILDREN_PAGE = Keyset(
    "after",
    cursor_param="children_after",
    default_limit=25,
    max_limit=MAX_RECOVERY_PAGE,
    tail=False,
)
# What each GET reads of its query string, each once; any other (`?eligble_after=`, a second
# `mode=`) is refused by name, never dropped (srbench.api.query_params_check).
PLAN_PARAMS = ("mode", *ELIGIBLE_PAGE.param_names, EXCLUDED_PAGE.cursor_param, FORMAT_PARAM)
LINEAGE_PARAMS = (*CHILDREN_PAGE.param_names, FORMAT_PARAM)
RecoveryPlanPageSerializer = inline_serializer(
    "RecoveryPlanPage",
    {
        "plan_sha256": serializers.CharField(),
        "mode": serializers.ChoiceField(choices=RECOVERY_MODES),
        "parent_run": serializers.IntegerField(),
        "parent": serializers.DictField(),
        "counts": serializers.DictField(),
        "selected_cells_count": serializers.IntegerField(),
        "eligible_cells": serializers.ListField(child=serializers.DictField()),
        "next_eligible_after": serializers.IntegerField(allow_null=True),
        "excluded": serializers.ListField(child=serializers.DictField()),
        "next_excluded_after": serializers.IntegerField(allow_null=True),
        "requires_acknowledgement": serializers.BooleanField(),
        # judge_only mode (issue 34): submit with confirm_judge_cost = judge_cost_quote's worst.
        "requires_judge_cost_confirmation": serializers.BooleanField(),
        "judge_cost_quote": serializers.DictField(
            required=False,
            help_text="judge_only mode: judged_cells, judge_calls and worst_case_usd (null: a "
            "judge price is missing, nothing can be confirmed) of the selected cells",
        ),
        "subject_requests": serializers.IntegerField(
            required=False, help_text="judge_only mode: always 0"
        ),
        "judge_only": serializers.DictField(
            allow_null=True,
            required=False,
            help_text="other modes: the cells whose answer is stored and whose judge call was "
            "never sent (mode judge_only), with that plan's hash and quote; null when none",
        ),
        "previous_attempt_cost_assumptions": serializers.ListField(
            child=serializers.CharField(),
            required=False,
            help_text="failed mode: the billing assumptions behind the previous attempts' "
            "costs, e.g. an HTTP error answer counted $0 because its target's frozen "
            "errors_billed is false",
        ),
        "model_requests": serializers.IntegerField(),
    },
)
RecoverRequestSerializer = inline_serializer(
    "RecoverRequest",
    {
        "plan_sha256": serializers.CharField(required=False),
        "mode": serializers.ChoiceField(choices=RECOVERY_MODES, required=False),
        "selected_cells": serializers.ListField(child=serializers.IntegerField(), required=False),
        "plan": serializers.DictField(required=False, help_text="the reviewed plan, whole"),
        "idempotency_key": serializers.CharField(required=False),
        "acknowledge_new_attempt": serializers.BooleanField(required=False),
        "confirm_judge_cost": serializers.CharField(
            required=False,
            help_text="judge_only mode: the plan's judge_cost_quote.worst_case_usd, exactly",
        ),
    },
)


class CellEchoSerializer(serializers.Serializer):
    """Many cell ids said in brief (`srbench.refusals.echo_items`): never all of them."""

    count = serializers.IntegerField(help_text="how many cells")
    first = serializers.ListField(
        child=serializers.IntegerField(), help_text="the first ten parent cell ids, ascending"
    )
    omitted = serializers.IntegerField(help_text="how many ids `first` leaves out")


RecoveryMarkerSerializer = inline_serializer(
    "RecoveryMarker",
    allow_null=True,
    help_text="where the child came from; null for a run that is no recovery child",
    fields={
        "parent_run": serializers.IntegerField(),
        "parent_plan_sha256": serializers.CharField(),
        "mode": serializers.ChoiceField(choices=RECOVERY_MODES),
        "recovery_plan_sha256": serializers.CharField(),
        "selected_cells": CellEchoSerializer(
            help_text="the parent cells this child runs: a count and the first ten ids, never "
            "all of them (a run may have 100,000); all of them are read as the child's cells "
            "(`cells`)"
        ),
        "selected_cells_sha256": serializers.CharField(
            help_text="the hash of every selected parent cell id (canonical JSON), whole"
        ),
        "eligible_cells": CellEchoSerializer(
            help_text="the parent cells the reviewed plan offered: a count and the first ten"
        ),
        "parent_snapshot": serializers.DictField(),
        "recovery_subset": serializers.BooleanField(),
        "judge_cost_quote": serializers.DictField(required=False, help_text="judge_only mode"),
        "cells": serializers.CharField(
            help_text="the child run's cells (GET, paged ≤ 100): one per selected parent cell, "
            "same question and target, the same slot (the next one in failed mode)"
        ),
    },
)


class RecoveredRunSerializer(RunSerializer):
    recovery = RecoveryMarkerSerializer

    class Meta(RunSerializer.Meta):
        fields = [*RunSerializer.Meta.fields, "recovery"]


LineageSerializer = inline_serializer(
    "Lineage",
    {
        "run": serializers.DictField(),
        "original_known_cost_usd": serializers.CharField(allow_null=True),
        "original_cost_complete": serializers.BooleanField(),
        "parent": serializers.DictField(allow_null=True),
        "recovered_from": serializers.DictField(allow_null=True),
        # A re-judge child's marker (runs/settlement/rejudge.py): its parent, judge calls, confirmed cost.
        "rejudged_from": serializers.DictField(allow_null=True),
        "children": serializers.ListField(
            child=serializers.DictField(),
            help_text="the whole tree below the run (recoveries and re-judges of its children "
            "too), ascending by id; each with `parent` (the run it came from) and `depth` "
            "(1: a child of this run)",
        ),
        "next_children_after": serializers.IntegerField(allow_null=True),
        "model_requests": serializers.IntegerField(),
    },
)


def _judge_cost(value: object) -> Decimal | None:
    """The confirmed judge cost of a judge_only submission as an exact amount (a decimal
    string; a JSON number is read by its text), None when absent; else refused (400)."""
    if value is None:
        return None
    try:
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise InvalidOperation
        amount = Decimal(str(value))
        if not amount.is_finite() or amount < 0:
            raise InvalidOperation
    except InvalidOperation:
        raise Refusal(
            "confirm_judge_cost must be an amount in USD, as the plan's quote states it.",
            code="invalid",
        ) from None
    return amount


class RecoveryPlanView(APIView):
    """Reconcile the run, then show what a recovery in `mode` would run and what it would
    not, with a reason per excluded cell. Never calls a model (model_requests: 0). Mode
    `judge_only` offers judged cells whose answer is stored and whose judge call was never
    sent, each with its judge call's worst case and the selection's `judge_cost_quote`."""

    schema = ApiSchema()

    @extend_schema(
        parameters=[
            OpenApiParameter("mode", str, enum=RECOVERY_MODES, required=True),
            *ELIGIBLE_PAGE.parameters("cursor: cell id"),
            EXCLUDED_PAGE.parameters("cursor: cell id")[0],
        ],
        responses={
            200: RecoveryPlanPageSerializer,
            **error_responses(
                _409="the ledger is in a state that allows no plan",
                _422="a preview run, or failed mode of a re-judge child (no new attempt)",
            ),
        },
    )
    def get(self, request: Request, pk: int) -> Response:
        query_params_check(request.query_params, frozenset(PLAN_PARAMS), PLAN_PARAMS)
        run = get_object_or_404(Run, pk=pk)
        cursors = {
            "eligible_after": ELIGIBLE_PAGE.cursor(request),
            "excluded_after": EXCLUDED_PAGE.cursor(request),
            "limit": ELIGIBLE_PAGE.limit(request),
        }
        mode = request.query_params.get("mode", "")
        return Response(
            recovery_plan_read(run=run, mode=mode, read=lambda pages: pages.page(**cursors))
        )


class RecoverView(APIView):
    """Create the child run of a reviewed plan: 201 new child, 200 replay of the same key,
    plan and cells (header Idempotent-Replayed), 409 when the ledger or the claims changed,
    422 when the key was used for something else, the plan hash is a plan of another mode than
    the one submitted, or a condition is not met (failed mode
    without acknowledge_new_attempt; judge_only mode without confirm_judge_cost equal to the
    plan's quoted worst case). Only the run's owner or an operator may submit (403
    otherwise): a recovery spends money."""

    schema = ApiSchema()
    permission_classes = RUN_WRITE_PERMISSIONS
    run_action = "recover"

    @extend_schema(
        request=RecoverRequestSerializer,
        parameters=[OpenApiParameter(IDEMPOTENCY_HEADER, str, OpenApiParameter.HEADER)],
        responses={
            201: RecoveredRunSerializer,
            200: RecoveredRunSerializer,
            **error_responses(
                _409="the ledger or the claims changed since the review",
                _422="the key was used for something else, the plan was reviewed in another "
                "mode (recovery_mode_changed), or a condition is not met",
            ),
        },
    )
    def post(self, request: Request, pk: int) -> Response:
        run = get_object_or_404(Run, pk=pk)
        self.check_object_permissions(request, run)
        data: Any = request.data
        require_object(data)
        # The documented fields only; inside `plan` (the reviewed plan, whole) anything goes.
        refuse_unknown_fields(data, frozenset(RecoverRequestSerializer.fields))
        # The full reviewed plan, or just its hash, mode and the selected cells.
        source = _reviewed_plan(data)
        _refuse_two_values(data, source)
        plan = {k: source.get(k) for k in ("plan_sha256", "mode", "selected_cells")}
        if "selected_cells" in data:
            plan["selected_cells"] = data["selected_cells"]
        key = IdempotencyKey.of_request(request.headers, data)
        ack = data.get("acknowledge_new_attempt", False)
        if not isinstance(ack, bool):
            raise Refusal("acknowledge_new_attempt must be true or false.", code="invalid")
        child, created = recovery_submit(
            run=run,
            plan=plan,
            idempotency_key=key_value(key) or "",
            acknowledge_new_attempt=ack,
            confirm_judge_cost=_judge_cost(data.get("confirm_judge_cost")),
            user=request.user,
        )
        child = selectors.runs_with_progress(Run.objects.filter(pk=child.pk)).get()
        body = {**RunSerializer(child).data, "recovery": recovery_child_doc(child)}
        return replay_response(body, created=created)


def _reviewed_plan(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """The reviewed plan a submission names: `plan` when given (a JSON object, else refused —
    a `plan` of another type was dropped and the top-level fields submitted), else the body."""
    if "plan" not in data:
        return data
    if not isinstance(data["plan"], Mapping):
        raise Refusal(
            f"plan must be the reviewed plan as a JSON object, not {echo_text(data['plan'])!r}; "
            "or send plan_sha256, mode and selected_cells at the top.",
            code="invalid",
            detail={"field": "plan"},
        )
    return data["plan"]


def _refuse_two_values(data: Mapping[str, Any], plan: Mapping[str, Any]) -> None:
    """A whole plan sent with a top-level mode, hash or selection of its own that differs:
    refused, never one of them silently chosen (the top-level one was taken: a top-level
    `selected_cells: null` widened a plan's reviewed subset to every eligible cell)."""
    if plan is data:
        return
    for key in ("mode", "plan_sha256", "selected_cells"):
        if key in data and data[key] != plan.get(key):
            raise Refusal(
                f"{key} is given twice with different values: {echo_text(data[key])!r} at the "
                f"top and {echo_text(plan.get(key))!r} in plan; send one.",
                code="invalid",
                detail={"field": key},
            )


class LineageView(APIView):
    """The run's parent and every run below it — recoveries and re-judges, children of
    children too, each with its `parent` and `depth` and its `mode` saying which
    ("undispatched", "failed", "judge_only", "rejudge") — paginated by id, each with its own
    status, progress and known cost; the original's known cost separately."""

    schema = ApiSchema()

    @extend_schema(
        parameters=[
            *CHILDREN_PAGE.parameters("cursor: child run id"),
        ],
        responses=LineageSerializer,
    )
    def get(self, request: Request, pk: int) -> Response:
        query_params_check(request.query_params, frozenset(LINEAGE_PARAMS), LINEAGE_PARAMS)
        run = get_object_or_404(Run, pk=pk)
        return Response(
            run_lineage(
                run=run,
                children_after=CHILDREN_PAGE.cursor(request),
                limit=CHILDREN_PAGE.limit(request),
            )
        )
