"""The sandbox's disk budget (issue 34 item 3) and its closed user namespaces, on the real
bubblewrap: everything a program or an agent command can write (/app, /tmp, /dev/shm, the
verifier's /logs) shares one size-limited tmpfs; a write past it fails that test, step or task
with the reason "disk quota exceeded", and the host's disk never pays for it."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import os
import tempfile
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest

from datasets.benchmarks import get_adapter
from datasets.scicode_fixture_data import write_fixture_test_data
from runs.engine.code_grading import grade_livecodebench, grade_scicode
from runs.engine.sandbox import DISK_QUOTA_EXCEEDED, SNAPSHOT_NAME, sandbox_run
from runs.engine.sandbox_command import (
    SandboxLimits,
    disk_budget_bytes,
    sandbox_available,
    sandbox_python,
)
from runs.engine.terminal import TERMINAL_LIMITS, TerminalTaskError, terminal_session_start
from runs.interfaces.public import grade_reasons, public_grade

# make test installs bubblewrap (scripts/ensure_sandbox.sh); without it these tests must fail,
# not skip: a skipped escape test proves nothing.
assert sandbox_available(), "bubblewrap missing: run scripts/ensure_sandbox.sh"

MIB = 1024 * 1024
QUOTA = 8 * MIB
# The per-file limit far above the budget, so it is the budget that stops the writer.
LIMITS = SandboxLimits(
    wall_s=20.0, cpu_s=10.0, memory_bytes=1024**3, file_size_bytes=256 * MIB, disk_bytes=QUOTA
)
TERMINAL = dataclasses.replace(TERMINAL_LIMITS, file_size_bytes=256 * MIB, disk_bytes=QUOTA)
# Tries to write 64 MiB (eight budgets) in 1 MiB chunks, half in its working directory and half
# in /tmp; says how far it got, then fails with the error.
WRITER = """\
written = 0
try:
    for i in range(64):
        with open("big" if i % 2 else "/tmp/big", "ab") as f:
            f.write(b"x" * (1 << 20))
        written += 1
finally:
    print("written MiB", written)
"""
SHELL_WRITER = (
    "for i in $(seq 32); do head -c 1048576 /dev/zero >> big || exit 1; "
    "head -c 1048576 /dev/zero >> /tmp/big || exit 1; done"
)


def host_free() -> int:
    """Free bytes on the filesystem of the host's work directories (sandbox temp dirs, a
    Terminal-Bench session's directory)."""
    st = os.statvfs(tempfile.gettempdir())
    return st.f_bavail * st.f_frsize


@contextmanager
def host_disk_watch() -> Iterator[list[int]]:
    """The most the host's free space shrank while the block ran, sampled every 5 ms (the
    list holds it once the block ends)."""
    before = host_free()
    lowest = [before]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.005):
            lowest[0] = min(lowest[0], host_free())

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    shrank: list[int] = []
    try:
        yield shrank
    finally:
        stop.set()
        thread.join()
        shrank.append(before - min(lowest[0], host_free()))


def shrinks_until_within_budget(scenario: Callable[[], int], tries: int = 3) -> list[int]:
    """Run `scenario` (one whole write past the budget, returning how much the host's free
    space shrank meanwhile) until one run stays within the budget, at most `tries` times.
    The host's free space is shared with everything else on the machine (another test suite,
    a database's WAL): a neighbour's writes once do not repeat on cue, while a sandbox that
    leaked to the host disk shrinks it past the budget on every try."""
    shrinks = []
    for _ in range(tries):
        shrinks.append(scenario())
        if shrinks[-1] <= QUOTA:
            break
    return shrinks


def written_mib(stdout: bytes) -> int:
    return int(stdout.split(b"written MiB")[1].split()[0])


# --- the sandbox ---------------------------------------------------------------------------


