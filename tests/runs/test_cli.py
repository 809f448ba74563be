"""`manage.py benchmark` run verbs go through the API in-process (one code path) against a
real worker and the simulator (issue 5 point 9, R10.4)."""

from __future__ import annotations

import json

import pytest

from runs.models import Run
from tests import factories as f
from tests.cli_support import bench
from tests.conftest import wait_until
from tests.runs import engine_support as es

pytestmark = pytest.mark.worker


def test_plan_run_show_report_cancel_through_the_cli(celery_worker, capsys):
    benchmarks = ["mmlu-pro"]
    with es.simulator(
        benchmarks, models={"sim-strong": {"ttft_s": 0.3, "tokens_per_second": 20.0}}
    ) as url:
        es.sim_targets(url)
        dataset = es.fixture_dataset(benchmarks)
        f.user_create(username="ops", staff=True)
        common = ["--dataset", str(dataset.pk), "--target", "sim-strong", "--user", "ops"]

        code, out, _ = bench(capsys, "plan", *common, "--json")
        assert code == 0 and json.loads(out)["model_requests"] == 0
        assert not Run.objects.exists()

        code, out, err = bench(
            capsys,
            "run",
            *common,
            "--concurrency",
            "2",
            "--detach",
            "--idempotency-key",
            "cli-1",
            "--json",
        )
        assert code == 0, err
        run_id = json.loads(out)["id"]
        code, _, err = bench(
            capsys, "run", *common, "--concurrency", "2", "--detach", "--idempotency-key", "cli-1"
        )
        assert code == 0 and "already existed" in err and Run.objects.count() == 1

        wait_until(
            lambda: (
                Run.objects.get(pk=run_id).cells.filter(calls__status="streaming").exists()
                or Run.objects.get(pk=run_id).cells.filter(calls__isnull=False).exists()
            ),
            timeout=60,
        )
        code, out, _ = bench(
            capsys,
            "show",
            str(run_id),
            "--calls",
            "--active",
            "--limit",
            "10",
            "--user",
            "ops",
            "--json",
        )
        assert code == 0
        page = json.loads(out)
        assert len(page["results"]) <= 10
        for call in page["results"]:
            assert call["status"] in ("sent", "streaming")
            assert {"stage", "elapsed_seconds", "last_activity_at", "bytes_received"} <= set(
                call["live"]
            )

        wait_until(lambda: es.terminal(Run.objects.get(pk=run_id)), timeout=120)
        code, out, _ = bench(capsys, "report", str(run_id), "--user", "ops")
        assert code == 0 and "mmlu-pro" in out and "weighted subset average" in out
        code, out, _ = bench(capsys, "show", str(run_id), "--events", "--user", "ops")
        assert "run.finished" in out and "loaded" in out
        code, out, _ = bench(capsys, "cancel", str(run_id), "--user", "ops")
        assert code == 0 and "nothing to cancel" in out


def test_cli_errors_are_one_line_and_exit_non_zero(transactional_db, capsys):
    # transactional: the in-process WSGI request closes the connection when it finishes.
    f.user_create(username="ops", staff=True)
    code, _, err = bench(capsys, "report", "424242", "--user", "ops")
    assert code == 2 and err.startswith("error:") and err.count("\n") == 1
    code, _, err = bench(capsys, "plan", "--dataset", "1", "--target", "x", "--user", "nobody")
    assert code == 2 and "nobody" in err
