"""The one rule for append-only, versioned records of a run (issue 24): usage corrections
(runs/reporting/reconcile.py) and regrades (runs/settlement/regrade.py) never change what they correct; each new
reading is the next version, and the same input read twice is the same version.

``version_append`` runs inside the caller's transaction, so the caller can write its event in
the same commit; the caller then calls ``version_appended`` last in that transaction, so what
keeps state derived from the record (the stored report, issue 38 item 1) stores the state
that commits, in the same commit. The run row lock serialises concurrent appends to one run: two readers of the
latest version cannot both write version n + 1 (the unique constraint on (run, version) would
refuse the second, but the lock makes the loser wait and then find the winner's row).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import connection, models
from django.db.models import Max

from runs.models import Run

# Called as hook(run_id=...) by `version_appended`, inside the transaction that appended a new
# version. Registered in `RunsConfig.ready` (`runs.reporting.stored_report.report_keep_appended`): the
# report depends on the records, and `runs.reporting.report` reads them, so the records cannot import it.
append_hooks: list[Callable[..., Any]] = []


def register_append_hook(hook: Callable[..., Any]) -> None:
    """Add a hook called after each new version; registering it again is a no-op."""
    if hook not in append_hooks:
        append_hooks.append(hook)


def version_appended(*, run_id: int) -> None:
    """Every append hook, for a run whose record just got a new version. Call it last in the
    transaction that appended it (after its event), so the state a hook keeps is the state
    that commits."""
    if not connection.in_atomic_block:
        raise RuntimeError("version_appended must run inside the appending transaction")
    for hook in list(append_hooks):
        hook(run_id=run_id)


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
