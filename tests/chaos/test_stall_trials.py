"""Seeded stall trials (issue 34): a worker that *stalls* rather than dies. The victim is frozen
(SIGSTOP) at a chosen point of a run — a call row just committed, mid-stream, a judge call in
flight, an answer complete but not graded, or a random moment — and kept frozen while the other
worker's recovery pass settles its cells and the run ends; then it is woken (SIGCONT) believing
it still holds its cells. Counted at the simulator and in the ledger, it must then send nothing
for this run: no request for a cell after the cell was settled, none after the run's terminal
event, no call row opened, no evidence written on a settled call, no spend added after the
end. PostgreSQL must report no deadlock (the driver's batches and the recovery pass take the
run row before its cells: one lock order, runs/engine/store.py).

The victim consumes only its own queue, so the run's re-dispatch goes to the other worker,
which is never frozen; the same victim process is frozen in every trial and must take the next
run each time. Half of the trials run under a cost limit (the budget's run-row lock); every run
holds judged (SimpleQA) and single-call (MMLU-Pro) cells.

Budgets (R15): `SRBENCH_STALL_TRIALS` trials (4 under `make test`, 24 under `make chaos`), a
timeout that grows with them, polling waits only.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter
from decimal import Decimal
from pathlib import Path

import httpx
import pytest
from django.db import connection
from django.db.models import Sum

from runs.models import Call, CallEvidence, Cell, Run
from runs.tasks import run_drive
from tests import factories as f
from tests.chaos import support as cs
from tests.conftest import ROOT, purge_broker, wait_until
from tests.runs import engine_support as es

pytestmark = pytest.mark.worker

TRIALS = int(os.environ.get("SRBENCH_STALL_TRIALS", "4"))
TRIAL_BUDGET_SECONDS = 60
SEED = 34_2026
STALL_POINTS = ("mid_stream", "grading", "call_row", "after_last_byte", "random_time")
REPORT = ROOT / "var" / "chaos-report.txt"
CLAIM_LOST = b"claim lost while"


@pytest.fixture(scope="module")
def sim_url():
    with es.simulator(cs.BENCHMARKS, models=cs.SLOW_MODELS) as url:
        yield url


def deadlocks() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")
        return int(cursor.fetchone()[0])


def spend(run: Run) -> tuple[Decimal | None, Decimal]:
    run.refresh_from_db()
    total = Call.objects.filter(cell__run=run).aggregate(s=Sum("cost_usd"))["s"]
    return total, run.budget_committed_usd


def stale_traffic(run: Run, arrivals: list[dict], woke_at: float) -> dict[str, int]:
    """What reached the model or the ledger for this run after it ended and its cells were
    settled (all before the victim woke)."""
    run.refresh_from_db()
    ended_at = run.finished_at.timestamp()
    ids = {str(pk) for pk in Call.objects.filter(cell__run=run).values_list("pk", flat=True)}
    mine = [a for a in arrivals if a["call_id"] in ids]
    # The run's terminal event: the recovery pass's `run.interrupted`, else `run.finished`.
    end_seq = (
        run.events.filter(type__in=["run.interrupted", "run.finished"])
        .order_by("seq")
        .values_list("seq", flat=True)
        .first()
    )
    assert end_seq is not None, "the run ended without a terminal event"
    return {
        # Every cell of the run was settled before the victim woke: a request of this run that
        # arrived after that went out for a settled cell.
        "requests_after_settled": sum(a["arrived_at"] > woke_at for a in mine),
        "requests_after_end": sum(a["arrived_at"] > ended_at for a in mine),
        "calls_opened_after_end": Call.objects.filter(
            cell__run=run, sent_at__gt=run.finished_at
        ).count(),
        "call_events_after_end": run.events.filter(type="call.sent", seq__gt=end_seq).count(),
        "evidence_on_settled": CallEvidence.objects.filter(
            call__cell__run=run, call__status="sent_unknown"
        ).count(),
    }


@pytest.mark.timeout(240 + TRIAL_BUDGET_SECONDS * TRIALS)
def test_seeded_stall_trials(transactional_db, sim_url, tmp_path: Path, monkeypatch) -> None:
    purge_broker()
    es.sim_targets(sim_url)
    dataset = cs.small_dataset("stall")
    owner = f.user_create()
    monkeypatch.setattr(
        "runs.planning.services.run_dispatch",
        lambda *, run_id: run_drive.apply_async(args=[run_id], queue="chaos-victim"),
    )
    victim = cs.ChaosWorker(tmp_path / "victim.log")
    victim.extra_args += ["-Q", "chaos-victim", "-n", "victim@%h"]
    helper = cs.ChaosWorker(tmp_path / "helper.log")
    helper.extra_args += ["-Q", "srbench,chaos-helper", "-n", "helper@%h"]
    for w in (victim, helper):
        w.start()
    for w in (victim, helper):
        w.wait_ready()
    victim_pid = victim.pid
    deadlocks_before = deadlocks()
    rows: list[dict] = []
    started = time.monotonic()
    try:
        for i in range(TRIALS):
            rng = random.Random(SEED * 1000 + i)
            point = STALL_POINTS[i % len(STALL_POINTS)]
            cost_limit = i % 2 == 1
            # A cost limit that is never reached: every call reserves under the run row lock.
            run = cs.start_run(
                owner, dataset, f"stall {i} {point}", max_cost_usd="100" if cost_limit else None
            )
            label, reached = cs.wait_for_point(run, point, rng, sim_url)
            os.killpg(victim_pid, signal.SIGSTOP)
            held = Cell.objects.filter(
                run=run, status="running", claimed_by__contains=f":{victim_pid}:"
            ).count()
            before = cs.snapshot(run)
            state = cs.settle(run, timeout=120)
            spend_at_end = spend(run)
            woke_at = time.time()
            os.killpg(victim_pid, signal.SIGCONT)
            # The woken worker acts on what it believed: its streams go on, its heartbeat comes
            # round, its episodes try their next calls. Two leases give it every chance.
            time.sleep(2 * cs.LEASE_SECONDS + 1.0)
            wait_until(lambda: not Cell.objects.filter(status="running").exists(), timeout=60)
            arrivals = httpx.get(f"{sim_url}/_sim/arrivals", timeout=10).json()["arrivals"]
            stale = stale_traffic(run, arrivals, woke_at)
            outcome = cs.check_invariants(run, before, cs.sim(sim_url)["by_call_id"])
            rows.append(
                {
                    "trial": i,
                    "point": point,
                    "reached": reached,
                    "held": held,
                    "cost_limit": cost_limit,
                    "state": state,
                    "stale": stale,
                    "spend_grew": spend(run) != spend_at_end,
                    "outcome": outcome,
                    "alive": victim.process.poll() is None,
                }
            )
            print(
                f"stall {i:2d} {point:15s} {label:30s} held={held} cost_limit={cost_limit!s:5} "
                f"-> {state} {outcome.status} calls={outcome.calls} "
                f"unknown={outcome.sent_unknown} stale={stale} {outcome.problems or ''}"
            )
            assert rows[-1]["alive"], victim.log()[-3000:]
    finally:
        if victim.process is not None and victim.process.poll() is None:
            os.killpg(victim_pid, signal.SIGCONT)
        for w in (victim, helper):
            w.stop()
        purge_broker()
    elapsed = time.monotonic() - started
    new_deadlocks = deadlocks() - deadlocks_before
    logs = victim.log_path.read_bytes() + helper.log_path.read_bytes()
    logged_deadlocks = logs.count(b"deadlock detected")
    claims_lost = victim.log_path.read_bytes().count(CLAIM_LOST)
    totals = Counter()
    for r in rows:
        totals.update(r["stale"])
    stalled_holding = sum(r["held"] > 0 for r in rows)
    summary = (
        f"chaos stall trials: seed {SEED}, trials {len(rows)}, stalled holding cells "
        f"{stalled_holding}, points {dict(Counter(r['point'] for r in rows))}, "
        f"with cost limit {sum(r['cost_limit'] for r in rows)}, "
        f"calls {sum(r['outcome'].calls for r in rows)}, "
        f"sent_unknown {sum(r['outcome'].sent_unknown for r in rows)}, "
        f"requests after settled {totals['requests_after_settled']}, "
        f"requests after run end {totals['requests_after_end']}, "
        f"calls opened after end {totals['calls_opened_after_end']}, "
        f"call.sent events after end {totals['call_events_after_end']}, "
        f"evidence on settled calls {totals['evidence_on_settled']}, "
        f"spend grew after end {sum(r['spend_grew'] for r in rows)}, "
        f"claims found lost by the woken worker {claims_lost}, "
        f"deadlocks {new_deadlocks} (logged {logged_deadlocks}), "
        f"runs {dict(Counter(r['outcome'].status for r in rows))}, "
        f"worker alive {sum(r['alive'] for r in rows)}/{len(rows)}, wall {elapsed:.0f}s"
    )
    print(summary)
    cs.report_line(REPORT, "chaos stall trials:", summary)

    assert all(r["state"] == "terminal" for r in rows), [(r["trial"], r["state"]) for r in rows]
    assert not any(totals.values()), summary
    assert not any(r["spend_grew"] for r in rows), summary
    assert new_deadlocks == 0 and logged_deadlocks == 0, summary
    problems = [(r["trial"], r["outcome"].problems) for r in rows if r["outcome"].problems]
    assert not problems, problems
    # The trials froze a worker that held cells (else they proved nothing), and the woken
    # worker found its claims gone at least once (the mechanism, not luck, kept it quiet).
    assert stalled_holding >= max(1, len(rows) // 2), summary
    assert claims_lost >= 1, summary
