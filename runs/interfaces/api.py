"""REST API of runs (DESIGN §9): plans, runs, report, results, calls, events, cancel."""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Any

from django.http import Http404, HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    PolymorphicProxySerializer,
    extend_schema,
    extend_schema_serializer,
    inline_serializer,
)
from rest_framework import serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from runs.interfaces.events_wait import MAX_WAIT_SECONDS, WAIT_PARAM, wait_param
from runs.interfaces.public import with_effective_costs
from runs.interfaces.serializers import (
    CallDetailSerializer,
    CallSummarySerializer,
    EventSerializer,
    ResultSerializer,
    RunSerializer,
    TargetSerializer,
)
from runs.ledger import selectors
from runs.ledger.idempotency import (
    IDEMPOTENCY_HEADER,
    IDEMPOTENCY_KEY_MAX,
    IdempotencyKey,
    key_value,
    replay_response,
)
from runs.ledger.permissions import MayActOnRun
from runs.models import Run, Target
from runs.planning.plans import PlanSerializer, plan_freeze
from runs.planning.services import run_cancel, run_create
from runs.preflight.plan import plan_preflight_review
from runs.reporting.stored_report import run_report_served
from srbench.api import (
    BIGINT_MAX,
    ApiSchema,
    DetailParamsMixin,
    Keyset,
    StrictFieldsSerializer,
    detail_params_check,
    error_responses,
    list_params_check,
    query_params_check,
    require_no_body_fields,
    require_object,
)
from srbench.refusals import Refusal

# Cancel, reconcile, regrade, export and recover: the run's owner or an operator (runs/permissions).
RUN_WRITE_PERMISSIONS = [IsAuthenticated, MayActOnRun]


# Every list of this API pages by the one keyset rule (srbench.api.Keyset).
RUN_PAGE = Keyset("before", default_limit=25, max_limit=100)
RESULT_PAGE = Keyset("after", default_limit=100, max_limit=selectors.MAX_DETAIL_PAGE)
CALL_PAGE = Keyset("after", default_limit=100, max_limit=selectors.MAX_DETAIL_PAGE)
EVENT_PAGE = Keyset(
    "after", default_limit=selectors.MAX_EVENT_PAGE, max_limit=selectors.MAX_EVENT_PAGE, key="seq"
)
# What each ledger list reads of its query string (DRF's `format` too); anything else — a
# `target=` filter these lists do not have — is refused by name, never silently dropped.
PAGE_PARAMS = ("after", "limit")
RESULT_PARAMS = frozenset({*PAGE_PARAMS, "format"})
CALL_PARAMS = frozenset({*PAGE_PARAMS, "active", "format"})
EVENT_PARAMS = frozenset({*PAGE_PARAMS, "type", WAIT_PARAM, "format"})
RUN_FILTERS = ("name", "model", "status", "mode", "profile")
RUN_LIST_PARAMS = frozenset({"before", "limit", *RUN_FILTERS, "format"})


def plan_summary(frozen: Any) -> dict[str, Any]:
    m = frozen.manifest
    return {
        # What a target's latest preflight says this plan exceeds (issue 39), as on the
        # Create page's review: before any call, never a refusal.
        "preflight_warnings": [
            {"target": row["slug"], "warning": warning}
            for row in plan_preflight_review(m)
            for warning in row["warnings"]
        ],
        "plan_sha256": frozen.plan_sha256,
        "cases_per_benchmark": {b: v["cases"] for b, v in m["benchmarks"].items()},
        "cells": len(m["cases"]) * len(m["targets"]) * m["slots"],
        "targets": m["targets"],
        "judges": m["judges"],
        "prices": m["prices"],
        "limits": m["limits"],
        "sampling": m["sampling"],
        "manifest": m,
        "model_requests": 0,
    }


# --- documented shapes of the dict answers ---------------------------------------------------

PlanSummarySerializer = inline_serializer(
    "PlanSummary",
    {
        "plan_sha256": serializers.CharField(),
        "cases_per_benchmark": serializers.DictField(child=serializers.IntegerField()),
        "cells": serializers.IntegerField(),
        "targets": serializers.ListField(child=serializers.DictField()),
        "judges": serializers.DictField(),
        "prices": serializers.DictField(),
        "limits": serializers.DictField(),
        "sampling": serializers.DictField(),
        "manifest": serializers.DictField(),
        "model_requests": serializers.IntegerField(),
        "preflight_warnings": serializers.ListField(
            child=serializers.DictField(child=serializers.CharField()),
            help_text="per target: what its latest preflight showed that this plan exceeds",
        ),
    },
)


