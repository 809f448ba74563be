from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required
from django.templatetags.static import static
from django.urls import URLPattern, include, path, re_path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView
from rest_framework.routers import SimpleRouter

from runs.interfaces.api import PlanReviewView, RunViewSet, TargetViewSet
from runs.interfaces.events_wait import events_long_poll
from runs.interfaces.preflight_api import TargetPreflightView
from runs.interfaces.recovery_api import LineageView, RecoverView, RecoveryPlanView
from srbench.api import api_not_found
from srbench.api_docs import ApiDocsView, ApiRedocView
from srbench.audit_api import AuditEventListView
from srbench.token_views import command_line_token_revoke, token_list, token_revoke

# Under /api/ Django's own 400/403/404/500 answers are the JSON error document too.
handler400 = "srbench.api.error_400"
handler403 = "srbench.api.error_403"
handler404 = "srbench.api.error_404"
handler500 = "srbench.api.error_500"

# SimpleRouter: no browsable root view and no `.json` suffix routes, so every API route is
# one the OpenAPI schema documents (tests/api/test_schema.py walks them all).
router = SimpleRouter()
router.register("targets", TargetViewSet)
router.register("runs", RunViewSet, basename="run")
# A run's events with ?wait= are a long poll (runs/interfaces/events_wait.py): the router's own view,
# behind an async wrapper that holds an empty page without holding a thread.
run_events = events_long_poll(
    next(p.callback for p in router.urls if isinstance(p, URLPattern) and p.name == "run-events")
)

urlpatterns = [
    path("", include("runs.urls")),
    path("datasets/", include("datasets.urls")),
    path("compare/", include("compare.urls")),
    path("recipes/", include("recipes.urls")),
    # Browsers ask for /favicon.ico on their own (pages link the SVG); answer, never a 404.
    path(
        "favicon.ico",
        login_not_required(RedirectView.as_view(url=static("favicon.svg"), permanent=True)),
    ),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("tokens/", token_list, name="tokens"),
    path("tokens/<int:pk>/revoke/", token_revoke, name="token-revoke"),
    path(
        "tokens/command-line/<int:user_id>/revoke/",
        command_line_token_revoke,
        name="command-line-token-revoke",
    ),
    path("api/v1/audit/", AuditEventListView.as_view(), name="audit-list"),
    path("api/v1/plans/review/", PlanReviewView.as_view(), name="plan-review"),
    path(
        "api/v1/runs/<int:pk>/recovery-plan/", RecoveryPlanView.as_view(), name="run-recovery-plan"
    ),
    path("api/v1/runs/<int:pk>/recover/", RecoverView.as_view(), name="run-recover"),
    path("api/v1/runs/<int:pk>/lineage/", LineageView.as_view(), name="run-lineage"),
    path(
        "api/v1/targets/<str:slug>/preflight/",
        TargetPreflightView.as_view(),
        name="target-preflight",
    ),
    path("api/v1/runs/<int:pk>/events/", run_events),
    path("api/v1/", include(router.urls)),
    path("api/v1/", include("datasets.api_urls")),
    path("api/v1/", include("recipes.api_urls")),
    path("api/v1/", include("compare.api_urls")),
    path(
        "api/schema/",
        SpectacularAPIView.as_view(),
        name="api-schema",
    ),
    # Swagger UI and Redoc: the schema's own protection, assets from drf_spectacular_sidecar.
    path("api/docs/", ApiDocsView.as_view(), name="api-docs"),
    path("api/redoc/", ApiRedocView.as_view(), name="api-redoc"),
    # Last: an unmatched /api/ path answers the JSON error document (not an endpoint).
    re_path(r"^api/(?P<path>[\s\S]*)\Z", api_not_found, name="api-not-found"),
]
