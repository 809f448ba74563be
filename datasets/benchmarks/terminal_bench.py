"""Terminal-Bench: a directory of Harbor task dirs (`task.toml`, `instruction.md`,
`environment/`, `tests/`, `solution/`); legacy TB1 dirs (`task.yaml`, `run-tests.sh`,
`solution.sh`) are read too.

The payload carries everything the agent may see (instruction, limits, environment files); the
verifier's tests and the reference solution go to the secret, because an agent that can read
them can pass without doing the task.
"""

from __future__ import annotations

import base64
import hashlib
import tomllib
from fractions import Fraction
from pathlib import Path
from typing import Any

import yaml

from datasets.benchmarks.base import (
    BenchmarkAdapter,
    LoadedQuestion,
    LoaderError,
    LoadResult,
    is_synthetic,
    require_path,
)

# Files larger than this are listed by hash instead of inlined: a payload is stored per
# question and rendered in the UI, and a task's data blobs belong to the runner, not the page.
INLINE_LIMIT_BYTES = 256 * 1024
SKIP_DIRS = {".git", "__pycache__"}

TERMINAL_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "terminal",
        "description": (
            "Run one shell command in the task's working directory and return its combined "
            "stdout and stderr (truncated) and exit status."
        ),
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string", "description": "A bash command line."}},
            "required": ["command"],
        },
    },
}

SYSTEM_PROMPT = (
    "You are an autonomous agent working in a Linux shell. Use the `terminal` tool to inspect "
    "and change the working directory until the task is done, then reply with a short summary "
    "and no tool call. Nobody will answer questions; work non-interactively."
)


def _file_entry(root: Path, file: Path) -> dict[str, Any]:
    data = file.read_bytes()
    entry: dict[str, Any] = {"path": file.relative_to(root).as_posix(), "size": len(data)}
    if len(data) > INLINE_LIMIT_BYTES:
        return entry | {"omitted": True, "sha256": hashlib.sha256(data).hexdigest()}
    try:
        return entry | {"encoding": "utf-8", "content": data.decode("utf-8")}
    except UnicodeDecodeError:
        return entry | {"encoding": "base64", "content": base64.b64encode(data).decode("ascii")}


def _files(root: Path, members: list[Path]) -> list[dict[str, Any]]:
    """Entries for the given files and directories (recursively), relative to the task root."""
    found: list[Path] = []
    for member in members:
        if member.is_file():
            found.append(member)
        elif member.is_dir():
            found.extend(
                p
                for p in member.rglob("*")
                if p.is_file() and not SKIP_DIRS.intersection(p.relative_to(root).parts)
            )
    return [_file_entry(root, f) for f in sorted(set(found))]


def _task_dirs(path: Path) -> list[Path]:
    if (path / "task.toml").is_file() or (path / "task.yaml").is_file():
        return [path]
    dirs = sorted(
        d for d in path.iterdir() if (d / "task.toml").is_file() or (d / "task.yaml").is_file()
    )
    if not dirs:
        raise LoaderError("no task directories (task.toml or task.yaml) found", file=path)
    return dirs


