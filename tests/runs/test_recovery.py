"""Explicit recovery (R15, issue 10): reconcile first, review a plan, create an independent
child run over the selected cells only, idempotently; never send a dispatched call twice and
never modify the parent."""

from __future__ import annotations

import json
import signal
import threading
from datetime import timedelta
from decimal import Decimal

import httpx
import pytest
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from runs.models import (
    Call,
    CallEvidence,
    Cell,
    RecoveryClaim,
    RecoveryRequest,
    Run,
    RunEvent,
)
from runs.planning.services import run_create
from runs.reporting.report import run_report
from runs.settlement.lineage import run_lineage
from runs.settlement.recovery import recovery_plan, recovery_submit
from srbench.canonical import sha256_hex
from srbench.refusals import Refusal
from tests import factories as f
from tests.cli_support import bench
from tests.conftest import WorkerProcess, purge_broker, wait_until
from tests.runs import engine_support as es

BENCHMARKS = ["mmlu-pro", "arc"]
SLOW = {"sim-strong": {"ttft_s": 0.2, "tokens_per_second": 8.0, "chunk_tokens": 1}}
# A first token after 4 s: long enough that a call seen in flight is still in flight when the
# test kills its worker, whatever the machine's load.
SLOW_FIRST_TOKEN = {"sim-strong": {"ttft_s": 4.0, "tokens_per_second": 8.0, "chunk_tokens": 1}}
FAST = {"sim-strong": {"ttft_s": 0.0, "tokens_per_second": 0.0}}


@pytest.fixture
def workers(transactional_db, tmp_path):
    started: list[WorkerProcess] = []

    def start(name: str) -> WorkerProcess:
        w = WorkerProcess(tmp_path / f"{name}.log", ["--pool=threads", "--concurrency=4"])
        w.start()
        started.append(w)
        return w

    purge_broker()
    yield start
    for w in started:
        w.stop()
    purge_broker()


def parent_run(owner, benchmarks=BENCHMARKS, **plan):
    dataset = es.fixture_dataset(benchmarks)
    limits = {"concurrency": 3, **plan.pop("limits", {})}
    run, _ = run_create(
        owner=owner,
        plan={
            "name": "parent",
            "dataset": dataset.pk,
            "targets": ["sim-strong"],
            "limits": limits,
            **plan,
        },
    )
    return run


def ledger_checksum(run: Run) -> str:
    """Every stored field of the run, its cells, calls and evidence, and its report."""
    run.refresh_from_db()
    rows = [
        list(Run.objects.filter(pk=run.pk).values()),
        list(Cell.objects.filter(run=run).order_by("pk").values()),
        list(Call.objects.filter(cell__run=run).order_by("pk").values()),
        list(
            CallEvidence.objects.filter(call__cell__run=run)
            .order_by("call_id")
            .values_list("call_id", "sha256", "raw_size")
        ),
        run_report(run=run),
    ]
    return sha256_hex(json.loads(json.dumps(rows, default=str)))


def coordinates(cells) -> set[tuple[int, int, int]]:
    return {(c.question_id, c.target_id, c.slot) for c in cells}


def budget_stopped_parent(owner) -> Run:
    """A real run stopped by its budget: completed cells and never-dispatched pending ones."""
    run = parent_run(owner, limits={"max_cost_usd": "0.01", "max_output_tokens": 100})
    wait_until(lambda: es.terminal(run), timeout=90)
    assert run.status == "failed" and run.stop_reason.startswith("budget")
    assert Cell.objects.filter(run=run, status="pending", calls__isnull=True).count() >= 3
    return run


# --- crash → reconcile → plan → child ------------------------------------------------------------


