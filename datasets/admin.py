from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from datasets import models


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(models.Source)
class SourceAdmin(ReadOnlyAdmin):
    list_display = [
        "benchmark",
        "profile",
        "seed",
        "split",
        "count",
        "requested_count",
        "synthetic",
    ]
    list_filter = ["benchmark", "profile", "split", "synthetic"]


@admin.register(models.FrozenDataset)
class FrozenDatasetAdmin(ReadOnlyAdmin):
    list_display = ["name", "profile", "seed", "split", "identity_sha256", "created_at"]
    list_filter = ["profile", "split"]


@admin.register(models.Question)
class QuestionAdmin(ReadOnlyAdmin):
    """The public payload only; secrets are not registered in the admin at all (R9.3)."""

    list_display = ["benchmark", "native_id", "subject"]
    list_filter = ["benchmark"]
    search_fields = ["native_id", "subject"]
