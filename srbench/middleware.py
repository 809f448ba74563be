from django.contrib.auth.middleware import LoginRequiredMiddleware
from django.core.exceptions import BadRequest
from django.http import JsonResponse


class PortalLoginRequiredMiddleware(LoginRequiredMiddleware):
    """Login required on every page; the API answers 401/403 as JSON through DRF instead of
    redirecting a script to an HTML login form."""

    def process_view(self, request, view_func, view_args, view_kwargs):  # type: ignore[no-untyped-def]
        if request.path_info.startswith("/api/"):
            return None
        return super().process_view(request, view_func, view_args, view_kwargs)


class RefuseNulMiddleware:
    """A request whose path or query string holds NUL (``%00``) is refused with 400 before any
    view reads it: PostgreSQL text cannot hold U+0000, so a filter or a lookup by it failed as a
    database error (500). JSON bodies are refused the same way by their parser
    (srbench/parsers.py); the API answers in its own refusal shape, a page with Django's 400."""

    def __init__(self, get_response):  # type: ignore[no-untyped-def]
        self.get_response = get_response

    def __call__(self, request):  # type: ignore[no-untyped-def]
        if "\x00" in request.path_info or any(
            "\x00" in key or any("\x00" in value for value in values)
            for key, values in request.GET.lists()
        ):
            what = "The address holds a NUL character (%00), which is not allowed."
            if request.path_info.startswith("/api/"):
                return JsonResponse(
                    {"error": what, "code": "nul_character", "detail": None}, status=400
                )
            raise BadRequest(what)
        return self.get_response(request)