@pytest.mark.worker
def test_killed_worker_run_recovers_only_never_dispatched_cells_in_a_child(workers):
    owner = f.user_create()
    # Every answer takes at least ttft_s: the worker is killed while a call sent under a second
    # ago is in flight, so it is still in flight when the kill lands, at any load (with 1-second
    # answers, a call seen streaming could finish before the kill at load 7: no sent_unknown).
    with es.simulator(BENCHMARKS, models=SLOW_FIRST_TOKEN) as url:
        es.sim_targets(url)
        first = workers("first")
        run = parent_run(owner)

        def a_fresh_call_in_flight() -> bool:
            fresh = timezone.now() - timedelta(seconds=1)
            in_flight = Call.objects.filter(cell__run=run, status__in=["sent", "streaming"])
            return (
                Cell.objects.filter(run=run, status="completed").exists()
                and in_flight.filter(sent_at__gte=fresh).exists()
            )

        wait_until(a_fresh_call_in_flight, timeout=90, interval=0.05)
        first.stop(signal.SIGKILL)

        # The dead worker's leases have not run out yet: the run is not terminal.
        with pytest.raises(Refusal) as refused:
            recovery_plan(run=run, mode="undispatched")
        assert refused.value.code == "run_not_terminal" and refused.value.http_status == 409

        wait_until(
            lambda: (
                not Cell.objects.filter(
                    run=run, status="running", lease_expires_at__gte=timezone.now()
                ).exists()
            ),
            timeout=30,
        )
        plan = recovery_plan(run=run, mode="undispatched")  # reconciles first
        run.refresh_from_db()
        assert run.status == "interrupted"
        never_sent = set(
            Cell.objects.filter(run=run, calls__isnull=True).values_list("pk", flat=True)
        )
        unknown = set(
            Cell.objects.filter(run=run, status="sent_unknown").values_list("pk", flat=True)
        )
        completed = set(
            Cell.objects.filter(run=run, status="completed").values_list("pk", flat=True)
        )
        assert unknown and completed and len(never_sent) >= 2
        assert {e["cell"] for e in plan["eligible_cells"]} == never_sent
        reasons = {e["cell"]: e["reason"] for e in plan["excluded"]}
        assert {
            c for c, r in reasons.items() if r == "ambiguous_dispatch_requires_reconciliation"
        } == unknown
        assert {c for c, r in reasons.items() if r == "completed_evidence_preserved"} == completed
        assert plan["parent"]["spend_complete"] is False  # sent_unknown calls have no cost
        assert plan["model_requests"] == 0
        before = ledger_checksum(run)

        # A reviewed subset: all never-dispatched cells but one.
        selection = sorted(never_sent)[:-1]
        child, created = recovery_submit(
            run=run,
            plan={**plan, "selected_cells": selection},
            idempotency_key="crash-1",
            user=owner,
        )
        assert created and child.parent_id == run.pk
        assert coordinates(child.cells.all()) == coordinates(Cell.objects.filter(pk__in=selection))
        workers("second")
        wait_until(lambda: es.terminal(child), timeout=120)
        stats = es.sim_stats(url)

    assert child.status == "completed"
    # No call reached the model twice, across the parent and the child, and none reached it
    # without its ledger row. The ledger writes a call's row before its request leaves, so the
    # SIGKILL may fall between the two: such a call is `sent_unknown` and the model never saw it.
    # Every call of the child was seen.
    seen = stats["by_call_id"]
    all_ids = {
        str(pk)
        for pk in Call.objects.filter(cell__run__in=[run, child]).values_list("pk", flat=True)
    }
    assert set(seen.values()) <= {1} and set(seen) <= all_ids
    unseen = all_ids - set(seen)
    assert unseen <= {
        str(pk)
        for pk in Call.objects.filter(cell__run=run, status="sent_unknown").values_list(
            "pk", flat=True
        )
    }
    assert {
        str(pk) for pk in Call.objects.filter(cell__run=child).values_list("pk", flat=True)
    } <= set(seen)
    assert Call.objects.filter(cell__run=child).count() == len(selection)
    # The parent is untouched: cells, calls, evidence and report.
    assert ledger_checksum(run) == before
    assert run_report(run=run)["complete"] is False
    child_report = run_report(run=child)
    assert child_report["denominator"] == len(selection)
    assert child_report["targets"][0]["score"]["kind"] != "sr-bench"

    # A replay after the child ran: the same child, nothing new.
    again, created = recovery_submit(
        run=run, plan={**plan, "selected_cells": selection}, idempotency_key="crash-1", user=owner
    )
    assert (again.pk, created) == (child.pk, False)
    assert Run.objects.filter(parent=run).count() == 1

    lineage = run_lineage(run=run)
    child_cost = sum(Call.objects.filter(cell__run=child).values_list("cost_usd", flat=True))
    assert [c["id"] for c in lineage["children"]] == [child.pk]
    assert Decimal(lineage["children"][0]["known_cost_usd"]) == child_cost
    assert lineage["children"][0]["progress"]["denominator"] == len(selection)
    parent_known = sum(
        c for c in Call.objects.filter(cell__run=run).values_list("cost_usd", flat=True) if c
    )
    assert Decimal(lineage["original_known_cost_usd"]) == parent_known
    assert lineage["original_cost_complete"] is False
    assert run_lineage(run=child)["parent"]["id"] == run.pk


