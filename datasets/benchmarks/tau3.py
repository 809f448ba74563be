"""τ³-bench (sierra-research/tau2-bench ≥ v1.0.0): `domains/<domain>/` with tasks.json, a policy
(policy.md or main_policy.md) and the domain database (db.json or db.toml).

Per task, the public payload is what the agent and the user simulator start from (policy,
initial database, user scenario); the evaluation criteria (gold actions, assertions, required
communications) and the author's description, which often spells out the solution, are secret.

The initial database is public. A small one (the self-authored fixtures) is embedded in each
task's payload; a large one (the official airline db.json is 7 MB, shared by its 50 tasks) is
referenced by ``db_sha256`` alone — the sha256 of its canonical JSON, which the question's own
content hash covers — and the runner resolves that hash to the installed domain package's copy,
verified, or refuses the task as "not available here" (runs/engine/tau.py, ``initial_db``).
"""

from __future__ import annotations

import functools
import json
import tomllib
from collections.abc import Mapping
from fractions import Fraction
from pathlib import Path
from typing import Any

from datasets.benchmarks.base import (
    BenchmarkAdapter,
    LoadedQuestion,
    LoaderError,
    LoadResult,
    is_synthetic,
    require_path,
)
from srbench.canonical import canonical_json, sha256_hex

POLICY_FILES = ("policy.md", "main_policy.md")
TECH_SUPPORT_MANUAL = "tech_support_manual.md"
# Loader options of a packaged source (datasets/packages.py): the domain folders to read, and the
# official task split to keep (split_tasks.json; τ²'s default task set is "base").
LOADER_OPTIONS = ("domains", "split")
# A database up to this size (canonical JSON) travels in every task's payload; a larger one is
# referenced by its hash (see the module docstring).
EMBED_DB_MAX_BYTES = 256 * 1024
REWARD_BASES = {"DB", "ENV_ASSERTION", "COMMUNICATE", "NL_ASSERTION", "ACTION"}

AGENT_PREAMBLE = (
    "You are a customer service agent. Help the user while following the policy below exactly. "
    "Use the tools to read and change the domain's records; make one tool call at a time, and "
    "do not act without the user's explicit confirmation where the policy requires it.\n\n"
)


def _domain_dirs(path: Path) -> list[Path]:
    if (path / "tasks.json").is_file():
        return [path]
    dirs = sorted(d for d in path.iterdir() if (d / "tasks.json").is_file())
    if not dirs:
        raise LoaderError("no <domain>/tasks.json under this directory", file=path)
    return dirs


def _read_policy(domain_dir: Path) -> str:
    for name in POLICY_FILES:
        file = domain_dir / name
        if file.is_file():
            policy = file.read_text(encoding="utf-8")
            manual = domain_dir / TECH_SUPPORT_MANUAL
            if name == "main_policy.md" and manual.is_file():
                # τ² telecom: the agent's policy is the main policy and the tech-support manual,
                # each in its tag (tau2/domains/telecom/environment.py, the "manual" policy).
                return (
                    f"<main_policy>\n{policy}\n</main_policy>\n<tech_support_policy>\n"
                    f"{manual.read_text(encoding='utf-8')}\n</tech_support_policy>"
                )
            return policy
    raise LoaderError(f"missing policy ({' or '.join(POLICY_FILES)})", file=domain_dir)


def _split_ids(domain_dir: Path, split: str) -> set[str] | None:
    """The task ids of an official split (split_tasks.json), or None when the domain has no
    split file; a split file without that split is refused."""
    file = domain_dir / "split_tasks.json"
    if not file.is_file():
        return None
    try:
        splits = json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise LoaderError(f"invalid JSON: {exc.msg}", file=file, row=exc.lineno) from exc
    if not isinstance(splits, dict) or not isinstance(splits.get(split), list):
        raise LoaderError(f"no split {split!r}", file=file)
    return {str(i) for i in splits[split]}


