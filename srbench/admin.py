"""Admin of the audit trail (read only) and of API tokens (staff revoke anyone's; issue 40).

Failed sign-ins and lockouts are django-axes's own admin pages (Access attempts, Access
failures), where an operator also unlocks an account by deleting its attempts.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.http import HttpRequest

from srbench.admin_base import ViewOnlyAdmin
from srbench.models import ApiToken, AuditEvent
from srbench.tokens import revoke_token


@admin.register(AuditEvent)
class AuditEventAdmin(ViewOnlyAdmin):
    """Append-only rows (the database refuses changes): view, search and filter only."""

    list_display = ["at", "actor", "action", "method", "target", "status_code", "via", "address"]
    list_filter = ["via", "method", "action"]
    search_fields = ["actor", "action", "path", "target", "address"]
    date_hierarchy = "at"


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Tokens are created on the portal's page (the secret is shown once, there); here staff
    see them all and revoke any."""

    list_display = ["name", "user", "prefix", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["revoked_at"]
    search_fields = ["name", "prefix", "user__username"]
    readonly_fields = [
        "user",
        "name",
        "prefix",
        "created_at",
        "last_used_at",
        "revoked_at",
        "revoked_by",
    ]
    exclude = ["digest"]
    actions = ["revoke"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # a revoked token stays, so the trail and the list still name it

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request: HttpRequest, queryset: Any) -> None:
        revoked = sum(revoke_token(token, request.user) for token in queryset)
        self.message_user(request, f"Revoked {revoked} token(s).", messages.SUCCESS)
