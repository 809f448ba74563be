"""Cross-cutting API conventions: JSON errors as {error, code, detail} (DESIGN §9)."""

from __future__ import annotations

from typing import Any

from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler


def error_response(*, http_status: int, code: str, error: str, detail: Any = None) -> Response:
    return Response({"error": error, "code": code, "detail": detail}, status=http_status)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
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
