"""Shared pieces of the append-only ledger: constants and the immutable-record guard."""

from __future__ import annotations

from typing import Any

from django.db import models

HEX64_REGEX = r"^[0-9a-f]{64}$"


class ImmutableRecordError(Exception):
    """Raised when code tries to change or delete a record the ledger keeps forever."""


class AppendOnlyQuerySet(models.QuerySet):
    """Bulk updates and deletes are refused: evidence, corrections and events are written once.

    This is the second line; PostgreSQL triggers (migrations) are the first.
    """

    def update(self, **kwargs: Any) -> int:
        raise ImmutableRecordError(f"{self.model.__name__} rows are append-only")

    def delete(self) -> tuple[int, dict[str, int]]:
        raise ImmutableRecordError(f"{self.model.__name__} rows are append-only")


class AppendOnlyModel(models.Model):
    objects = AppendOnlyQuerySet.as_manager()

    class Meta:
        abstract = True

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise ImmutableRecordError(f"{type(self).__name__} {self.pk} is append-only")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise ImmutableRecordError(f"{type(self).__name__} {self.pk} is append-only")
