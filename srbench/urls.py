from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView
from rest_framework.routers import DefaultRouter

from runs.api import PlanReviewView, RunViewSet, TargetViewSet
from runs.recovery_api import LineageView, RecoverView, RecoveryPlanView

router = DefaultRouter()
router.register("targets", TargetViewSet)
router.register("runs", RunViewSet, basename="run")

urlpatterns = [
    path("", include("runs.urls")),
    path("datasets/", include("datasets.urls")),
    path("recipes/", include("recipes.urls")),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("api/v1/plans/review/", PlanReviewView.as_view(), name="plan-review"),
    path(
        "api/v1/runs/<int:pk>/recovery-plan/", RecoveryPlanView.as_view(), name="run-recovery-plan"
    ),
    path("api/v1/runs/<int:pk>/recover/", RecoverView.as_view(), name="run-recover"),
    path("api/v1/runs/<int:pk>/lineage/", LineageView.as_view(), name="run-lineage"),
    path("api/v1/", include(router.urls)),
    path("api/v1/", include("datasets.api_urls")),
    path("api/v1/", include("recipes.api_urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
]
