"""Model-written code and agent commands plant symlinks in their work directory; nothing the
host then does for that benchmark (prepare, verify, read the reward, clean up) may create,
modify or delete anything outside it (issue 19, R9.3, docs/decisions.md "Sandbox host paths").

Each test hashes a planted host directory (names, types, modes, owners, sizes, contents, link
targets and directory mtimes) before and after the episode. The symlinks point at it, at `/`,
at `..` (the host's temp dir, seen from the work directory), through a symlinked parent, and
one is swapped in between two commands.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from pathlib import Path

import pytest

from datasets.benchmarks import get_adapter
from datasets.scicode_fixture_data import write_fixture_test_data
from runs.engine.code_grading import grade_livecodebench, grade_scicode
from runs.engine.sandbox import SandboxError, sandbox_run
from runs.engine.sandbox_command import SandboxLimits, sandbox_available
from runs.engine.sandbox_files import SandboxPathError, read_file_beneath, write_sandbox_files
from runs.engine.terminal import terminal_session_start

# make test installs bubblewrap; without it these tests must fail, not skip.
assert sandbox_available(), "bubblewrap missing: run scripts/ensure_sandbox.sh"

# Names the verifier writes or deletes; none may appear at `/` or in the host temp dir.
VERIFIER_NAMES = ("test.sh", "run-tests.sh", "test_outputs.py", "verifier", "reward.txt")
FAST = SandboxLimits(wall_s=20.0, cpu_s=5.0, memory_bytes=1024**3)


def tree_digest(root: Path) -> str:
    """Everything observable about `root` without following a symlink."""
    h = hashlib.sha256()
    for current, dirs, files in os.walk(root, followlinks=False):
        dirs.sort()
        for name in sorted([*dirs, *files, "."]):
            path = Path(current) / name if name != "." else Path(current)
            st = path.lstat()
            h.update(f"{path.relative_to(root)}|{st.st_mode:o}|{st.st_uid}|{st.st_gid}|".encode())
            if stat.S_ISLNK(st.st_mode):
                h.update(os.readlink(path).encode())
            elif stat.S_ISREG(st.st_mode):
                h.update(path.read_bytes())
            else:
                h.update(str(st.st_mtime_ns).encode())
    return h.hexdigest()


@pytest.fixture
def host_dir(tmp_path: Path) -> Path:
    """A host directory shaped like what an escaping verifier would touch."""
    host = tmp_path / "host"
    (host / "verifier").mkdir(parents=True)
    (host / "verifier" / "keep.txt").write_text("do not delete\n")
    (host / "reward").write_text("1\n")
    (host / "test.sh").write_text("#!/bin/sh\necho original\n")
    (host / "sub").mkdir()
    (host / "sub" / "data.bin").write_bytes(os.urandom(64))
    return host


def outside_names() -> set[str]:
    found = set()
    for top in (Path("/"), Path(tempfile.gettempdir())):
        found |= {f"{top}/{n}" for n in VERIFIER_NAMES if (top / n).exists()}
    return found


def terminal_question(task_id: str):
    adapter = get_adapter("terminal-bench")
    return {q.native_id: q for q in adapter.load(adapter.fixture_path())}[task_id]


def plants(host: Path) -> dict[str, list[str]]:
    """Agent command sequences, one episode each."""
    return {
        "links-to-host-dir": [f"ln -s {host} tests && ln -s {host} logs"],
        "links-to-root": ["ln -s / tests && ln -s / logs"],
        "links-to-parent": ["ln -s .. tests && ln -s .. logs"],
        "symlinked-parent": [
            f"mkdir -p real && ln -s {host} real/tests && ln -s real/tests tests",
            f"ln -s {host} logs; ln -s {host} run-tests.sh; mkdir -p x && ln -s {host} x/verifier",
        ],
        "swapped-mid-episode": [
            "mkdir -p logs/verifier tests && echo 1 > logs/verifier/reward.txt",
            f"rm -rf logs tests && ln -s {host} logs && ln -s {host} tests",
        ],
        "reward-link": [f"mkdir -p logs/verifier && ln -s {host}/reward logs/verifier/reward.txt"],
    }


PLANTS = list(plants(Path("/x")))


@pytest.mark.parametrize("task_id", ["count-error-lines", "csv-column-sum"])
@pytest.mark.parametrize("plant", PLANTS)
def test_terminal_episode_cannot_touch_host_files(host_dir: Path, plant: str, task_id: str):
    before, names_before = tree_digest(host_dir), outside_names()
    q = terminal_question(task_id)
    with terminal_session_start(q.payload, q.secret) as session:
        for command in plants(host_dir)[plant]:
            code, out, err = session.run_command(command)
            assert code == 0, (command, out, err)
        reward, detail = session.verify()
        workdir = session.workdir
    assert tree_digest(host_dir) == before
    assert outside_names() == names_before
    # The planted links and a planted reward never count; the task was not solved.
    assert reward == 0, detail
    assert not workdir.exists()


def test_terminal_solution_still_passes_beside_planted_links(host_dir: Path):
    """The hardening does not break grading: the official solution passes with links around."""
    before = tree_digest(host_dir)
    q = terminal_question("fix-broken-script")
    with terminal_session_start(q.payload, q.secret) as session:
        session.run_command(f"ln -s {host_dir} tests && ln -s {host_dir} logs && ln -s / root")
        for entry in q.secret["solution"]:
            assert session.run_command(entry["content"])[0] == 0
        reward, detail = session.verify()
    assert reward == 1, detail
    assert tree_digest(host_dir) == before


def test_a_verifier_that_plants_a_reward_symlink_is_not_followed(host_dir: Path):
    """Whatever runs in the verifier (code the tests run; agent code used to get there through a
    planted pytest.py, tests/security/test_hostile_agent_verifier.py) could point the reward
    file at a host file holding "1"; the host reads the reward without following links, so the
    forged link scores nothing. Here the task's own test script plants it."""
    before = tree_digest(host_dir)
    q = terminal_question("fix-broken-script")
    plant = (
        f"ln -s {str(host_dir / 'reward')!r} /logs/verifier/reward.txt\nchmod 555 /logs/verifier\n"
    )
    tests = [t for t in q.secret["tests"] if not t["path"].endswith("test.sh")]
    secret = {**q.secret, "tests": [*tests, {"path": "tests/test.sh", "content": plant}]}
    with terminal_session_start(q.payload, secret) as session:
        reward, detail = session.verify()
    assert reward == 0 and detail["reward_source"] == "missing", detail
    assert tree_digest(host_dir) == before


