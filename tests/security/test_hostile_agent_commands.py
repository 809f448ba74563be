"""A Terminal-Bench agent whose commands attack the host, through the real path (R9.3): a run
created by the service the API uses, a Celery worker process, the simulator typing the hostile
commands as the model's tool calls, the cell read back from the public API.

The commands read the environment and `/proc`, look for the hidden tests, try PostgreSQL and
Redis on loopback, plant links out of `/app`, leave a daemonised process behind, print bytes
that are not UTF-8 (with NUL), flood stdout and sleep past the command's timeout. The run must
end, the worker survive, the task score 0, no process outlive the run, nothing secret reach the
stored calls or the public view, and the host file the links point at stay as it was.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path

import pytest

from datasets.benchmarks import get_adapter
from runs.models import Call, Cell
from tests.runs import engine_support as es

pytestmark = pytest.mark.worker

MARK = "srbench-hostile-4242"


def hostile_script(host_file: Path) -> str:
    return "\n".join(
        [
            "env; cat /proc/1/environ /proc/self/environ | tr '\\0' '\\n'",
            "ls -la / /tests /logs /root 2>&1; cat /tests/* /solution/* 2>&1 | head -c 2000",
            "(exec 3<>/dev/tcp/127.0.0.1/5432 && echo PG-REACHED) 2>&1; "
            "(exec 3<>/dev/tcp/127.0.0.1/6379 && echo REDIS-REACHED) 2>&1",
            f"ln -s {host_file} /app/link; ln {host_file} /app/hard 2>&1; echo owned > /app/link 2>&1",
            f"setsid nohup sh -c 'exec -a {MARK} sleep 600' >/dev/null 2>&1 & echo left",
            "printf 'bad \\xff\\xfe \\x00 nul \\xed\\xa0\\x80 end\\n'",
            "yes srbench-flood | head -c 50000000",
            "sleep 100",
        ]
    )


def hostile_key(script: str):
    key = es.answer_key(["terminal-bench"])
    for sha, entry in list(key._entries.items()):
        if entry.benchmark == "terminal-bench":
            solution = [{"path": "solution/solve.sh", "content": script}]
            key._entries[sha] = dataclasses.replace(
                entry, secret={**entry.secret, "solution": solution}
            )
    return key


def leftover_processes() -> str:
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return "\n".join(line for line in out.splitlines() if MARK in line)


def test_a_hostile_agent_scores_zero_reaches_nothing_and_leaves_nothing(
    celery_worker, tmp_path: Path, client
):
    host_file = tmp_path / "host-secret.txt"
    host_file.write_text("host data\n")
    key = hostile_key(hostile_script(host_file))
    dataset = es.fixture_dataset(["terminal-bench"], per_benchmark=1)
    run = es.keyed_run(key, dataset, "hostile-agent", timeout=300)
    assert run.status == "completed", (run.stop_reason, celery_worker.log()[-3000:])
    cell = Cell.objects.get(run=run)
    assert cell.status == "completed", cell.error
    assert cell.correct is False, cell.grade
    assert host_file.read_text() == "host data\n"
    assert leftover_processes() == ""

    calls = Call.objects.filter(cell__run=run)
    stored = json.dumps([[c.request, c.content, c.tool_calls] for c in calls])
    # What the commands printed, as the agent was told it (the tool messages it was sent).
    told = "\n".join(
        str(m.get("content"))
        for c in calls
        for m in (c.request or {}).get("messages") or []
        if m.get("role") == "tool"
    )
    # Every hostile command ran and the agent saw its answer.
    assert "[killed: command exceeded" in told and "output limit exceeded" in told
    assert "bad " in told and " end" in told
    assert "PG-REACHED" not in told and "REDIS-REACHED" not in told
    assert "host data" not in told
    for secret in ("postgres://", "redis://", "DJANGO_SECRET", "SRBENCH_", "/work/"):
        assert secret not in stored, secret
    adapter = get_adapter("terminal-bench")
    [task] = [
        q for q in adapter.load(adapter.fixture_path()) if q.native_id == cell.question.native_id
    ]
    hidden = [t["content"] for t in task.secret["tests"] if "content" in t]
    assert hidden and not any(h.strip()[:200] in stored for h in hidden if h.strip())

    client.force_login(run.owner)
    page = client.get(f"/api/v1/runs/{run.pk}/results/")
    assert page.status_code == 200
    [row] = page.json()["results"]
    assert row["correct"] is False
    assert "the task's tests did not pass" in row["reasons"]


def test_an_agent_that_sleeps_is_stopped_at_the_tasks_agent_timeout(
    celery_worker, tmp_path: Path, client
):
    """Each command is killed after 30 s, but a model could ask for thirty of them (or a
    thousand in one turn) and hold the worker for hours: the task's own `agent_timeout_sec`
    (Harbor's agent.timeout_sec, TB1's max_agent_timeout_sec) bounds the commands' time in all,
    as upstream bounds the agent; then its tests decide, as upstream's do after a timeout."""
    adapter = get_adapter("terminal-bench")
    task = adapter.load(adapter.fixture_path())[0]
    task = dataclasses.replace(task, payload={**task.payload, "agent_timeout_sec": 3.0})
    key = hostile_key("\n".join(["sleep 100"] * 4))
    dataset = es.questions_dataset([task], name="slow-agent", benchmarks=["terminal-bench"])
    run = es.keyed_run(key, dataset, "slow-agent", timeout=300)
    assert run.status == "completed", (run.stop_reason, celery_worker.log()[-3000:])
    cell = Cell.objects.get(run=run)
    assert cell.correct is False
    assert cell.grade["detail"]["commands_run"] == 1, cell.grade
    assert cell.grade["agent_stopped"] == "agent_timeout", cell.grade
    assert (cell.finished_at - cell.started_at).total_seconds() < 25
    client.force_login(run.owner)
    [row] = client.get(f"/api/v1/runs/{run.pk}/results/").json()["results"]
    assert any("3 s" in r and "agent" in r for r in row["reasons"]), row["reasons"]
