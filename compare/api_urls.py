from django.urls import path

from compare import api

# Mounted under /api/v1/ (srbench/urls.py).
urlpatterns = [
    path("compare/", api.CompareView.as_view(), name="compare"),
    path("compare/baselines/", api.CompareBaselinesView.as_view(), name="compare-baselines"),
    path("compare/candidates/", api.CompareCandidatesView.as_view(), name="compare-candidates"),
    path("compare/export.csv", api.CompareExportCSVView.as_view(), name="compare-export-csv"),
    path("compare/export.json", api.CompareExportJSONView.as_view(), name="compare-export-json"),
]
