"""REST API of comparisons (R5, R6, R11): candidate runs against the strongest single model
of a baseline run. Reads saved results only; the answer says `model_requests: 0`.

THE comparison endpoint is ``POST /api/v1/compare/`` (issue 24: one endpoint); the exports
share its answer, and the deprecated ``GET /api/v1/comparisons/`` (`compare.api_deprecated`)
delegates to the same computation."""

from __future__ import annotations

import csv
import io
import json
from decimal import Decimal
from typing import Any

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    inline_serializer,
)
from rest_framework import serializers
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from compare.forms import MAX_SELECTION, ids_format, ids_parse
from compare.selectors import (
    BaselineOffer,
    RunOption,
    baseline_offer,
    candidate_options,
    comparable_pool,
)
from compare.services import comparison_build, comparison_margin_check
from compare.verdict import RULE, VERDICT_HELP, VERDICTS
from datasets.provenance import provenance_text
from runs.models import Run
from runs.planning.plans import MarginField
from runs.reporting.official_metrics import NOTE as OFFICIAL_NOTE
from runs.reporting.official_metrics import csv_cells as official_csv_cells
from runs.reporting.official_metrics import csv_columns as official_csv_columns
from srbench.api import (
    FORMAT_PARAM,
    ApiSchema,
    StrictFieldsSerializer,
    error_responses,
    int_param,
    query_params_check,
)
from srbench.spreadsheet import spreadsheet_text

# One compared candidate. Documented field by field where a client decides on it (the verdict
# and the numbers behind it); the rest of the candidate's document is described in
# docs/statistics.md and passes through unchanged.
ComparedCandidateSerializer = inline_serializer(
    "ComparedCandidate",
    {
        "run": serializers.IntegerField(),
        "run_name": serializers.CharField(),
        "target": serializers.CharField(),
        "kind": serializers.CharField(),
        "delta": serializers.FloatField(),
        "delta_exact": serializers.CharField(),
        "verdict": serializers.ChoiceField(
            choices=[(v, VERDICT_HELP[v]) for v in VERDICTS], help_text=RULE
        ),
        "verdict_label": serializers.CharField(
            help_text="the verdict for people; non-inferior carries its margin, e.g. "
            '"Non-inferior (margin 0.05)"'
        ),
        "verdict_reason": serializers.CharField(
            help_text="why, in words: the interval read, and the margin or why none applies"
        ),
        "verdict_margin": serializers.CharField(
            allow_null=True,
            help_text="the non-inferiority margin the rule applied (exact decimal), frozen in "
            "the candidate run's plan; null when none could be applied",
        ),
        "verdict_interval": inline_serializer(
            "ComparisonVerdictInterval",
            {
                "lower": serializers.FloatField(),
                "upper": serializers.FloatField(),
                "level": serializers.FloatField(),
                "method": serializers.CharField(),
            },
        ),
        "interval": serializers.DictField(),
        "family_interval": serializers.DictField(),
        "improvement": serializers.BooleanField(),
        "family_improvement": serializers.BooleanField(),
        "worse": serializers.BooleanField(
            help_text="the single-comparison interval lies below 0 (the verdict reads the "
            "family-wise one)"
        ),
        "non_inferiority": serializers.DictField(),
        "savings": serializers.DictField(),
        "usage": serializers.DictField(),
        "official": serializers.ListField(
            child=serializers.DictField(),
            help_text=OFFICIAL_NOTE
            + " Per metric: `benchmark`, `metric` (pass_at_2, f_score, accuracy, "
            "calibration_error), `name`, `label`, `scorer`, `value` (null = unknown, with "
            "`unknown_reason`), `n` and `n_unit`, `interval` (`lower`, `upper`, `method`: the "
            "official summary's own, or null). The baseline's are in `baseline.official`.",
        ),
    },
    many=True,
)

