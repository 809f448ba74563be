"""Terminal-Bench pieces for the local runner (benchmarks.md §8): a task's environment
materialised in a sandbox directory, one command at a time through the sandbox, and the task's
own test script as the verifier. The agent loop (tool calls, step budget) lives in the driver.

Each command is a fresh `bash -c` in the same directory (files persist; shell variables and
`cd` do not), under the same isolation as every sandbox run: no network, no host files. The
session's `/app` lives in the sandbox's disk budget (runs/engine/sandbox.py) and between commands
as a snapshot archive in the session's host directory, never larger than that budget. A command
that exceeds the budget fails the task: later commands do not run, the verifier does not run,
and the grade says "disk quota exceeded".
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

from datasets.benchmarks import get_adapter
from runs.engine.sandbox import DISK_QUOTA_EXCEEDED, SNAPSHOT_NAME, sandbox_run
from runs.engine.sandbox_command import SandboxLimits, disk_budget_bytes
from runs.engine.sandbox_files import fresh_directory, write_sandbox_files
from runs.engine.sandbox_pythons import PYTHON_START_REFUSED, REFUSED_ENV
from runs.engine.startup_plants import STARTUP_MODULE_PLANTED, startup_plants

TERMINAL_GRADER_VERSION = get_adapter("terminal-bench").grader_version
COMMAND_TIMEOUT_S = 30.0
TAIL_CHARS = 4000
DEFAULT_VERIFIER_TIMEOUT_S = 60.0
TERMINAL_LIMITS = SandboxLimits(
    wall_s=COMMAND_TIMEOUT_S,
    cpu_s=COMMAND_TIMEOUT_S,
    memory_bytes=2 * 1024 * 1024 * 1024,
    max_processes=128,
    file_size_bytes=64 * 1024 * 1024,
    output_bytes=1024 * 1024,
)
# The verifier's view (Harbor's convention): hidden tests at /tests (a fresh host directory
# mounted read-only for the verification only), its logs at /logs (on the sandbox's disk budget;
# the reward file comes out through `collect`); the agent's /app is the session's.
TESTS_INSIDE = "/tests"
LOGS_INSIDE = "/logs"
REWARD_FILE = "verifier/reward.txt"  # beneath LOGS_INSIDE
REWARD_PATH = f"{LOGS_INSIDE}/{REWARD_FILE}"
REWARD_MAX_BYTES = 4096
# What the task's test command runs with besides TEST_DIR (docs/decisions.md, "A verifier's
# pytest the agent cannot replace" and "jb: the verifier's guard in the interpreter itself"): a
# site directory of ours, mounted read-only, whose guard a `.pth` in the sandboxed Python's own
# site-packages loads at every start — whatever PYTHONPATH the test script sets — so that a
# process importing pytest never imports pytest, its dependencies or the standard library from
# the agent's /app and is confined with all it starts (no write under /logs, no ptrace of the
# test script); no pytest plugin but those the task names (upstream's verifier has pytest and
# its own plugin only; an autoloaded plugin would also find entry points on any path the tests
# add; the guard sets it again in the pytest process); no user site, which a Python outside a
# virtualenv reads under HOME, the agent's /app (also refused whatever the environment says:
# the sandbox gives every base installation a pyvenv.cfg, runs/engine/sandbox_pythons.py).
VERIFIER_SITE = Path(__file__).resolve().with_name("verifier_site")
VERIFIER_SITE_INSIDE = "/srbench/verifier-site"  # named in srbench-verifier.pth
VERIFIER_PTH = "srbench-verifier.pth"
# Every base interpreter of the verifier's sandbox runs through a wrapper that refuses a start
# under a name in a writable place (a virtualenv the test script made, `exec -a /app/…`) and
# notes it here: the session is then not verified (runs/engine/sandbox_pythons.py).
REFUSED_DIR = f"{LOGS_INSIDE}/srbench"
REFUSED_PATH = f"{REFUSED_DIR}/refused-pythons.txt"
VERIFIER_ENV = {
    "TEST_DIR": TESTS_INSIDE,
    REFUSED_ENV: REFUSED_PATH,
    "PYTHONNOUSERSITE": "1",
    "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
}
# Image build files are not part of the task's working directory (upstream COPYs the data).
BUILD_FILES = {"Dockerfile", "docker-compose.yaml", "docker-compose.yml"}


class TerminalTaskError(RuntimeError):
    """The task cannot be run locally (a file was left out of the payload, a bad path)."""


def _decode(entry: dict[str, Any]) -> bytes:
    if entry.get("omitted"):
        raise TerminalTaskError(f"{entry['path']} was too large to inline in the payload")
    if entry.get("encoding") == "base64":
        return base64.b64decode(entry["content"])
    return str(entry["content"]).encode("utf-8")


def environment_files(payload: dict[str, Any]) -> dict[str, bytes]:
    """The working directory's initial files: a Harbor task's `environment/` contents, or a
    legacy task's top-level data files, without the image build files."""
    files = {}
    for entry in payload["environment_files"]:
        path = PurePosixPath(entry["path"])
        if payload.get("format") == "harbor" and path.parts[:1] == ("environment",):
            path = PurePosixPath(*path.parts[1:])
        if path.name in BUILD_FILES and len(path.parts) == 1:
            continue
        files[str(path)] = _decode(entry)
    return files