def _number(value: Any, *, file: Path, task: str, field: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise LoaderError("must be a positive number", file=file, row=task, field=field)
    return float(value)


def _tags(value: Any, *, file: Path, task: str, field: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise LoaderError("must be a list of strings", file=file, row=task, field=field)
    return value


class TerminalBenchAdapter(BenchmarkAdapter):
    key = "terminal-bench"
    title = "Terminal-Bench"
    weight = Fraction(1, 10)
    kind = "agent"
    episode = "terminal"
    # runs/engine/terminal.py reads it from here; /3: a session that left a start-up module
    # where a test script's PYTHONPATH could reach it is not verified (startup_plants.py); /4:
    # a test script's Python is guarded under -S too, and one started from a virtualenv it made
    # or under a name in a writable place is refused, the session not verified
    # (sandbox_pythons.py).
    grader_version = "terminal-local/4"
    loader_version = "terminal-bench/1"
    licence_note = (
        "Terminal-Bench task format (harbor-framework/terminal-bench-2), Apache-2.0. Official "
        "tasks need their Docker images; the bundled tasks are self-authored and run locally."
    )
    fixture_relpath = "tasks"

    def load_with_report(self, path: Path) -> LoadResult:
        require_path(path, what="Terminal-Bench task directory")
        questions = []
        files = []
        for task_dir in _task_dirs(path):
            if (task_dir / "task.toml").is_file():
                question = self._harbor(task_dir)
                files.append(task_dir / "task.toml")
            else:
                question = self._legacy(task_dir)
                files.append(task_dir / "task.yaml")
            questions.append(question)
        return LoadResult(questions=questions, files=files, synthetic=is_synthetic(path))

    def _harbor(self, task_dir: Path) -> LoadedQuestion:
        task = task_dir.name
        config_file = task_dir / "task.toml"
        try:
            config = tomllib.loads(config_file.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise LoaderError(f"invalid TOML: {exc}", file=config_file, row=task) from exc
        instruction_file = task_dir / "instruction.md"
        if not instruction_file.is_file():
            raise LoaderError("missing instruction.md", file=instruction_file, row=task)
        instruction = instruction_file.read_text(encoding="utf-8")
        if not instruction.strip():
            raise LoaderError("empty instruction", file=instruction_file, row=task, field="text")
        if not (task_dir / "tests" / "test.sh").is_file():
            raise LoaderError("missing tests/test.sh", file=task_dir / "tests", row=task)
        tables: dict[str, dict[str, Any]] = {}
        for section in ("metadata", "environment", "agent", "verifier"):
            value = config.get(section, {})
            if not isinstance(value, dict):
                raise LoaderError("must be a table", file=config_file, row=task, field=section)
            tables[section] = value
        meta, env = tables["metadata"], tables["environment"]
        difficulty = meta.get("difficulty", "unknown")
        if not isinstance(difficulty, str):
            raise LoaderError(
                "must be a string", file=config_file, row=task, field="metadata.difficulty"
            )
        agent_timeout = _number(
            tables["agent"].get("timeout_sec"),
            file=config_file,
            task=task,
            field="agent.timeout_sec",
        )
        verifier_timeout = _number(
            tables["verifier"].get("timeout_sec"),
            file=config_file,
            task=task,
            field="verifier.timeout_sec",
        )
        payload = {
            "task_id": task,
            "format": "harbor",
            "instruction": instruction,
            "difficulty": difficulty,
            "category": str(meta.get("category", "")),
            "tags": _tags(meta.get("tags"), file=config_file, task=task, field="metadata.tags"),
            "agent_timeout_sec": agent_timeout,
            "verifier_timeout_sec": verifier_timeout,
            "environment": {
                "docker_image": env.get("docker_image"),
                "allow_internet": bool(env.get("allow_internet", False)),
                # Our own field (benchmarks.md §8): the task needs only tools on the host.
                "local_compatible": bool(meta.get("local_compatible", False)),
            },
            "environment_files": _files(task_dir, [task_dir / "environment"]),
            "tools": [TERMINAL_TOOL],
        }
        secret = {
            "tests": _files(task_dir, [task_dir / "tests"]),
            "solution": _files(task_dir, [task_dir / "solution"]),
            "test_command": "bash /tests/test.sh",
        }
        return LoadedQuestion(self.key, task, difficulty, payload, secret)

    def _legacy(self, task_dir: Path) -> LoadedQuestion:
        task = task_dir.name
        config_file = task_dir / "task.yaml"
        try:
            config = yaml.safe_load(config_file.read_text(encoding="utf-8"))
        except yaml.YAMLError as exc:
            raise LoaderError(f"invalid YAML: {exc}", file=config_file, row=task) from exc
        if not isinstance(config, dict):
            raise LoaderError("must be a mapping", file=config_file, row=task)
        instruction = config.get("instruction")
        if not isinstance(instruction, str) or not instruction.strip():
            raise LoaderError("missing or empty", file=config_file, row=task, field="instruction")
        if not (task_dir / "run-tests.sh").is_file():
            raise LoaderError("missing run-tests.sh", file=task_dir / "run-tests.sh", row=task)
        difficulty = config.get("difficulty", "unknown")
        if not isinstance(difficulty, str):
            raise LoaderError("must be a string", file=config_file, row=task, field="difficulty")
        secret_names = {"tests", "run-tests.sh", "solution.sh", "solution.yaml", "task.yaml"}
        environment_members = [p for p in task_dir.iterdir() if p.name not in secret_names]
        payload = {
            "task_id": task,
            "format": "legacy",
            "instruction": instruction,
            "difficulty": difficulty,
            "category": str(config.get("category", "")),
            "tags": _tags(config.get("tags"), file=config_file, task=task, field="tags"),
            "agent_timeout_sec": _number(
                config.get("max_agent_timeout_sec"),
                file=config_file,
                task=task,
                field="max_agent_timeout_sec",
            ),
            "verifier_timeout_sec": _number(
                config.get("max_test_timeout_sec"),
                file=config_file,
                task=task,
                field="max_test_timeout_sec",
            ),
            "environment": {
                "docker_image": None,
                "allow_internet": False,
                "local_compatible": bool(config.get("local_compatible", False)),
            },
            "environment_files": _files(task_dir, environment_members),
            "tools": [TERMINAL_TOOL],
        }
        secret = {
            "tests": _files(task_dir, [task_dir / "tests", task_dir / "run-tests.sh"]),
            "solution": _files(task_dir, [task_dir / "solution.sh", task_dir / "solution.yaml"]),
            "test_command": "bash /tests/run-tests.sh",
        }
        return LoadedQuestion(self.key, task, difficulty, payload, secret)

    def messages(self, payload: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": payload["instruction"]},
        ]


ADAPTER = TerminalBenchAdapter()
