import asyncio
from collections.abc import AsyncIterator
from typing import IO

from django.contrib.auth.middleware import LoginRequiredMiddleware
from django.core.exceptions import BadRequest
from django.core.handlers.asgi import ASGIRequest
from django.http import JsonResponse
from whitenoise.middleware import WhiteNoiseMiddleware  # type: ignore[import-untyped]

from srbench.api import unsafe_params_refusal


class PortalLoginRequiredMiddleware(LoginRequiredMiddleware):
    """Login required on every page; the API answers 401/403 as JSON through DRF instead of
    redirecting a script to an HTML login form."""

    def process_view(self, request, view_func, view_args, view_kwargs):  # type: ignore[no-untyped-def]
        if request.path_info.startswith("/api/"):
            return None
        return super().process_view(request, view_func, view_args, view_kwargs)


class UnsafeQueryParamsMiddleware:
    """Every write to the API (POST, PUT, PATCH, DELETE) refuses a query parameter it does not
    read, with 400 and the parameter named, before its view runs (`srbench.api.
    unsafe_params_refusal`, on the GETs' one rule, srbench/query_params.py)."""

    def __init__(self, get_response):  # type: ignore[no-untyped-def]
        self.get_response = get_response

    def __call__(self, request):  # type: ignore[no-untyped-def]
        return self.get_response(request)

    def process_view(self, request, view_func, view_args, view_kwargs):  # type: ignore[no-untyped-def]
        if not request.path_info.startswith("/api/"):
            return None
        refusal = unsafe_params_refusal(request, view_func)
        if refusal is None:
            return None
        return JsonResponse(refusal.document(), status=refusal.http_status)


# C0 controls and DEL: never part of an address the portal or the API hands out.
CONTROL_CHARACTERS = frozenset(map(chr, [*range(0x20), 0x7F]))


class RefuseControlCharactersMiddleware:
    """A request is refused with 400 before any view reads it when its path holds a control
    character (C0 or DEL: `%0A`, `%09`, `%7F`, …) or its path or query string holds NUL (`%00`).
    PostgreSQL text cannot hold U+0000, so a filter or a lookup by it failed as a database error
    (500); and a path segment ending in a newline reached a view as that segment (`runs/1%0A/`
    answered run 1: DRF's lookup took "1\n", and int("1\n") == 1). A control character in a
    query value is data (a search for a tab), refused only when it is NUL. JSON bodies are
    refused the same way by their parser (srbench/parsers.py); the API answers in its own refusal
    shape, a page with Django's 400."""

    def __init__(self, get_response):  # type: ignore[no-untyped-def]
        self.get_response = get_response

    def __call__(self, request):  # type: ignore[no-untyped-def]
        refusal = address_refusal(request)
        if refusal is not None:
            code, what = refusal
            if request.path_info.startswith("/api/"):
                return JsonResponse({"error": what, "code": code, "detail": None}, status=400)
            raise BadRequest(what)
        return self.get_response(request)


def address_refusal(request) -> tuple[str, str] | None:  # type: ignore[no-untyped-def]
    """(code, message) when the request's address holds what the portal refuses, else None."""
    if "\x00" in request.path_info or any(
        "\x00" in key or any("\x00" in value for value in values)
        for key, values in request.GET.lists()
    ):
        return "nul_character", "The address holds a NUL character (%00), which is not allowed."
    control = next((c for c in request.path_info if c in CONTROL_CHARACTERS), None)
    if control is not None:
        return (
            "control_character",
            f"The address's path holds a control character (%{ord(control):02X}), which is "
            "not allowed.",
        )
    return None


# A static file is read in chunks of this size, each in a worker thread (never on the event loop).
STATIC_CHUNK_BYTES = 64 * 1024


class StaticFilesMiddleware(WhiteNoiseMiddleware):
    """WhiteNoise (its headers, compressed variants, ranges and 304s), with the file of a request
    that came through ASGI (uvicorn) read by an asynchronous iterator. WhiteNoise 6 answers a
    FileResponse over a synchronous file, which Django's ASGI handler can only consume by a
    thread per chunk and with a warning logged for every static file (docs/decisions.md "Static
    files"). Under WSGI (the in-process CLI, the test server) its answer is left as it is."""

    def serve(self, static_file, request):  # type: ignore[no-untyped-def]
        response = super().serve(static_file, request)
        if isinstance(request, ASGIRequest):
            # The file (None for HEAD, a 304 or a 416) stays closed by the response's closers.
            response.streaming_content = file_chunks(response.file_to_stream)
        return response


async def file_chunks(file: IO[bytes] | None) -> AsyncIterator[bytes]:
    """The bytes of `file` (none when None), each chunk read in a worker thread."""
    while file is not None and (chunk := await asyncio.to_thread(file.read, STATIC_CHUNK_BYTES)):
        yield chunk
