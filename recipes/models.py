"""Frozen, redacted router recipes (R12)."""

from django.db import models
from django.db.models import Q

from srbench.ledger import HEX64_REGEX


class Recipe(models.Model):
    run = models.ForeignKey("runs.Run", on_delete=models.PROTECT, related_name="recipes")
    target = models.ForeignKey("runs.Target", on_delete=models.PROTECT, related_name="recipes")
    captured_at = models.DateTimeField()
    projection_sha256 = models.CharField(max_length=64)
    source_config_hash = models.CharField(max_length=64)
    generated_config_hash = models.CharField(max_length=64)
    active_config_hash = models.CharField(max_length=64)
    etag = models.CharField(max_length=200)
    body = models.JSONField()
    redactions = models.JSONField(default=list)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "target"], name="recipe_once_per_run_target"),
            models.CheckConstraint(
                condition=Q(projection_sha256__regex=HEX64_REGEX)
                & Q(generated_config_hash__regex=HEX64_REGEX)
                & Q(active_config_hash__regex=HEX64_REGEX),
                name="recipe_hashes_hex",
            ),
            # A recipe is stored only when the router ran the pinned config (R12.2).
            models.CheckConstraint(
                condition=Q(generated_config_hash=models.F("active_config_hash")),
                name="recipe_generated_equals_active",
            ),
        ]
