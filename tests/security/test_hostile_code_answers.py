"""Model-written code that ends its own program early is never graded correct (R9.3).

A SciCode step is the model's code, then the step's hidden tests, in one program; the step
passed when that program exits 0. Code that exits 0 before the tests run (``sys.exit(0)``,
``os._exit(0)``, a module-level ``raise SystemExit``, a real model's ``if __name__ ==
"__main__":`` block that ends in ``sys.exit()``) used to pass every step it was given, so the
problem scored correct with no function defined at all. The grader now needs the program to
reach the end of the tests: the values the tests' calls returned are written only after the
last one (tests/security/test_scicode_hidden_targets.py says why that is safe); a step that
exits without them is ``exited_early`` and the cell's public reasons say so.

The end-to-end test goes the real way: a run created through the API's service, a Celery worker
process, the simulator answering with the hostile code, the cell read back from the public API.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from datasets.benchmarks import get_adapter
from datasets.scicode_fixture_data import write_fixture_test_data
from runs.engine.code_grading import grade_scicode
from runs.engine.sandbox_command import SandboxLimits, sandbox_available
from runs.models import Cell
from tests.conftest import WorkerProcess, purge_broker
from tests.runs import engine_support as es

assert sandbox_available(), "bubblewrap missing: run scripts/ensure_sandbox.sh"

FAST = SandboxLimits(wall_s=20.0, cpu_s=10.0, memory_bytes=1024**3)

EARLY_EXITS = {
    "sys.exit": "import sys\nsys.exit(0)\n",
    "os._exit": "import os\nos._exit(0)\n",
    "raise SystemExit": "raise SystemExit\n",
    "main block": "def main():\n    return 0\n\nif __name__ == '__main__':\n    raise SystemExit(main())\n",
    "atexit os._exit": "import atexit, os\natexit.register(os._exit, 0)\nos._exit(0)\n",
}


def scicode_question():
    adapter = get_adapter("scicode")
    return next(iter(adapter.load(adapter.fixture_path())))


@pytest.mark.parametrize("body", EARLY_EXITS.values(), ids=EARLY_EXITS.keys())
def test_a_scicode_step_that_exits_before_its_tests_is_not_passed(body: str, tmp_path: Path):
    h5 = write_fixture_test_data(tmp_path / "test_data.h5")
    q = scicode_question()
    reply = f"```python\n{body}```"
    grade = grade_scicode(
        step_replies=[reply] * len(q.secret["steps"]),
        payload=q.payload,
        secret=q.secret,
        h5_path=h5,
        limits=FAST,
    )
    assert grade["correct"] is False
    assert grade["steps_passed"] == 0
    assert {s["status"] for s in grade["steps"] if s["status"] != "gold"} == {"exited_early"}


def hostile_scicode_key(body: str):
    """The fixture's answer key with every SciCode step's solution replaced by ``body``."""
    key = es.answer_key(["scicode"])
    for sha, entry in list(key._entries.items()):
        if entry.benchmark == "scicode" and "solution" in entry.secret:
            key._entries[sha] = dataclasses.replace(
                entry, secret={**entry.secret, "solution": body}
            )
    return key


def run_scicode_against(key, tmp_path: Path, settings) -> Cell:
    h5 = str(write_fixture_test_data(tmp_path / "test_data.h5"))
    settings.SRBENCH_SCICODE_H5 = h5
    purge_broker()
    worker = WorkerProcess(
        tmp_path / "worker.log", ["--pool=solo"], extra_env={"SRBENCH_SCICODE_H5": h5}
    )
    worker.start()
    try:
        dataset = es.fixture_dataset(["scicode"], per_benchmark=1)
        run = es.keyed_run(key, dataset, "hostile-scicode", timeout=240)
    finally:
        worker.stop()
        purge_broker()
    assert run.status == "completed", (run.stop_reason, worker.log()[-3000:])
    return Cell.objects.get(run=run)


@pytest.mark.worker
def test_a_run_whose_model_exits_early_scores_the_problem_wrong_and_says_why(
    transactional_db, tmp_path: Path, settings, client
):
    body = "import sys\nsys.exit(0)\n"
    cell = run_scicode_against(hostile_scicode_key(body), tmp_path, settings)
    assert cell.status == "completed"
    assert cell.correct is False, cell.grade
    client.force_login(cell.run.owner)
    page = client.get(f"/api/v1/runs/{cell.run_id}/results/").json()
    [row] = page["results"]
    assert row["correct"] is False
    assert {s["status"] for s in row["grade"]["steps"]} == {"exited_early"}
    assert any("exited early" in r for r in row["reasons"]), row["reasons"]


@pytest.mark.worker
def test_the_same_run_with_the_reference_solutions_is_correct(
    transactional_db, tmp_path: Path, settings
):
    """The control: the key unchanged, the same path scores the problem correct."""
    cell = run_scicode_against(es.answer_key(["scicode"]), tmp_path, settings)
    assert cell.correct is True, cell.grade
