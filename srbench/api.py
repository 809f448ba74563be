"""Cross-cutting API conventions: JSON errors as {error, code, detail} (DESIGN §9)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.core.exceptions import BadRequest, SuspiciousOperation
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiResponse
from rest_framework import exceptions, serializers, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler


def error_response(*, http_status: int, code: str, error: str, detail: Any = None) -> Response:
    return Response({"error": error, "code": code, "detail": detail}, status=http_status)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, (SuspiciousOperation, BadRequest)):
        # E.g. a form body with more fields than DATA_UPLOAD_MAX_NUMBER_FIELDS, raised while
        # DRF parses it: without this Django answers its HTML 400 page (found by schemathesis).
        return error_response(
            http_status=status.HTTP_400_BAD_REQUEST,
            code="bad_request",
            error=" ".join(str(exc).split()) or "The request is not valid.",
        )
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        code, error, detail = "invalid", "The request is not valid.", response.data
    elif isinstance(exc, exceptions.APIException):
        codes = exc.get_codes()
        code = codes if isinstance(codes, str) else "error"
        error = str(exc.detail) if isinstance(exc.detail, str) else "Request failed."
        detail = None if isinstance(exc.detail, str) else response.data
    else:  # Http404 / PermissionDenied converted by DRF
        code = "not_found" if response.status_code == status.HTTP_404_NOT_FOUND else "error"
        error, detail = str(response.data.get("detail", "Request failed.")), None
    response.data = {"error": error, "code": code, "detail": detail}
    return response


class ErrorSerializer(serializers.Serializer):
    """The one error document every endpoint answers with (DESIGN §9)."""

    error = serializers.CharField()
    code = serializers.CharField()
    detail = serializers.JSONField(allow_null=True)


# Every operation can answer these; documenting them keeps the schema honest for a client
# (and for schemathesis, which treats an undocumented status code as a schema violation).
COMMON_ERRORS = {
    "400": "The request is not valid.",
    "401": "No or an invalid token.",
    "403": "Not allowed.",
    "404": "Not found.",
}


class ApiSchema(AutoSchema):
    """drf-spectacular's AutoSchema plus the shared error responses on every operation."""

    def _get_response_bodies(self, direction: str = "response") -> dict[str, Any]:  # type: ignore[override]
        responses = super()._get_response_bodies(direction)  # type: ignore[arg-type]
        if direction != "response":
            return responses
        for code, description in COMMON_ERRORS.items():
            if code not in responses:
                responses[code] = self._get_response_for_code(
                    OpenApiResponse(ErrorSerializer, description=description), code
                )
        return responses


@csrf_exempt
def api_not_found(request: HttpRequest, path: str = "") -> JsonResponse:
    """Any path under /api/ that no route matches: the JSON error document, not Django's HTML
    404 page, so a client parses every API answer the same way."""
    return JsonResponse(
        {"error": "No such API endpoint.", "code": "not_found", "detail": None}, status=404
    )


# --- request bodies: unknown fields are refused (issue 19) ----------------------------------


class StrictFieldsSerializer(serializers.Serializer):
    """A request body that refuses fields it does not know (400) instead of dropping them:
    a misspelt option must not turn into a request made without it."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({k: ["Unknown field."] for k in unknown})
        return super().to_internal_value(data)


def refuse_unknown_fields(data: Any, known: set[str] | frozenset[str]) -> None:
    """The same rule for a view that reads its body by hand."""
    if isinstance(data, Mapping):
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise exceptions.ValidationError({k: ["Unknown field."] for k in unknown})


def require_no_body_fields(data: Any) -> None:
    """For an action that takes no body: none, or `{}`. Reading `request.data` to pass it here
    also puts the body through the parser's checks (size, depth, Unicode, content type)."""
    require_object(data)
    refuse_unknown_fields(data, frozenset())


# --- Django's own error pages under /api/ (settings via srbench/urls.py handler*) -------------
# DRF answers its views' errors through exception_handler above; these cover what reaches
# Django instead: an uncaught exception (500), a 400/403/404 raised outside a DRF view.


def _api_error_page(http_status: int, code: str, error: str) -> JsonResponse:
    return JsonResponse({"error": error, "code": code, "detail": None}, status=http_status)


def _is_api(request: HttpRequest) -> bool:
    return request.path_info.startswith("/api/")


def error_400(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if _is_api(request):
        return _api_error_page(400, "bad_request", "The request is not valid.")
    return defaults.bad_request(request, exception)


def error_403(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if _is_api(request):
        return _api_error_page(403, "permission_denied", "Not allowed.")
    return defaults.permission_denied(request, exception)


def error_404(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if _is_api(request):
        return _api_error_page(404, "not_found", "Not found.")
    return defaults.page_not_found(request, exception)


def error_500(request: HttpRequest) -> HttpResponse:
    if _is_api(request):
        return _api_error_page(500, "server_error", "Internal server error; it has been logged.")
    return defaults.server_error(request)


def require_object(data: Any) -> None:
    """A JSON body that must be an object: anything else is a 400, not a crash."""
    if not isinstance(data, dict):
        raise exceptions.ValidationError({"non_field_errors": ["The body must be a JSON object."]})


def error_responses(**codes: str) -> dict[int, OpenApiResponse]:
    """Extra documented refusals of one operation, e.g. error_responses(_409="…")."""
    return {
        int(code.lstrip("_")): OpenApiResponse(ErrorSerializer, description=text)
        for code, text in codes.items()
    }


# Named enum components are shared by field name across the whole schema: runs, cells and
# calls each have a `status`, runs and recovery plans a `mode`. These names make the choice
# sets distinct without drf-spectacular guessing. Used by the schema view (srbench/urls.py);
# the same dict belongs in settings.SPECTACULAR_SETTINGS so `manage.py spectacular` agrees.
SCHEMA_SETTINGS: dict[str, Any] = {
    "ENUM_NAME_OVERRIDES": {
        "RunStatusEnum": "runs.models.RunStatus",
        "CellStatusEnum": "runs.models.CellStatus",
        "CallStatusEnum": "runs.models.CallStatus",
        "RunModeEnum": "runs.models.Run.Mode",
        "PlanModeEnum": ["live", "preview"],
        "BenchmarkEnum": "datasets.benchmarks.ADAPTERS",
        "RecoveryModeEnum": ["undispatched", "failed"],
        "ProfileEnum": "datasets.models.Profile",
    },
}
