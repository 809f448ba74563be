"""The API documentation pages: Swagger UI at /api/docs/ and Redoc at /api/redoc/.

Both read /api/schema/ and share its protection (SPECTACULAR_SETTINGS["SERVE_PERMISSIONS"]: a
logged-in member's session or an API token). Their scripts and styles are
drf_spectacular_sidecar's static files, served by WhiteNoise like the rest of the portal's:
nothing is loaded from a CDN or any other host.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.views import SpectacularRedocView, SpectacularSwaggerView
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response


class JsonErrorsMixin:
    """The page is HTML, but its errors (401 without a login) are the API's JSON error
    document, as everywhere under /api/: the HTML renderer would answer a bare text page."""

    def handle_exception(self, exc: Exception) -> Response:
        response: Response = super().handle_exception(exc)  # type: ignore[misc]
        request: Any = self.request  # type: ignore[attr-defined]
        request.accepted_renderer = JSONRenderer()
        request.accepted_media_type = JSONRenderer.media_type
        return response


class ApiDocsView(JsonErrorsMixin, SpectacularSwaggerView):
    url_name = "api-schema"
    # drf-spectacular's page with its inline start-up script under the CSP nonce (issue 40).
    template_name = "srbench/swagger_ui.html"


class ApiRedocView(JsonErrorsMixin, SpectacularRedocView):
    url_name = "api-schema"
    # drf-spectacular's page minus its Google Fonts links.
    template_name = "srbench/redoc.html"