ComparisonSerializer = inline_serializer(
    "Comparison",
    {
        "baseline": serializers.DictField(),
        "alpha": serializers.FloatField(),
        "family_size": serializers.IntegerField(),
        "weights": serializers.DictField(child=serializers.CharField()),
        "split": serializers.CharField(allow_null=True),
        "non_inferiority_margin": serializers.JSONField(allow_null=True),
        "comparisons": ComparedCandidateSerializer,
        "refused": serializers.ListField(child=serializers.DictField()),
        "statements": serializers.DictField(child=serializers.CharField()),
        "model_requests": serializers.IntegerField(),
    },
)


MARGIN_PARAM = "non_inferiority_margin"
MARGIN_HELP = (
    "optional check only: the margin frozen in the runs' plans; any other value is refused "
    "(409 margin_frozen) — a margin cannot be set or changed after the run"
)


def margin_param(request: Request) -> Decimal | None:
    raw = request.query_params.get(MARGIN_PARAM)
    if raw is None:
        return None
    try:
        value: Decimal = MarginField().run_validation(raw)
    except ValidationError as exc:
        raise ValidationError({MARGIN_PARAM: exc.detail}) from None
    return value


# --- Compare iterations (issue 9): the page's two steps, THE comparison and its exports ---------
#
# One comparison endpoint (issue 24): POST /compare/. It and both exports answer through
# `comparison_answer`; incomparable pairs are compared as far as they can be — each refused
# candidate run is listed under "refused" with its differences (200) and only when *every*
# candidate run is refused is the answer 409 with the same list. The deprecated
# GET /comparisons/ (compare/api_deprecated.py) reads the same `comparison_document` and only
# translates a refusal to its old all-or-nothing 422. Every refusal is raised (compare.services'
# MarginFrozen, CandidatesRefused, ComparisonError) and rendered by the one exception handler.

OPTIONS_PAGE_SIZE = 25
OPTIONS_PAGE_MAX = 100


def _option_doc(o: RunOption) -> dict[str, Any]:
    return {
        "id": o.id,
        "name": o.name,
        "created_at": o.created_at.isoformat(),
        "status": o.status,
        "targets": [
            {"slug": t.get("slug"), "kind": t.get("kind"), "model": t.get("model")}
            for t in o.targets
        ],
        "baseline_targets": o.baseline_targets,
        "comparable_runs": o.compatible_count,
    }


def _page_window(request: Request) -> tuple[int, int, int]:
    """(page, page size, first index) of an options page."""
    size = int_param(request, "page_size", OPTIONS_PAGE_SIZE, low=1, high=OPTIONS_PAGE_MAX)
    page = int_param(request, "page", 1, low=1)
    return page, size, (page - 1) * size


def _options_page(request: Request, options: list[RunOption] | BaselineOffer) -> dict[str, Any]:
    page, size, start = _page_window(request)
    return {
        "count": len(options),
        "page": page,
        "page_size": size,
        "results": [_option_doc(o) for o in options[start : start + size]],
    }


OptionsPageSerializer = inline_serializer(
    "ComparisonOptionsPage",
    {
        "count": serializers.IntegerField(),
        "page": serializers.IntegerField(),
        "page_size": serializers.IntegerField(),
        "results": serializers.ListField(child=serializers.DictField()),
    },
)
PAGE_PARAMS = [
    OpenApiParameter("q", str, description="search run name, id or a target's slug or model"),
    OpenApiParameter("page", int, description="1-based page number"),
    OpenApiParameter("page_size", int, description=f"at most {OPTIONS_PAGE_MAX}"),
]
BASELINE_WHAT = "the baseline run id"
BASELINE_PARAM = OpenApiParameter("baseline", int, required=True, description=BASELINE_WHAT)


def _options_params_check(request: Request, params: list[OpenApiParameter]) -> None:
    """The option lists read their documented parameters and `format`, each once; any other
    (`?search=`, `?candidates=`) is refused by name (srbench.api.query_params_check)."""
    reads = (*(p.name for p in params), FORMAT_PARAM)
    query_params_check(request.query_params, frozenset(reads), reads)


