"""The deprecated ``GET /api/v1/comparisons/`` (issue 24: one comparison endpoint).

THE comparison endpoint is ``POST /api/v1/compare/``. This route stays for one release so that
clients written against it keep working, with its documented contract unchanged: for a
selection whose candidate runs are all comparable it answers the very document POST /compare/
answers; when any candidate run is refused it answers the old all-or-nothing 422
``incomparable`` naming the first refused one (POST /compare/ compares the rest instead).

It computes nothing of its own: the document comes from `compare.api.comparison_document`, the
one path of POST /compare/ and the exports, and the refusal is the one that path lists. Every
answer, errors included, carries ``Deprecation`` (RFC 9745) and ``Link`` headers naming the
successor, so a client learns of the move from any response it gets.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.urls import reverse
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from compare.api import (
    MARGIN_HELP,
    MARGIN_PARAM,
    ComparisonSerializer,
    comparison_document,
    margin_param,
    unknown_runs_refuse,
)
from compare.compatibility import Difference, IncomparableRuns
from compare.services import CandidatesRefused, comparison_margin_check
from srbench.api import ApiSchema, error_responses, int_param, query_params_check

MAX_CANDIDATES = 100
# The query parameters this route reads ("format" is DRF's own, ?format=json). Any other is
# refused, not dropped: `candidates` (the successor's name) beside `candidate` compared only the
# latter and answered 200.
PARAMS = frozenset({"baseline", "candidate", "baseline_target", MARGIN_PARAM, "format"})
SINGLE_PARAMS = ("baseline", "baseline_target", MARGIN_PARAM)
CANDIDATES_HINT = (
    "this deprecated route reads `candidate` (repeat it, or separate run ids by commas); "
    "`candidates` is the field of its successor, POST /api/v1/compare/"
)

# The day GET /comparisons/ was deprecated (RFC 9745: a Structured Field Date, "@" + Unix
# seconds). No Sunset header: the removal is tied to the next release, not to a date.
DEPRECATED_SINCE = datetime(2026, 12, 4, tzinfo=UTC)


def deprecation_headers() -> dict[str, str]:
    """The headers every answer of the deprecated route carries."""
    return {
        "Deprecation": f"@{int(DEPRECATED_SINCE.timestamp())}",
        "Link": (
            f'<{reverse("compare")}>; rel="successor-version", '
            f'<{reverse("api-docs")}>; rel="deprecation"; type="text/html"'
        ),
    }


def _params_check(request: Request) -> None:
    """400 for a parameter this route does not read, a single one given twice, or no baseline
    (it answered 404 "unknown run(s): 0")."""
    params = request.query_params
    if "candidates" in params:
        raise ValidationError({"candidates": CANDIDATES_HINT})
    query_params_check(params, PARAMS, SINGLE_PARAMS)
    if not params.get("baseline"):
        raise ValidationError({"baseline": "required: the baseline run id"})


def _run_ids(request: Request) -> list[int]:
    raw = [v for item in request.query_params.getlist("candidate") for v in item.split(",")]
    if not raw or len(raw) > MAX_CANDIDATES:
        raise ValidationError({"candidate": f"name 1 to {MAX_CANDIDATES} candidate run ids"})
    try:
        ids = [int(v) for v in raw]
    except ValueError:
        raise ValidationError({"candidate": "run ids are integers"}) from None
    if any(i < 1 or i > 2**63 - 1 for i in ids):
        raise ValidationError({"candidate": "run ids are positive bigints"})
    return ids


def _refuse_all_or_nothing(baseline: int, doc: dict[str, Any]) -> None:
    """The old contract: one refused candidate run refuses the whole comparison, named by the
    first refused one (the refusal itself is the one the comparison document lists)."""
    if doc["refused"]:
        first = doc["refused"][0]
        differences = [Difference(**d) for d in first["differences"]]
        raise IncomparableRuns(baseline, first["run"], differences)


DEPRECATION_HEADER_PARAMS = [
    OpenApiParameter(
        "Deprecation",
        str,
        OpenApiParameter.HEADER,
        response=True,
        description="RFC 9745: the date this route was deprecated, as @<unix seconds>",
    ),
    OpenApiParameter(
        "Link",
        str,
        OpenApiParameter.HEADER,
        response=True,
        description='rel="successor-version": POST /api/v1/compare/',
    ),
]


class ComparisonView(APIView):
    """Deprecated: use ``POST /api/v1/compare/`` (same document; refused candidate runs are
    listed under ``refused`` and the rest compared, 409 only when every one is refused).
    Kept for one release with its old contract: 422 when any candidate run is refused."""

    schema = ApiSchema()

    def finalize_response(
        self, request: Request, response: Any, *args: Any, **kwargs: Any
    ) -> Response:
        response = super().finalize_response(request, response, *args, **kwargs)
        for name, value in deprecation_headers().items():
            response[name] = value
        return response

    @extend_schema(
        deprecated=True,
        parameters=[
            OpenApiParameter("baseline", int, required=True, description="baseline run id"),
            OpenApiParameter(
                "candidate",
                int,
                required=True,
                many=True,
                explode=True,
                description="candidate run ids (repeat the parameter, or separate by commas)",
            ),
            OpenApiParameter(
                "baseline_target", str, description="one of the tied strongest single models"
            ),
            OpenApiParameter(MARGIN_PARAM, str, description=MARGIN_HELP),
            *DEPRECATION_HEADER_PARAMS,
        ],
        responses={
            200: ComparisonSerializer,
            **error_responses(
                _409="a margin other than the one frozen before the run was given",
                _400="a parameter other than these, `candidates` (POST /compare/'s name), a "
                "baseline missing or given twice, or a candidate id that is not a positive integer",
                _422="a candidate run is not comparable (all or nothing), or there is no baseline",
            ),
        },
    )
    def get(self, request: Request) -> Response:
        _params_check(request)
        baseline = int_param(request, "baseline", 0, low=1)
        candidates = _run_ids(request)
        margin = margin_param(request)
        unknown_runs_refuse(baseline, candidates)
        try:
            doc = comparison_document(
                baseline=baseline,
                candidates=candidates,
                baseline_target=request.query_params.get("baseline_target"),
            )
        except CandidatesRefused as exc:
            # The old contract: every candidate refused is the first one's 422, not a 409.
            raise IncomparableRuns(exc.baseline_run, exc.candidate_run, exc.differences) from None
        _refuse_all_or_nothing(baseline, doc)
        if margin is not None:
            comparison_margin_check(doc, supplied=margin)  # MarginFrozen: 409 margin_frozen
        return Response(doc)
