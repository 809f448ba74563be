"""Recovery and re-judge as a demanding user drives them through the API and the CLI (the third
outside probe, session 6): names at the column's limit, recoveries of recovery children, a run
still going, repeated and concurrent submissions, bad bodies. Ledger rows are built directly;
no model is called."""

from __future__ import annotations

import itertools
import threading

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from runs.models import Run, Target
from runs.planning.services import run_create
from runs.settlement.recovery import recovery_plan
from tests import factories as f
from tests.conftest import purge_broker
from tests.runs import engine_support as es

pytestmark = pytest.mark.django_db

_seq = itertools.count(1)
NAME_MAX = Run._meta.get_field("name").max_length


def _interrupted_parent(owner, *, name: str = "parent", benchmarks=("mmlu-pro",)) -> Run:
    if not Target.objects.filter(slug="sim-strong").exists():
        f.target_create(slug="sim-strong", prices={"sim-strong": es.PRICES["sim-strong"]})
    run, _ = run_create(
        owner=owner,
        plan={
            "name": name,
            "dataset": es.fixture_dataset(list(benchmarks), name=f"fixtures {next(_seq)}").pk,
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


def _concurrently(n: int, request) -> list:
    """`request(i)` from n threads released together, each on its own database connection."""
    barrier = threading.Barrier(n)
    answers: list = [None] * n

    def one(i: int) -> None:
        try:
            barrier.wait(timeout=30)
            answers[i] = request(i)
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            answers[i] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return answers


@pytest.mark.django_db(transaction=True)
def test_concurrent_submissions_of_one_plan_make_one_child(transactional_db):
    """Four submissions of one reviewed plan at once: with one key, one child (201) and three
    replays of it (200); with four keys, one child and three refusals (409), never two children
    or a 500."""
    purge_broker()
    owner = f.user_create()
    run = _interrupted_parent(owner)
    plan = recovery_plan(run=run, mode="undispatched")
    body = {"plan_sha256": plan["plan_sha256"], "mode": "undispatched"}

    def post(key: str):
        c = Client()
        c.force_login(owner)
        return c.post(
            f"/api/v1/runs/{run.pk}/recover/",
            body,
            content_type="application/json",
            headers={"Idempotency-Key": key},
        )

    same = _concurrently(4, lambda i: post("same"))
    assert all(not isinstance(a, BaseException) for a in same), same
    assert sorted(a.status_code for a in same) == [200, 200, 200, 201], [a.content for a in same]
    assert len({a.json()["id"] for a in same}) == 1
    assert Run.objects.filter(parent=run).count() == 1

    other = _interrupted_parent(owner, name="other")
    run = other
    plan = recovery_plan(run=run, mode="undispatched")
    body = {"plan_sha256": plan["plan_sha256"], "mode": "undispatched"}
    keys = _concurrently(4, lambda i: post(f"key-{i}"))
    assert all(not isinstance(a, BaseException) for a in keys), keys
    codes = sorted(a.status_code for a in keys)
    assert codes == [201, 409, 409, 409], [a.content for a in keys]
    assert Run.objects.filter(parent=run).count() == 1
    purge_broker()


def test_a_submission_is_refused_when_its_plan_is_no_object_or_its_selection_given_twice(client):
    """Bad bodies that were accepted (session 6 probe): `plan` as a string was dropped and the
    top-level hash submitted (201); a top-level `selected_cells: null` beside a whole plan with
    a reviewed subset widened it to every eligible cell. Both are refused (400), nothing is
    created; the same values given once are accepted. A hash given in upper case is said to be
    malformed, not missing."""
    owner = f.user_create()
    client.force_login(owner)
    run = _interrupted_parent(owner)
    plan = recovery_plan(run=run, mode="undispatched")
    top = {"plan_sha256": plan["plan_sha256"], "mode": "undispatched"}
    subset = {**top, "selected_cells": plan["selected_cells"][:1]}
    url = f"/api/v1/runs/{run.pk}/recover/"

    def post(body, key):
        return client.post(
            url, body, content_type="application/json", headers={"Idempotency-Key": key}
        )

    for label, body, field in [
        ("plan as text", {**top, "plan": "x"}, "plan"),
        ("plan as a list", {**top, "plan": [1]}, "plan"),
        ("wider selection", {"plan": subset, "selected_cells": None}, "selected_cells"),
        ("other selection", {"plan": subset, "selected_cells": plan["selected_cells"][1:2]},
         "selected_cells"),
    ]:  # fmt: skip
        answer = post(body, label)
        assert answer.status_code == 400, (label, answer.content)
        assert answer.json()["code"] == "invalid" and answer.json()["detail"] == {"field": field}
    upper = post({**top, "plan_sha256": top["plan_sha256"].upper()}, "upper")
    assert upper.status_code == 400 and upper.json()["code"] == "recovery_plan_required"
    assert "64 lower-case hexadecimal digits" in upper.json()["error"]
    assert not Run.objects.filter(parent=run).exists()

    same = post({"plan": subset, "selected_cells": subset["selected_cells"]}, "same")
    assert same.status_code == 201, same.content
    assert same.json()["recovery"]["selected_cells"]["count"] == 1


def test_a_regrade_with_a_judge_cost_but_no_rejudge_is_refused(client):
    """`confirm_judge_cost` without `rejudge: true` ran a plain regrade (200) and dropped the
    confirmed amount: the caller asked for a re-judge. Refused (400); nothing is regraded."""
    owner = f.user_create()
    client.force_login(owner)
    run = _interrupted_parent(owner)
    answer = client.post(
        f"/api/v1/runs/{run.pk}/regrade/",
        {"confirm_judge_cost": "1"},
        content_type="application/json",
    )
    assert answer.status_code == 400, answer.content
    assert "confirm_judge_cost" in answer.json()["detail"]
    assert not run.regrades.exists()