def test_hidden_tests_are_not_in_the_agents_directory_and_leave_with_the_verifier():
    q = terminal_question("fix-broken-script")
    with terminal_session_start(q.payload, q.secret) as session:
        session.verify()
        code, out, _ = session.run_command("ls -A /app; ls /tests /logs 2>&1; true")
    assert code == 0
    assert "test_outputs.py" not in out and "test.sh" not in out
    assert "No such file" in out


LINK_PLANTER = """\
import os
for name, target in [("host", {host!r}), ("root", "/"), ("up", ".."), ("runner_link", {host!r})]:
    try:
        os.symlink(target, name)
    except OSError:
        pass
os.makedirs("nested", exist_ok=True)
os.symlink({host!r}, "nested/verifier")
os.replace("host", "solution_link")
"""


def test_livecodebench_code_cannot_touch_host_files(host_dir: Path):
    before, names_before = tree_digest(host_dir), outside_names()
    adapter = get_adapter("livecodebench")
    questions = [
        q for q in adapter.load(adapter.fixture_path()) if q.payload.get("func_name") is None
    ]
    q = questions[0]
    answer = "```python\n" + LINK_PLANTER.format(host=str(host_dir)) + "print(0)\n```"
    grade = grade_livecodebench(answer=answer, payload=q.payload, secret=q.secret, limits=FAST)
    assert grade["tests"], grade  # the planted code really ran
    assert grade["tests"][0]["status"] in ("failed", "wrong_answer", "passed"), grade
    assert tree_digest(host_dir) == before
    assert outside_names() == names_before