# --- failed mode -----------------------------------------------------------------------------------


def set_judge_role(url: str, role: str) -> None:
    config = httpx.get(f"{url}/api/v1/config").json()
    config.setdefault("models", {}).setdefault("sim-judge", {})["role"] = role
    assert httpx.put(f"{url}/api/v1/config", json=config).status_code == 200


@pytest.mark.worker
def test_failed_mode_needs_acknowledgement_and_retries_selected_cells_as_new_attempts(workers):
    owner = f.user_create()
    benchmarks = ["mmlu-pro", "simpleqa"]
    # The judge first answers like a subject: its verdicts are malformed, so the judged cells
    # fail although both of their calls finished with a known cost.
    with es.simulator(benchmarks, models={**FAST, "sim-judge": {"role": "subject"}}) as url:
        es.sim_targets(url)
        workers("only")
        run = parent_run(owner, benchmarks, judges={"simpleqa": "sim-judge"})
        wait_until(lambda: es.terminal(run), timeout=90)
        assert run.status == "failed"
        failed = list(Cell.objects.filter(run=run, status="failed").order_by("pk"))
        assert len(failed) >= 3 and all(c.benchmark == "simpleqa" for c in failed)

        plan = recovery_plan(run=run, mode="failed")
        assert {e["cell"] for e in plan["eligible_cells"]} == {c.pk for c in failed}
        assert all(e["previous_attempt_cost_usd"] for e in plan["eligible_cells"])
        assert {e["reason"] for e in plan["excluded"]} == {"completed_evidence_preserved"}
        assert plan["requires_acknowledgement"] is True
        assert recovery_plan(run=run, mode="undispatched")["eligible_cells"] == []
        before = ledger_checksum(run)

        selection = [c.pk for c in failed[:2]]
        request = {**plan, "selected_cells": selection}
        with pytest.raises(Refusal) as refused:
            recovery_submit(run=run, plan=request, idempotency_key="retry-1", user=owner)
        assert refused.value.code == "acknowledgement_required"
        assert not Run.objects.filter(parent=run).exists()
        assert not RecoveryRequest.objects.exists()

        set_judge_role(url, "judge")  # the transient judge problem is fixed
        child, created = recovery_submit(
            run=run,
            plan=request,
            idempotency_key="retry-1",
            acknowledge_new_attempt=True,
            user=owner,
        )
        assert created
        wait_until(lambda: es.terminal(child), timeout=90)
        stats = es.sim_stats(url)

    assert child.status == "completed"
    # New attempts: the next slot of each selected (question, target), nothing else.
    assert coordinates(child.cells.all()) == {
        (c.question_id, c.target_id, c.slot + 1) for c in failed[:2]
    }
    assert all(n == 1 for n in stats["by_call_id"].values())
    assert ledger_checksum(run) == before
    request_row = RecoveryRequest.objects.get(child=child)
    assert request_row.mode == "failed" and request_row.acknowledged_new_attempt
    # The other failed cells stay available; the retried ones are claimed.
    fresh = recovery_plan(run=run, mode="failed")
    assert {e["cell"] for e in fresh["eligible_cells"]} == {c.pk for c in failed[2:]}
    claimed = {
        e["cell"] for e in fresh["excluded"] if e["reason"] == "already_claimed_by_another_recovery"
    }
    assert claimed == set(selection)


