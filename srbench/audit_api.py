"""The audit trail through the API (issue 40 item 4): staff only, newest first.

GET /api/v1/audit/ — filters `actor` (a username), `action` (a view name, e.g. `run-cancel`),
`since` (ISO 8601); page numbers or the API's keyset cursor (`before=`).
"""

from __future__ import annotations

from typing import Any

from django.utils.dateparse import parse_datetime
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, generics, permissions, serializers

from srbench.api import ApiSchema, KeysetPagePagination
from srbench.models import AuditEvent


class AuditEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = AuditEvent
        fields = [
            "id",
            "at",
            "actor_id",
            "actor",
            "action",
            "method",
            "path",
            "query",
            "target",
            "status_code",
            "via",
            "address",
            "user_agent",
            "detail",
        ]


@extend_schema(
    tags=["audit"],
    parameters=[
        OpenApiParameter("actor", OpenApiTypes.STR, description="a username"),
        OpenApiParameter("action", OpenApiTypes.STR, description="a view name, e.g. run-cancel"),
        OpenApiParameter("since", OpenApiTypes.DATETIME, description="at or after (ISO 8601)"),
    ],
)
class AuditEventListView(generics.ListAPIView):
    """Every write a person made: who, when, what, from where (staff only)."""

    schema = ApiSchema()
    serializer_class = AuditEventSerializer
    pagination_class = KeysetPagePagination
    permission_classes = [permissions.IsAdminUser]

    def get_queryset(self) -> Any:
        rows = AuditEvent.objects.order_by("-id")
        params = self.request.query_params
        if params.get("actor"):
            rows = rows.filter(actor=params["actor"])
        if params.get("action"):
            rows = rows.filter(action=params["action"])
        if params.get("since"):
            try:
                # A well-formed but impossible date (month 13) raises rather than giving None.
                since = parse_datetime(params["since"])
            except ValueError:
                since = None
            if since is None:
                raise exceptions.ValidationError({"since": ["an ISO 8601 date and time"]})
            rows = rows.filter(at__gte=since)
        return rows