class CompareBaselinesView(APIView):
    """Step 1 (R11.1): runs offered as a baseline — live, finished, a single model with a
    result for every planned case, and at least one comparable candidate. Newest first."""

    schema = ApiSchema()

    @extend_schema(parameters=PAGE_PARAMS, responses={200: OptionsPageSerializer})
    def get(self, request: Request) -> Response:
        _options_params_check(request, PAGE_PARAMS)
        q = request.query_params.get("q", "")[:200]
        _, size, start = _page_window(request)
        offer = baseline_offer(q, window=(start, start + size))  # its rows come with the count
        return Response(_options_page(request, offer))


class CompareCandidatesView(APIView):
    """Step 2 (R11.2): runs comparable with the baseline run, oldest first. ``matching_ids``
    is every id matching the search on every page — what "Select all" selects."""

    schema = ApiSchema()

    @extend_schema(
        parameters=[BASELINE_PARAM, *PAGE_PARAMS],
        responses={
            200: inline_serializer(
                "ComparisonCandidatesPage",
                {
                    "baseline": serializers.IntegerField(),
                    "count": serializers.IntegerField(),
                    "page": serializers.IntegerField(),
                    "page_size": serializers.IntegerField(),
                    "matching_ids": serializers.ListField(child=serializers.IntegerField()),
                    "results": serializers.ListField(child=serializers.DictField()),
                },
            )
        },
    )
    def get(self, request: Request) -> Response:
        _options_params_check(request, [BASELINE_PARAM, *PAGE_PARAMS])
        baseline = int_param(request, "baseline", None, low=1, what=BASELINE_WHAT)
        q = request.query_params.get("q", "")[:200]
        pool = comparable_pool(baseline)
        if baseline not in pool and not Run.objects.filter(pk=baseline).exists():
            raise NotFound(f"unknown run: {baseline}")
        options = candidate_options(baseline, q, pool=pool)
        return Response(
            {
                "baseline": baseline,
                **_options_page(request, options),
                "matching_ids": [o.id for o in options],
            }
        )


class CompareRequestSerializer(StrictFieldsSerializer):
    baseline = serializers.IntegerField(min_value=1, max_value=2**63 - 1)
    candidates = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=2**63 - 1),
        min_length=1,
        max_length=MAX_SELECTION,
        help_text="candidate run ids; the baseline run itself compares its other targets",
    )
    baseline_target = serializers.CharField(
        required=False, allow_null=True, allow_blank=True, max_length=64
    )
    non_inferiority_margin = MarginField(required=False, allow_null=True, help_text=MARGIN_HELP)


def unknown_runs_refuse(baseline: int, candidates: list[int]) -> None:
    """404 naming every run id of the selection that does not exist."""
    known = set(Run.objects.filter(pk__in=[baseline, *candidates]).values_list("pk", flat=True))
    missing = sorted({baseline, *candidates} - known)
    if missing:
        raise NotFound(f"unknown run(s): {', '.join(map(str, missing))}")


def comparison_document(
    *, baseline: int, candidates: list[int], baseline_target: str | None
) -> dict[str, Any]:
    """The one computation behind every comparison the API answers: every pair re-verified,
    refused candidate runs listed under ``refused`` and the rest compared. Raises the
    service's errors (CandidatesRefused when every candidate run is refused)."""
    return comparison_build(
        baseline_run_id=baseline,
        candidate_run_ids=candidates,
        baseline_target=baseline_target or None,
    )


def comparison_answer(
    baseline: int,
    candidates: list[int],
    baseline_target: str | None,
    margin: Decimal | None = None,
) -> dict[str, Any]:
    """The comparison document; refused (raised) with 404 for an unknown run, 409 when every
    candidate is refused or a margin other than the frozen one is given, 422 no baseline."""
    unknown_runs_refuse(baseline, candidates)
    doc = comparison_document(
        baseline=baseline, candidates=candidates, baseline_target=baseline_target
    )
    if margin is not None:
        comparison_margin_check(doc, supplied=margin)
    return doc