class RunCreateSerializer(PlanSerializer):
    """A plan, plus the idempotency key when the client does not send the header."""

    idempotency_key = serializers.CharField(
        required=False,
        max_length=IDEMPOTENCY_KEY_MAX,
        help_text="or the Idempotency-Key header (the header wins)",
    )


@extend_schema_serializer(many=False)  # a page object, though `list` answers it
class RunPageSerializer(serializers.Serializer):
    results = RunSerializer(many=True)
    next_before = serializers.IntegerField(
        allow_null=True, help_text="cursor for the next page (pass as before=)"
    )


class RunCancelSerializer(RunSerializer):
    cancel_requested = serializers.BooleanField(help_text="whether this request did it")
    model_requests = serializers.IntegerField()

    class Meta(RunSerializer.Meta):
        fields = [*RunSerializer.Meta.fields, "cancel_requested", "model_requests"]


ResultPageSerializer = RESULT_PAGE.page_serializer("ResultPage", ResultSerializer(many=True))
CallPageSerializer = CALL_PAGE.page_serializer("CallPage", CallSummarySerializer(many=True))
EventPageSerializer = EVENT_PAGE.page_serializer(
    "EventPage",
    EventSerializer(many=True),
    loaded=serializers.IntegerField(help_text="events in this read; there is no total"),
    waited=serializers.FloatField(
        required=False,
        help_text="with `wait`: the seconds the server held this request (a server without "
        "the long poll leaves it out: poll instead)",
    ),
)
ReportSerializer = inline_serializer(
    "RunReport",
    {
        "run": serializers.DictField(),
        "complete": serializers.BooleanField(),
        "incomplete_reasons": serializers.ListField(child=serializers.CharField()),
        "not_run": serializers.ListField(
            child=serializers.DictField(),
            help_text="questions left out at plan time because they cannot run on this server: "
            "benchmark, reason, questions",
        ),
        "denominator": serializers.IntegerField(),
        "counts": serializers.DictField(),
        "targets": serializers.ListField(
            child=serializers.DictField(),
            help_text="per target: counts, sr-bench score, tokens, costs; `official`: the "
            "official scorers beside the sr-bench score (ARC pass@2, SimpleQA F-score, HLE "
            "calibration), or null",
        ),
        "spend": serializers.DictField(
            help_text="total spend and waste (failed and unknown-outcome calls), USD text or null"
        ),
        "report_version": serializers.DictField(
            help_text="which report this is (an ended run's is the one kept at its end, "
            "recomputed only when its ledger changes): `key`, the name it is stored under "
            "(sha256 of the ledger's state and the report code's version; null while the run "
            "is in progress), `code`, the report code's version, `usage_correction` and "
            "`regrade`, the versions it reflects (null: none), `computed_at` (when the kept "
            "report was computed; null for one computed for this request), and `stored` "
            "(false: computed for this request)"
        ),
    },
)
CorrectionSerializer = inline_serializer(
    "UsageCorrection",
    {
        "version": serializers.IntegerField(),
        "evidence_sha256": serializers.CharField(),
        "created_at": serializers.DateTimeField(),
        "verified": serializers.IntegerField(),
        "changed": serializers.IntegerField(),
        "unverifiable": serializers.IntegerField(),
        "old_known_cost_usd": serializers.CharField(allow_null=True),
        "new_known_cost_usd": serializers.CharField(allow_null=True),
        "created": serializers.BooleanField(),
        "model_requests": serializers.IntegerField(),
    },
)
RegradeSerializer = inline_serializer(
    "Regrade",
    {
        "run": serializers.IntegerField(),
        "version": serializers.IntegerField(),
        "created": serializers.BooleanField(),
        "input_sha256": serializers.CharField(),
        "grader_versions": serializers.DictField(),
        "regraded": serializers.IntegerField(),
        "changed": serializers.IntegerField(),
        "skipped": serializers.IntegerField(),
        "by_target": serializers.DictField(),
        "judge_cost_quote": serializers.DictField(),
        "model_requests": serializers.IntegerField(),
    },
)
RegradeQueuedSerializer = inline_serializer(
    "RegradeQueued",
    {
        "run": serializers.IntegerField(),
        "status": serializers.CharField(),
        "task": serializers.CharField(),
        "input_sha256": serializers.CharField(allow_null=True),
        "follow": serializers.CharField(),
        "model_requests": serializers.IntegerField(),
    },
)


