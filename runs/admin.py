"""Admin for operators: targets are registered here; evidence is view-only."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.views.decorators.http import require_POST

from runs import models
from runs.interfaces.admin_forms import PriceTableField
from runs.interfaces.health import target_health_check
from runs.models.preflight import PreflightCall, PreflightStatus, TargetPreflight
from runs.planning.fixed_params import fixed_params_errors
from runs.planning.services import target_set_api_key
from runs.preflight.checks import PreflightRefused, preflight_quote, target_preflight
from runs.reporting.effective import CallEffectiveCost, call_effective_costs
from srbench.admin_base import ViewOnlyAdmin
from srbench.money import usd_text


class TargetAdminForm(forms.ModelForm):
    api_key = forms.CharField(
        required=False,
        strip=True,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text="Write-only. Leave empty to keep the stored key; it is never shown again.",
    )
    clear_api_key = forms.BooleanField(required=False, help_text="Remove the stored key.")
    prices = PriceTableField(required=False, label="Prices")

    class Meta:
        model = models.Target
        fields = [
            "slug",
            "name",
            "kind",
            "base_url",
            "api",
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

    def clean_fixed_params(self) -> Any:
        """Known chat parameters of the right type and range only (`runs.planning.fixed_params`): a
        bad value is refused here rather than sent with every call of a run."""
        value = self.cleaned_data.get("fixed_params")
        errors = fixed_params_errors(value if value is not None else {})
        if errors:
            raise forms.ValidationError(errors)
        return value


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
        (
            "Endpoint",
            {"fields": ["base_url", "api", "model", "api_key", "clear_api_key", "api_key_env"]},
        ),
        ("Request and prices", {"fields": ["fixed_params", "prices", "errors_billed"]}),
        (
            "MoM router",
            {"fields": ["config_hash", "preview_url", "capture_recipe", "max_inference_calls"]},
        ),
    ]

    change_form_template = "admin/runs/target/change_form.html"

    def get_urls(self) -> list[Any]:
        health = self.admin_site.admin_view(require_POST(self.health_view))
        preflight = self.admin_site.admin_view(self.preflight_view)
        return [
            path("<int:object_id>/health/", health, name="runs_target_health"),
            path("<int:object_id>/preflight/", preflight, name="runs_target_preflight"),
            *super().get_urls(),
        ]

    def health_view(self, request: HttpRequest, object_id: int) -> HttpResponse:
        """POST only (it sends traffic): GET {base_url}/models, timed, shown as a message."""
        target = get_object_or_404(models.Target, pk=object_id)
        if not self.has_change_permission(request, target):
            raise PermissionDenied
        check = target_health_check(target=target)
        level = messages.SUCCESS if check.ok and check.model_listed is not False else messages.ERROR
        self.message_user(request, f"Health check of {target.slug}: {check.summary()}", level)
        return HttpResponseRedirect(reverse("admin:runs_target_change", args=[target.pk]))

    def preflight_view(self, request: HttpRequest, object_id: int) -> HttpResponse:
        """Beside the health check (issue 39): GET quotes the preflight's worst case and shows
        the latest one; POST, with that quote echoed, sends it (an operator's action)."""
        target = get_object_or_404(models.Target, pk=object_id)
        if not self.has_change_permission(request, target):
            raise PermissionDenied
        if request.method == "POST":
            confirm = request.POST.get("confirm_worst_case_usd") or None
            try:
                preflight = target_preflight(
                    target=target, confirm_worst_case_usd=confirm, user=request.user
                )
            except PreflightRefused as exc:
                self.message_user(request, f"Preflight of {target.slug}: {exc}", messages.ERROR)
            else:
                level = (
                    messages.SUCCESS
                    if preflight.status == PreflightStatus.COMPLETED
                    else messages.ERROR
                )
                self.message_user(
                    request,
                    f"Preflight #{preflight.pk} of {target.slug}: {preflight.status}",
                    level,
                )
            return HttpResponseRedirect(reverse("admin:runs_target_preflight", args=[target.pk]))
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "original": target,
            "title": f"Preflight of {target.slug}",
            "quote": preflight_quote(target=target),
            "latest": target.preflights.order_by("-created_at", "-pk").first(),
        }
        return TemplateResponse(request, "admin/runs/target/preflight.html", context)

    @admin.display(boolean=True, description="stored key")
    def has_stored_key(self, obj: models.Target) -> bool:
        return models.TargetSecret.objects.filter(target=obj).exists()

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        if form.cleaned_data.get("clear_api_key"):
            target_set_api_key(target=obj, api_key="")
        elif form.cleaned_data.get("api_key"):
            target_set_api_key(target=obj, api_key=form.cleaned_data["api_key"])


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
    """Each call at the cost the run's report counts for it (`call_effective_costs`: after a
    usage correction, the corrected one; a known-unbilled failure, 0) beside the recorded one."""

    list_display = [
        "id",
        "cell",
        "role",
        "sequence",
        "status",
        "served_model",
        "counted_cost",
        "recorded_cost",
    ]
    list_filter = ["status", "role"]
    exclude = ["request"]
    readonly_fields = ["counted_cost"]

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return _CallChangeList

    @admin.display(description="counted cost")
    def counted_cost(self, call: models.Call) -> str:
        counted = getattr(call, "counted", None)
        if counted is None:
            counted = _counted_costs([call.pk]).get(call.pk)
        cost = None if counted is None else counted.cost_usd
        note = "" if counted is None or not counted.note else f" ({counted.note})"
        return usd_text(cost) + note

    @admin.display(description="recorded cost", ordering="cost_usd")
    def recorded_cost(self, call: models.Call) -> str:
        return usd_text(call.cost_usd)


def _counted_costs(call_ids: list[int]) -> dict[int, CallEffectiveCost]:
    """What each call's run's report counts for it, one query per run of the calls."""
    by_run: dict[int, list[int]] = defaultdict(list)
    for pk, run_id in models.Call.objects.filter(pk__in=call_ids).values_list("pk", "cell__run_id"):
        by_run[run_id].append(pk)
    counted: dict[int, CallEffectiveCost] = {}
    for run_id, ids in by_run.items():
        counted |= call_effective_costs(run_id=run_id, call_ids=ids)
    return counted


class _CallChangeList(ChangeList):
    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        counted = _counted_costs([call.pk for call in self.result_list])
        for call in self.result_list:
            call.counted = counted.get(call.pk)


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


@admin.register(TargetPreflight)
class TargetPreflightAdmin(ViewOnlyAdmin):
    list_display = ["id", "target", "status", "created_at", "cost_usd", "cuts_at", "context_tokens"]
    list_filter = ["status"]


@admin.register(PreflightCall)
class PreflightCallAdmin(ViewOnlyAdmin):
    list_display = ["preflight", "sequence", "purpose", "status", "http_status", "cost_usd"]
    exclude = ["request"]