class CompareView(APIView):
    """Compare any number of candidate runs with the baseline run's strongest single model.
    Every pair is re-verified; refused candidate runs are listed under ``refused`` with their
    differences and the rest are compared (409 only when every candidate run is refused)."""

    schema = ApiSchema()

    @extend_schema(
        request=CompareRequestSerializer,
        responses={
            200: ComparisonSerializer,
            **error_responses(
                _409="every candidate run is incomparable with the baseline run",
                _422="there is no baseline (no single model with a result for every case)",
            ),
        },
    )
    def post(self, request: Request) -> Response:
        body = CompareRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        v = body.validated_data
        out = comparison_answer(
            v["baseline"],
            v["candidates"],
            v.get("baseline_target"),
            v.get("non_inferiority_margin"),
        )
        return Response(out)


# --- exports ----------------------------------------------------------------------------------

CSV_COLUMNS = (
    "row",
    "baseline_run",
    "baseline_target",
    "run",
    "run_name",
    "run_created_at",
    "target",
    "kind",
    "cases",
    "questions",
    "attempts_per_question",
    "cases_without_result",
    "quality",
    "quality_exact",
    "provenance",
    # Each benchmark's official metric (runs.reporting.official_metrics), apart from the quality.
    *official_csv_columns(),
    "delta",
    "delta_exact",
    "micro_delta",
    "interval_lower",
    "interval_upper",
    "interval_level",
    "interval_clipped",
    "family_lower",
    "family_upper",
    "family_level",
    "family_size",
    "bootstrap_lower_diagnostic",
    "bootstrap_upper_diagnostic",
    "improvement",
    "family_improvement",
    "not_an_improvement",
    "worse",
    "verdict",
    "verdict_label",
    "verdict_reason",
    "verdict_margin",
    "non_inferiority",
    "non_inferiority_reason",
    "wins",
    "losses",
    "ties",
    "subject_cost_usd",
    "total_spend_usd",
    "cache_neutral_cost_usd",
    "subject_savings_pct",
    "subject_savings_unknown_reason",
    "savings_interval_lower",
    "savings_interval_upper",
    "savings_interval_alpha",
    "savings_interval_draws",
    "savings_interval_seed",
    "savings_interval_label",
    "total_savings_pct",
    "total_savings_unknown_reason",
    "cache_neutral_savings_pct",
    "cache_neutral_savings_unknown_reason",
    "savings_caution",
    "input_tokens",
    "cached_input_tokens",
    "cache_write_tokens",
    "output_tokens",
    "ttft_p50_ms",
    "latency_p50_ms",
    "latency_p95_ms",
    "request_seconds_sum",
    "wall_seconds",
    "refused_reasons",
)


_SAVINGS_INTERVAL_KEYS = ("lower", "upper", "alpha", "draws", "seed", "label")


def _usage_cells(u: dict[str, Any]) -> dict[str, Any]:
    tokens = u["tokens"]
    return {
        "subject_cost_usd": u["subject_cost_usd"],
        "total_spend_usd": u["total_spend_usd"],
        "cache_neutral_cost_usd": u["cache_neutral_cost_usd"],
        "input_tokens": tokens.get("input"),
        "cached_input_tokens": tokens.get("cached_input"),
        "cache_write_tokens": tokens.get("cache_write"),
        "output_tokens": tokens.get("output"),
        "ttft_p50_ms": u["ttft_p50_ms"],
        "latency_p50_ms": u["latency_p50_ms"],
        "latency_p95_ms": u["latency_p95_ms"],
        "request_seconds_sum": u["request_seconds_sum"],
        "wall_seconds": u["wall_seconds"],
    }


def comparison_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """One row for the baseline, one per compared candidate (all of them), one per refused
    candidate run. Unknown is None (an empty CSV cell), never 0."""
    b = doc["baseline"]
    rows: list[dict[str, Any]] = [
        {
            "row": "baseline",
            "baseline_run": b["run"],
            "baseline_target": b["target"],
            "run": b["run"],
            "run_name": b["run_name"],
            "target": b["target"],
            "kind": "single",
            "quality": b["quality"],
            "quality_exact": b["quality_exact"],
            "provenance": provenance_text(b["provenance"]),
            **official_csv_cells(b.get("official") or []),
            **_usage_cells(b["usage"]),
        }
    ]
    rows += [_candidate_row(b, c) for c in doc["comparisons"]]
    for r in doc.get("refused", []):
        rows.append(
            {
                "row": "refused",
                "baseline_run": b["run"],
                "baseline_target": b["target"],
                "run": r["run"],
                "run_name": r["run_name"],
                "refused_reasons": "; ".join(d["text"] for d in r["differences"]),
            }
        )
    return rows


