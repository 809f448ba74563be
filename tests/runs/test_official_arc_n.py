"""The n beside ARC's official pass@2 (third outside probe, session 6): unknown is null, and the
count beside it says truthfully how many tasks were measured — never a 0 for tasks that were
not read. Runs built in the ledger (tests/runs/official_support.py); no model call."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from runs.reporting.official_metrics import official_metrics
from runs.reporting.report import run_report
from tests import factories as f
from tests.runs import official_support as o

pytestmark = pytest.mark.django_db

ARC_TASKS = len(o.ARC_OUTPUTS)


def _arc(run, slug: str) -> tuple[dict, dict]:
    """(the report's ARC official section, the named pass@2 metric) of one target."""
    target = next(t for t in run_report(run=run)["targets"] if t["slug"] == slug)
    metric = next(m for m in official_metrics(target["official"]) if m["benchmark"] == "arc")
    return target["official"]["benchmarks"]["arc"], metric


def test_one_attempt_per_question_counts_its_arc_tasks_beside_an_unknown_pass_at_2():
    """With one attempt per question pass@2 is unknown (null); its four tasks were graded at
    that one attempt. The report said `tasks: 0` and the metric `n: 0` (the cells were never
    read), so a reader saw "no ARC task"; both say 4 now, and the page's n column too."""
    run = o.official_run("one attempt", slots=1)
    section, metric = _arc(run, "strong")
    assert section["value"] is None and "one attempt per question" in section["reason"]
    assert section["tasks"] == ARC_TASKS and section["tasks_measured"] == ARC_TASKS
    assert metric["value"] is None and metric["n"] == ARC_TASKS and metric["n_unit"] == "tasks"

    api = APIClient()
    api.force_authenticate(f.user_create(username="ops", staff=True))
    export = api.get(f"/api/v1/runs/{run.pk}/export/").json()
    (arc,) = [m for m in export["official"]["strong"] if m["benchmark"] == "arc"]
    assert arc["value"] is None and arc["n"] == ARC_TASKS


def test_a_pass_at_2_unknown_for_one_attempt_counts_only_the_tasks_measured():
    """Target cheap: one task's second attempt has no per-output record, so pass@2 is unknown;
    three tasks were measured. n said 4 (every task, the unmeasured one too); it says 3. A known
    pass@2 (target strong) keeps n = every task."""
    run = o.official_run("partly measured")
    section, metric = _arc(run, "cheap")
    assert section["value"] is None and section["tasks"] == ARC_TASKS
    assert section["tasks_measured"] == ARC_TASKS - 1
    assert metric["value"] is None and metric["n"] == ARC_TASKS - 1
    _, strong = _arc(run, "strong")
    assert strong["value"] is not None and strong["n"] == ARC_TASKS
