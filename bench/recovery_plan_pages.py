"""Scale benchmark: paging a reviewed recovery plan of 100,000 cells through the API, as
`benchmark recover-plan` does (fourth outside probe, item 1).

The first page computes the plan (and keeps it, `runs.settlement.recovery_store`); the later
pages read the kept plan. Before the plan was kept, every page cost what the first does.
Reviewing reconciles the ledger in durable transactions, so the rows are committed: run it on
a scratch database (migrated; the rows stay), e.g.

    createdb srbench_bench_recovery && DATABASE_URL=postgres://…/srbench_bench_recovery \\
        .venv/bin/python manage.py migrate
    DATABASE_URL=postgres://…/srbench_bench_recovery .venv/bin/python bench/recovery_plan_pages.py

Not part of `make bench` (bench/run_all.py) yet. A second invocation reuses the run it built.
`--ends`: the first review of a failed run of the same size (every tenth cell failed), with no
plan kept (what the page paid before) and after the run end's worker kept its plans.
After the pages it times what every page pays before it reads the plan: the ledger's state
(`run_settled_fingerprint`, `recovery_plan_key`) and the reconciliation a review runs
(`recovery_reconcile`). Target (PERFORMANCE.md): every page ≤ 100 ms.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import report_scale as rs  # noqa: E402  (sets up Django)
from django.contrib.auth import get_user_model  # noqa: E402
from django.test import Client  # noqa: E402

from datasets.models import FrozenDataset  # noqa: E402
from runs.ledger.selectors import run_settled_fingerprint  # noqa: E402
from runs.models import Run, Target  # noqa: E402
from runs.settlement.recovery import recovery_plans_keep, recovery_reconcile  # noqa: E402
from runs.settlement.recovery_store import recovery_plan_key, recovery_plans_forget  # noqa: E402

NAME = "recovery-plan-pages"
ENDS = "recovery-plan-ends"


def parent_run(name: str = NAME) -> Run:
    """An interrupted run of 10,000 questions × 10 targets, every cell completed: its plan
    excludes all 100,000 (1,000 pages of 100). `ENDS`: a failed run of the same size, every
    tenth cell failed with its call (a known cost): what a run that ends with cells left to
    recover looks like."""
    owner, _ = get_user_model().objects.get_or_create(username="bench-recovery", is_staff=True)
    run = Run.objects.filter(name=name).order_by("-pk").first()
    if run is not None:
        return run
    started = time.perf_counter()
    dataset = FrozenDataset.objects.create(
        identity_sha256=hashlib.sha256(NAME.encode()).hexdigest(),
        name="bench",
        profile="standard",
        seed=1,
        split="dev",
        selection={},
    )
    stem = "rp" if name == NAME else "re"
    qs = rs.build_questions(10_000, stem)
    targets = [
        Target.objects.create(
            slug=f"bench-{stem}{k}", name="t", model="m", base_url="http://x/v1", prices=rs.PRICE
        )
        for k in range(10)
    ]
    run = rs.build_run(qs, targets, dataset, owner, seed=1, failed_every=10 if name == ENDS else 0)
    Run.objects.filter(pk=run.pk).update(
        name=name, status="failed" if name == ENDS else "interrupted"
    )
    rs.analyze()
    print(f"built 100,000 cells and calls in {time.perf_counter() - started:.1f} s")
    run.refresh_from_db()
    return run


def timed(what: str, step: Callable[[], Any]) -> Any:
    started = time.perf_counter()
    result = step()
    print(f"{what}: {(time.perf_counter() - started) * 1000:9.1f} ms  ({rs.load()})")
    return result


def ok_get(client: Client, path: str, params: dict[str, Any]) -> Any:
    response = client.get(path, params)
    assert response.status_code == 200, response.content[:300]
    return response


def first_reviews(client: Client, run: Run) -> None:
    """What the first review of a run that ended with cells left to recover waits for: before,
    it computed the plan on its page; now the run's end rings a worker that keeps the plans
    (`recovery_plans_keep`) and the page reads them."""
    page = f"/api/v1/runs/{run.pk}/recovery-plan/"
    for mode in ("failed", "undispatched"):
        recovery_plans_forget(run_id=run.pk)
        timed(
            f"first API page ({mode}), no plan kept (computes it)",
            lambda m=mode: ok_get(client, page, {"mode": m, "limit": 100}),
        )
    recovery_plans_forget(run_id=run.pk)
    kept = timed(
        "the run end's worker: recovery_plans_keep (3 modes)",
        lambda: recovery_plans_keep(run_id=run.pk),
    )
    print(f"  kept: {', '.join(kept)}")
    for mode in ("failed", "undispatched"):
        timed(
            f"first API page ({mode}) after it",
            lambda m=mode: ok_get(client, page, {"mode": m, "limit": 100}),
        )
        timed(
            f"first recovery page ({mode}) after it",
            lambda m=mode: ok_get(client, f"/runs/{run.pk}/recovery/", {"mode": m}),
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pages", type=int, default=6)
    parser.add_argument(
        "--ends",
        action="store_true",
        help="only the first review of a run that ended with cells left to recover",
    )
    args = parser.parse_args()
    if args.ends:
        ended = parent_run(ENDS)
        first_reviews(rs.api_client(ended.owner), ended)
        return
    run = parent_run()
    client = rs.api_client(run.owner)
    after = 0
    for page in range(1, args.pages + 1):
        started = time.perf_counter()
        response = client.get(
            f"/api/v1/runs/{run.pk}/recovery-plan/",
            {"mode": "undispatched", "excluded_after": after, "limit": 100},
        )
        seconds = time.perf_counter() - started
        assert response.status_code == 200, response.content[:300]
        after = response.json()["next_excluded_after"]
        print(f"recovery plan page {page} of 1,000: {seconds * 1000:8.1f} ms  ({rs.load()})")
    for page in (1, 2_000, 4_000):  # the recovery page: 25 a page by number (4,000 pages)
        started = time.perf_counter()
        response = client.get(
            f"/runs/{run.pk}/recovery/", {"mode": "undispatched", "excluded_page": page}
        )
        seconds = time.perf_counter() - started
        assert response.status_code == 200, response.content[:300]
        print(f"recovery page, excluded page {page:,}: {seconds * 1000:8.1f} ms  ({rs.load()})")
    for name, step in (
        ("run_settled_fingerprint", lambda: run_settled_fingerprint(run)),
        ("recovery_plan_key", lambda: recovery_plan_key(run, "undispatched")),
        ("recovery_reconcile", lambda: recovery_reconcile(run=run)),
    ):
        times = []
        for _ in range(5):
            started = time.perf_counter()
            step()
            times.append(time.perf_counter() - started)
        print(f"{name}: median {sorted(times)[2] * 1000:6.1f} ms of 5  ({rs.load()})")


if __name__ == "__main__":
    main()