def _read_db(domain_dir: Path) -> dict[str, Any]:
    json_file, toml_file = domain_dir / "db.json", domain_dir / "db.toml"
    if json_file.is_file():
        try:
            db = json.loads(json_file.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise LoaderError(f"invalid JSON: {exc.msg}", file=json_file, row=exc.lineno) from exc
        source = json_file
    elif toml_file.is_file():
        try:
            db = tomllib.loads(toml_file.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise LoaderError(f"invalid TOML: {exc}", file=toml_file) from exc
        source = toml_file
    else:
        raise LoaderError("missing db.json or db.toml", file=domain_dir)
    if not isinstance(db, dict):
        raise LoaderError("database must be an object", file=source)
    return db


@functools.lru_cache(maxsize=8)
def _domain_db_cached(domain_dir: str) -> dict[str, Any]:
    return _read_db(Path(domain_dir))


def domain_db(path: Path, payload: dict[str, Any]) -> dict[str, Any]:
    """A task's initial database read from the domains directory it was loaded from, whether
    or not the payload embeds it (the simulator's answer key draws plausible ids from it)."""
    if isinstance(payload.get("db"), dict):
        return payload["db"]
    domain_dir = path if (path / "tasks.json").is_file() else path / str(payload["domain"])
    return _domain_db_cached(str(domain_dir.resolve()))


class Tau3Adapter(BenchmarkAdapter):
    key = "tau3"
    title = "τ³-bench"
    weight = Fraction(1, 10)
    kind = "agent"
    episode = "tau"
    # /2: an episode ends at τ²'s max_errors (10 agent tool errors, reward 0), live and in regrade.
    grader_version = "tau-local/2"  # runs/engine/tau.py reads it from here
    loader_version = "tau3/2"
    licence_note = (
        "τ³-bench (sierra-research/tau2-bench v1.0+), MIT licence. Results from self-authored or "
        "locally run domains are not leaderboard-comparable."
    )
    fixture_relpath = "domains"

    def load_with_report(self, path: Path) -> LoadResult:
        return self.load_with_options(path, {})

    def load_with_options(self, path: Path, options: Mapping[str, str]) -> LoadResult:
        require_path(path, what="τ³ domains directory")
        unknown = sorted(set(options) - set(LOADER_OPTIONS))
        if unknown:
            raise LoaderError(f"unknown τ³ loader option(s) {', '.join(unknown)}", file=path)
        dirs = _domain_dirs(path)
        if "domains" in options:
            wanted = [d.strip() for d in options["domains"].split(",") if d.strip()]
            by_name = {d.name: d for d in dirs}
            missing = [d for d in wanted if d not in by_name]
            if missing:
                raise LoaderError(f"no τ³ domain(s) {', '.join(missing)}", file=path)
            dirs = [by_name[d] for d in wanted]
        questions: list[LoadedQuestion] = []
        files: list[Path] = []
        for domain_dir in dirs:
            tasks_file = domain_dir / "tasks.json"
            files.append(tasks_file)
            keep = _split_ids(domain_dir, options["split"]) if "split" in options else None
            questions.extend(self._domain(domain_dir, tasks_file, keep))
        return LoadResult(questions=questions, files=files, synthetic=is_synthetic(path))

    def _domain(
        self, domain_dir: Path, tasks_file: Path, keep: set[str] | None = None
    ) -> list[LoadedQuestion]:
        domain = domain_dir.name
        policy = _read_policy(domain_dir)
        db = _read_db(domain_dir)
        db_hash = sha256_hex(db)
        embedded = {"db": db} if len(canonical_json(db)) <= EMBED_DB_MAX_BYTES else {}
        try:
            tasks = json.loads(tasks_file.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise LoaderError(f"invalid JSON: {exc.msg}", file=tasks_file, row=exc.lineno) from exc
        if not isinstance(tasks, list):
            raise LoaderError("must be a JSON list of tasks", file=tasks_file)
        questions = []
        seen: set[str] = set()
        for index, task in enumerate(tasks, start=1):
            if not isinstance(task, dict):
                raise LoaderError("task must be an object", file=tasks_file, row=index)
            raw_id = task.get("id")
            if isinstance(raw_id, bool) or not isinstance(raw_id, str | int) or raw_id == "":
                raise LoaderError("missing or not a string", file=tasks_file, row=index, field="id")
            task_id = str(raw_id)
            if keep is not None and task_id not in keep:
                continue
            if task_id in seen:
                raise LoaderError("duplicate task id", file=tasks_file, row=task_id, field="id")
            seen.add(task_id)
            scenario = task.get("user_scenario")
            if not isinstance(scenario, dict) or "instructions" not in scenario:
                raise LoaderError(
                    "must be an object with instructions",
                    file=tasks_file,
                    row=task_id,
                    field="user_scenario",
                )
            criteria = task.get("evaluation_criteria")
            if not isinstance(criteria, dict):
                raise LoaderError(
                    "must be an object", file=tasks_file, row=task_id, field="evaluation_criteria"
                )
            basis = criteria.get("reward_basis", ["DB", "COMMUNICATE"])
            if not isinstance(basis, list) or not set(basis) <= REWARD_BASES:
                raise LoaderError(
                    f"must be a list drawn from {sorted(REWARD_BASES)}",
                    file=tasks_file,
                    row=task_id,
                    field="evaluation_criteria.reward_basis",
                )
            questions.append(
                LoadedQuestion(
                    benchmark=self.key,
                    # Task ids repeat across domains ("0", "1", ...); the domain makes them unique.
                    native_id=f"{domain}/{task_id}",
                    subject=domain,
                    payload={
                        "domain": domain,
                        "task_id": task_id,
                        "policy": policy,
                        **embedded,
                        "db_sha256": db_hash,
                        "user_scenario": scenario,
                        "initial_state": task.get("initial_state"),
                        "ticket": task.get("ticket"),
                        "required_documents": task.get("required_documents") or [],
                        "user_tools": task.get("user_tools") or [],
                    },
                    secret={
                        "evaluation_criteria": criteria,
                        "description": task.get("description"),
                    },
                )
            )
        return questions

    def messages(self, payload: dict[str, Any]) -> list[dict[str, Any]]:
        """The subject's first turn: the policy, then the user's opening line. In solo mode the
        ticket is the whole request; otherwise the opening is the scenario's reason for calling,
        and every later user turn comes from the simulator target."""
        instructions = payload["user_scenario"]["instructions"]
        if payload.get("ticket"):
            opening = str(payload["ticket"])
        elif isinstance(instructions, dict) and instructions.get("reason_for_call"):
            opening = str(instructions["reason_for_call"])
        else:
            opening = str(instructions)
        return [
            {"role": "system", "content": AGENT_PREAMBLE + payload["policy"]},
            {"role": "user", "content": opening},
        ]


ADAPTER = Tau3Adapter()
