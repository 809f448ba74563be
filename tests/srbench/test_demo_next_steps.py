"""What the demo prints for the user to do next, and its headline margin.

The next steps are pasted into another terminal, where `python` is not the venv's (a new shell
has not activated it): they must name the interpreter that works. The headline margin reads the
same when the run starts as in the answer sentence."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from srbench.cli.local import headline_answer
from srbench.demo import HEADLINE_BASELINE, HEADLINE_CANDIDATE, HEADLINE_MARGIN

ROOT = Path(__file__).resolve().parents[2]


def a_new_terminal() -> dict[str, str]:
    """The environment of a shell opened next to the demo's: no venv on PATH, none active."""
    env = {k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "PYTHONPATH"}}
    return env | {"PATH": "/usr/local/bin:/usr/bin:/bin"}


def pasted(line: str) -> subprocess.CompletedProcess[str]:
    """The line pasted into that shell in the checkout, with --help appended: it parses the
    verb's arguments in the real command (Django and every app imported) and touches no data."""
    return subprocess.run(
        ["bash", "-c", f"{line.strip()} --help"],
        cwd=ROOT,
        env=a_new_terminal(),
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_next_step_pasted_in_a_new_terminal_runs_with_the_venvs_interpreter() -> None:
    from srbench.cli.local import cli_line

    line = cli_line("report", "1", "--user", "demo")
    result = pasted(line)
    assert result.returncode == 0, f"`{line}`:\n{result.stdout}{result.stderr}"
    assert "usage:" in result.stdout and "report" in result.stdout
    # Short where the interpreter lies in the checkout: `.venv/bin/python manage.py …`.
    exe = Path(os.path.abspath(sys.executable))
    if exe.is_relative_to(ROOT):
        assert line.strip() == f"{exe.relative_to(ROOT)} manage.py benchmark report 1 --user demo"


@pytest.fixture
def headline_run():  # type: ignore[no-untyped-def]
    """A completed headline run (the strong model and the router on held-out questions) whose
    margin was frozen from the demo's plan as the planner freezes it (runs.planning.plans)."""
    from runs.planning.plans import MarginField, margin_text
    from tests import factories as f
    from tests.compare import builders as b
    from tests.compare.test_verdicts import outcomes

    frozen = margin_text(MarginField().to_internal_value(HEADLINE_MARGIN))
    qs = b.questions({"mmlu-pro": 40})
    strong_out, router_out = outcomes(40, 30, loses=1, gains=0)
    strong, router = b.target(HEADLINE_BASELINE), b.target(HEADLINE_CANDIDATE, kind="mom")
    run = b.run(
        qs, {strong: strong_out, router: router_out}, split="holdout", non_inferiority_margin=frozen
    )
    return run, f.user_create(username="demo-next", staff=True)


def answer(run, user, capsys) -> str:  # type: ignore[no-untyped-def]
    """What the demo prints once its headline run has ended (headline_answer)."""
    from srbench.api_client import ApiClient

    code = headline_answer(
        ApiClient(user=user.username),
        {"id": run.pk, "status": "completed"},
        time.monotonic() + 600,
        user.username,
        "http://127.0.0.1:8000/",
    )
    printed: str = capsys.readouterr().out
    assert code == 0, printed
    return printed


@pytest.mark.django_db
def test_the_compare_step_under_the_answer_works_in_a_new_terminal(headline_run, capsys) -> None:  # type: ignore[no-untyped-def]
    printed = answer(*headline_run, capsys)
    compare = next(s for s in printed.splitlines() if "manage.py benchmark compare" in s)
    result = pasted(compare)
    assert result.returncode == 0, f"`{compare}`:\n{result.stdout}{result.stderr}"
    assert "usage:" in result.stdout and "compare" in result.stdout


@pytest.mark.django_db
def test_the_headline_margin_reads_the_same_at_the_start_and_in_the_answer(  # type: ignore[no-untyped-def]
    headline_run, capsys
) -> None:
    """The plan says "0.10"; the run freezes "0.1", which the answer sentence shows: the line
    printed when the run starts says the same."""
    from srbench.cli.local import headline_started

    run, user = headline_run
    plan = {"non_inferiority_margin": HEADLINE_MARGIN}
    started = headline_started({"id": run.pk, "progress": {"denominator": 80}}, plan)
    said = re.search(r"non-inferiority margin (\S+) fixed in its plan", started)
    assert said, started
    sentence = next(
        s for s in answer(run, user, capsys).splitlines() if s.startswith("Does sim-router keep")
    )
    answered = re.search(r"the margin (\S+) fixed before the run", sentence)
    assert answered, sentence
    assert said.group(1) == answered.group(1), (started, sentence)
