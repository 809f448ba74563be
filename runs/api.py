"""REST API of runs (DESIGN §9): plans, runs, report, results, calls, events, cancel."""

from __future__ import annotations

from typing import Any

from django.http import Http404, HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
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

from runs import selectors
from runs.models import Run, Target
from runs.permissions import MayActOnRun
from runs.plans import PlanError, PlanSerializer, plan_freeze
from runs.report import run_report
from runs.serializers import (
    CallDetailSerializer,
    CallSummarySerializer,
    EventSerializer,
    ResultSerializer,
    RunSerializer,
    TargetSerializer,
)
from runs.services import IdempotencyConflict, run_cancel, run_create
from srbench.api import (
    ApiSchema,
    error_response,
    error_responses,
    require_no_body_fields,
    require_object,
)
from srbench.parsers import json_value_problem

IDEMPOTENCY_HEADER = "Idempotency-Key"
IDEMPOTENCY_KEY_MAX = 255  # the column's length: a longer key is a 400, never a database error
# Cancel, reconcile, regrade, export and recover: the run's owner or an operator (runs/permissions).
RUN_WRITE_PERMISSIONS = [IsAuthenticated, MayActOnRun]


BIGINT_MAX = 2**63 - 1


def int_param(
    request: Request, name: str, default: int, *, low: int = 0, high: int | None = None
) -> int:
    raw = request.query_params.get(name)
    if raw in (None, ""):
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValidationError({name: "must be an integer"}) from None
    # Cursors are bigint ids; anything past that range is a client error, not a database one.
    high = BIGINT_MAX if high is None else high
    if value < low or value > high:
        raise ValidationError({name: f"must be between {low} and {high}"})
    return value


