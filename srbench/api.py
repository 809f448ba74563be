"""Cross-cutting API conventions (DESIGN §9): JSON errors as {error, code, detail} — every
refusal a service raises (:class:`srbench.refusals.Refusal`) rendered here, by the one exception
handler, never mapped by a view — and the one keyset paging rule of every list (:class:`Keyset`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

from django.core.exceptions import BadRequest, SuspiciousOperation
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, inline_serializer
from rest_framework import exceptions, serializers, status
from rest_framework.generics import GenericAPIView
from rest_framework.pagination import PageNumberPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.utils.urls import replace_query_param
from rest_framework.views import exception_handler as drf_exception_handler

from srbench.query_params import query_params_problems
from srbench.refusals import ECHO_MAX_ITEMS, Refusal, echo_text

# DRF's own query parameter (`?format=json`): every GET reads it.
FORMAT_PARAM: str = api_settings.URL_FORMAT_OVERRIDE or "format"


def error_response(*, http_status: int, code: str, error: str, detail: Any = None) -> Response:
    return Response({"error": error, "code": code, "detail": detail}, status=http_status)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """The one renderer of every API refusal (issue 36 item 2): a service's :class:`Refusal`
    with the status and code it carries, DRF's own (validation, authentication, permission,
    not found, throttling) and Django's bad requests, all as ``{error, code, detail}``."""
    if isinstance(exc, Refusal):
        return Response(exc.document(), status=exc.http_status)
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
    """The one error document every endpoint answers with (DESIGN §9): every refusal, of every
    write and read, whatever refused it (issue 36 item 2)."""

    error = serializers.CharField(help_text="what was refused and why, in one line")
    code = serializers.CharField(
        help_text="stable snake_case code, e.g. invalid, not_found, invalid_plan, "
        "idempotency_key_reused, invalid_idempotency_key, recovery_plan_changed"
    )
    detail = serializers.JSONField(
        allow_null=True,
        help_text="what a client may act on (invalid fields, the conflicting run, the "
        "differences), or null",
    )


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
        refuse_unknown_fields(data, set(self.fields))
        return super().to_internal_value(data)


def refuse_unknown_fields(data: Any, known: set[str] | frozenset[str]) -> None:
    """The one rule, also for a view that reads its body by hand: a field the body does not know
    is refused (400), each named — at most the first ``ECHO_MAX_ITEMS``, each name cut by
    ``echo_text``, and how many more (a body of 100,000 unknown fields answered all of them)."""
    if isinstance(data, Mapping):
        unknown = sorted(set(data) - set(known))
        if unknown:
            named = {str(echo_text(k)): ["Unknown field."] for k in unknown[:ECHO_MAX_ITEMS]}
            if len(unknown) > ECHO_MAX_ITEMS:
                named["…"] = [f"and {len(unknown) - ECHO_MAX_ITEMS:,} more unknown fields"]
            raise exceptions.ValidationError(named)


def query_params_check(
    params: Any, known: set[str] | frozenset[str], single: Iterable[str] = ()
) -> None:
    """The one rule for a GET's query string (``srbench.query_params``): a parameter the view
    does not read is refused (400), named with the ones it reads, and so is one of ``single``
    given twice — a typo (`candidate=` for `candidates=`, a misspelt margin, `benchmrk=`)
    silently dropped changed the answer."""
    problems = query_params_problems(params, known, single)
    if problems:
        raise Refusal(
            "Query string refused: " + "; ".join(f"{k}: {v}" for k, v in problems.items()) + ".",
            code="invalid",
            detail={name: [problem] for name, problem in problems.items()},
        )


def list_params_check(view: GenericAPIView, filters: Iterable[str] = ()) -> None:
    """The same rule for a DRF list view: it reads ``filters``, its paginator's parameters
    (``query_param_names``) and DRF's ``format``, each at most once."""
    paginator = view.paginator
    paging = paginator.query_param_names() if isinstance(paginator, PagePagination) else ()
    reads = (*filters, *paging, FORMAT_PARAM)
    query_params_check(view.request.query_params, frozenset(reads), reads)


def detail_params_check(request: Request, reads: Iterable[str] = ()) -> None:
    """The same rule for a detail — one object (or one document of it) found by its path: it
    reads ``reads`` (a regrade's `task`, an export's `as`; most read none) and DRF's ``format``,
    each at most once. A list's filter on a detail (`sources/5/?benchmark=arc`) is refused by
    name: it was dropped, or worse applied, answering 404 for a source that exists."""
    names = (*reads, FORMAT_PARAM)
    query_params_check(request.query_params, frozenset(names), names)


class DetailParamsMixin:
    """A DRF view's ``retrieve`` (``GET <list>/<id>/``) under ``detail_params_check``: it reads
    ``detail_params`` and ``format``, checked before the object is looked up."""

    detail_params: tuple[str, ...] = ()

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        detail_params_check(request, self.detail_params)
        return super().retrieve(request, *args, **kwargs)  # type: ignore[misc]