def output_tail(data: bytes) -> str:
    return data.decode("utf-8", "replace")[-TAIL_CHARS:]


def _quota_note(limits: SandboxLimits) -> str:
    megabytes = disk_budget_bytes(limits) / (1024 * 1024)
    return (
        f"\n[disk quota exceeded: this session may write {megabytes:g} MiB in all (/app, /tmp and"
        " every other writable place); the task has failed and no further command runs]"
    )


def unrunnable(cmd: str) -> str | None:
    """Why a shell cannot be given an agent's command (a model's text), as the bracketed note
    the agent reads; None when it can. U+0000 cannot pass into an argument vector, and a lone
    surrogate has no bytes (but U+DC80–U+DCFF, which stand for undecodable bytes, are those
    bytes)."""
    if "\x00" in cmd:
        why = "it holds U+0000, which cannot pass to a shell"
    else:
        try:
            os.fsencode(cmd)
            return None
        except UnicodeEncodeError:
            why = "it holds a lone surrogate, which has no bytes"
    return f"[not run: {why}]"


UNRUNNABLE_EXIT = 2  # as bash for a command it cannot parse


def limit_note(reason: str, timeout: float) -> str:
    """The bracketed note an agent sees after a command a limit stopped (sandbox or container)."""
    if reason == "timeout":
        return f"\n[killed: command exceeded {timeout:g} s]"
    if reason == "output_cap":
        return "\n[killed: output limit exceeded]"
    if reason in ("memory", "file_size"):
        return f"\n[{reason} limit reached]"
    return ""


