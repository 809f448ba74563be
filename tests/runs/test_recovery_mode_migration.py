"""Migration 0023: a judge-only recovery written before it (its request row said
"undispatched", its child's manifest "judge_only") is named judge_only; an undispatched one
stays undispatched."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from runs.models import RecoveryRequest
from tests import factories as f

H = "0" * 64


@pytest.mark.django_db(transaction=True)
def test_judge_only_requests_written_before_0023_are_named_from_their_childs_manifest():
    parent = f.run_create(status="interrupted", finished_at=timezone.now())
    judged = f.run_create(parent=parent, manifest={"recovery": {"mode": "judge_only"}})
    resent = f.run_create(parent=parent, manifest={"recovery": {"mode": "undispatched"}})
    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes()
    executor.migrate([("runs", "0022_stored_router_names")])
    try:
        with connection.cursor() as cur:
            for key, child in (("a", judged), ("b", resent)):
                cur.execute(
                    "INSERT INTO runs_recoveryrequest (parent_id, owner_id, idempotency_key, "
                    "mode, plan_sha256, selected_cells_sha256, acknowledged_new_attempt, "
                    "child_id, created_at) VALUES (%s, %s, %s, 'undispatched', %s, %s, false, "
                    "%s, now())",
                    [parent.pk, parent.owner_id, key, H, H, child.pk],
                )
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(latest)
    modes = dict(RecoveryRequest.objects.values_list("child_id", "mode"))
    assert modes == {judged.pk: "judge_only", resent.pk: "undispatched"}