def _candidate_row(b: dict[str, Any], c: dict[str, Any]) -> dict[str, Any]:
    """A compared candidate's CSV/export row."""
    i, fam, s, boot = c["interval"], c["family_interval"], c["savings"], c["bootstrap"]
    # The subject savings' stratified paired bootstrap (a diagnostic); unknown leaves
    # every one of its cells empty.
    si = c["savings_interval"] or {}
    return {
        "row": "candidate",
        "baseline_run": b["run"],
        "baseline_target": b["target"],
        "run": c["run"],
        "run_name": c["run_name"],
        "run_created_at": c["run_created_at"],
        "target": c["target"],
        "kind": c["kind"],
        "cases": c["cases"],
        "questions": c.get("questions"),
        "attempts_per_question": c.get("attempts_per_question"),
        "cases_without_result": c["cases_without_result"],
        "quality": c["quality"],
        "quality_exact": c["quality_exact"],
        "provenance": provenance_text(c["provenance"]),
        **official_csv_cells(c.get("official") or []),
        "delta": c["delta"],
        "delta_exact": c["delta_exact"],
        "micro_delta": c["micro_delta"],
        "interval_lower": i["lower"],
        "interval_upper": i["upper"],
        "interval_level": i["level"],
        "interval_clipped": i["clipped"],
        "family_lower": fam["lower"],
        "family_upper": fam["upper"],
        "family_level": fam["level"],
        "family_size": fam["family_size"],
        "bootstrap_lower_diagnostic": None if boot is None else boot["lower"],
        "bootstrap_upper_diagnostic": None if boot is None else boot["upper"],
        "improvement": c["improvement"],
        "family_improvement": c["family_improvement"],
        "not_an_improvement": c["not_an_improvement"],
        "worse": c["worse"],
        "verdict": c["verdict"],
        "verdict_label": c["verdict_label"],
        "verdict_reason": c["verdict_reason"],
        "verdict_margin": c["verdict_margin"],
        "non_inferiority": c["non_inferiority"]["verdict"],
        "non_inferiority_reason": c["non_inferiority"]["reason"],
        "wins": c["wins"],
        "losses": c["losses"],
        "ties": c["ties"],
        "subject_savings_pct": s["subject_cost_pct"],
        "subject_savings_unknown_reason": s["subject_cost_unknown_reason"],
        **{f"savings_interval_{k}": si.get(k) for k in _SAVINGS_INTERVAL_KEYS},
        "total_savings_pct": s["total_spend_pct"],
        "total_savings_unknown_reason": s["total_spend_unknown_reason"],
        "cache_neutral_savings_pct": s["cache_neutral_pct"],
        "cache_neutral_savings_unknown_reason": s["cache_neutral_unknown_reason"],
        "savings_caution": s["caution"],
        **_usage_cells(c["usage"]),
    }


# Cells whose text a user chose (a run's name, a target's slug), written as a spreadsheet shows
# them as text (srbench.spreadsheet). Figures are never touched: a negative Δ or savings rate
# (``-17/35``) keeps its sign.
FREE_TEXT_COLUMNS = ("run_name", "target", "baseline_target")


def _csv_cell(column: str, value: Any) -> Any:
    if value is None:
        return ""
    return spreadsheet_text(value) if column in FREE_TEXT_COLUMNS else value


