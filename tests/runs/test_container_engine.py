"""Terminal-Bench's official tasks with a container engine (issue 37 item 5), tested where there
is none: fake ``docker``/``podman`` executables on a PATH of their own answer ``info`` or fail,
and record every command line the session gives them. What a real engine does with those
command lines is not tested here (docs/decisions.md says what is not)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from datasets.benchmarks import get_adapter
from runs.engine import container
from runs.engine.container import (
    ENGINE_ENV,
    Engine,
    Mount,
    choose_engine,
    container_engine,
    exec_argv,
    run_argv,
)
from runs.engine.container_session import ContainerSession, run_capped
from runs.engine.terminal import TERMINAL_LIMITS
from runs.engine.terminal_runner import terminal_session_open
from runs.planning.plans import plan_freeze
from tests.runs.engine_support import fixture_dataset
from tests.runs.test_not_run import add_copy, plan

# A fake engine: `info` answers as FAKE_<NAME>_INFO says (exit code, stderr, or "hang"); every
# call is appended to FAKE_LOG as JSON; `exec` runs the command on the host in FAKE_ROOT (the
# container's /app); `run --rm` plays the verifier: it writes FAKE_REWARD to the /logs mount,
# or plants a symlink there when FAKE_REWARD is "symlink".
FAKE = r"""#!{python}
import json, os, subprocess, sys, time
name = os.path.basename(sys.argv[0])
args = sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps([name, *args]) + "\n")
verb = args[0] if args else ""
if verb == "info":
    how = os.environ.get("FAKE_" + name.upper() + "_INFO", "0")
    if how == "hang":
        time.sleep(60)
    code, _, message = how.partition(":")
    if message:
        sys.stderr.write("some detail\n" + message + "\n")
    sys.exit(int(code))
if verb == "exec":
    command = args[-1]
    sys.exit(subprocess.run(["bash", "-c", command], cwd=os.environ["FAKE_ROOT"]).returncode)
if verb == "run" and "--rm" in args:
    mounts = dict(
        (dict(p.split("=", 1) for p in m.split(",") if "=" in p)["target"], m)
        for m in (args[i + 1] for i, a in enumerate(args) if a == "--mount")
    )
    logs = dict(p.split("=", 1) for p in mounts["/logs"].split(",") if "=" in p)["source"]
    tests = dict(p.split("=", 1) for p in mounts["/tests"].split(",") if "=" in p)["source"]
    print("tests seen:", sorted(os.listdir(tests)))
    reward = os.environ.get("FAKE_REWARD", "1")
    target = os.path.join(logs, "verifier", "reward.txt")
    if reward == "symlink":
        os.symlink(os.environ["FAKE_ROOT"] + "/planted", target)
    else:
        with open(target, "w") as out:
            out.write(reward)
    sys.exit(0)
if verb == "run" and "--detach" in args:
    print("0123456789abcdef")