@dataclass
class TerminalSession:
    """One task attempt. Not thread-safe; `close()` (or the context manager) removes the dir."""

    task_id: str
    workdir: Path
    secret: dict[str, Any]
    verifier_timeout_s: float
    limits: SandboxLimits = TERMINAL_LIMITS
    commands_run: int = field(default=0)
    # Set by the first command (or the set-up) that went past the disk budget: sticky.
    disk_quota_exceeded: bool = field(default=False)

    def __enter__(self) -> TerminalSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)

    def run_command(self, cmd: str, timeout: float = COMMAND_TIMEOUT_S) -> tuple[int, str, str]:
        """(exit code, stdout tail, stderr tail). A command killed by a limit reports 124 for a
        timeout (as coreutils `timeout` does) or 137, with a bracketed note in the stderr tail.
        Once the disk quota was exceeded nothing runs any more: exit 1 and the note."""
        self.commands_run += 1
        if (refused := unrunnable(cmd)) is not None:
            return UNRUNNABLE_EXIT, "", refused
        if self.disk_quota_exceeded:
            return 1, "", _quota_note(self.limits).lstrip("\n")
        result = sandbox_run(
            argv=["bash", "-c", cmd],
            files={},
            limits=replace(self.limits, wall_s=timeout, cpu_s=timeout),
            workdir=self.workdir,
        )
        exit_code = result.exit_code
        if exit_code is None:
            exit_code = 124 if result.reason == "timeout" else 137
        note = limit_note(result.reason, timeout)
        if result.reason == DISK_QUOTA_EXCEEDED:
            self.disk_quota_exceeded = True
            note = _quota_note(self.limits)
            # Nothing runs in this session any more: its files need not stay on the host.
            (self.workdir / SNAPSHOT_NAME).unlink(missing_ok=True)
        return exit_code, output_tail(result.stdout), output_tail(result.stderr) + note

    def verify(self) -> tuple[int, dict[str, Any]]:
        """Run the task's test command with its hidden tests at `/tests` and read the reward:
        Harbor tasks write `/logs/verifier/reward.txt`; legacy tasks (run-tests.sh + pytest)
        pass when the command exits 0. Reward 1 only for a full pass.

        The host never writes into, deletes from or reads through the agent's directory: the
        tests go into a fresh directory mounted read-only at `/tests`, the verifier's logs are
        on the sandbox's budget at `/logs`, and the reward comes out in an archive the sandbox
        makes, regular files only, so a planted symlink is never followed. A reward or a
        `tests/` the agent planted in `/app` is never looked at.

        Nothing the agent planted runs in the verifier unless the tests run it (VERIFIER_ENV,
        verifier_site/srbench_guard.py): a Python that imports pytest, however it was started,
        imports pytest and the standard library from the runtime, never from `/app`; only the
        tests' own imports reach a module there; no pytest plugin is autoloaded; no user site
        is read. What the tests do run (the agent's program) runs confined with pytest: it
        cannot write under `/logs` nor reach the test script, which writes the reward.

        A session whose `/app` holds a module a test script's Python would import at start-up
        from there (`encodings`, `sitecustomize`, … where a path root could be) is not verified:
        reward 0, `verifier_reason` and `reward_source` "startup_module_planted"
        (runs/engine/startup_plants.py). A verification in which a Python was started under a
        name in a writable place (refused by the sandbox's wrapper: a virtualenv the test script
        made, `exec -a /app/bin/python3`) is not a verdict: reward 0, `verifier_reason` and
        `reward_source` "python_start_refused", the names in `refused_pythons`. A session that exceeded its disk quota is not
        verified: reward 0, `verifier_reason` and `reward_source` "disk_quota_exceeded". A
        verifier that exceeds it scores 0 too."""
        if self.disk_quota_exceeded:
            return 0, self._quota_detail()
        snapshot = self.workdir / SNAPSHOT_NAME
        if snapshot.exists() and (planted := startup_plants(snapshot)):
            return 0, self._planted_detail(planted)
        tests_dir = fresh_directory("srbench-terminal-tests-")
        try:
            write_sandbox_files(tests_dir, hidden_test_files(self.secret), uid=None)
            result = sandbox_run(
                argv=["bash", "-c", self.secret["test_command"]],
                files={},
                limits=replace(
                    self.limits, wall_s=self.verifier_timeout_s, cpu_s=self.verifier_timeout_s
                ),
                workdir=self.workdir,
                save=False,
                ro_binds={TESTS_INSIDE: tests_dir, VERIFIER_SITE_INSIDE: VERIFIER_SITE},
                writable_dirs=[f"{LOGS_INSIDE}/verifier", REFUSED_DIR],
                collect=[REWARD_PATH, REFUSED_PATH],
                env=VERIFIER_ENV,
                site_files={VERIFIER_PTH: VERIFIER_SITE / VERIFIER_PTH},
            )
        finally:
            shutil.rmtree(tests_dir, ignore_errors=True)
        if result.reason == DISK_QUOTA_EXCEEDED:
            self.disk_quota_exceeded = True
            return 0, self._quota_detail() | {
                "verifier_output_tail": output_tail(result.stdout + result.stderr)[-1500:]
            }
        reward, detail = reward_grade(
            self.secret["test_command"],
            result.collected.get(REWARD_PATH),
            reason=result.reason,
            exit_code=result.exit_code,
            output=result.stdout + result.stderr,
            commands_run=self.commands_run,
        )
        refused = result.collected.get(REFUSED_PATH)
        if refused:
            # The test script's own outcome is not the verdict: a Python it started could not
            # be guarded. Never a pass, and said as such.
            names = refused.decode("utf-8", "replace").split()
            return 0, detail | {
                "verifier_reason": PYTHON_START_REFUSED,
                "reward_source": PYTHON_START_REFUSED,
                "refused_pythons": sorted(set(names))[:20],
            }
        return reward, detail

    def _unverified_detail(self, reason: str, **extra: Any) -> dict[str, Any]:
        """The grade detail of a session whose test script did not run: `reason` as the
        verifier's and the reward's source (public: runs/interfaces/public.py shows
        `verifier_reason`), reward 0."""
        return {
            "grader": "terminal-bench",
            "version": TERMINAL_GRADER_VERSION,
            "verifier_reason": reason,
            "verifier_exit_code": None,
            "verifier_output_tail": "",
            "commands_run": self.commands_run,
            "reward_source": reason,
            **extra,
        }

    def _planted_detail(self, planted: list[str]) -> dict[str, Any]:
        """Not verified: the agent left a module a test script's Python would import at
        start-up (runs/engine/startup_plants.py)."""
        return self._unverified_detail(STARTUP_MODULE_PLANTED, startup_modules=planted[:20])

    def _quota_detail(self) -> dict[str, Any]:
        """Not verified: the session went past its disk budget."""
        return self._unverified_detail(
            DISK_QUOTA_EXCEEDED,
            disk_quota_exceeded=True,
            disk_budget_mb=disk_budget_bytes(self.limits) / (1024 * 1024),
        )


