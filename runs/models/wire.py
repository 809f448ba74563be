"""Which API a target speaks on the wire (issue 37 item 4): its own module so that
``runs.models`` stays within its size; ``runs.models`` re-exports it."""

from __future__ import annotations

from django.db import models


class WireApi(models.TextChoices):
    OPENAI = "openai", "OpenAI chat completions (/chat/completions)"
    ANTHROPIC = "anthropic", "Anthropic Messages API (/messages)"
