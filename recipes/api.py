"""REST API of recipes (R12.3, R12.5) and route preview (R8.7).

Read-only except route preview, which asks the router's preview endpoint and never a model.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import generics, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from recipes.selectors import recipe_list, run_recipe_availability
from recipes.serializers import (
    RecipeDetailSerializer,
    RecipeSummarySerializer,
    RoutePreviewRequestSerializer,
)
from recipes.views import recipe_download_response
from runs.engine.router_client import route_preview
from runs.models import Run, Target
from srbench.api import (
    ApiSchema,
    DetailParamsMixin,
    KeysetPagePagination,
    detail_params_check,
    error_responses,
    list_params_check,
)

RunRecipeSerializer = inline_serializer(
    "RunRecipe",
    {
        "run": serializers.IntegerField(),
        "available": serializers.BooleanField(),
        "recipes": RecipeDetailSerializer(many=True),
        "not_captured": serializers.JSONField(),
        "reason": serializers.CharField(required=False, help_text="when not available"),
    },
)
RoutePreviewSerializer = inline_serializer(
    "RoutePreview",
    {
        "target": serializers.CharField(),
        "requested_model": serializers.CharField(allow_null=True),
        "selected_model": serializers.CharField(allow_null=True),
        "decision": serializers.CharField(allow_null=True),
        "config_hash": serializers.CharField(allow_null=True),
        "config_hash_matches": serializers.BooleanField(allow_null=True),
        "preview_context": serializers.DictField(),
        "model_requests": serializers.IntegerField(),
    },
)


@extend_schema(tags=["recipes"])
class RecipeListView(generics.ListAPIView):
    """Frozen recipes, newest first: page numbers, or the API's keyset cursor (`before=`)."""

    schema = ApiSchema()
    serializer_class = RecipeSummarySerializer
    pagination_class = KeysetPagePagination

    def get_queryset(self):  # type: ignore[no-untyped-def]
        return recipe_list()

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        # No filter: only its paging and `format`; `?run=7` is refused, never answered with
        # every recipe (srbench.api.list_params_check).
        list_params_check(self)
        return super().list(request, *args, **kwargs)


@extend_schema(tags=["recipes"])
class RecipeDetailView(DetailParamsMixin, generics.RetrieveAPIView):
    """One recipe: hashes, ETag, confirmations, the redacted recipe and its redaction list."""

    schema = ApiSchema()
    serializer_class = RecipeDetailSerializer

    def get_queryset(self):  # type: ignore[no-untyped-def]
        return recipe_list()


@extend_schema(
    tags=["recipes"],
    responses={
        (200, "application/json"): OpenApiResponse(
            OpenApiTypes.OBJECT, description="the recipe artefact, as a file"
        )
    },
)
class RecipeDownloadView(APIView):
    """The recipe as a JSON file marked "recipe artefact, not a deployable configuration"."""

    schema = ApiSchema()

    def get(self, request: Request, pk: int) -> HttpResponse:
        detail_params_check(request)
        return recipe_download_response(get_object_or_404(recipe_list(), pk=pk))


@extend_schema(tags=["recipes"], responses=RunRecipeSerializer)
class RunRecipeView(APIView):
    """This run's own recipes, or `available: false` with the reason — never another run's
    recipe, even of the same router (R12.5)."""

    schema = ApiSchema()

    def get(self, request: Request, run_id: int) -> Response:
        detail_params_check(request)
        run = get_object_or_404(Run, pk=run_id)
        availability = run_recipe_availability(run=run)
        document: dict[str, Any] = {
            "run": run.pk,
            "available": availability.available,
            "recipes": RecipeDetailSerializer(availability.recipes, many=True).data,
            "not_captured": availability.not_captured,
        }
        if not availability.available:
            document["reason"] = availability.reason
        return Response(document)


@extend_schema(
    tags=["recipes"],
    request=RoutePreviewRequestSerializer,
    responses={
        200: RoutePreviewSerializer,
        **error_responses(_502="the router's preview endpoint failed"),
    },
)
class RoutePreviewView(APIView):
    """Which model and decision the router would choose; `model_requests` is always 0."""

    schema = ApiSchema()

    def post(self, request: Request, slug: str) -> Response:
        target = get_object_or_404(Target, slug=slug)
        serializer = RoutePreviewRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        # PreviewNotPossible (400) and PreviewError (502) are refusals the handler renders.
        return Response(route_preview(target=target, **serializer.validated_data))
