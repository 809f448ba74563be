"""Admin for operators: targets are registered here; evidence is view-only."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest

from runs import models
from runs.services import target_set_api_key


class TargetAdminForm(forms.ModelForm):
    api_key = forms.CharField(
        required=False,
        strip=True,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text="Write-only. Leave empty to keep the stored key; it is never shown again.",
    )
    clear_api_key = forms.BooleanField(required=False, help_text="Remove the stored key.")

    class Meta:
        model = models.Target
        fields = [
            "slug",
            "name",
            "kind",
            "base_url",
            "model",
            "api_key_env",
            "fixed_params",
            "prices",
            "config_hash",
            "preview_url",
            "capture_recipe",
            "max_inference_calls",
            "errors_billed",
            "active",
        ]


@admin.register(models.Target)
class TargetAdmin(admin.ModelAdmin):
    form = TargetAdminForm
    list_display = [
        "slug",
        "name",
        "kind",
        "model",
        "base_url",
        "errors_billed",
        "active",
        "has_stored_key",
    ]
    list_filter = ["kind", "active"]
    search_fields = ["slug", "name", "model"]
    fieldsets = [
        (None, {"fields": ["slug", "name", "kind", "active"]}),
        ("Endpoint", {"fields": ["base_url", "model", "api_key", "clear_api_key", "api_key_env"]}),
        ("Request and prices", {"fields": ["fixed_params", "prices", "errors_billed"]}),
        (
            "MoM router",
            {"fields": ["config_hash", "preview_url", "capture_recipe", "max_inference_calls"]},
        ),
    ]

    @admin.display(boolean=True, description="stored key")
    def has_stored_key(self, obj: models.Target) -> bool:
        return models.TargetSecret.objects.filter(target=obj).exists()

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        if form.cleaned_data.get("clear_api_key"):
            target_set_api_key(target=obj, api_key="")
        elif form.cleaned_data.get("api_key"):
            target_set_api_key(target=obj, api_key=form.cleaned_data["api_key"])


class ViewOnlyAdmin(admin.ModelAdmin):
    """Evidence is never edited by hand: it is what the money bought."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(models.Run)
class RunAdmin(ViewOnlyAdmin):
    list_display = ["id", "name", "mode", "status", "profile", "owner", "created_at"]
    list_filter = ["status", "mode", "profile"]
    search_fields = ["name"]


@admin.register(models.Cell)
class CellAdmin(ViewOnlyAdmin):
    list_display = ["id", "run", "benchmark", "target", "slot", "status", "correct"]
    list_filter = ["status", "benchmark"]


@admin.register(models.Call)
class CallAdmin(ViewOnlyAdmin):
    list_display = ["id", "cell", "role", "sequence", "status", "served_model", "cost_usd"]
    list_filter = ["status", "role"]
    exclude = ["request"]


@admin.register(models.CallEvidence)
class CallEvidenceAdmin(ViewOnlyAdmin):
    list_display = ["call", "raw_size", "sha256", "created_at"]
    exclude = ["body"]


@admin.register(models.UsageCorrection)
class UsageCorrectionAdmin(ViewOnlyAdmin):
    list_display = ["run", "version", "verified_count", "changed_count", "created_at"]


@admin.register(models.RunEvent)
class RunEventAdmin(ViewOnlyAdmin):
    list_display = ["run", "seq", "type", "created_at"]
    list_filter = ["type"]


@admin.register(models.RecoveryRequest)
class RecoveryRequestAdmin(ViewOnlyAdmin):
    list_display = ["parent", "idempotency_key", "mode", "child", "created_at"]