def reward_grade(
    test_command: str,
    raw_reward: bytes | None,
    *,
    reason: str,
    exit_code: int | None,
    output: bytes,
    commands_run: int,
    runner: str | None = None,
) -> tuple[int, dict[str, Any]]:
    """Reward 1 only for a full pass: a reward file's value >= 1 (Harbor), else a legacy task's
    run-tests.sh exiting 0; the grade detail says which. ``runner`` names a container engine
    when the task ran in its own image (the bubblewrap path leaves it out)."""
    detail: dict[str, Any] = {
        "grader": "terminal-bench",
        "version": TERMINAL_GRADER_VERSION,
        "verifier_reason": reason,
        "verifier_exit_code": exit_code,
        "verifier_output_tail": output_tail(output)[-1500:],
        "commands_run": commands_run,
    }
    if runner is not None:
        detail["runner"] = runner
    if raw_reward is not None:
        raw = raw_reward[:REWARD_MAX_BYTES].decode("utf-8", errors="replace").strip()
        try:
            value = float(raw)
        except ValueError:
            return 0, detail | {"reward_source": "reward.txt", "reward_raw": raw[:100]}
        return int(value >= 1.0), detail | {"reward_source": "reward.txt", "reward": value}
    if test_command.endswith("run-tests.sh"):
        passed = reason == "ok" and exit_code == 0
        return int(passed), detail | {"reward_source": "exit_code"}
    return 0, detail | {"reward_source": "missing"}


T = TypeVar("T")

# A task that names no agent timeout gets Terminal-Bench's usual one.
DEFAULT_AGENT_TIMEOUT_S = 600.0


def agent_timeout_s(payload: dict[str, Any]) -> float:
    """The task's agent timeout (Harbor's agent.timeout_sec, TB1's max_agent_timeout_sec)."""
    value = payload.get("agent_timeout_sec")
    return float(value) if isinstance(value, int | float) and value > 0 else DEFAULT_AGENT_TIMEOUT_S


@dataclass
class AgentClock:
    """The time an agent's commands have used of the task's agent timeout. Upstream stops the
    agent there and still runs the tests; so does the episode: each command gets at most what
    is left, and once nothing is left no command runs (a model may ask for thirty turns of
    commands, or hundreds in one turn, each up to the command timeout)."""

    budget_s: float
    used_s: float = 0.0

    def left(self) -> float:
        return self.budget_s - self.used_s

    def note(self) -> str:
        return f"Error: not run: the task's agent timeout of {self.budget_s:g} s is used up"

    async def timed(self, work: Awaitable[T]) -> T:
        started = time.monotonic()
        try:
            return await work
        finally:
            self.used_s += time.monotonic() - started


def tool_command(arguments: Any) -> str | None:
    """The `command` of a `terminal` tool call's JSON arguments; None when they are not a JSON
    object with a `command` string (the agent is told so, and nothing runs)."""
    try:
        command = json.loads(arguments)["command"]
    except (ValueError, KeyError, TypeError, RecursionError):
        return None
    return command if isinstance(command, str) else None


def hidden_test_files(secret: dict[str, Any]) -> dict[str, bytes]:
    """The task's test files as they appear under `/tests`: a Harbor task's `tests/…` and a
    legacy task's `tests/…` plus `run-tests.sh` (TB1 copies both into its test dir)."""
    files = {}
    for entry in secret["tests"]:
        path = PurePosixPath(entry["path"])
        if path.parts[:1] == ("tests",):
            path = PurePosixPath(*path.parts[1:])
        files[str(path)] = _decode(entry)
    return files


def terminal_session_start(
    task_payload: dict[str, Any],
    secret: dict[str, Any],
    *,
    limits: SandboxLimits = TERMINAL_LIMITS,
) -> TerminalSession:
    """Materialise the task's environment files as the session's first `/app` snapshot (in a
    fresh host directory). Raises TerminalTaskError when they do not fit the disk budget.
    (An official task runs in its own image instead: runs/engine/terminal_runner.py.)"""
    workdir = fresh_directory("srbench-terminal-")
    try:
        # An empty first run unpacks the files in the sandbox and saves /app.
        result = sandbox_run(
            argv=["true"],
            files=environment_files(task_payload),
            limits=replace(limits, wall_s=10.0, cpu_s=5.0),
            workdir=workdir,
        )
        if result.reason == DISK_QUOTA_EXCEEDED:
            megabytes = disk_budget_bytes(limits) / (1024 * 1024)
            raise TerminalTaskError(
                f"the task's files do not fit the sandbox's {megabytes:g} MiB disk budget: "
                "disk quota exceeded"
            )
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    return TerminalSession(
        task_id=str(task_payload["task_id"]),
        workdir=workdir,
        secret=secret,
        verifier_timeout_s=float(task_payload.get("verifier_timeout_sec") or 0)
        or DEFAULT_VERIFIER_TIMEOUT_S,
        limits=limits,
    )