# The methods that change things: a query string they do not read is refused before they act.
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def unsafe_params_refusal(request: HttpRequest, view_func: Any) -> Refusal | None:
    """The same rule for a write (POST, PUT, PATCH, DELETE) to an API view: it reads the
    query parameters its class names in ``unsafe_query_params`` (none reads one today) and
    DRF's ``format``, each at most once; anything else is refused before the view runs, so
    nothing is written. A write reads its body, and `runs/N/recover/?dry_run=1` spent money
    for a client who believed it asked for a dry run. Applied to every DRF view under /api/
    by `srbench.middleware.UnsafeQueryParamsMiddleware`; None: nothing to refuse."""
    view_class = getattr(view_func, "cls", None)
    if request.method not in UNSAFE_METHODS or view_class is None or not request.GET:
        return None
    names = (*getattr(view_class, "unsafe_query_params", ()), FORMAT_PARAM)
    problems = query_params_problems(request.GET, frozenset(names), names)
    if not problems:
        return None
    return Refusal(
        f"Query string refused, nothing was done ({request.method} reads its body): "
        + "; ".join(f"{k}: {v}" for k, v in problems.items())
        + ".",
        code="invalid",
        detail={name: [problem] for name, problem in problems.items()},
    )


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


# --------------------------------------------------------------------------------------------
# Paging: the one keyset rule of every API list (DESIGN §9, issue 7)

# Cursors are bigint ids; anything past that range is a client error, not a database one.
BIGINT_MAX = 2**63 - 1


def int_param(
    request: Request,
    name: str,
    default: int | None,
    *,
    low: int = 0,
    high: int | None = None,
    what: str = "",
) -> int:
    """An integer query parameter within ``low``..``high`` (a bigint by default), else 400.
    ``default`` None: the parameter is required (``what`` says what it names), and absent or
    empty it is refused (400) — never read as 0 (`compare/candidates/` without a baseline
    answered 404 "unknown run: 0")."""
    raw = request.query_params.get(name)
    if raw in (None, ""):
        if default is None:
            problem = f"required: give {what or 'an integer'}"
            raise Refusal(
                f"Query string refused: {name} is {problem}.",
                code="invalid",
                detail={name: [problem]},
            )
        return default
    try:
        value = int(raw)
    except ValueError:
        raise exceptions.ValidationError({name: "must be an integer"}) from None
    high = BIGINT_MAX if high is None else high
    if value < low or value > high:
        raise exceptions.ValidationError({name: f"must be between {low} and {high}"})
    return value


class Keyset:
    """A keyset cursor over a list ordered by an integer key: rows inserted between two reads
    neither shift nor repeat a page (page numbers would). One rule, two directions:

    * ``before`` — newest first; a page holds rows with a smaller key (0 = from the top). One
      row past ``limit`` is read, and ``next_before`` is the page's last key only when more
      rows exist: new rows arrive at the top, never below the cursor, so null means done.
    * ``after`` — oldest first; a page holds rows with a larger key. For a list that grows at
      its end (``tail``: a run's results, calls, events) ``next_after`` is the last key read
      (null only on an empty page): a reader polls the tail from it until a page is empty. A
      list read as it stands (``tail=False``: a recovery plan's cells, a run's lineage
      children) ends like ``before``: null when no row follows.

    ``next_cursor`` is that rule, the only one: every paged answer of the API (the recovery
    plan's two lists and the lineage included) takes its cursor from it (issue 36 item 2).
    The answer is ``{results, next_<direction>}`` (a view may add fields); ``parameters()``
    and ``page_serializer()`` describe it to drf-spectacular.
    """

    def __init__(
        self,
        direction: Literal["before", "after"],
        *,
        cursor_param: str | None = None,
        limit_param: str = "limit",
        default_limit: int = 25,
        max_limit: int = 100,
        key: str = "pk",
        tail: bool | None = None,
    ) -> None:
        self.direction = direction
        self.tail = direction == "after" if tail is None else tail
        self.cursor_param = cursor_param or direction
        self.limit_param = limit_param
        self.default_limit = default_limit
        self.max_limit = max_limit
        self.key = key

    @property
    def param_names(self) -> tuple[str, str]:
        """The query parameters this cursor reads (for ``query_params_check``)."""
        return (self.cursor_param, self.limit_param)

    @property
    def next_field(self) -> str:
        return f"next_{self.direction}"

    def cursor(self, request: Request) -> int:
        return int_param(request, self.cursor_param, 0)

    def limit(self, request: Request) -> int:
        return int_param(request, self.limit_param, self.default_limit, low=1, high=self.max_limit)

    def rows(
        self, queryset: Any, request: Request, *, limit: int | None = None
    ) -> tuple[list[Any], int | None]:
        """One page of ``queryset`` and the cursor of the next: (rows, next). ``limit`` given
        by the caller (a DRF paginator's clamped page size) replaces the limit parameter."""
        cursor = self.cursor(request)
        limit = self.limit(request) if limit is None else limit
        if self.direction == "before":
            qs = queryset.order_by(f"-{self.key}")
            if cursor:
                qs = qs.filter(**{f"{self.key}__lt": cursor})
        else:
            qs = queryset.order_by(self.key).filter(**{f"{self.key}__gt": cursor})
        page = list(qs[: limit + 1])
        return page[:limit], self.next_cursor(page[:limit], more=len(page) > limit)

    def next_cursor(self, page: list[Any], *, more: bool) -> int | None:
        """The rule for the next cursor, for rows a selector read: the page's last key while
        more rows follow; at the end, null — unless the list grows at its tail, whose reader
        keeps polling from the last key read."""
        if not page or (not more and not self.tail):
            return None
        last = page[-1]
        return last[self.key] if isinstance(last, Mapping) else getattr(last, self.key)

    def body(self, results: Any, page: list[Any], *, more: bool = False, **extra: Any) -> dict:
        return {"results": results, **extra, self.next_field: self.next_cursor(page, more=more)}

    def parameters(self, cursor_help: str = "", limit_help: str = "") -> list[OpenApiParameter]:
        order = "a smaller" if self.direction == "before" else "a larger"
        return [
            OpenApiParameter(
                self.cursor_param, int, description=cursor_help or f"cursor: rows with {order} id"
            ),
            OpenApiParameter(
                self.limit_param, int, description=limit_help or f"≤ {self.max_limit}"
            ),
        ]

    def page_serializer(self, name: str, item: Any, **extra: Any) -> Any:
        """The documented page object: ``results`` of ``item``, extra fields, the cursor."""
        help_text = f"cursor for the next page (pass as {self.cursor_param}=)"
        return inline_serializer(
            name,
            {
                "results": item,
                **extra,
                self.next_field: serializers.IntegerField(allow_null=True, help_text=help_text),
            },
        )