def plan_summary(frozen: Any) -> dict[str, Any]:
    m = frozen.manifest
    return {
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


ResultPageSerializer = inline_serializer(
    "ResultPage",
    {
        "results": ResultSerializer(many=True),
        "next_after": serializers.IntegerField(allow_null=True),
    },
)
CallPageSerializer = inline_serializer(
    "CallPage",
    {
        "results": CallSummarySerializer(many=True),
        "next_after": serializers.IntegerField(allow_null=True),
    },
)
EventPageSerializer = inline_serializer(
    "EventPage",
    {
        "results": EventSerializer(many=True),
        "loaded": serializers.IntegerField(help_text="events in this read; there is no total"),
        "next_after": serializers.IntegerField(allow_null=True),
    },
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
        "targets": serializers.ListField(child=serializers.DictField()),
        "spend": serializers.DictField(
            help_text="total spend and waste (failed and unknown-outcome calls), USD text or null"
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
        "model_requests": serializers.IntegerField(),
    },
)
ExportSerializer = inline_serializer(
    "AnswerMatrix",
    {
        "targets": serializers.ListField(child=serializers.CharField()),
        "rows": serializers.ListField(child=serializers.DictField()),
        "model_requests": serializers.IntegerField(),
    },
)


def _invalid_plan(exc: PlanError) -> Response:
    return error_response(
        http_status=400, code="invalid_plan", error="The plan is not valid.", detail=exc.errors
    )


class TargetViewSet(viewsets.ReadOnlyModelViewSet):
    """Registered targets (read-only for everyone; operators edit them in the admin)."""

    schema = ApiSchema()
    queryset = Target.objects.all().order_by("slug")
    serializer_class = TargetSerializer
    lookup_field = "slug"


class PlanReviewView(APIView):
    """Freeze a plan and show it: no run is created and no model is called (R8.8)."""

    schema = ApiSchema()

    @extend_schema(request=PlanSerializer, responses=PlanSummarySerializer)
    def post(self, request: Request) -> Response:
        require_object(request.data)
        try:
            frozen = plan_freeze(data=request.data)
        except PlanError as exc:
            return _invalid_plan(exc)
        return Response(plan_summary(frozen))


class RunViewSet(viewsets.ReadOnlyModelViewSet):
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
            OpenApiParameter("before", int, description="cursor: runs with a smaller id"),
            OpenApiParameter("limit", int, description="≤ 100"),
            *[OpenApiParameter(p, str) for p in ("name", "model", "status", "mode", "profile")],
        ],
        responses=RunPageSerializer,
    )
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        before = int_param(request, "before", 0)
        limit = int_param(request, "limit", 25, low=1, high=100)
        qs = self.get_queryset()
        if before:
            qs = qs.filter(pk__lt=before)
        page = list(qs[: limit + 1])
        more = len(page) > limit
        page = page[:limit]
        return Response(
            {
                "results": RunSerializer(page, many=True).data,
                "next_before": page[-1].pk if more and page else None,
            }
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
        key = request.headers.get(IDEMPOTENCY_HEADER) or request.data.get("idempotency_key")
        # The header bypasses the body parser's checks: a NUL would be a database error.
        if key is not None and (
            not isinstance(key, str) or len(key) > IDEMPOTENCY_KEY_MAX or json_value_problem(key)
        ):
            raise ValidationError(
                {
                    "idempotency_key": f"a string of at most {IDEMPOTENCY_KEY_MAX} characters, "
                    "valid Unicode without NUL"
                }
            )
        plan = {k: v for k, v in request.data.items() if k != "idempotency_key"}
        try:
            run, created = run_create(owner=request.user, plan=plan, idempotency_key=key)
        except PlanError as exc:
            return _invalid_plan(exc)
        except IdempotencyConflict as exc:
            return error_response(
                http_status=422,
                code="idempotency_key_reused",
                error=str(exc),
                detail={"run": exc.run.pk, "plan_sha256": exc.run.plan_sha256},
            )
        run = selectors.runs_with_progress(Run.objects.filter(pk=run.pk)).get()
        # A replay is answered with the run as it is now (its id and plan are what the first
        # request created); 200 and the header tell the client it was not created again.
        response = Response(
            RunSerializer(run).data,
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )
        if not created:
            response["Idempotent-Replayed"] = "true"
        return response

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
        return Response(run_report(run=self.get_object()))

    @extend_schema(
        parameters=[OpenApiParameter("after", int), OpenApiParameter("limit", int)],
        responses=ResultPageSerializer,
    )
    @action(detail=True, methods=["get"])
    def results(self, request: Request, pk: str | None = None) -> Response:
        run = self.get_object()
        cells = selectors.results_page(
            run=run,
            after=int_param(request, "after", 0),
            limit=int_param(request, "limit", 100, low=1, high=selectors.MAX_DETAIL_PAGE),
        )
        return Response(
            {
                "results": ResultSerializer(cells, many=True).data,
                "next_after": cells[-1].pk if cells else None,
            }
        )

    @extend_schema(
        parameters=[
            OpenApiParameter("after", int),
            OpenApiParameter("limit", int),
            OpenApiParameter("active", bool, description="only calls in flight"),
        ],
        responses=CallPageSerializer,
    )
    @action(detail=True, methods=["get"])
    def calls(self, request: Request, pk: str | None = None) -> Response:
        run = self.get_object()
        calls = selectors.calls_page(
            run=run,
            after=int_param(request, "after", 0),
            limit=int_param(request, "limit", 100, low=1, high=selectors.MAX_DETAIL_PAGE),
            active=request.query_params.get("active", "").lower() in ("1", "true", "yes"),
        )
        return Response(
            {
                "results": CallSummarySerializer(calls, many=True).data,
                "next_after": calls[-1].pk if calls else None,
            }
        )

    @extend_schema(
        operation_id="v1_runs_call_retrieve",
        parameters=[OpenApiParameter("call_id", int, OpenApiParameter.PATH)],
        responses=CallDetailSerializer,
    )
    @action(detail=True, methods=["get"], url_path=r"calls/(?P<call_id>\d+)")
    def call(self, request: Request, pk: str | None = None, call_id: str | None = None) -> Response:
        run = self.get_object()
        call = selectors.call_full(run=run, call_id=int_param_value("call_id", call_id))
        if call is None:
            return error_response(
                http_status=404, code="not_found", error="No such call in this run."
            )
        # A judge call's request and reply are withheld there, as on the call page (R9.3).
        return Response(CallDetailSerializer(call).data)

    @extend_schema(
        parameters=[
            OpenApiParameter("after", int, description="cursor: events with a larger seq"),
            OpenApiParameter("limit", int, description="≤ 1000"),
            OpenApiParameter("type", str, many=True),
        ],
        responses=EventPageSerializer,
    )
    @action(detail=True, methods=["get"])
    def events(self, request: Request, pk: str | None = None) -> Response:
        run = self.get_object()
        events = selectors.events_page(
            run=run,
            after=int_param(request, "after", 0),
            limit=int_param(
                request, "limit", selectors.MAX_EVENT_PAGE, low=1, high=selectors.MAX_EVENT_PAGE
            ),
            types=request.query_params.getlist("type") or None,
        )
        # No total (R14.2): the reader only knows how many it has loaded.
        return Response(
            {
                "results": EventSerializer(events, many=True).data,
                "loaded": len(events),
                "next_after": events[-1].seq if events else None,
            }
        )

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
        from runs.reconcile import ReconcileRefused, correction_summary, usage_reconcile

        require_no_body_fields(request.data)
        run = self.get_object()
        try:
            result = usage_reconcile(run_id=run.pk)
        except ReconcileRefused as exc:
            return error_response(http_status=409, code="reconcile_refused", error=str(exc))
        summary = correction_summary(result.correction) or {}
        return Response({**summary, "created": result.created, "model_requests": 0})

    @extend_schema(
        request=None,
        responses={
            200: RegradeSerializer,
            **error_responses(_409="the run cannot be re-graded (not ended, or a preview)"),
        },
    )
    @action(detail=True, methods=["post"], permission_classes=RUN_WRITE_PERMISSIONS)
    def regrade(self, request: Request, pk: str | None = None) -> Response:
        """Re-grade saved mcq/grid answers with today's graders (R14.4). No model call."""
        from runs.regrade import RegradeRefused, run_regrade

        require_no_body_fields(request.data)
        run = self.get_object()
        try:
            result = run_regrade(run_id=run.pk)
        except RegradeRefused as exc:
            return error_response(http_status=409, code="regrade_refused", error=str(exc))
        r = result.regrade
        return Response(
            {
                "run": r.run_id,
                "version": r.version,
                "created": result.created,
                "input_sha256": r.input_sha256,
                "grader_versions": r.grader_versions,
                "regraded": r.regraded_count,
                "changed": r.changed_count,
                "skipped": r.skipped_count,
                "by_target": r.results["by_target"],
                "model_requests": 0,
            }
        )

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
        from runs.export import ExportRefused, export_csv, export_matrix

        as_ = request.query_params.get("as") or "json"
        if as_ not in ("json", "csv"):
            raise ValidationError({"as": "expected json or csv"})
        run = self.get_object()
        try:
            matrix = export_matrix(run_id=run.pk)
        except ExportRefused as exc:
            return error_response(http_status=409, code="export_refused", error=str(exc))
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
