from django.contrib import admin

from datasets import models
from srbench.admin_base import ViewOnlyAdmin


@admin.register(models.Source)
class SourceAdmin(ViewOnlyAdmin):
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
class FrozenDatasetAdmin(ViewOnlyAdmin):
    list_display = ["name", "profile", "seed", "split", "identity_sha256", "created_at"]
    list_filter = ["profile", "split"]


@admin.register(models.Question)
class QuestionAdmin(ViewOnlyAdmin):
    """The public payload only; secrets are not registered in the admin at all (R9.3)."""

    list_display = ["benchmark", "native_id", "subject"]
    list_filter = ["benchmark"]
    search_fields = ["native_id", "subject"]