def test_writing_past_the_budget_in_cwd_and_tmp_is_disk_quota_exceeded():
    def scenario() -> int:
        with host_disk_watch() as shrank:
            result = sandbox_run(argv=[sandbox_python(), "-c", WRITER], files={}, limits=LIMITS)
        assert result.reason == DISK_QUOTA_EXCEEDED, result
        assert b"No space left on device" in result.stderr
        # /app and /tmp share one budget: both together got no more than it.
        assert written_mib(result.stdout) <= QUOTA // MIB
        return shrank[0]

    shrinks = shrinks_until_within_budget(scenario)
    assert shrinks[-1] <= QUOTA, shrinks


def test_dev_shm_and_extra_writable_dirs_count_against_the_same_budget():
    code = (
        "for path in ('/dev/shm/a', '/logs/verifier/b', 'c'):\n"
        "    with open(path, 'wb') as f:\n"
        "        f.write(b'x' * (3 << 20))\n"
    )
    result = sandbox_run(
        argv=[sandbox_python(), "-c", code],
        files={},
        limits=LIMITS,
        writable_dirs=["/logs/verifier"],
    )
    assert result.reason == DISK_QUOTA_EXCEEDED, result


def test_a_program_within_the_budget_is_ok_and_nothing_else_is_writable():
    code = (
        "open('/tmp/a', 'wb').write(b'x' * (3 << 20))\n"
        "open('b', 'wb').write(b'x' * (3 << 20))\n"
        "for path in ('/dev/x', '/usr/x', '/proc/x', '/x', '/run/x'):\n"
        "    try:\n"
        "        open(path, 'w')\n"
        "        print('wrote', path)\n"
        "    except OSError:\n"
        "        pass\n"
    )
    result = sandbox_run(argv=[sandbox_python(), "-c", code], files={}, limits=LIMITS)
    assert (result.reason, result.exit_code) == ("ok", 0), result
    # As a normal user the budget's root and /run are the user's too (on the budget as well);
    # /dev, the runtime and /proc are read-only or refused in either case.
    assert b"/dev/x" not in result.stdout and b"/usr/x" not in result.stdout
    assert b"/proc/x" not in result.stdout


def test_user_namespaces_are_closed_inside_the_sandbox():
    result = sandbox_run(
        argv=[
            "bash",
            "-c",
            "unshare -Ur true; echo unshare=$?; "
            f"{sandbox_python()} -c 'import os; os.unshare(os.CLONE_NEWUSER)'; echo python=$?",
        ],
        files={},
        limits=LIMITS,
    )
    assert result.reason == "ok", result
    assert b"unshare=0" not in result.stdout and b"unshare=" in result.stdout
    assert b"python=0" not in result.stdout and b"python=" in result.stdout


def test_concurrent_sandboxes_close_only_their_own_descriptors(tmp_path: Path):
    """A worker runs sandboxes on several threads: each closes its own pipes exactly once, so
    a descriptor another thread has just been given (a database socket) is never closed under
    it. Here that other thread checks pipes of its own the whole time."""
    errors: list[BaseException] = []
    stop = threading.Event()

    def bystander() -> None:
        while not stop.is_set():
            r, w = os.pipe()
            try:
                os.write(w, b"x")
                if os.read(r, 1) != b"x":
                    errors.append(AssertionError("lost a byte"))
            except OSError as exc:
                errors.append(exc)
            finally:
                for fd in (r, w):
                    with contextlib.suppress(OSError):
                        os.close(fd)

    def session(index: int) -> None:
        workdir = tmp_path / f"s{index}"
        workdir.mkdir()
        for step in range(4):
            result = sandbox_run(
                argv=["bash", "-c", f"echo {step} >> steps; cat /logs/verifier/r 2>/dev/null"],
                files={},
                limits=LIMITS,
                workdir=workdir,
                writable_dirs=["/logs/verifier"],
                collect=["/logs/verifier/r"],
            )
            assert result.reason == "ok", result
        assert (
            sandbox_run(argv=["cat", "steps"], files={}, limits=LIMITS, workdir=workdir).stdout
            == b"0\n1\n2\n3\n"
        )

    watcher = threading.Thread(target=bystander)
    watcher.start()
    try:
        with ThreadPoolExecutor(max_workers=4) as pool:
            list(pool.map(session, range(4)))
    finally:
        stop.set()
        watcher.join()
    assert errors == []


