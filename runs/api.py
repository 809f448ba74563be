"""REST API of runs (DESIGN §9): plans, runs, report, results, calls, events, cancel."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from runs import selectors
from runs.models import Call, Run, Target
from runs.plans import PlanError, plan_freeze
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
from srbench.api import error_response

IDEMPOTENCY_HEADER = "Idempotency-Key"


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
    if value < low or (high is not None and value > high):
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


class TargetViewSet(viewsets.ReadOnlyModelViewSet):
    """Registered targets (read-only for everyone; operators edit them in the admin)."""

    queryset = Target.objects.all()
    serializer_class = TargetSerializer
    lookup_field = "slug"


class PlanReviewView(APIView):
    """Freeze a plan and show it: no run is created and no model is called (R8.8)."""

    @extend_schema(request=dict, responses=dict)
    def post(self, request: Request) -> Response:
        try:
            frozen = plan_freeze(data=request.data)
        except PlanError as exc:
            return error_response(
                http_status=400,
                code="invalid_plan",
                error="The plan is not valid.",
                detail=exc.errors,
            )
        return Response(plan_summary(frozen))


class RunViewSet(viewsets.ReadOnlyModelViewSet):
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

    @extend_schema(
        parameters=[
            OpenApiParameter("before", int, description="cursor: runs with a smaller id"),
            OpenApiParameter("limit", int, description="≤ 100"),
            *[OpenApiParameter(p, str) for p in ("name", "model", "status", "mode", "profile")],
        ]
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

    @extend_schema(request=dict, responses=RunSerializer)
    def create(self, request: Request) -> Response:
        key = request.headers.get(IDEMPOTENCY_HEADER) or request.data.get("idempotency_key")
        plan = {k: v for k, v in request.data.items() if k != "idempotency_key"}
        try:
            run, created = run_create(owner=request.user, plan=plan, idempotency_key=key)
        except PlanError as exc:
            return error_response(
                http_status=400,
                code="invalid_plan",
                error="The plan is not valid.",
                detail=exc.errors,
            )
        except IdempotencyConflict as exc:
            return error_response(
                http_status=422,
                code="idempotency_key_reused",
                error=str(exc),
                detail={"run": exc.run.pk, "plan_sha256": exc.run.plan_sha256},
            )
        run = selectors.runs_with_progress(Run.objects.filter(pk=run.pk)).get()
        response = Response(
            RunSerializer(run).data,
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )
        if not created:
            response["Idempotent-Replayed"] = "true"
        return response

    @extend_schema(request=None, responses=RunSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        run = self.get_object()
        changed = run_cancel(run=run, user=request.user)
        run = selectors.runs_with_progress(Run.objects.filter(pk=run.pk)).get()
        return Response(
            {**RunSerializer(run).data, "cancel_requested": changed, "model_requests": 0}
        )

    @extend_schema(responses=dict)
    @action(detail=True, methods=["get"])
    def report(self, request: Request, pk: str | None = None) -> Response:
        return Response(run_report(run=self.get_object()))

    @extend_schema(
        parameters=[OpenApiParameter("after", int), OpenApiParameter("limit", int)],
        responses=ResultSerializer(many=True),
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
        responses=CallSummarySerializer(many=True),
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

    @extend_schema(responses=CallDetailSerializer)
    @action(detail=True, methods=["get"], url_path=r"calls/(?P<call_id>\d+)")
    def call(self, request: Request, pk: str | None = None, call_id: str | None = None) -> Response:
        run = self.get_object()
        call = (
            Call.objects.select_related("cell", "target").filter(cell__run=run, pk=call_id).first()
        )
        if call is None:
            return error_response(
                http_status=404, code="not_found", error="No such call in this run."
            )
        data = CallDetailSerializer(call).data
        if call.role == "judge":
            # The judge is shown the reference answer; it must not reach a page or API (R9.3).
            data["request"] = {"withheld": "the judge request contains the reference answer"}
        return Response(data)

    @extend_schema(
        parameters=[
            OpenApiParameter("after", int, description="cursor: events with a larger seq"),
            OpenApiParameter("limit", int, description="≤ 1000"),
            OpenApiParameter("type", str, many=True),
        ],
        responses=EventSerializer(many=True),
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