def test_scicode_code_cannot_touch_host_files(host_dir: Path, tmp_path: Path):
    h5 = write_fixture_test_data(tmp_path / "test_data.h5")
    before, names_before = tree_digest(host_dir), outside_names()
    adapter = get_adapter("scicode")
    q = next(iter(adapter.load(adapter.fixture_path())))
    step = "```python\n" + LINK_PLANTER.format(host=str(host_dir)) + "```"
    grade = grade_scicode(
        step_replies=[step] * len(q.secret["steps"]),
        payload=q.payload,
        secret=q.secret,
        h5_path=h5,
        limits=FAST,
    )
    assert grade["correct"] is False
    assert tree_digest(host_dir) == before
    assert outside_names() == names_before


def test_sandbox_run_cleans_up_a_directory_full_of_links(host_dir: Path):
    before = tree_digest(host_dir)
    script = LINK_PLANTER.format(host=str(host_dir))
    result = sandbox_run(
        argv=["python3", "-c", script + "print('planted')"], files={"a/b.txt": b"x"}, limits=FAST
    )
    assert result.stdout == b"planted\n", result
    assert tree_digest(host_dir) == before


# The file layer itself ----------------------------------------------------------------------


def test_writing_refuses_a_symlink_at_any_component(tmp_path: Path, host_dir: Path):
    before = tree_digest(host_dir)
    work = tmp_path / "work"
    work.mkdir()
    (work / "tests").symlink_to(host_dir)
    (work / "deep").mkdir()
    (work / "deep" / "link").symlink_to(host_dir / "sub")
    (work / "file").write_text("keep")
    for name in ("tests/test.sh", "deep/link/new.txt", "tests/verifier/x", "file", "../escape"):
        with pytest.raises(SandboxPathError):
            write_sandbox_files(work, {name: b"#!/bin/sh\n"}, uid=None)
    assert (work / "file").read_text() == "keep"
    assert not (tmp_path / "escape").exists()
    assert tree_digest(host_dir) == before


def test_reading_refuses_symlinks_fifos_and_directories(tmp_path: Path, host_dir: Path):
    logs = tmp_path / "logs"
    (logs / "verifier").mkdir(parents=True)
    (logs / "ok").mkdir()
    (logs / "ok" / "reward.txt").write_text("1\n")
    assert read_file_beneath(logs, "ok/reward.txt", max_bytes=10) == b"1\n"
    (logs / "verifier" / "reward.txt").symlink_to(host_dir / "reward")
    assert read_file_beneath(logs, "verifier/reward.txt", max_bytes=10) is None
    (logs / "linked").symlink_to(host_dir)
    assert read_file_beneath(logs, "linked/reward", max_bytes=10) is None
    os.mkfifo(logs / "fifo")
    assert read_file_beneath(logs, "fifo", max_bytes=10) is None  # and it did not block
    assert read_file_beneath(logs, "ok", max_bytes=10) is None
    assert read_file_beneath(logs, "missing/reward.txt", max_bytes=10) is None
    (logs / "big").write_bytes(b"1" * 100)
    assert read_file_beneath(logs, "big", max_bytes=10) == b"1" * 10


@pytest.mark.parametrize(
    "target", ["/app/tests", "/app", "/tmp/x", "relative", "/", "/usr/x", "/a/../app"]
)
def test_extra_mounts_may_not_land_in_the_agents_directory(target: str, tmp_path: Path):
    with pytest.raises(ValueError, match="bind target"):
        sandbox_run(argv=["true"], files={}, limits=FAST, ro_binds={target: tmp_path})


def test_a_sandbox_that_fails_to_set_up_is_a_host_error_not_a_failing_program(tmp_path: Path):
    """bubblewrap can fail after it forked (here: a mount source that does not exist; in a
    container without NET_ADMIN: the loopback set-up). That is the host's fault: SandboxError,
    never a program that "exited 1" and is graded wrong."""
    with pytest.raises(SandboxError, match="sandbox failed to start"):
        sandbox_run(
            argv=["true"],
            files={},
            limits=FAST,
            ro_binds={"/data/missing": tmp_path / "does-not-exist"},
        )
