"""Preflight API (issue 39): ``GET /api/v1/targets/{slug}/preflight/`` gives the quote and the
latest preflight; ``POST`` sends one, for operators, only with the quote's worst case echoed.

Reading is for every signed-in member; a preflight spends money on a target, and targets are
the operators' (runs/ledger/permissions.py), so sending one is for operators. A refusal sends nothing.
"""

from __future__ import annotations

from typing import Any

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from runs.ledger.idempotency import IdempotencyKey, key_value
from runs.ledger.permissions import user_is_operator
from runs.models import Target
from runs.models.preflight import TargetPreflight
from runs.preflight.checks import (
    DEFAULT_CONTEXT_PROBE_TOKENS,
    MAX_CONTEXT_PROBE_TOKENS,
    PreflightRefused,
    preflight_quote,
    target_preflight,
)
from srbench.api import ApiSchema, detail_params_check, error_response, error_responses
from srbench.money import money_text


def preflight_json(preflight: TargetPreflight | None) -> dict[str, Any] | None:
    """A preflight with its findings and each call's usage and cost (unknown: null)."""
    if preflight is None:
        return None
    return {
        "id": preflight.pk,
        "target": preflight.target.slug,
        "status": preflight.status,
        "created_at": preflight.created_at.isoformat(),
        "finished_at": preflight.finished_at.isoformat() if preflight.finished_at else None,
        "base_url": preflight.base_url,
        "model": preflight.model,
        "planned_calls": preflight.planned_calls,
        "worst_case_usd": money_text(preflight.worst_case_usd),
        "cost_usd": money_text(preflight.cost_usd),
        "known_cost_usd": money_text(preflight.known_cost_usd),
        "facts": {
            name: getattr(preflight, name)
            for name in (
                "stream_usage",
                "plain_usage",
                "cached_fields",
                "max_whole_streams",
                "cuts_at",
                "served_model",
                "served_model_priced",
                "length_finish_reason",
                "context_tokens",
                "context_source",
            )
        },
        "findings": preflight.findings,
        "error": preflight.error or None,
        "calls": [
            {
                "sequence": c.sequence,
                "purpose": c.purpose,
                "status": c.status,
                "stream": c.stream,
                "http_status": c.http_status,
                "served_model": c.served_model or None,
                "finish_reason": c.finish_reason or None,
                "input_tokens": c.input_tokens,
                "cached_input_tokens": c.cached_input_tokens,
                "output_tokens": c.output_tokens,
                "cost_usd": money_text(c.cost_usd),
                # What the preflight's total counts for it (a known 0 for an unbilled error).
                "effective_cost_usd": money_text(c.effective_cost_usd),
                "cost_note": c.cost_note or None,
                "worst_case_usd": money_text(c.worst_case_usd),
                "error": c.error or None,
            }
            for c in preflight.calls.order_by("sequence")
        ],
    }


def _probe_tokens(value: Any) -> int | None:
    if value is None:
        return DEFAULT_CONTEXT_PROBE_TOKENS
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 1 <= value <= MAX_CONTEXT_PROBE_TOKENS else None


class TargetPreflightView(APIView):
    schema = ApiSchema()

    @extend_schema(
        operation_id="targets_preflight_read",
        responses={200: inline_serializer("PreflightRead", {"quote": serializers.DictField()})},
    )
    def get(self, request: Request, slug: str) -> Response:
        """The quote of a preflight (nothing sent) and the target's latest preflight."""
        detail_params_check(request)
        target = get_object_or_404(Target, slug=slug)
        latest = target.preflights.order_by("-created_at", "-pk").first()
        return Response({"quote": preflight_quote(target=target), "latest": preflight_json(latest)})

    @extend_schema(
        operation_id="targets_preflight_send",
        request=inline_serializer(
            "PreflightSend",
            {
                "confirm_worst_case_usd": serializers.CharField(allow_null=True),
                "context_probe_tokens": serializers.IntegerField(required=False),
            },
        ),
        responses={
            201: inline_serializer("PreflightSent", {"id": serializers.IntegerField()}),
            **error_responses(
                _409="a preflight of this target is running; nothing was sent",
                _422="cost_not_confirmed: the quote's worst case was not echoed; nothing was sent",
            ),
        },
    )
    def post(self, request: Request, slug: str) -> Response:
        """Send the preflight: ``confirm_worst_case_usd`` must be the quote's worst case."""
        target = get_object_or_404(Target, slug=slug)
        if not user_is_operator(request.user):
            return error_response(
                http_status=status.HTTP_403_FORBIDDEN,
                code="not_operator",
                error="Only an operator may send a preflight (it spends money on a target); "
                "nothing was sent.",
            )
        data = request.data if isinstance(request.data, dict) else {}
        tokens = _probe_tokens(data.get("context_probe_tokens"))
        if tokens is None or "confirm_worst_case_usd" not in data:
            return error_response(
                http_status=status.HTTP_400_BAD_REQUEST,
                code="invalid",
                error="send confirm_worst_case_usd (the quote's worst case, null when unknown) "
                f"and optionally context_probe_tokens (1 to {MAX_CONTEXT_PROBE_TOKENS})",
            )
        # The one key rule (runs.ledger.idempotency): NUL, invalid Unicode or too long is refused.
        key = IdempotencyKey.of_request(request.headers)
        try:
            preflight = target_preflight(
                target=target,
                confirm_worst_case_usd=data["confirm_worst_case_usd"],
                user=request.user,
                context_probe_tokens=tokens,
                idempotency_key=key_value(key) or "",
            )
        except PreflightRefused as exc:
            return error_response(
                http_status=status.HTTP_409_CONFLICT if exc.code == "preflight_running" else 422,
                code=exc.code,
                error=str(exc),
                detail={"quote": exc.quote},
            )
        return Response(preflight_json(preflight), status=status.HTTP_201_CREATED)