RejudgeSerializer = inline_serializer(
    "Rejudge",
    {
        "run": serializers.IntegerField(),
        "rejudge": serializers.BooleanField(),
        "child_run": serializers.IntegerField(),
        "created": serializers.BooleanField(),
        "status": serializers.CharField(),
        "judge_calls": serializers.IntegerField(),
        "max_cost_usd": serializers.CharField(),
        "rejudge_sha256": serializers.CharField(),
        "judge_cost_quote": serializers.DictField(),
        "follow": serializers.CharField(),
        "report": serializers.CharField(),
        "subject_requests": serializers.IntegerField(),
    },
)
RegradeAcceptedSerializer = PolymorphicProxySerializer(
    component_name="RegradeAccepted",
    serializers=[RegradeQueuedSerializer, RejudgeSerializer],
    resource_type_field_name=None,
)


class RegradeRequestSerializer(StrictFieldsSerializer):
    """Judged answers are re-judged only when asked, and only at a confirmed worst case."""

    rejudge = serializers.BooleanField(required=False, default=False)
    # The ledger's scale (srbench.money): a worst case at 12-decimal prices has up to 18.
    confirm_judge_cost = serializers.DecimalField(
        required=False, max_digits=40, decimal_places=18, allow_null=True, default=None
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        # A confirmation without `rejudge: true` ran a plain regrade and dropped the amount:
        # the caller meant a re-judge (session 6 probe).
        if attrs.get("confirm_judge_cost") is not None and not attrs.get("rejudge"):
            raise serializers.ValidationError(
                {"confirm_judge_cost": ["only with rejudge: true (a re-judge's confirmed cost)"]}
            )
        return attrs


ExportSerializer = inline_serializer(
    "AnswerMatrix",
    {
        "targets": serializers.ListField(child=serializers.CharField()),
        "rows": serializers.ListField(child=serializers.DictField()),
        "model_requests": serializers.IntegerField(),
    },
)


class TargetViewSet(DetailParamsMixin, viewsets.ReadOnlyModelViewSet):
    """Registered targets (read-only for everyone; operators edit them in the admin)."""

    schema = ApiSchema()
    queryset = Target.objects.all().order_by("slug")
    serializer_class = TargetSerializer
    lookup_field = "slug"

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        # Every target, unpaged and unfiltered: `?kind=mom` is refused, not answered with all.
        list_params_check(self)
        return super().list(request, *args, **kwargs)


class PlanReviewView(APIView):
    """Freeze a plan and show it: no run is created and no model is called (R8.8)."""

    schema = ApiSchema()

    @extend_schema(request=PlanSerializer, responses=PlanSummarySerializer)
    def post(self, request: Request) -> Response:
        require_object(request.data)
        return Response(plan_summary(plan_freeze(data=request.data)))


class RunViewSet(DetailParamsMixin, viewsets.ReadOnlyModelViewSet):
    schema = ApiSchema()
    serializer_class = RunSerializer

    def get_queryset(self):  # type: ignore[no-untyped-def]
        qs = selectors.runs_with_progress()
        if self.action == "list":
            params = self.request.query_params
            qs = selectors.runs_filter(
                qs,
                name=params.get("name", ""),
                model=params.get("model", ""),
                status=params.get("status", ""),
                mode=params.get("mode", ""),
                profile=params.get("profile", ""),
            )
        return qs.order_by("-id")

    def get_object(self) -> Run:
        try:
            return super().get_object()
        except Http404:
            # Name the run: a CLI shows this line as it is.
            raise NotFound(f"run {self.kwargs.get('pk')} does not exist") from None

    @extend_schema(
        parameters=[
            *RUN_PAGE.parameters("cursor: runs with a smaller id"),
            *[OpenApiParameter(p, str) for p in RUN_FILTERS],
        ],
        responses=RunPageSerializer,
    )
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        query_params_check(request.query_params, RUN_LIST_PARAMS, ("before", "limit", *RUN_FILTERS))
        page, following = RUN_PAGE.rows(self.get_queryset(), request)
        return Response(
            {"results": RunSerializer(page, many=True).data, RUN_PAGE.next_field: following}
        )

    @extend_schema(
        request=RunCreateSerializer,
        parameters=[
            OpenApiParameter(
                IDEMPOTENCY_HEADER,
                str,
                OpenApiParameter.HEADER,
                description="retrying with the same key and body returns the same run",
            )
        ],
        responses={
            201: RunSerializer,
            200: OpenApiResponse(
                RunSerializer, description="replay: this key already created the run"
            ),
            **error_responses(_422="the key was used before with a different plan"),
        },
    )
    def create(self, request: Request) -> Response:
        require_object(request.data)
        key = IdempotencyKey.of_request(request.headers, request.data)
        plan = {k: v for k, v in request.data.items() if k != "idempotency_key"}
        run, created = run_create(owner=request.user, plan=plan, idempotency_key=key_value(key))
        run = selectors.runs_with_progress(Run.objects.filter(pk=run.pk)).get()
        # A replay is answered with the run as it is now (its id and plan are what the first
        # request created); 200 and the header tell the client it was not created again.
        return replay_response(RunSerializer(run).data, created=created)

    @extend_schema(request=None, responses=RunCancelSerializer)
    @action(detail=True, methods=["post"], permission_classes=RUN_WRITE_PERMISSIONS)
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        require_no_body_fields(request.data)
        run = self.get_object()
        changed = run_cancel(run=run, user=request.user)
        run = selectors.runs_with_progress(Run.objects.filter(pk=run.pk)).get()
        return Response(
            {**RunSerializer(run).data, "cancel_requested": changed, "model_requests": 0}
        )

    @extend_schema(responses=ReportSerializer)
    @action(detail=True, methods=["get"])
    def report(self, request: Request, pk: str | None = None) -> Response:
        # The report kept at run end, named by `report_version` (issue 38 item 1).
        detail_params_check(request)
        return Response(run_report_served(run=self.get_object()))

    @extend_schema(
        parameters=RESULT_PAGE.parameters(),
        responses=ResultPageSerializer,
    )
    @action(detail=True, methods=["get"])
    def results(self, request: Request, pk: str | None = None) -> Response:
        query_params_check(request.query_params, RESULT_PARAMS, PAGE_PARAMS)
        run = self.get_object()
        cells = selectors.results_page(
            run=run, after=RESULT_PAGE.cursor(request), limit=RESULT_PAGE.limit(request)
        )
        return Response(RESULT_PAGE.body(ResultSerializer(cells, many=True).data, cells))

    @extend_schema(
        parameters=[
            *CALL_PAGE.parameters(),
            OpenApiParameter("active", bool, description="only calls in flight"),
        ],
        responses=CallPageSerializer,
    )
    @action(detail=True, methods=["get"])
    def calls(self, request: Request, pk: str | None = None) -> Response:
        query_params_check(request.query_params, CALL_PARAMS, (*PAGE_PARAMS, "active"))
        run = self.get_object()
        calls = selectors.calls_page(
            run=run,
            after=CALL_PAGE.cursor(request),
            limit=CALL_PAGE.limit(request),
            active=request.query_params.get("active", "").lower() in ("1", "true", "yes"),
        )
        with_effective_costs(calls, run_id=run.pk)
        return Response(CALL_PAGE.body(CallSummarySerializer(calls, many=True).data, calls))

    @extend_schema(
        operation_id="v1_runs_call_retrieve",
        parameters=[OpenApiParameter("call_id", int, OpenApiParameter.PATH)],
        responses=CallDetailSerializer,
    )
    @action(detail=True, methods=["get"], url_path=r"calls/(?P<call_id>\d+)")
    def call(self, request: Request, pk: str | None = None, call_id: str | None = None) -> Response:
        detail_params_check(request)
        run = self.get_object()
        call = selectors.call_full(run=run, call_id=int_param_value("call_id", call_id))
        if call is None:
            raise NotFound("No such call in this run.")
        with_effective_costs([call], run_id=run.pk)
        # A judge call's request and reply are withheld there, as on the call page (R9.3).
        return Response(CallDetailSerializer(call).data)

    @extend_schema(
        parameters=[
            *EVENT_PAGE.parameters("cursor: events with a larger seq"),
            OpenApiParameter("type", str, many=True),
            OpenApiParameter(
                WAIT_PARAM,
                float,
                description="long poll (issue 38): hold an empty page until an event of the "
                f"run commits or this many seconds pass (at most {MAX_WAIT_SECONDS:g})",
            ),
        ],
        responses=EventPageSerializer,
    )
    @action(detail=True, methods=["get"])
    def events(self, request: Request, pk: str | None = None) -> Response:
        # ?wait= is validated here; runs.interfaces.events_wait, in front of this view, holds the request.
        query_params_check(request.query_params, EVENT_PARAMS, (*PAGE_PARAMS, WAIT_PARAM))
        wait_param(request.query_params)
        run = self.get_object()
        events = selectors.events_page(
            run=run,
            after=EVENT_PAGE.cursor(request),
            limit=EVENT_PAGE.limit(request),
            types=request.query_params.getlist("type") or None,
        )
        # No total (R14.2): the reader only knows how many it has loaded.
        data = EventSerializer(events, many=True).data
        return Response(EVENT_PAGE.body(data, events, loaded=len(events)))

    @extend_schema(
        request=None,
        responses={
            200: CorrectionSerializer,
            **error_responses(_409="the run cannot be reconciled (not ended, or a preview)"),
        },
    )
    @action(
        detail=True,
        methods=["post"],
        url_path="reconcile-usage",
        permission_classes=RUN_WRITE_PERMISSIONS,
    )
    def reconcile_usage(self, request: Request, pk: str | None = None) -> Response:
        """Rebuild usage from the saved SSE evidence and append an idempotent, versioned cost
        correction (R2). Makes no model call."""
        from runs.reporting.reconcile import correction_summary, usage_reconcile

        require_no_body_fields(request.data)
        run = self.get_object()
        result = usage_reconcile(run_id=run.pk)  # ReconcileRefused: 409 reconcile_refused
        summary = correction_summary(result.correction) or {}
        return Response({**summary, "created": result.created, "model_requests": 0})

    @extend_schema(
        methods=["POST"],
        request=RegradeRequestSerializer,
        parameters=[
            OpenApiParameter(
                IDEMPOTENCY_HEADER,
                str,
                OpenApiParameter.HEADER,
                description="with a confirmed re-judge: the same key returns the same child",
            )
        ],
        responses={
            200: RegradeSerializer,
            202: RegradeAcceptedSerializer,
            **error_responses(
                _409="the run cannot be re-graded (not ended, or a preview), or re-judging "
                "was asked without confirming its worst-case judge cost",
                _422="nothing to re-judge, or the idempotency key belongs to another run",
            ),
        },
    )
    @extend_schema(
        methods=["GET"],
        request=None,
        parameters=[
            OpenApiParameter("task", OpenApiTypes.UUID, description="from a 202's `follow`")
        ],
        responses={
            200: RegradeSerializer,
            202: RegradeQueuedSerializer,
            **error_responses(_409="the queued regrade failed"),
        },
    )
    @action(detail=True, methods=["get", "post"], permission_classes=RUN_WRITE_PERMISSIONS)
    def regrade(self, request: Request, pk: str | None = None) -> Response:
        """Re-grade saved answers with today's graders (R14.4, issue 22). No model call.

        mcq/grid only: graded here, 200. With code answers (LiveCodeBench, SciCode,
        Terminal-Bench) the sandbox must run them, which only a worker does: 202 with a
        `follow` URL (GET it until 200), or 200 at once when the same inputs were re-graded
        before. `rejudge` re-judges the judged answers instead: refused (409) with the
        worst-case judge cost unless `confirm_judge_cost` states that amount; confirmed, a
        child run of judge calls only, budgeted at that amount (202 with `child_run`; follow
        it like any run; the same confirmation returns the same child). GET without `task`:
        the latest regrade."""
        from runs.engine.doorbell import regrade_dispatch
        from runs.settlement.regrade import (
            judge_cost_quote,
            regrade_checked_run,
            regrade_doc,
            regrade_input_sha256,
            regrade_queued_doc,
            run_regrade,
            sandbox_regrade_needed,
        )

        run = self.get_object()
        if request.method == "GET":
            return self._regrade_follow(request, run)
        require_object(request.data)
        body = RegradeRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        regrade_checked_run(run.pk)  # RegradeRefused: 409 regrade_refused
        if body.validated_data["rejudge"]:
            return self._rejudge(request, run, body.validated_data["confirm_judge_cost"])
        quote = judge_cost_quote(run)
        if sandbox_regrade_needed(run):
            sha = regrade_input_sha256(run, sandbox=True)
            done = run.regrades.filter(input_sha256=sha).first()
            if done is not None:
                return Response(regrade_doc(done, created=False, quote=quote))
            task_id = regrade_dispatch(run_id=run.pk)
            return Response(
                regrade_queued_doc(run, task_id, "queued", sha), status=status.HTTP_202_ACCEPTED
            )
        result = run_regrade(run_id=run.pk)
        return Response(regrade_doc(result.regrade, created=result.created, quote=quote))

    def _regrade_follow(self, request: Request, run: Run) -> Response:
        from celery.result import AsyncResult

        from runs.engine.doorbell import regrade_issued
        from runs.settlement.regrade import judge_cost_quote, regrade_doc, regrade_queued_doc

        detail_params_check(request, ("task",))
        task_id = request.query_params.get("task")
        if not task_id:
            latest = run.regrades.order_by("-version").first()
            if latest is None:
                raise NotFound("this run has no regrade")
            return Response(regrade_doc(latest, created=False, quote=judge_cost_quote(run)))
        try:
            task_id = str(uuid.UUID(task_id))  # Celery's task ids; anything else is no task
        except ValueError:
            raise ValidationError({"task": ["Not a task id."]}) from None
        if not regrade_issued(task_id):
            raise NotFound("no regrade of this run has that task")
        result = AsyncResult(task_id)
        if result.state == "FAILURE":
            raise Refusal(
                f"the regrade failed: {result.result}", code="regrade_failed", http_status=409
            )
        if result.state != "SUCCESS":
            doc = regrade_queued_doc(run, task_id, result.state.lower(), None)
            return Response(doc, status=status.HTTP_202_ACCEPTED)
        done = result.result if isinstance(result.result, dict) else {}
        regrade = run.regrades.filter(pk=done.get("regrade")).first()
        if done.get("run") != run.pk or regrade is None:
            raise NotFound("no regrade of this run has that task")
        return Response(
            regrade_doc(regrade, created=bool(done.get("created")), quote=judge_cost_quote(run))
        )

    @staticmethod
    def _rejudge(request: Request, run: Run, confirmed: Decimal | None) -> Response:
        """A confirmed re-judge: the child run (runs/settlement/rejudge.py), 202; else the refusal."""
        from runs.settlement.regrade import judge_cost_quote
        from runs.settlement.rejudge import rejudge_doc, rejudge_submit

        key = IdempotencyKey.of_request(request.headers)  # the header only: the body is strict
        child, created = rejudge_submit(
            run=run, confirm_judge_cost=confirmed, user=request.user, idempotency_key=key_value(key)
        )
        doc = rejudge_doc(child, created=created, quote=judge_cost_quote(run))
        return replay_response(doc, created=created, created_status=202, replay_status=202)

    @extend_schema(
        parameters=[
            # Not `format`: DRF reserves that query parameter for renderer selection.
            OpenApiParameter("as", str, enum=["json", "csv"], description="default json"),
        ],
        responses={
            (200, "application/json"): ExportSerializer,
            (200, "text/csv"): OpenApiResponse(
                OpenApiTypes.STR, description="one row per case; unknown is an empty field"
            ),
            **error_responses(_409="only completed live dev-split runs can be exported"),
        },
    )
    @action(detail=True, methods=["get"], permission_classes=RUN_WRITE_PERMISSIONS)
    def export(self, request: Request, pk: str | None = None) -> Response | HttpResponse:
        """The per-question answer matrix of a completed dev-split run (R14.4). No model call."""
        from runs.reporting.export import export_csv, export_matrix

        detail_params_check(request, ("as",))
        as_ = request.query_params.get("as") or "json"
        if as_ not in ("json", "csv"):
            raise ValidationError({"as": "expected json or csv"})
        run = self.get_object()
        matrix = export_matrix(run_id=run.pk)  # ExportRefused: 409 export_refused
        if as_ == "json":
            return Response(matrix)
        response = HttpResponse(export_csv(matrix), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="run-{run.pk}-matrix.csv"'
        return response


def int_param_value(name: str, raw: str | None) -> int:
    """A path integer within the bigint range (the URL pattern already checked the digits)."""
    value = int(raw or 0)
    if value > BIGINT_MAX:
        raise ValidationError({name: "out of range"})
    return value