def test_the_budget_defaults_to_the_setting(settings):
    settings.SRBENCH_SANDBOX_DISK_MB = 3
    assert disk_budget_bytes(SandboxLimits()) == 3 * MIB
    assert disk_budget_bytes(LIMITS) == QUOTA
    result = sandbox_run(
        argv=["bash", "-c", "head -c 4194304 /dev/zero > big"], files={}, limits=SandboxLimits()
    )
    assert result.reason == DISK_QUOTA_EXCEEDED, result


# --- LiveCodeBench -------------------------------------------------------------------------


def test_livecodebench_program_past_the_budget_fails_with_the_quota_reason():
    adapter = get_adapter("livecodebench")
    q = next(q for q in adapter.load(adapter.fixture_path()) if q.payload.get("func_name") is None)
    answer = f"```python\n{WRITER}```"
    grades = []

    def scenario() -> int:
        with host_disk_watch() as shrank:
            grades.append(
                grade_livecodebench(
                    answer=answer, payload=q.payload, secret=q.secret, limits=LIMITS
                )
            )
        return shrank[0]

    shrinks = shrinks_until_within_budget(scenario)
    assert shrinks[-1] <= QUOTA, shrinks
    grade = grades[-1]
    assert grade["correct"] is False and grade["status"] == "failed", grade
    assert grade["tests"][0]["status"] == DISK_QUOTA_EXCEEDED, grade
    # The member's view: the reason in words, from the public grade.
    assert "first failure: disk quota exceeded" in grade_reasons(public_grade(grade))


# --- SciCode -------------------------------------------------------------------------------


def test_scicode_step_past_the_budget_fails_with_the_quota_reason(tmp_path: Path):
    h5 = write_fixture_test_data(tmp_path / "test_data.h5")
    adapter = get_adapter("scicode")
    q = next(iter(adapter.load(adapter.fixture_path())))
    step = f"```python\n{WRITER}```"
    grades = []

    def scenario() -> int:
        with host_disk_watch() as shrank:
            grades.append(
                grade_scicode(
                    step_replies=[step] * len(q.secret["steps"]),
                    payload=q.payload,
                    secret=q.secret,
                    h5_path=h5,
                    limits=LIMITS,
                )
            )
        return shrank[0]

    shrinks = shrinks_until_within_budget(scenario)
    assert shrinks[-1] <= QUOTA, shrinks
    grade = grades[-1]
    assert grade["correct"] is False, grade
    scored = [s for s in grade["steps"] if s["status"] != "gold"]
    assert scored and all(s["status"] == DISK_QUOTA_EXCEEDED for s in scored), grade
    # Public: each step's outcome is shown by index (the member's grade table).
    public = public_grade(grade)
    assert public is not None
    assert {s["status"] for s in public["steps"]} >= {DISK_QUOTA_EXCEEDED}


# --- Terminal-Bench ------------------------------------------------------------------------


def terminal_question(task_id: str = "count-error-lines"):
    adapter = get_adapter("terminal-bench")
    return {q.native_id: q for q in adapter.load(adapter.fixture_path())}[task_id]