sys.exit(0)
"""


@pytest.fixture
def fakes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A bin directory for fake engines (none yet), made the only PATH entry besides the
    system's, and a log of their calls."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    root = tmp_path / "app"
    root.mkdir()
    log = tmp_path / "calls.jsonl"
    log.touch()
    monkeypatch.setenv("FAKE_LOG", str(log))
    monkeypatch.setenv("FAKE_ROOT", str(root))
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.delenv(ENGINE_ENV, raising=False)

    def install(name: str, info: str = "0") -> Path:
        exe = bin_dir / name
        exe.write_text(FAKE.replace("{python}", sys.executable))
        exe.chmod(0o755)
        monkeypatch.setenv(f"FAKE_{name.upper()}_INFO", info)
        return exe

    def calls() -> list[list[str]]:
        return [json.loads(line) for line in log.read_text().splitlines()]

    return {"bin": bin_dir, "root": root, "install": install, "calls": calls}


def test_no_engine_on_path_is_none_with_both_named(fakes):
    choice = choose_engine()
    assert choice.engine is None
    assert choice.reason == "docker: not found; podman: not found"


def test_docker_answering_is_chosen_and_podman_never_asked(fakes):
    docker = fakes["install"]("docker")
    fakes["install"]("podman")
    choice = choose_engine()
    assert choice.engine == Engine("docker", str(docker))
    assert fakes["calls"]() == [["docker", "info"]]


def test_a_docker_that_fails_info_gives_way_to_podman(fakes):
    fakes["install"]("docker", "1:Cannot connect to the Docker daemon at unix:///var/run/x")
    podman = fakes["install"]("podman")
    choice = choose_engine()
    assert choice.engine == Engine("podman", str(podman))
    assert fakes["calls"]() == [["docker", "info"], ["podman", "info"]]


def test_when_every_engine_fails_the_reason_quotes_each(fakes):
    fakes["install"]("docker", "1:Cannot connect to the Docker daemon")
    fakes["install"]("podman", "125:cannot find newuidmap")
    choice = choose_engine()
    assert choice.engine is None
    assert choice.reason == (
        "docker: `docker info` exited 1: Cannot connect to the Docker daemon; "
        "podman: `podman info` exited 125: cannot find newuidmap"
    )


def test_an_engine_whose_info_hangs_does_not_answer(fakes):
    fakes["install"]("docker", "hang")
    choice = choose_engine(timeout_s=0.5)
    assert choice.engine is None
    assert choice.reason.startswith("docker: `docker info` did not answer within 0.5 s")


def test_the_setting_names_one_engine_or_none(fakes, monkeypatch):
    fakes["install"]("docker")
    podman = fakes["install"]("podman")
    monkeypatch.setenv(ENGINE_ENV, "podman")
    assert choose_engine().engine == Engine("podman", str(podman))
    monkeypatch.setenv(ENGINE_ENV, "none")
    assert choose_engine().engine is None
    assert fakes["calls"]() == [["podman", "info"]]
    monkeypatch.setenv(ENGINE_ENV, "lxc")
    assert "not one of docker, podman, none" in choose_engine().reason


def test_the_cached_choice_follows_a_changed_path(fakes, monkeypatch):
    monkeypatch.setattr(container, "_cached", None)
    assert container_engine().engine is None
    fakes["install"]("docker")
    assert container_engine().engine is None  # believed for a while...
    assert container_engine(fresh=True).engine is not None  # ... unless asked again
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert container_engine().engine is None  # another PATH is asked at once


def _pairs(argv: list[str]) -> list[tuple[str, str]]:
    return list(zip(argv, argv[1:], strict=False))


def test_every_container_is_confined_like_the_sandbox():
    engine = Engine("docker", "/usr/bin/docker")
    argv = run_argv(
        engine,
        "tb/task:1",
        ["bash", "-c", "bash /tests/test.sh"],
        name="srbench-tb-x-verify",
        limits=TERMINAL_LIMITS,
        mounts=[
            Mount(Path("/tmp/t"), "/tests", read_only=True),
            Mount(Path("/tmp/l"), "/logs", read_only=False),
        ],
        env={"TEST_DIR": "/tests"},
    )
    pairs = _pairs(argv)
    assert argv[:2] == ["/usr/bin/docker", "run"] and "--rm" in argv
    assert ("--network", "none") in pairs
    assert ("--cap-drop", "ALL") in pairs
    assert ("--security-opt", "no-new-privileges") in pairs
    assert ("--pull", "never") in pairs and ("--entrypoint", "") in pairs
    memory = f"{TERMINAL_LIMITS.memory_bytes}b"
    assert ("--memory", memory) in pairs and ("--memory-swap", memory) in pairs
    assert ("--pids-limit", str(TERMINAL_LIMITS.max_processes)) in pairs
    size = TERMINAL_LIMITS.file_size_bytes
    assert ("--ulimit", f"fsize={size}:{size}") in pairs
    assert ("--ulimit", "cpu=30:30") in pairs and ("--ulimit", "core=0:0") in pairs
    assert ("--mount", "type=bind,source=/tmp/t,target=/tests,readonly") in pairs
    assert ("--mount", "type=bind,source=/tmp/l,target=/logs") in pairs
    assert ("--env", "TEST_DIR=/tests") in pairs
    assert argv[-4:] == ["tb/task:1", "bash", "-c", "bash /tests/test.sh"]
    # Nothing that would loosen it.
    assert not {"--privileged", "--network=host", "host", "--cap-add"} & set(argv)


def test_an_agent_command_is_killed_inside_the_container_too():
    argv = exec_argv(Engine("podman", "/bin/podman"), "c1", "ls -la", timeout_s=30)
    assert argv == [
        "/bin/podman",
        "exec",
        "--workdir",
        "/app",
        "c1",
        "timeout",
        "--kill-after=2",
        "30",
        "bash",
        "-c",
        "ls -la",
    ]


def test_output_is_capped_by_the_host():
    result = run_capped(
        ["bash", "-c", "head -c 300000 /dev/zero; sleep 30"], timeout_s=60, output_bytes=1000
    )
    assert result.reason == "output_cap" and result.exit_code is None
    assert len(result.stdout) + len(result.stderr) <= 1000


# --------------------------------------------------------------------------------------------
# The plan and the session


def official_task() -> Any:
    adapter = get_adapter("terminal-bench")
    for q in adapter.load(adapter.fixture_path()):
        if q.payload["environment"].get("docker_image") and q.payload["format"] == "harbor":
            payload = json.loads(json.dumps(q.payload))
            payload["environment"]["local_compatible"] = False
            return payload, q.secret
    raise AssertionError("no fixture task names an image")


@pytest.mark.django_db
def test_a_plan_runs_official_tasks_where_an_engine_answers_and_says_why_not_elsewhere(
    fakes, monkeypatch
):
    monkeypatch.setattr(container, "_cached", None)
    dataset = fixture_dataset(["terminal-bench"], per_benchmark=1)
    official = add_copy(
        dataset,
        "terminal-bench",
        lambda p, s: p["environment"].update(local_compatible=False, docker_image="tb/x:1"),
    )
    fakes["install"]("docker", "1:Cannot connect to the Docker daemon")
    frozen = plan_freeze(data=plan(dataset))
    assert official.pk not in [c[0] for c in frozen.manifest["cases"]]
    (entry,) = frozen.manifest["not_run"]
    assert entry["reason"].endswith(
        "no engine answers on this server (docker: `docker info` exited 1: Cannot connect to "
        "the Docker daemon; podman: not found)"
    )
    fakes["install"]("docker")
    monkeypatch.setattr(container, "_cached", None)
    frozen = plan_freeze(data=plan(dataset))
    assert official.pk in [c[0] for c in frozen.manifest["cases"]]
    assert "not_run" not in frozen.manifest


def test_a_session_runs_commands_in_the_image_and_tests_only_in_the_verifiers_container(
    fakes, monkeypatch
):
    monkeypatch.setattr(container, "_cached", None)
    fakes["install"]("docker")
    payload, secret = official_task()
    image = payload["environment"]["docker_image"]
    with terminal_session_open(payload, secret) as session:
        assert isinstance(session, ContainerSession)
        code, out, err = session.run_command("echo hello; ls /tests 2>&1; exit 3", timeout=30)
        assert (code, out.splitlines()[0]) == (3, "hello")
        reward, detail = session.verify()
    calls = fakes["calls"]()
    verbs = [c[1] for c in calls]
    assert verbs == ["info", "image", "run", "exec", "commit", "rm", "run", "rm", "rm", "rmi"]
    start, command, verifier = calls[2], calls[3], calls[6]
    assert "--detach" in start and start[-3:] == [image, "sleep", "infinity"]
    assert ("--network", "none") in _pairs(start) and ("--network", "none") in _pairs(verifier)
    # The hidden tests are mounted in the verifier's container only, read-only, and that
    # container starts from the agent's committed state after the agent's one is removed.
    assert "--mount" not in start + command
    assert not any("target=/tests" in a for a in start + command)
    mounts = [verifier[i + 1] for i, a in enumerate(verifier) if a == "--mount"]
    assert len(mounts) == 2 and mounts[0].endswith("target=/tests,readonly")
    assert mounts[1].endswith("target=/logs")
    assert calls[4][2:] == [session.name, f"srbench-verify/{session.name}:latest"]
    assert calls[5][2:] == ["--force", session.name]
    assert f"srbench-verify/{session.name}:latest" in verifier
    assert reward == 1 and detail["reward_source"] == "reward.txt"
    assert detail["runner"] == "container (docker)"
    expected = sorted({p.split("/")[1] for p in (e["path"] for e in secret["tests"])})
    assert f"tests seen: {expected}" in detail["verifier_output_tail"]
    # Every host directory of the verification is gone.
    for mount in mounts:
        source = dict(p.split("=", 1) for p in mount.split(",") if "=" in p)["source"]
        assert not os.path.exists(source)


@pytest.mark.parametrize(("reward", "expected"), [("0", 0), ("symlink", 0), ("1.0", 1)])
def test_the_reward_is_read_without_following_a_planted_link(fakes, monkeypatch, reward, expected):
    monkeypatch.setattr(container, "_cached", None)
    fakes["install"]("docker")
    (fakes["root"] / "planted").write_text("1")
    monkeypatch.setenv("FAKE_REWARD", reward)
    payload, secret = official_task()
    with terminal_session_open(payload, secret) as session:
        got, detail = session.verify()
    assert got == expected
    if reward == "symlink":
        assert detail["reward_source"] == "missing"


def test_a_command_past_the_output_cap_is_cut_and_said(fakes, monkeypatch):
    monkeypatch.setattr(container, "_cached", None)
    fakes["install"]("docker")
    payload, secret = official_task()
    with terminal_session_open(payload, secret) as session:
        code, out, err = session.run_command("head -c 3000000 /dev/zero | tr '\\0' x", 30)
    assert code == 137 and err.endswith("[killed: output limit exceeded]")


def test_without_an_engine_a_worker_refuses_the_task_with_the_reason(fakes, monkeypatch):
    from runs.engine.terminal import TerminalTaskError

    monkeypatch.setattr(container, "_cached", None)
    payload, secret = official_task()
    with pytest.raises(TerminalTaskError, match="docker: not found; podman: not found"):
        terminal_session_open(payload, secret)
    payload["environment"]["docker_image"] = None
    with pytest.raises(TerminalTaskError, match="names no image"):
        terminal_session_open(payload, secret)
