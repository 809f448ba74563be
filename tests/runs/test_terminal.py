"""Terminal-Bench fixture tasks in the local sandbox: solvable by their own solutions, failing
without them, and not fooled by an agent that writes its own reward."""

from __future__ import annotations

from pathlib import Path

import pytest

from datasets.benchmarks.terminal_bench import ADAPTER
from runs.engine.sandbox_command import sandbox_available
from runs.engine.terminal import terminal_session_start

# make test installs bubblewrap (scripts/ensure_sandbox.sh); without it these tests must fail,
# not skip: a skipped escape test proves nothing.
assert sandbox_available(), "bubblewrap missing: run scripts/ensure_sandbox.sh"

TASKS = Path(__file__).resolve().parents[2] / "datasets" / "fixtures" / "terminal-bench" / "tasks"
QUESTIONS = {q.native_id: q for q in ADAPTER.load(TASKS)}


@pytest.mark.parametrize("task_id", sorted(QUESTIONS))
def test_fixture_task_is_solved_by_its_own_solution(task_id):
    q = QUESTIONS[task_id]
    with terminal_session_start(q.payload, q.secret) as session:
        for entry in q.secret["solution"]:
            code, out, err = session.run_command(entry["content"])
            assert code == 0, (out, err)
        reward, detail = session.verify()
    assert reward == 1, detail


@pytest.mark.parametrize("task_id", sorted(QUESTIONS))
def test_fixture_task_fails_without_the_solution(task_id):
    q = QUESTIONS[task_id]
    with terminal_session_start(q.payload, q.secret) as session:
        reward, detail = session.verify()
    assert reward == 0, detail


def test_environment_files_are_in_the_working_directory_and_tests_are_not():
    q = QUESTIONS["count-error-lines"]
    with terminal_session_start(q.payload, q.secret) as session:
        code, out, _ = session.run_command("ls -A; pwd")
    assert code == 0
    assert out.split() == ["app.log", "/app"]


def test_files_persist_between_commands_of_a_session():
    q = QUESTIONS["count-error-lines"]
    with terminal_session_start(q.payload, q.secret) as session:
        session.run_command("echo remembered > note.txt")
        assert session.run_command("cat note.txt")[1] == "remembered\n"


def test_a_self_written_reward_file_does_not_count():
    q = QUESTIONS["count-error-lines"]
    with terminal_session_start(q.payload, q.secret) as session:
        session.run_command("mkdir -p logs/verifier && echo 1 > logs/verifier/reward.txt")
        reward, _ = session.verify()
    assert reward == 0


def test_a_hanging_command_is_killed_at_its_timeout():
    q = QUESTIONS["count-error-lines"]
    with terminal_session_start(q.payload, q.secret) as session:
        code, _, err = session.run_command("sleep 30", timeout=1)
    assert code == 124 and "exceeded 1 s" in err


def test_a_command_has_no_network():
    q = QUESTIONS["count-error-lines"]
    with terminal_session_start(q.payload, q.secret) as session:
        code, _, _ = session.run_command("exec 3<>/dev/tcp/127.0.0.1/5432", timeout=5)
    assert code != 0


@pytest.mark.parametrize(
    ("command", "why"),
    [("echo a\x00b > out.txt", "U+0000"), ("echo a\ud800b > out.txt", "lone surrogate")],
)
def test_a_command_a_shell_cannot_take_is_not_run_and_the_agent_is_told(command, why):
    """R15: an agent's command is a model's text. U+0000 cannot pass into an argument vector and
    a lone surrogate has no bytes; both raised out of the session before (the cell crashed).
    Now nothing runs, the agent reads why (exit 2, as bash for a command it cannot parse), and
    the session goes on."""
    q = QUESTIONS["count-error-lines"]
    with terminal_session_start(q.payload, q.secret) as session:
        code, out, err = session.run_command(command)
        assert (code, out) == (2, "") and why in err and "not run" in err
        assert session.run_command("ls")[1].split() == ["app.log"]  # nothing was written
        assert session.commands_run == 2


def test_a_surrogate_escaped_byte_still_reaches_the_shell_as_that_byte():
    """U+DC80–U+DCFF stand for undecodable bytes (Python's surrogateescape): they have bytes,
    so the command runs with them."""
    q = QUESTIONS["count-error-lines"]
    with terminal_session_start(q.payload, q.secret) as session:
        code, out, _ = session.run_command("printf '\udcff' | od -An -tx1")
    assert code == 0 and out.split() == ["ff"]
