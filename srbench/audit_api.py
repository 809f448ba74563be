"""The audit trail through the API (issue 40 item 4): staff only, newest first.

GET /api/v1/audit/ — filters `actor` (a username), `action` (a view name, e.g. `run-cancel`),
`since` (ISO 8601); page numbers or the API's keyset cursor (`before=`). Any other parameter,
or one given twice, is refused by name (srbench.api.list_params_check).
"""

from __future__ import annotations

from typing import Any

from django.utils.dateparse import parse_datetime
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, generics, permissions, serializers
from rest_framework.request import Request
from rest_framework.response import Response

from srbench.api import ApiSchema, KeysetPagePagination, list_params_check
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


# The filters (documented from this list, and the only ones accepted beside paging and `format`).
AUDIT_FILTERS = [
    OpenApiParameter("actor", OpenApiTypes.STR, description="a username"),
    OpenApiParameter("action", OpenApiTypes.STR, description="a view name, e.g. run-cancel"),
    OpenApiParameter("since", OpenApiTypes.DATETIME, description="at or after (ISO 8601)"),
]


@extend_schema(tags=["audit"], parameters=AUDIT_FILTERS)
class AuditEventListView(generics.ListAPIView):
    """Every write a person made: who, when, what, from where (staff only)."""

    schema = ApiSchema()
    serializer_class = AuditEventSerializer
    pagination_class = KeysetPagePagination
    permission_classes = [permissions.IsAdminUser]

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        # `?user=alice` listed everyone's writes as if they were alice's: refused by name.
        list_params_check(self, [p.name for p in AUDIT_FILTERS])
        return super().list(request, *args, **kwargs)

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
