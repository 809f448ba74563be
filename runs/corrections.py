"""The one rule for append-only, versioned records of a run (issue 24): usage corrections
(runs/reconcile.py) and regrades (runs/regrade.py) never change what they correct; each new
reading is the next version, and the same input read twice is the same version.

``version_append`` runs inside the caller's transaction, so the caller can write its event in
the same commit. The run row lock serialises concurrent appends to one run: two readers of the
latest version cannot both write version n + 1 (the unique constraint on (run, version) would
refuse the second, but the lock makes the loser wait and then find the winner's row).
"""

from __future__ import annotations

from typing import Any

from django.db import connection, models
from django.db.models import Max

from runs.models import Run


def version_append[Record: models.Model](
    model: type[Record], *, run_id: int, key: dict[str, Any], fields: dict[str, Any]
) -> tuple[Record, bool]:
    """(record, created): the run's record already made from ``key`` (the input's hash), or
    a new one with the next version and ``fields``."""
    if not connection.in_atomic_block:
        raise RuntimeError("version_append must run inside the caller's transaction")
    Run.objects.select_for_update().filter(pk=run_id).values_list("pk").get()
    rows = model._default_manager.filter(run_id=run_id)
    existing = rows.filter(**key).first()
    if existing is not None:
        return existing, False
    latest = rows.aggregate(v=Max("version"))["v"] or 0
    record = model._default_manager.create(run_id=run_id, version=latest + 1, **key, **fields)
    return record, True
