"""REST API for sources, frozen datasets and their public questions (SPEC R8.2–R8.4, R9).

Read-only except `POST datasets/compose/`, which only freezes a selection of already prepared
sources: no download, no re-sampling, no model call (the receipt says `model_requests: 0`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from datasets.benchmarks import ADAPTERS, LoaderError
from datasets.models import FrozenDataset, Profile, Question, Source, Split
from datasets.profiles import DEFAULT_SEED
from datasets.selectors import (
    dataset_list,
    dataset_questions,
    profile_totals,
    source_list,
)
from datasets.serializers import (
    ComposeReceiptSerializer,
    ComposeRequestSerializer,
    DatasetDetailSerializer,
    DatasetListSerializer,
    ProfileTotalSerializer,
    QuestionSerializer,
    SourceSerializer,
)
from datasets.services import (
    dataset_compose_receipt,
    source_prepare_receipt,
)
from srbench.api import (
    ApiSchema,
    DetailParamsMixin,
    KeysetPagePagination,
    PagePagination,
    StrictFieldsSerializer,
    detail_params_check,
    error_responses,
    list_params_check,
)
from srbench.digits import ascii_digits
from srbench.refusals import Refusal

EXPORT_CHUNK = 200


class PrepareRequestSerializer(StrictFieldsSerializer):
    benchmark = serializers.ChoiceField(choices=list(ADAPTERS))
    profile = serializers.ChoiceField(choices=Profile.choices)
    seed = serializers.IntegerField(default=DEFAULT_SEED, min_value=-(2**63), max_value=2**63 - 1)
    source_path = serializers.CharField(
        required=False, allow_blank=True, max_length=4096, help_text="operators only"
    )
    from_package = serializers.BooleanField(
        default=False,
        help_text="read the benchmark's public data in place from the installed package that "
        "carries it (no download); not with source_path",
    )
    package = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=200,
        help_text="with from_package: the distribution expected to carry it",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs.get("from_package") and attrs.get("source_path"):
            raise ValidationError({"from_package": "choose either source_path or from_package"})
        if attrs.get("package") and not attrs.get("from_package"):
            raise ValidationError({"package": "package needs from_package"})
        return attrs


class PrepareReceiptSerializer(serializers.Serializer):
    source = SourceSerializer()
    created = serializers.BooleanField()
    model_requests = serializers.IntegerField()


class JSONLinesRenderer(BaseRenderer):
    """Lets a client ask for `application/x-ndjson`; the export streams its own body, so this
    only renders the error document of a failed export, as one line."""

    media_type = "application/x-ndjson"
    format = "jsonl"
    charset = "utf-8"

    def render(self, data: Any, accepted_media_type: Any = None, renderer_context: Any = None):  # type: ignore[no-untyped-def]
        return json.dumps(data, ensure_ascii=False).encode("utf-8") + b"\n"


BENCHMARK_PARAM = OpenApiParameter("benchmark", str, enum=list(ADAPTERS))
PROFILE_PARAM = OpenApiParameter("profile", str, enum=Profile.values)
# Each list's filters: documented from these and the only ones it accepts (with its paging
# parameters and `format`); any other is refused by name (srbench.api.list_params_check).
SOURCE_FILTERS = [
    BENCHMARK_PARAM,
    PROFILE_PARAM,
    OpenApiParameter("seed", int),
    OpenApiParameter("split", str, enum=Split.values),
]
DATASET_FILTERS = [
    OpenApiParameter("q", str, description="name contains, or identity sha256 prefix"),
    PROFILE_PARAM,
    BENCHMARK_PARAM,
]
QUESTION_FILTERS = [
    BENCHMARK_PARAM,
    OpenApiParameter("subject", str),
    OpenApiParameter("q", str, description="text in the id, subject or public payload"),
]


def _names(filters: list[OpenApiParameter]) -> list[str]:
    return [p.name for p in filters]


def _choice(request: Request, name: str, choices: list[str]) -> str | None:
    value = request.query_params.get(name) or None
    if value is not None and value not in choices:
        raise ValidationError({name: [f"expected one of {', '.join(choices)}"]})
    return value


@extend_schema(tags=["datasets"])
class SourceViewSet(DetailParamsMixin, viewsets.ReadOnlyModelViewSet):
    """Prepared, frozen question sources (one benchmark under one profile, seed and split)."""

    schema = ApiSchema()
    queryset = Source.objects.all()
    serializer_class = SourceSerializer
    pagination_class = KeysetPagePagination

    def get_queryset(self) -> Any:
        if self.action != "list":
            # A detail is found by its id alone: the list's filters are not its parameters.
            return source_list()
        seed = self.request.query_params.get("seed") or None
        if seed is not None and not ascii_digits(seed.removeprefix("-")):
            raise ValidationError({"seed": ["must be an integer"]})
        return source_list(
            benchmark=_choice(self.request, "benchmark", list(ADAPTERS)),
            profile=_choice(self.request, "profile", Profile.values),
            seed=int(seed) if seed is not None else None,
            split=_choice(self.request, "split", Split.values),
        )

    @extend_schema(parameters=SOURCE_FILTERS)
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        list_params_check(self, _names(SOURCE_FILTERS))
        return super().list(request, *args, **kwargs)

    @extend_schema(
        request=PrepareRequestSerializer,
        responses={
            201: PrepareReceiptSerializer,
            200: PrepareReceiptSerializer,
            **error_responses(
                _409="a source at this coordinate already holds other content; nothing written"
            ),
        },
    )
    @action(detail=False, methods=["post"])
    def prepare(self, request: Request) -> Response:
        """Prepare one benchmark's frozen question window (R9): from the bundled fixture, for
        an operator from `source_path`, a file or folder on the server, or with `from_package`
        from the installed registry package that carries the benchmark's public data (a fixed
        path inside a fixed distribution, so any member may: the request names no path; a
        package that is not installed answers 400 `package_unavailable`). Idempotent: the
        same content answers 200 with the existing source. No model call, no download."""
        form = PrepareRequestSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        data = form.validated_data
        if data.get("source_path") and not request.user.is_staff:
            # It reads a path on the server: an operator's decision, never a member's.
            raise PermissionDenied("only an operator may prepare from a server path")
        try:
            receipt = source_prepare_receipt(
                benchmark=data["benchmark"],
                profile=data["profile"],
                seed=data["seed"],
                source_path=data.get("source_path") or None,
                from_package=data["from_package"],
                package=data.get("package") or None,
            )
        except Refusal:  # PreparationConflict (409), PackageUnavailable (400): as they are
            raise
        except (LoaderError, ValueError, OSError) as exc:
            # A malformed or unreadable file: the loader's own line, as a refusal.
            raise Refusal(str(exc), code="invalid_source") from exc
        body = {
            "source": SourceSerializer(receipt.source, context={"request": request}).data,
            "created": receipt.created,
            "model_requests": 0,
        }
        return Response(body, status=status.HTTP_201_CREATED if receipt.created else 200)


@extend_schema(tags=["datasets"])
class DatasetViewSet(DetailParamsMixin, viewsets.ReadOnlyModelViewSet):
    """Frozen, content-addressed datasets and their public questions."""

    schema = ApiSchema()
    queryset = FrozenDataset.objects.all()
    pagination_class = KeysetPagePagination

    def get_queryset(self) -> Any:
        if self.action != "list":
            return dataset_list()
        return dataset_list(
            search=self.request.query_params.get("q") or None,
            profile=_choice(self.request, "profile", Profile.values),
            benchmark=_choice(self.request, "benchmark", list(ADAPTERS)),
        )

    def get_serializer_class(self) -> Any:
        if self.action == "retrieve":
            return DatasetDetailSerializer
        if self.action == "questions":
            return QuestionSerializer
        return DatasetListSerializer

    @extend_schema(parameters=DATASET_FILTERS)
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        list_params_check(self, _names(DATASET_FILTERS))
        return super().list(request, *args, **kwargs)

    @extend_schema(parameters=QUESTION_FILTERS, responses=QuestionSerializer(many=True))
    @action(detail=True, methods=["get"], pagination_class=PagePagination)
    def questions(self, request: Request, pk: str | None = None) -> Response:
        """The dataset's questions in frozen order; public payload only."""
        list_params_check(self, _names(QUESTION_FILTERS))
        dataset = self.get_object()
        questions = dataset_questions(
            dataset=dataset,
            benchmark=_choice(request, "benchmark", list(ADAPTERS)),
            subject=request.query_params.get("subject") or None,
            text=request.query_params.get("q") or None,
        )
        page = self.paginate_queryset(questions)
        return self.get_paginated_response(QuestionSerializer(page, many=True).data)

    @extend_schema(
        responses={
            (200, "application/x-ndjson"): OpenApiResponse(
                OpenApiTypes.STR,
                description="One JSON object per line: position, benchmark, native_id, "
                "subject and the public payload. Never answers or hidden tests.",
            )
        }
    )
    @action(
        detail=True,
        methods=["get"],
        renderer_classes=[JSONRenderer, JSONLinesRenderer],
        pagination_class=None,  # the whole file: no page parameter is read
    )
    def export(self, request: Request, pk: str | None = None) -> StreamingHttpResponse:
        """The dataset's public questions as JSON Lines, streamed in frozen order: all of
        them (no filter; `?format=jsonl` to ask for the type)."""
        list_params_check(self, ())
        dataset = self.get_object()
        response = StreamingHttpResponse(
            _export_lines(dataset), content_type="application/x-ndjson; charset=utf-8"
        )
        response["Content-Disposition"] = (
            f'attachment; filename="dataset-{dataset.pk}-{dataset.identity_sha256[:12]}.jsonl"'
        )
        return response

    @extend_schema(
        request=ComposeRequestSerializer,
        responses={
            201: ComposeReceiptSerializer,
            200: ComposeReceiptSerializer,
            **error_responses(
                _400="invalid request",
                _409="the sources cannot be combined: detail.conflicts lists every reason",
            ),
        },
    )
    @action(detail=False, methods=["post"])
    def compose(self, request: Request) -> Response:
        """Freeze whole benchmark groups of prepared sources into a dataset (R8.2–R8.4).

        201 when a new dataset is frozen, 200 when this composition already exists (same
        identity), 409 with every conflict when the sources cannot be combined.
        """
        form = ComposeRequestSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        sources = list(Source.objects.filter(pk__in=form.validated_data["sources"]))
        # CompositionInvalid (400) and CompositionConflict (409, every conflict) are refusals.
        receipt = dataset_compose_receipt(
            sources=sources,
            benchmarks=form.validated_data.get("benchmarks"),
            name=form.validated_data.get("name"),
            user=request.user,
        )
        dataset = dataset_list().get(pk=receipt.dataset.pk)
        body = {
            "dataset": DatasetDetailSerializer(dataset).data,
            "created": receipt.created,
            "model_requests": receipt.model_requests,
        }
        return Response(body, status=status.HTTP_201_CREATED if receipt.created else 200)

    @extend_schema(responses=ProfileTotalSerializer(many=True))
    @action(detail=False, methods=["get"], pagination_class=None)
    def totals(self, request: Request) -> Response:
        """Per-profile sums of prepared sets, labelled as neither de-duplicated nor a run
        denominator (R9.6)."""
        list_params_check(self, ())
        return Response(ProfileTotalSerializer(profile_totals(), many=True).data)


@extend_schema(tags=["datasets"])
class QuestionViewSet(viewsets.GenericViewSet):
    """One question's public payload: task text, options, full code/agent task input."""

    schema = ApiSchema()
    queryset = Question.objects.all()
    serializer_class = QuestionSerializer

    def retrieve(self, request: Request, pk: str | None = None) -> Response:
        detail_params_check(request)
        return Response(QuestionSerializer(self.get_object()).data)


def _export_lines(dataset: FrozenDataset) -> Iterator[bytes]:
    # Fields are picked by name so nothing else on the row can slip into the file.
    rows = dataset_questions(dataset=dataset).values(
        "position", "benchmark", "native_id", "subject", "payload"
    )
    for row in rows.iterator(chunk_size=EXPORT_CHUNK):
        yield json.dumps(row, ensure_ascii=False, sort_keys=True).encode("utf-8") + b"\n"
