"""The report users fetch is the report kept at run end (issue 38 item 1).

`GET /api/v1/runs/ID/report/` — and so `benchmark report` and the report `benchmark run` prints
at its end — and the exports read the report the run finish kept (`RunReport`, keyed by the
ledger's fingerprint and the report code's version: `runs.reporting.report.report_key`) instead of
computing it on every request (659–666 ms at 100,000 cells). It is computed again only when
it is stale:

- a usage correction or a regrade appends a new version of its record and, in the same
  transaction, stores the report of the state it commits (`report_keep_appended`, the append
  hook of `runs.ledger.corrections`, registered in `RunsConfig.ready`);
- a run that ended without its end-of-run work (it ended before that work existed, or the
  work failed) gets it on its first read, once: `runs.engine.finish.run_report_keep` (the
  report under its lock, then the run-end hooks), and the workers' recovery pass does it for
  such runs before anyone reads them (`runs.engine.finish.runs_report_backfill`);
- a run in progress has no stored report: its report is computed on each read.

What is served is the stored JSON itself and, beside it, `report_version`: what it was kept
under (`key`), the report code's version, the usage correction and the regrade it reflects,
when it was computed, and whether it was read from the stored row.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Max

from runs.engine.finish import run_report_keep
from runs.ledger.hooks import run_end
from runs.ledger.selectors import run_settled_fingerprint
from runs.models import Regrade, Run, RunReport
from runs.reporting.report import (
    REPORT_CACHE_VERSION,
    report_key,
    run_report_compute,
    run_report_settled,
    run_report_store,
)
from runs.reporting.report_types import report_doc

__all__ = ["report_keep_appended", "report_version", "run_report_served"]

log = logging.getLogger(__name__)


def report_version(
    doc: dict[str, Any],
    *,
    key: str | None,
    regrade: int | None,
    computed_at: datetime | None,
    stored: bool,
) -> dict[str, Any]:
    """The version of a served report (`report_version` in the API's answer): `key`, the name
    it is stored under (the ledger's fingerprint and the report code's version; null for a run
    in progress, whose report is never kept); `code`, the report code's version; the usage
    correction and the regrade it reflects (their versions, null for none); when it was
    computed; `stored`: read from the kept row (false: computed for this request)."""
    correction = doc.get("usage_correction")
    return {
        "key": key,
        "code": REPORT_CACHE_VERSION,
        "usage_correction": None if correction is None else correction["version"],
        "regrade": regrade,
        # A report computed for this read has no time of its own: it is the ledger as it
        # stands, and two reads of one ledger give one document.
        "computed_at": None if computed_at is None else computed_at.isoformat(),
        "stored": stored,
    }


def _latest_regrade(run_id: int) -> int | None:
    return Regrade.objects.filter(run_id=run_id).aggregate(v=Max("version"))["v"]


def _kept(run_id: int, key: str) -> tuple[str, datetime] | None:
    return (
        RunReport.objects.filter(run_id=run_id, fingerprint=key)
        .values_list("report_json", "computed_at")
        .first()
    )


def report_keep_settled(*, run_id: int) -> None:
    """Store an ended run's report (the report keeper `RunsConfig.ready()` registers in
    `runs.ledger.hooks`; the engine's run end calls it)."""
    run_report_settled(run=Run.objects.get(pk=run_id))


def run_report_served(*, run: Run) -> dict[str, Any]:
    """The run's report as the API, the CLI and the exports give it (`report_doc` plus
    `report_version`). A settled run's is the stored one; when none is stored under the
    ledger's current state, the end-of-run work is done first (once: concurrent readers wait
    for the one computing it). A run in progress, or one whose ledger moved while its report
    was kept, gets a report computed for this request, and says so (`stored`: false)."""
    fingerprint = run_settled_fingerprint(run)
    key = None if fingerprint is None else report_key(fingerprint)
    kept = None if key is None else _kept(run.pk, key)
    if key is not None and kept is None:
        run_report_keep(run_id=run.pk)  # the end-of-run work this run ended without
        kept = _kept(run.pk, key)
    regrade = None if key is None else _latest_regrade(run.pk)
    if kept is None:
        doc = report_doc(run_report_compute(run=run))
        return {
            **doc,
            "report_version": report_version(
                doc, key=None, regrade=regrade, computed_at=None, stored=False
            ),
        }
    doc = json.loads(kept[0])
    return {
        **doc,
        "report_version": report_version(
            doc, key=key, regrade=regrade, computed_at=kept[1], stored=True
        ),
    }


def report_keep_appended(*, run_id: int) -> None:
    """The append hook of `runs.ledger.corrections` (a usage correction or a regrade just got a new
    version): store the run's report under the state the appending transaction commits, in
    that transaction (it holds the run row, so nothing else moves the state meanwhile); after
    the commit, the run-end hooks keep what they derive from the ledger (compare's per-cell
    figures) under the new state too. A failure is logged and rolled back to a savepoint,
    never the record's: the report is then computed again on its next read."""
    run = Run.objects.get(pk=run_id)
    fingerprint = run_settled_fingerprint(run)
    if fingerprint is None:  # records are appended to ended runs only; nothing to keep
        return
    try:
        with transaction.atomic():
            report = run_report_compute(run=run)
            run_report_store(run_id=run_id, fingerprint=report_key(fingerprint), report=report)
    except Exception:
        log.exception("storing the report of run %s with its new record failed", run_id)
        return
    transaction.on_commit(lambda: run_end(run_id=run_id))
