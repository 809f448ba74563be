from django.urls import path

from compare import api, api_deprecated

# Mounted under /api/v1/ (srbench/urls.py). THE comparison endpoint is POST compare/ (issue 24);
# GET comparisons/ is its deprecated predecessor, kept for one release (compare/api_deprecated.py).
urlpatterns = [
    path("compare/", api.CompareView.as_view(), name="compare"),
    path("compare/baselines/", api.CompareBaselinesView.as_view(), name="compare-baselines"),
    path("compare/candidates/", api.CompareCandidatesView.as_view(), name="compare-candidates"),
    path("compare/export.csv", api.CompareExportCSVView.as_view(), name="compare-export-csv"),
    path("compare/export.json", api.CompareExportJSONView.as_view(), name="compare-export-json"),
    path("comparisons/", api_deprecated.ComparisonView.as_view(), name="comparison"),
]
