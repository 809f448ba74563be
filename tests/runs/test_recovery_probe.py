"""Recovery and re-judge as a demanding user drives them through the API and the CLI (the third
outside probe, session 6): names at the column's limit, recoveries of recovery children, a run
still going, repeated and concurrent submissions, bad bodies. Ledger rows are built directly;
no model is called."""

from __future__ import annotations

import pytest
from django.utils import timezone

from runs.models import Run
from runs.planning.services import run_create
from tests import factories as f
from tests.runs import engine_support as es

pytestmark = pytest.mark.django_db

NAME_MAX = Run._meta.get_field("name").max_length


def _interrupted_parent(owner, *, name: str = "parent", benchmarks=("mmlu-pro",)) -> Run:
    f.target_create(slug="sim-strong", prices={"sim-strong": es.PRICES["sim-strong"]})
    run, _ = run_create(
        owner=owner,
        plan={
            "name": name,
            "dataset": es.fixture_dataset(list(benchmarks)).pk,
            "targets": ["sim-strong"],
        },
    )
    Run.objects.filter(pk=run.pk).update(status="interrupted", finished_at=timezone.now())
    run.refresh_from_db()
    return run


def _recover(client, run: Run, key: str, **body):
    plan = client.get(f"/api/v1/runs/{run.pk}/recovery-plan/", {"mode": "undispatched"}).json()
    return client.post(
        f"/api/v1/runs/{run.pk}/recover/",
        {"plan_sha256": plan["plan_sha256"], "mode": "undispatched", **body},
        content_type="application/json",
        headers={"Idempotency-Key": key},
    )


def test_a_run_named_to_the_column_limit_and_its_recovery_of_a_recovery_are_recovered(client):
    """A plan's name may be 200 characters; its recovery child's name adds " · recovery (…)"
    and was written uncut: the recovery answered 500 (value too long) and created nothing.
    The child's name is cut to the column, as a re-judge child's always was; a recovery of
    that child (cells never dispatched there either) works the same way."""
    owner = f.user_create()
    client.force_login(owner)
    run = _interrupted_parent(owner, name="n" * NAME_MAX)
    answer = _recover(client, run, "long-name")
    assert answer.status_code == 201, answer.content
    child = Run.objects.get(pk=answer.json()["id"])
    assert child.name == ("n" * NAME_MAX)[:NAME_MAX] and len(child.name) == NAME_MAX
    # The manifest keeps the whole name the child was given (the plan hash covers it).
    assert child.manifest["name"] == "n" * NAME_MAX + " · recovery (undispatched)"

    Run.objects.filter(pk=child.pk).update(status="cancelled", finished_at=timezone.now())
    grandchild = _recover(client, child, "long-name-2")
    assert grandchild.status_code == 201, grandchild.content
    assert Run.objects.get(pk=grandchild.json()["id"]).parent_id == child.pk