@pytest.mark.django_db
def test_failed_mode_excludes_cells_with_unknown_cost_or_ambiguous_calls():
    owner = f.user_create()
    target = f.target_create(slug="sim-strong", prices={"sim-strong": es.PRICES["sim-strong"]})
    run = parent_run(owner)
    Run.objects.filter(pk=run.pk).update(status="failed", finished_at=timezone.now())
    cells = list(Cell.objects.filter(run=run).order_by("pk")[:4])
    known, unknown, ambiguous, never = cells
    for cell in (known, unknown, ambiguous):
        Cell.objects.filter(pk=cell.pk).update(status="failed")
    Cell.objects.filter(pk=ambiguous.pk).update(status="sent_unknown")
    f.call_create(cell=known, target=target, status="failed", output_tokens=10, cost_usd="0.0002")
    f.call_create(cell=unknown, target=target, status="failed")  # an HTTP error: cost unknown
    f.call_create(cell=ambiguous, target=target, status="sent_unknown")

    plan = recovery_plan(run=run, mode="failed")
    reasons = {e["cell"]: e["reason"] for e in plan["excluded"]}
    assert [e["cell"] for e in plan["eligible_cells"]] == [known.pk]
    assert reasons[unknown.pk] == "ambiguous_saved_result_requires_reconciliation"
    assert reasons[ambiguous.pk] == "ambiguous_dispatch_requires_reconciliation"
    assert reasons[never.pk] == "never_dispatched_use_undispatched_mode"
    undispatched = recovery_plan(run=run, mode="undispatched")
    reasons = {e["cell"]: e["reason"] for e in undispatched["excluded"]}
    assert reasons[known.pk] == "already_dispatched_requires_new_attempt"
    assert never.pk in {e["cell"] for e in undispatched["eligible_cells"]}
    with pytest.raises(Refusal) as bad:
        recovery_plan(run=run, mode="failed", selected_cells=[known.pk, unknown.pk])
    assert bad.value.code == "cells_not_eligible"
    assert bad.value.detail == {
        "count": 1,
        "first": {str(unknown.pk): "ambiguous_saved_result_requires_reconciliation"},
        "omitted": 0,
        "by_reason": {"ambiguous_saved_result_requires_reconciliation": 1},
    }


@pytest.mark.django_db
def test_a_run_that_is_not_terminal_cannot_be_recovered():
    f.target_create(slug="sim-strong", prices={"sim-strong": es.PRICES["sim-strong"]})
    owner = f.user_create()
    run = parent_run(owner)  # queued: no worker here
    with pytest.raises(Refusal) as refused:
        recovery_plan(run=run, mode="undispatched")
    assert refused.value.code == "run_not_terminal"
    assert "queued" in refused.value.message
    with pytest.raises(Refusal):
        recovery_submit(
            run=run,
            plan={"mode": "undispatched", "plan_sha256": "0" * 64},
            idempotency_key="k",
            user=owner,
        )
    assert not Run.objects.filter(parent=run).exists()


# --- idempotency and claims ------------------------------------------------------------------------


