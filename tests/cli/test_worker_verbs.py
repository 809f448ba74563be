"""The verbs that watch real work (issue 7, R10.4): `show --calls --active --after --limit`
pages correctly while calls are in flight, and `run` waits with progress on stderr — over
HTTP and in-process, with a real worker and a slow simulator model."""

from __future__ import annotations

import json

import pytest

from runs.models import Call, Run
from tests.conftest import wait_until
from tests.runs import engine_support as es

pytestmark = pytest.mark.worker

SLOW = {"sim-strong": {"ttft_s": 1.5, "tokens_per_second": 30.0}}


def test_active_calls_page_while_in_flight_and_run_waits(bench, celery_worker) -> None:  # type: ignore[no-untyped-def]
    with es.simulator(["mmlu-pro"], models=SLOW) as url:
        es.sim_targets(url)
        dataset = es.fixture_dataset(["mmlu-pro"])
        args = ["--dataset", str(dataset.pk), "--target", "sim-strong", "--concurrency", "3"]
        r = bench("run", *args, "--detach", "--idempotency-key", "slow-1", "--json")
        assert r.code == 0, r.err
        run_id = json.loads(r.out)["id"]

        def in_flight() -> int:
            return Call.objects.filter(
                cell__run_id=run_id, status__in=["sent", "streaming"]
            ).count()

        wait_until(lambda: in_flight() >= 2, timeout=60)
        seen: list[int] = []
        after = 0
        for _ in range(50):
            r = bench("show", str(run_id), "--calls", "--active", "--after", str(after),
                      "--limit", "1", "--json")  # fmt: skip
            assert r.code == 0, r.err
            page = json.loads(r.out)
            assert len(page["results"]) <= 1
            if not page["results"]:
                break
            call = page["results"][0]
            assert call["id"] > after and call["status"] in ("sent", "streaming")
            assert {"stage", "elapsed_seconds", "last_activity_at", "bytes_received"} <= set(
                call["live"]
            )
            seen.append(call["id"])
            after = page["next_after"]
        assert seen and seen == sorted(set(seen))  # ascending, no repeats
        r = bench("show", str(run_id), "--calls", "--active", "--limit", "10")
        assert r.code == 0 and ("last activity" in r.out or r.out.startswith("no calls"))

        # The same key again without --detach: no second run; wait with progress, then report.
        r = bench("run", *args, "--idempotency-key", "slow-1", "--poll", "0.5")
        assert r.code == 0, (r.err, celery_worker.log()[-2000:])
        assert "already existed" in r.err and "completed" in r.err
        assert "mmlu-pro" in r.out and "weighted subset average" in r.out
        assert Run.objects.count() == 1