def comparison_csv(doc: dict[str, Any]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in comparison_rows(doc):
        writer.writerow({k: _csv_cell(k, v) for k, v in row.items()})
    return out.getvalue()


class CSVRenderer(BaseRenderer):
    """Lets a client send ``Accept: text/csv``; an error document becomes a one-row CSV
    (error, code, and the detail that names the fields, as compact JSON)."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(self, data: Any, accepted_media_type: Any = None, renderer_context: Any = None):  # type: ignore[no-untyped-def]
        if isinstance(data, str):
            return data.encode("utf-8")
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        doc = data or {}
        detail = doc.get("detail")
        writer.writerow(["error", "code", "detail"])
        writer.writerow(
            [
                doc.get("error", ""),
                doc.get("code", ""),
                "" if detail is None else json.dumps(detail, ensure_ascii=False, sort_keys=True),
            ]
        )
        return out.getvalue().encode("utf-8")


EXPORT_PARAMS = [
    OpenApiParameter("baseline", int, required=True, description=BASELINE_WHAT),
    OpenApiParameter(
        "candidates",
        str,
        required=True,
        description="candidate run ids: comma-separated, ranges allowed (3-9,12)",
    ),
    OpenApiParameter("baseline_target", str, description="one of the tied strongest models"),
    OpenApiParameter(MARGIN_PARAM, str, description=MARGIN_HELP),
]


# What an export reads of its query string (DRF's `format` too); anything else is refused.
EXPORT_PARAM_NAMES = frozenset(
    {"baseline", "candidates", "baseline_target", MARGIN_PARAM, "format"}
)
EXPORT_SINGLE_PARAMS = ("baseline", "candidates", "baseline_target", MARGIN_PARAM)


class CompareExportView(APIView):
    """The whole selected comparison (every candidate, not a page of cards) as CSV or JSON;
    the same numbers as POST /compare/, with the fixed statements in the JSON."""

    schema = ApiSchema()
    renderer_classes = [JSONRenderer, CSVRenderer]
    export_format = "json"

    def _selection(self, request: Request) -> tuple[int, list[int]]:
        query_params_check(request.query_params, EXPORT_PARAM_NAMES, EXPORT_SINGLE_PARAMS)
        baseline = int_param(request, "baseline", None, low=1, what=BASELINE_WHAT)
        try:
            candidates = ids_parse(request.query_params.get("candidates", ""))
        except ValueError as exc:
            raise ValidationError({"candidates": str(exc)}) from None
        if not candidates:
            raise ValidationError({"candidates": "name at least one candidate run id"})
        return baseline, candidates

    def get(self, request: Request) -> Response | HttpResponse:
        baseline, candidates = self._selection(request)
        out = comparison_answer(
            baseline,
            candidates,
            request.query_params.get("baseline_target"),
            margin_param(request),
        )
        name = f"srbench-compare-{baseline}-vs-{len(candidates)}-runs.{self.export_format}"
        if self.export_format == "csv":
            response = HttpResponse(comparison_csv(out), content_type="text/csv; charset=utf-8")
        else:
            doc = {
                **out,
                "selection": {
                    "baseline": baseline,
                    "candidates": candidates,
                    "candidates_compact": ids_format(candidates),
                    "baseline_target": request.query_params.get("baseline_target") or None,
                },
            }
            response = HttpResponse(
                JSONRenderer().render(doc), content_type="application/json; charset=utf-8"
            )
        response["Content-Disposition"] = f'attachment; filename="{name}"'
        return response


class CompareExportCSVView(CompareExportView):
    export_format = "csv"
    renderer_classes = [CSVRenderer, JSONRenderer]

    @extend_schema(
        parameters=EXPORT_PARAMS,
        responses={
            (200, "text/csv"): OpenApiResponse(OpenApiTypes.STR, description="CSV rows"),
            **error_responses(_409="every candidate run refused", _422="no baseline"),
        },
    )
    def get(self, request: Request) -> Response | HttpResponse:
        return super().get(request)


class CompareExportJSONView(CompareExportView):
    export_format = "json"

    @extend_schema(
        parameters=EXPORT_PARAMS,
        responses={
            200: ComparisonSerializer,
            **error_responses(_409="every candidate run refused", _422="no baseline"),
        },
    )
    def get(self, request: Request) -> Response | HttpResponse:
        return super().get(request)