@pytest.mark.worker
def test_same_key_replays_other_cells_conflict_and_claims_are_exclusive(workers):
    owner = f.user_create()
    with es.simulator(BENCHMARKS, models=FAST) as url:
        es.sim_targets(url)
        workers("only")
        run = budget_stopped_parent(owner)
        reviewed = recovery_plan(run=run, mode="undispatched")
        eligible = [e["cell"] for e in reviewed["eligible_cells"]]
        before = ledger_checksum(run)

        # Two concurrent submissions over the same cells with different keys.
        results: dict[str, object] = {}

        def submit(key: str) -> None:
            try:
                results[key] = recovery_submit(
                    run=run, plan=reviewed, idempotency_key=key, user=owner
                )
            except Refusal as exc:
                results[key] = exc
            finally:
                connection.close()

        threads = [threading.Thread(target=submit, args=(k,)) for k in ("race-a", "race-b")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        winners = [v for v in results.values() if isinstance(v, tuple)]
        losers = [v for v in results.values() if isinstance(v, Refusal)]
        assert len(winners) == 1 and len(losers) == 1
        assert losers[0].code in ("recovery_plan_changed", "cells_already_claimed")
        assert losers[0].http_status == 409
        child, created = winners[0]
        winning_key = next(k for k, v in results.items() if isinstance(v, tuple))
        assert created
        assert sorted(RecoveryClaim.objects.values_list("cell_id", flat=True)) == sorted(eligible)
        assert Run.objects.filter(parent=run).count() == 1

        # The lost response is resubmitted: the same child, nothing dispatched again.
        again, created = recovery_submit(
            run=run, plan=reviewed, idempotency_key=winning_key, user=owner
        )
        assert (again.pk, created) == (child.pk, False)
        # Same key, other cells: a conflict, not a second child.
        with pytest.raises(Refusal) as conflict:
            recovery_submit(
                run=run,
                plan={**reviewed, "selected_cells": eligible[:1]},
                idempotency_key=winning_key,
                user=owner,
            )
        assert conflict.value.code == "idempotency_key_reused"
        assert conflict.value.http_status == 422

        # A new review shows the cells as claimed; claiming one anyway is refused.
        fresh = recovery_plan(run=run, mode="undispatched")
        assert fresh["eligible_cells"] == []
        assert {
            e["cell"]
            for e in fresh["excluded"]
            if e["reason"] == "already_claimed_by_another_recovery"
        } == set(eligible)
        with pytest.raises(Refusal) as claimed:
            recovery_submit(
                run=run,
                plan={**fresh, "selected_cells": eligible[:1]},
                idempotency_key="third",
                user=owner,
            )
        assert claimed.value.code == "cells_not_eligible"
        assert "already_claimed" in json.dumps(claimed.value.detail)
        # The database itself refuses a second claim of a cell.
        with pytest.raises(IntegrityError), transaction.atomic():
            RecoveryClaim.objects.create(
                cell_id=eligible[0], request=RecoveryRequest.objects.get(child=child)
            )

        wait_until(lambda: es.terminal(child), timeout=90)
        stats = es.sim_stats(url)
    assert all(n == 1 for n in stats["by_call_id"].values())
    assert RunEvent.objects.filter(run=child, type="run.started").count() == 1
    assert ledger_checksum(run) == before


@pytest.mark.django_db
def test_a_plan_reviewed_before_the_ledger_changed_is_refused_and_creates_nothing():
    f.target_create(slug="sim-strong", prices={"sim-strong": es.PRICES["sim-strong"]})
    owner = f.user_create()
    run = parent_run(owner)
    Run.objects.filter(pk=run.pk).update(
        status="cancelled", finished_at=timezone.now(), cancel_requested_at=timezone.now()
    )
    Cell.objects.filter(run=run).update(status="cancelled")
    mine = recovery_plan(run=run, mode="undispatched")
    cells = [e["cell"] for e in mine["eligible_cells"]]
    # Someone else recovers part of the run in the meantime.
    other, _ = recovery_submit(
        run=run, plan={**mine, "selected_cells": cells[:2]}, idempotency_key="other", user=owner
    )
    with pytest.raises(Refusal) as stale:
        recovery_submit(run=run, plan=mine, idempotency_key="mine", user=owner)
    assert stale.value.code == "recovery_plan_changed" and stale.value.http_status == 409
    assert list(Run.objects.filter(parent=run)) == [other]
    assert not RecoveryRequest.objects.filter(idempotency_key="mine").exists()


@pytest.mark.django_db
def test_a_plan_submitted_in_another_mode_than_it_was_reviewed_in_is_refused_for_that(client):
    """A plan reviewed as one mode and submitted as another is refused saying so — the
    reviewed mode and the submitted one —, not as "the ledger changed since this recovery plan
    was reviewed" (nothing changed); nothing is created. The reviewed plan in its own mode
    still goes through, and a hash that is no mode's plan still says the ledger changed."""
    target = f.target_create(slug="sim-strong", prices={"sim-strong": es.PRICES["sim-strong"]})
    owner = f.user_create()
    run = parent_run(owner)
    Run.objects.filter(pk=run.pk).update(status="failed", finished_at=timezone.now())
    failed, *rest = Cell.objects.filter(run=run).order_by("pk")
    Cell.objects.filter(pk=failed.pk).update(status="failed")
    f.call_create(cell=failed, target=target, status="failed", output_tokens=9, cost_usd="0.01")
    Cell.objects.filter(pk__in=[c.pk for c in rest]).update(status="cancelled")
    reviewed = recovery_plan(run=run, mode="undispatched")
    switched = {**reviewed, "mode": "failed", "selected_cells": [failed.pk]}

    with pytest.raises(Refusal) as refused:
        recovery_submit(
            run=run,
            plan=switched,
            idempotency_key="switched",
            acknowledge_new_attempt=True,
            user=owner,
        )
    assert refused.value.code == "recovery_mode_changed", refused.value.message
    assert refused.value.http_status == 422
    assert "reviewed in mode 'undispatched' but submitted in mode 'failed'" in (
        refused.value.message
    )
    assert "ledger changed" not in refused.value.message
    assert refused.value.detail == {"reviewed_mode": "undispatched", "submitted_mode": "failed"}

    client.force_login(owner)
    answer = client.post(
        f"/api/v1/runs/{run.pk}/recover/",
        {
            "plan_sha256": reviewed["plan_sha256"],
            "mode": "failed",
            "selected_cells": [failed.pk],
            "acknowledge_new_attempt": True,
        },
        content_type="application/json",
        headers={"Idempotency-Key": "switched-api"},
    )
    assert answer.status_code == 422 and answer.json()["code"] == "recovery_mode_changed"
    # The reviewed plan whole, with a top-level mode or hash of another value: refused, neither
    # chosen silently (the plan's own mode was taken and the top-level one dropped).
    for key, other in (("mode", "failed"), ("plan_sha256", "f" * 64)):
        twice = client.post(
            f"/api/v1/runs/{run.pk}/recover/",
            {"plan": reviewed, key: other, "acknowledge_new_attempt": True},
            content_type="application/json",
            headers={"Idempotency-Key": f"twice-{key}"},
        )
        assert twice.status_code == 400, twice.content
        assert twice.json()["code"] == "invalid" and twice.json()["detail"] == {"field": key}
        assert f"{key} is given twice with different values" in twice.json()["error"]
    assert not Run.objects.filter(parent=run).exists()
    assert not RecoveryRequest.objects.exists()

    with pytest.raises(Refusal) as unknown:
        recovery_submit(
            run=run, plan={**reviewed, "plan_sha256": "f" * 64}, idempotency_key="x", user=owner
        )
    assert unknown.value.code == "recovery_plan_changed"
    child, created = recovery_submit(run=run, plan=reviewed, idempotency_key="ok", user=owner)
    assert created and child.parent_id == run.pk


# --- API and CLI -----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_refusal_echoes_a_count_and_the_first_few_of_many_selected_cells(client):
    """A selection of 200,000 cells none of which is eligible is refused (422) with their count,
    the first ten with their reasons and the count per reason — not every id (6.7 MB before);
    a 100,000-character mode is repeated cut to 100 characters. Nothing is created."""
    f.target_create(slug="sim-strong", prices={"sim-strong": es.PRICES["sim-strong"]})
    owner = f.user_create()
    client.force_login(owner)
    run = parent_run(owner)
    Run.objects.filter(pk=run.pk).update(status="interrupted", finished_at=timezone.now())
    plan = recovery_plan(run=run, mode="undispatched")
    ids = list(range(10**9, 10**9 + 200_000))
    answer = client.post(
        f"/api/v1/runs/{run.pk}/recover/",
        {"plan_sha256": plan["plan_sha256"], "mode": "undispatched", "selected_cells": ids},
        content_type="application/json",
        headers={"Idempotency-Key": "many"},
    )
    assert answer.status_code == 422 and answer.json()["code"] == "cells_not_eligible"
    assert len(answer.content) < 2_000, len(answer.content)
    detail = answer.json()["detail"]
    assert detail["count"] == 200_000 and detail["omitted"] == 199_990
    assert detail["first"] == dict.fromkeys(map(str, ids[:10]), "not a cell of this run")
    assert detail["by_reason"] == {"not a cell of this run": 200_000}
    assert "200000 selected cell(s) are not eligible" in answer.json()["error"]

    long_mode = client.post(
        f"/api/v1/runs/{run.pk}/recover/",
        {"plan_sha256": plan["plan_sha256"], "mode": "m" * 100_000},
        content_type="application/json",
        headers={"Idempotency-Key": "long-mode"},
    )
    assert long_mode.status_code == 400 and long_mode.json()["code"] == "invalid_mode"
    assert long_mode.json()["detail"] == {"mode": "m" * 100 + "… (100000 characters)"}
    assert not Run.objects.filter(parent=run).exists()


@pytest.mark.django_db
def test_api_pages_the_plan_and_answers_201_200_409_422_400(client):
    f.target_create(slug="sim-strong", prices={"sim-strong": es.PRICES["sim-strong"]})
    owner = f.user_create()
    client.force_login(owner)
    run = parent_run(owner)
    Run.objects.filter(pk=run.pk).update(status="interrupted", finished_at=timezone.now())
    total = Cell.objects.filter(run=run).count()

    url = f"/api/v1/runs/{run.pk}/recovery-plan/"
    first = client.get(url, {"mode": "undispatched", "limit": 2}).json()
    assert first["model_requests"] == 0 and first["counts"]["eligible"] == total
    assert len(first["eligible_cells"]) == 2 and first["next_eligible_after"]
    seen = [e["cell"] for e in first["eligible_cells"]]
    cursor = first["next_eligible_after"]
    while cursor:
        page = client.get(
            url, {"mode": "undispatched", "limit": 2, "eligible_after": cursor}
        ).json()
        assert page["plan_sha256"] == first["plan_sha256"]
        seen += [e["cell"] for e in page["eligible_cells"]]
        cursor = page["next_eligible_after"]
    assert seen == sorted(Cell.objects.filter(run=run).values_list("pk", flat=True))
    assert client.get(url, {"mode": "sideways"}).status_code == 400

    recover = f"/api/v1/runs/{run.pk}/recover/"
    body = {"plan_sha256": first["plan_sha256"], "mode": "undispatched", "selected_cells": seen[:3]}
    assert client.post(recover, body, content_type="application/json").status_code == 400  # no key
    created = client.post(
        recover, body, content_type="application/json", headers={"Idempotency-Key": "api-1"}
    )
    assert created.status_code == 201, created.json()
    child = created.json()
    assert child["parent"] == run.pk and child["progress"]["denominator"] == 3
    replay = client.post(
        recover, body, content_type="application/json", headers={"Idempotency-Key": "api-1"}
    )
    assert replay.status_code == 200 and replay.json()["id"] == child["id"]
    assert replay["Idempotent-Replayed"] == "true"
    other = client.post(
        recover,
        {**body, "selected_cells": seen[:2]},
        content_type="application/json",
        headers={"Idempotency-Key": "api-1"},
    )
    assert other.status_code == 422 and other.json()["code"] == "idempotency_key_reused"
    stale = client.post(
        recover, body, content_type="application/json", headers={"Idempotency-Key": "api-2"}
    )
    assert stale.status_code == 409 and stale.json()["code"] == "recovery_plan_changed"

    lineage = client.get(f"/api/v1/runs/{run.pk}/lineage/").json()
    assert [c["id"] for c in lineage["children"]] == [child["id"]]
    assert lineage["children"][0]["progress"]["denominator"] == 3
    assert lineage["original_known_cost_usd"] == "0"
    assert client.get(f"/api/v1/runs/{child['id']}/lineage/").json()["parent"]["id"] == run.pk


@pytest.mark.worker
def test_cli_plan_edit_recover_and_resubmit_returns_the_same_child(workers, capsys, tmp_path):
    ops = f.user_create(username="ops", staff=True)
    with es.simulator(BENCHMARKS, models=FAST) as url:
        es.sim_targets(url)
        workers("only")
        run = budget_stopped_parent(ops)
        path = tmp_path / "recovery.json"
        code, out, err = bench(
            capsys,
            "recover-plan",
            str(run.pk),
            "--mode",
            "undispatched",
            "--output",
            str(path),
            "--user",
            "ops",
        )
        assert code == 0, err
        assert "no model was called" in out and "completed_evidence_preserved" in out
        plan = json.loads(path.read_text())
        assert plan["selected_cells"] == [e["cell"] for e in plan["eligible_cells"]]
        plan["selected_cells"] = plan["selected_cells"][:2]  # the reviewed subset
        path.write_text(json.dumps(plan))

        args = [
            "recover",
            str(run.pk),
            "--plan",
            str(path),
            "--idempotency-key",
            "cli-rec-1",
            "--user",
            "ops",
            "--json",
        ]
        code, out, err = bench(capsys, *args)
        assert code == 0, err
        assert "created" in err
        child_id = json.loads(out)["id"]
        code, out, err = bench(capsys, *args)  # the outcome was "uncertain": run it again
        assert code == 0 and json.loads(out)["id"] == child_id
        assert "already existed" in err
        assert Run.objects.filter(parent=run).count() == 1
        assert Cell.objects.filter(run_id=child_id).count() == 2

        plan["selected_cells"] = plan["selected_cells"][:1]
        path.write_text(json.dumps(plan))
        code, _, err = bench(capsys, *args)
        assert code == 2 and "idempotency_key_reused" in err

        code, out, _ = bench(capsys, "lineage", str(run.pk), "--user", "ops")
        assert code == 0 and f"run {child_id}" in out
        wait_until(lambda: es.terminal(Run.objects.get(pk=child_id)), timeout=90)
        stats = es.sim_stats(url)
    assert all(n == 1 for n in stats["by_call_id"].values())
    assert Call.objects.filter(cell__run_id=child_id).count() <= 2
