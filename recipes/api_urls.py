from django.urls import path

from recipes import api

# Mounted under /api/v1/ beside the project router (srbench/urls.py).
urlpatterns = [
    path("recipes/", api.RecipeListView.as_view(), name="recipes-api-list"),
    path("recipes/<int:pk>/", api.RecipeDetailView.as_view(), name="recipes-api-detail"),
    path(
        "recipes/<int:pk>/download/", api.RecipeDownloadView.as_view(), name="recipes-api-download"
    ),
    path("runs/<int:run_id>/recipe/", api.RunRecipeView.as_view(), name="recipes-api-run"),
    path(
        "targets/<str:slug>/route-preview/",
        api.RoutePreviewView.as_view(),
        name="recipes-api-route-preview",
    ),
]