class PagePagination(PageNumberPagination):
    """Page numbers (the dashboard links to page N); at most 100 rows per read (DESIGN §9).

    Right for a frozen list (a dataset's questions never change); a growing list uses
    KeysetPagePagination, because page N shifts when a row is inserted before it.
    """

    page_size = 25
    page_size_query_param = "page_size"
    max_page_size = 100

    def query_param_names(self) -> tuple[str, ...]:
        """What this paginator reads of a query string (``list_params_check``)."""
        return (self.page_query_param, self.page_size_query_param)


class KeysetPagePagination(PagePagination):
    """Page numbers, or with ``before=ID`` (0 = from the top) the :class:`Keyset` ``before``
    rule over ids, newest first, sized by ``page_size``: a DRF paginator for viewset lists."""

    def query_param_names(self) -> tuple[str, ...]:
        return (*super().query_param_names(), "before")

    def paginate_queryset(self, queryset: Any, request: Request, view: Any = None) -> Any:
        self.keyset = "before" in request.query_params
        self.next_before: int | None = None
        if self.keyset and self.page_query_param in request.query_params:
            # The page number was dropped: page 3 with before=0 answered the first page.
            raise Refusal(
                "Query string refused: page and before are two ways to page; give one.",
                code="invalid",
                detail={self.page_query_param: ["not with before (the keyset cursor)"]},
            )
        if not self.keyset:
            return super().paginate_queryset(queryset, request, view)
        self.request = request
        size = self.get_page_size(request) or self.page_size  # clamped, as page numbers are
        rows, self.next_before = Keyset("before").rows(queryset, request, limit=size)
        return rows

    def get_paginated_response(self, data: Any) -> Response:
        if not self.keyset:
            response = super().get_paginated_response(data)
            response.data["next_before"] = None
            return response
        following = None
        if self.next_before is not None:
            following = replace_query_param(
                self.request.build_absolute_uri(), "before", self.next_before
            )
        return Response(
            {
                "count": None,  # a keyset read does not count (and a count would race anyway)
                "next": following,
                "previous": None,
                "results": data,
                "next_before": self.next_before,
            }
        )

    def get_paginated_response_schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        document = super().get_paginated_response_schema(schema)
        document["properties"]["count"]["nullable"] = True
        document["properties"]["next_before"] = {
            "type": "integer",
            "nullable": True,
            "description": "keyset cursor for the next page (pass as before=)",
        }
        return document

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        return [
            *super().get_schema_operation_parameters(view),
            {
                "name": "before",
                "required": False,
                "in": "query",
                "description": "keyset cursor: rows with a smaller id, newest first (0 = top)",
                "schema": {"type": "integer", "minimum": 0},
            },
        ]