def test_terminal_command_past_the_budget_fails_the_task_with_the_quota_reason():
    q = terminal_question()
    with (
        host_disk_watch() as shrank,
        terminal_session_start(q.payload, q.secret, limits=TERMINAL) as session,
    ):
        code, _, err = session.run_command(SHELL_WRITER)
        snapshot = session.workdir / SNAPSHOT_NAME
        on_host = snapshot.stat().st_size if snapshot.exists() else 0
        # Nothing runs after it: the task has failed.
        later = session.run_command("echo still here")
        reward, detail = session.verify()
    assert code != 0 and "disk quota exceeded" in err, err
    assert session.disk_quota_exceeded
    assert later[0] != 0 and "still here" not in later[1] and "disk quota exceeded" in later[2]
    assert reward == 0
    assert detail["verifier_reason"] == DISK_QUOTA_EXCEEDED and detail["disk_quota_exceeded"]
    assert on_host <= QUOTA
    assert shrank[0] <= QUOTA, shrank
    grade = {"grader": "terminal-bench", "reward": reward, "steps": 2, "detail": detail}
    reasons = " ".join(grade_reasons(public_grade(grade)))
    assert "disk quota exceeded" in reasons.replace("_", " "), reasons


def test_terminal_files_within_the_budget_persist_and_survive_a_timeout():
    q = terminal_question()
    with terminal_session_start(q.payload, q.secret, limits=TERMINAL) as session:
        assert (
            session.run_command("head -c 3145728 /dev/urandom > data.bin; echo x > /tmp/t")[0] == 0
        )
        code, _, err = session.run_command("echo kept > note.txt; sleep 30", timeout=1)
        assert code == 124 and "exceeded 1 s" in err
        code, out, _ = session.run_command("cat note.txt; wc -c < data.bin; ls /tmp")
        assert session.workdir.joinpath(SNAPSHOT_NAME).stat().st_size <= QUOTA
    assert code == 0 and out.split() == ["kept", "3145728"], out  # /tmp is per command
    assert not session.disk_quota_exceeded


def test_terminal_snapshot_larger_than_the_budget_is_the_quota_too():
    """Empty files cost a tmpfs no budget, but 512 bytes each in the saved snapshot: 20,000 of
    them (10 MB of archive) go past 8 MiB, so the host never stores more than the budget."""
    q = terminal_question()
    with terminal_session_start(q.payload, q.secret, limits=TERMINAL) as session:
        code, _, err = session.run_command(
            "mkdir many && cd many && for i in $(seq 20000); do : > f$i; done"
        )
        assert not session.workdir.joinpath(SNAPSHOT_NAME).exists()
    assert "disk quota exceeded" in err, err
    assert session.disk_quota_exceeded


def test_terminal_task_whose_files_do_not_fit_the_budget_cannot_be_set_up():
    q = terminal_question()
    big = {
        "path": "environment/big.bin",
        "content": base64.b64encode(b"\0" * (QUOTA + MIB)).decode(),
        "encoding": "base64",
    }
    payload = q.payload | {"environment_files": [*q.payload["environment_files"], big]}
    with pytest.raises(TerminalTaskError, match="disk quota exceeded"):
        terminal_session_start(payload, q.secret, limits=TERMINAL)


def test_terminal_command_cannot_create_a_user_namespace():
    q = terminal_question()
    with terminal_session_start(q.payload, q.secret, limits=TERMINAL) as session:
        code, _, err = session.run_command("unshare -Ur true")
        assert not session.disk_quota_exceeded  # unshare's ENOSPC is not the disk's
    assert code != 0, err


def test_terminal_verifier_past_the_budget_scores_nothing():
    q = terminal_question("fix-broken-script")
    with terminal_session_start(q.payload, q.secret, limits=TERMINAL) as session:
        for entry in q.secret["solution"]:
            assert session.run_command(entry["content"])[0] == 0
        # Code the verifier runs (the tests run the agent's median.py) fills the budget.
        session.run_command(
            "cat >> median.py <<'EOF'\n"
            "with open('/tmp/fill', 'wb') as f:\n"
            "    f.write(b'x' * (64 << 20))\n"
            "EOF"
        )
        reward, detail = session.verify()
    assert reward == 0 and detail["verifier_reason"] == DISK_QUOTA_EXCEEDED, detail
