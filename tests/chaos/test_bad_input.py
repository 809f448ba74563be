"""Malformed plans, recovery files and idempotency reuse through the service layer and the CLI
(issue 13 point 2): each gets a clear error and changes nothing — every ledger table keeps its
row count (and the parent run its checksum)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from datasets.models import FrozenDataset, Question
from runs.ledger.idempotency import IdempotencyKeyReused
from runs.models import (
    Call,
    CallEvidence,
    Cell,
    RecoveryClaim,
    RecoveryRequest,
    Run,
    RunEvent,
    Target,
)
from runs.planning.plans import PlanError
from runs.planning.services import run_create
from runs.settlement.recovery import recovery_plan, recovery_submit
from srbench.refusals import Refusal
from tests import factories as f
from tests.cli_support import bench
from tests.runs import engine_support as es

pytestmark = pytest.mark.django_db(transaction=True)

TABLES = (
    Run,
    Cell,
    Call,
    CallEvidence,
    RunEvent,
    RecoveryRequest,
    RecoveryClaim,
    Target,
    FrozenDataset,
    Question,
)


def counts() -> dict[str, int]:
    return {m.__name__: m.objects.count() for m in TABLES}


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    # No broker in these tests: a doorbell that would ring is recorded instead.
    rung: list[int] = []
    monkeypatch.setattr("runs.engine.doorbell.run_dispatch", lambda *, run_id: rung.append(run_id))
    target = f.target_create(slug="sim-strong", prices={"sim-strong": es.PRICES["sim-strong"]})
    f.target_create(
        slug="sim-judge", model="sim-judge", prices={"sim-judge": es.PRICES["sim-judge"]}
    )
    dataset = es.fixture_dataset(["mmlu-pro"])
    owner = f.user_create(username="ops", staff=True)
    return {"target": target, "dataset": dataset, "owner": owner, "rung": rung}


def good_plan(world: dict[str, Any]) -> dict[str, Any]:
    return {"name": "ok", "dataset": world["dataset"].pk, "targets": ["sim-strong"]}


def malformed_plans(world: dict[str, Any]) -> list[tuple[str, Any]]:
    good = good_plan(world)
    return [
        ("empty", {}),
        ("no targets", {**good, "targets": []}),
        ("targets not a list", {**good, "targets": "sim-strong"}),
        ("unknown target", {**good, "targets": ["nope"]}),
        ("target twice", {**good, "targets": ["sim-strong", "sim-strong"]}),
        ("missing dataset", {**good, "dataset": 999_999}),
        ("dataset not a number", {**good, "dataset": "one"}),
        ("negative dataset", {**good, "dataset": -1}),
        ("unknown benchmark", {**good, "benchmarks": ["nope"]}),
        ("benchmark not in dataset", {**good, "benchmarks": ["arc"]}),
        ("zero concurrency", {**good, "limits": {"concurrency": 0}}),
        ("huge concurrency", {**good, "limits": {"concurrency": 10**9}}),
        ("negative budget", {**good, "limits": {"max_cost_usd": "-1"}}),
        ("budget not a number", {**good, "limits": {"max_cost_usd": "lots"}}),
        ("limits not an object", {**good, "limits": [1, 2]}),
        ("limits a string", {**good, "limits": "fast"}),
        ("sampling not an object", {**good, "sampling": "hot"}),
        ("temperature a string", {**good, "sampling": {"temperature": "warm"}}),
        ("unknown failure policy", {**good, "failure_policy": "retry"}),
        ("unknown mode", {**good, "mode": "dry"}),
        ("judges not an object", {**good, "judges": ["sim-judge"]}),
        ("zero slots", {**good, "slots": 0}),
        ("name too long", {**good, "name": "x" * 10_000}),
        ("name null", {**good, "name": None}),
        ("NUL in name", {**good, "name": "a\x00b"}),
    ]


def test_malformed_plans_are_refused_by_the_service_and_change_nothing(world):
    before = counts()
    accepted = []
    for label, plan in malformed_plans(world):
        try:
            run_create(owner=world["owner"], plan=plan)
        except PlanError as error:
            assert error.errors and str(error).strip(), label
        else:
            accepted.append(label)
        assert counts() == before or accepted, label
        assert world["rung"] == [], label
    assert accepted == [] and world["rung"] == []


# runs/interfaces/cli.py plan_from once did dict(plan.get("limits") or {}) and dict(plan.get("sampling") or {}):
# a plan file whose limits/sampling is a non-empty list or string raises TypeError/ValueError out
# of the command (a traceback, not "error: ..."). Fixed; tested separately below.
CLI_CRASHES = {"limits not an object", "limits a string", "sampling not an object"}
# json.loads raises RecursionError (not a ValueError) on deeply nested input: same traceback.
DEEP = b"[" * 5000 + b"]" * 5000


def test_a_plan_file_with_non_object_limits_or_sampling_or_deep_nesting_fails_the_cli_cleanly(
    world, tmp_path, capsys
):
    before = counts()
    for label, plan in malformed_plans(world):
        if label not in CLI_CRASHES:
            continue
        path = tmp_path / "plan.json"
        path.write_text(json.dumps(plan))
        code, _, err = bench(capsys, "plan", "--plan-file", str(path), "--user", "ops")
        assert code == 2 and err.startswith("error:"), (label, err)
        assert counts() == before
    path = tmp_path / "deep.json"
    path.write_bytes(DEEP)
    for verb in (["plan", "--plan-file"], ["recover", "1", "--idempotency-key", "k", "--plan"]):
        code, _, err = bench(capsys, *verb, str(path), "--user", "ops")
        assert code == 2 and err.startswith("error:"), (verb, err)


def test_malformed_plan_files_fail_the_cli_with_one_line_and_change_nothing(
    world, tmp_path, capsys
):
    files: list[tuple[str, Path]] = []
    for i, (label, plan) in enumerate(malformed_plans(world)):
        if label in CLI_CRASHES:
            continue
        path = tmp_path / f"plan-{i}.json"
        path.write_text(json.dumps(plan))
        files.append((label, path))
    for label, raw in [
        ("not JSON", b"{name: 'x'"),
        ("a list", b"[1, 2, 3]"),
        ("a string", b'"plan"'),
        ("empty file", b""),
        ("binary", bytes(range(256))),
        ("invalid UTF-8", b'{"name": "\xff\xfe"}'),
        (
            "huge number",
            b'{"name": "x", "dataset": 1' + b"0" * 5000 + b', "targets": ["sim-strong"]}',
        ),
    ]:
        path = tmp_path / f"raw-{len(files)}.json"
        path.write_bytes(raw)
        files.append((label, path))
    files.append(("missing file", tmp_path / "does-not-exist.json"))
    before = counts()
    for label, path in files:
        for verb in (["plan"], ["run", "--detach"]):
            code, out, err = bench(capsys, *verb, "--plan-file", str(path), "--user", "ops")
            assert code == 2, (label, verb, code, out, err)
            assert err.startswith("error:") and err.count("\n") == 1, (label, verb, err)
            assert "Traceback" not in err + out, label
            assert counts() == before, (label, verb)
    assert world["rung"] == []


def test_a_reused_run_idempotency_key_with_another_plan_is_refused(world, capsys):
    run, created = run_create(owner=world["owner"], plan=good_plan(world), idempotency_key="k1")
    assert created
    before = counts()
    again, created = run_create(owner=world["owner"], plan=good_plan(world), idempotency_key="k1")
    assert (again.pk, created) == (run.pk, False)
    with pytest.raises(IdempotencyKeyReused, match="idempotency key already used"):
        run_create(
            owner=world["owner"], plan={**good_plan(world), "name": "other"}, idempotency_key="k1"
        )
    code, _, err = bench(
        capsys,
        "run",
        "--dataset",
        str(world["dataset"].pk),
        "--target",
        "sim-strong",
        "--name",
        "other",
        "--idempotency-key",
        "k1",
        "--detach",
        "--user",
        "ops",
    )
    assert code == 2 and err.startswith("error:") and "idempotency" in err.lower(), err
    assert counts() == before and world["rung"] == [run.pk]


def interrupted_parent(world: dict[str, Any]) -> Run:
    """A terminal run as a crash leaves it: completed, sent_unknown and never-sent cells."""
    run, _ = run_create(owner=world["owner"], plan=good_plan(world))
    cells = list(Cell.objects.filter(run=run).order_by("pk"))
    done, unknown = cells[0], cells[1]
    Cell.objects.filter(pk=done.pk).update(status="completed", correct=True, scored=True)
    Cell.objects.filter(pk=unknown.pk).update(status="sent_unknown")
    call = f.call_create(
        cell=done,
        target=world["target"],
        status="completed",
        input_tokens=10,
        cached_input_tokens=0,
        cache_write_tokens=0,
        output_tokens=5,
        cost_usd="0.0001",
    )
    CallEvidence.objects.create(call=call, body=b"x", raw_size=1, sha256="0" * 64)
    f.call_create(cell=unknown, target=world["target"], status="sent_unknown")
    Run.objects.filter(pk=run.pk).update(status="interrupted", finished_at=timezone.now())
    run.refresh_from_db()
    return run


def test_malformed_recovery_plans_are_refused_and_change_nothing(world, tmp_path, capsys):
    run = interrupted_parent(world)
    plan = recovery_plan(run=run, mode="undispatched")
    eligible = [e["cell"] for e in plan["eligible_cells"]]
    ambiguous = [e["cell"] for e in plan["excluded"]]
    assert eligible and ambiguous
    sha = plan["plan_sha256"]
    bad: list[tuple[str, Any, str]] = [
        ("not an object", [1], "invalid_plan"),
        ("no mode", {"plan_sha256": sha}, "invalid_mode"),
        ("unknown mode", {"mode": "all", "plan_sha256": sha}, "invalid_mode"),
        ("no hash", {"mode": "undispatched"}, "recovery_plan_required"),
        ("short hash", {"mode": "undispatched", "plan_sha256": "abc"}, "recovery_plan_required"),
        (
            "hash of another plan",
            {"mode": "undispatched", "plan_sha256": "f" * 64},
            "recovery_plan_changed",
        ),
        ("cells not a list", {**plan, "selected_cells": "all"}, "invalid_selection"),
        ("cells as strings", {**plan, "selected_cells": [str(eligible[0])]}, "invalid_selection"),
        ("cells as bools", {**plan, "selected_cells": [True]}, "invalid_selection"),
        ("cell twice", {**plan, "selected_cells": [eligible[0], eligible[0]]}, "invalid_selection"),
        ("no cells", {**plan, "selected_cells": []}, "invalid_selection"),
        ("an ambiguous cell", {**plan, "selected_cells": ambiguous[:1]}, "cells_not_eligible"),
        ("a cell of another run", {**plan, "selected_cells": [10**9]}, "cells_not_eligible"),
        (
            "failed mode without cells",
            {**plan, "mode": "failed", "selected_cells": None},
            "invalid_selection",
        ),
    ]
    before = counts()
    for label, body, code in bad:
        with pytest.raises(Refusal) as error:
            recovery_submit(run=run, plan=body, idempotency_key=f"bad-{label}", user=world["owner"])
        assert error.value.code == code, (label, error.value.code, error.value.message)
        assert error.value.message, label
        assert counts() == before, label
    for label, key in [("empty key", ""), ("blank key", "   "), ("long key", "k" * 256)]:
        with pytest.raises(Refusal, match="(?i)idempotency.key"):
            recovery_submit(run=run, plan=plan, idempotency_key=key, user=world["owner"])
        assert counts() == before, label

    # The same through the CLI: files that are not plans, plans for another run, bad fields.
    files = []
    for label, body, _ in bad:
        path = tmp_path / f"recovery-{len(files)}.json"
        path.write_text(json.dumps(body))
        files.append((label, path))
    for label, raw in [
        ("not JSON", b"{"),
        ("binary", bytes(range(256))),
        ("empty", b""),
        ("for another run", json.dumps({**plan, "parent_run": run.pk + 1}).encode()),
    ]:
        path = tmp_path / f"recovery-{len(files)}.json"
        path.write_bytes(raw)
        files.append((label, path))
    files.append(("missing", tmp_path / "nope.json"))
    for label, path in files:
        code, out, err = bench(
            capsys,
            "recover",
            str(run.pk),
            "--plan",
            str(path),
            "--idempotency-key",
            f"cli-{label}",
            "--user",
            "ops",
        )
        assert code == 2 and err.startswith("error:") and err.count("\n") == 1, (label, err)
        assert "Traceback" not in out + err
        assert counts() == before, label
    assert world["rung"] == [run.pk]  # only the parent's own doorbell


def test_a_reused_recovery_key_with_another_selection_is_refused(world, tmp_path, capsys):
    run = interrupted_parent(world)
    plan = recovery_plan(run=run, mode="undispatched")
    eligible = [e["cell"] for e in plan["eligible_cells"]]
    assert len(eligible) >= 2
    first = {**plan, "selected_cells": eligible[:1]}
    child, created = recovery_submit(run=run, plan=first, idempotency_key="r1", user=world["owner"])
    assert created
    before = counts()
    again, created = recovery_submit(run=run, plan=first, idempotency_key="r1", user=world["owner"])
    assert (again.pk, created) == (child.pk, False)
    with pytest.raises(Refusal) as reused:
        recovery_submit(
            run=run,
            plan={**plan, "selected_cells": eligible[1:2]},
            idempotency_key="r1",
            user=world["owner"],
        )
    assert reused.value.code == "idempotency_key_reused" and reused.value.http_status == 422
    path = tmp_path / "other-selection.json"
    path.write_text(json.dumps({**plan, "selected_cells": eligible[1:2]}))
    code, _, err = bench(
        capsys,
        "recover",
        str(run.pk),
        "--plan",
        str(path),
        "--idempotency-key",
        "r1",
        "--user",
        "ops",
    )
    assert code == 2 and "idempotency key 'r1' was already used" in err, err
    # Another key for a cell the first recovery claimed: refused, nothing created.
    with pytest.raises(Refusal) as claimed:
        recovery_submit(run=run, plan=first, idempotency_key="r2", user=world["owner"])
    assert claimed.value.code in ("recovery_plan_changed", "cells_not_eligible")
    assert counts() == before
    assert world["rung"] == [run.pk, child.pk]  # the parent's doorbell, then the child's
