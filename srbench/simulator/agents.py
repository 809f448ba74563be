"""The simulated agent on multi-turn agent tasks (τ³, Terminal-Bench).

The last user message changes as the simulated user speaks, so an agent task is recognised by
the **first** user message (the task's opening, see ``AnswerKey``) and the agent's progress is
read from the tool calls already in the conversation (``agent_turn``). Correctness is rolled as
for single-turn questions (``oracle.is_correct``); a plan is the whole episode of one simulated
model on one task: its tool calls in order, then a final answer.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from srbench.simulator.oracle import (
    AGENT_CLOSING,
    AnswerKey,
    KeyEntry,
    first_user_text,
    is_correct,
    prompt_sha256,
)

# Tools named like this only read (τ² naming); the wrong τ³ path needs a tool that writes.
READ_ONLY_PREFIXES = ("get_", "search_", "find_", "list_", "lookup_", "calculate", "think")
READ_ONLY_NAMES = frozenset({"transfer_to_human_agents"})
TERMINAL_TOOL_NAME = "terminal"
SOLUTION_SCRIPTS = ("solve.sh", "solution.sh")
_HEREDOC_RE = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")


@dataclass(frozen=True)
class AgentAction:
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class AgentPlan:
    """Everything one simulated model does on one agent task: its tool calls in order, then a
    final text answer."""

    actions: tuple[AgentAction, ...]
    final: str


@dataclass(frozen=True)
class AgentTurn:
    """The next turn: a single tool call, or (``tool_name`` None) the final text."""

    content: str
    tool_name: str | None
    arguments: str | None
    benchmark: str
    correct: bool


def _looks_read_only(name: str) -> bool:
    return name in READ_ONLY_NAMES or name.startswith(READ_ONLY_PREFIXES)


def _values_by_key(data: Any, found: dict[str, list[Any]] | None = None) -> dict[str, list[Any]]:
    """Every scalar in a τ³ database under each field name, in document order: the pool the
    wrong agent draws plausible ids from (``loan_id`` -> ["L-1", "L-2", ...])."""
    found = {} if found is None else found
    if isinstance(data, dict):
        for key, value in data.items():
            if isinstance(value, str | int | float) and not isinstance(value, bool):
                bucket = found.setdefault(str(key), [])
                if value not in bucket:
                    bucket.append(value)
            else:
                _values_by_key(value, found)
    elif isinstance(data, list):
        for item in data:
            _values_by_key(item, found)
    return found


def _tool_params(tool: dict[str, Any]) -> tuple[str, list[str]]:
    function = tool.get("function") or {}
    params = function.get("parameters") or {}
    props = params.get("properties") or {}
    return str(function.get("name")), list(params.get("required") or props)


def _perturbed(action: AgentAction, pool: dict[str, list[Any]]) -> AgentAction:
    """The same call on a different record: the first argument with another value of the same
    field in the database takes it; otherwise the first argument is made unrecognisable."""
    for name, value in action.arguments.items():
        others = [v for v in pool.get(name, []) if v != value]
        if others:
            return AgentAction(action.name, action.arguments | {name: others[0]})
    for name, value in action.arguments.items():
        changed = f"{value}-X" if isinstance(value, str) else 0 if value else 1
        return AgentAction(action.name, action.arguments | {name: changed})
    return action


def _unrequested_write(
    gold: list[AgentAction], tools: list[dict[str, Any]], pool: dict[str, list[Any]]
) -> AgentAction | None:
    """A change nobody asked for: the first offered write-looking tool the task does not use,
    its arguments taken from the task's own calls or else the first value in the database."""
    known: dict[str, Any] = {}
    for action in gold:
        for name, value in action.arguments.items():
            known.setdefault(name, value)
    used = {a.name for a in gold}
    for tool in tools:
        name, required = _tool_params(tool)
        if name in used or _looks_read_only(name):
            continue
        arguments = {}
        for param in required:
            if param in known:
                arguments[param] = known[param]
            elif pool.get(param):
                arguments[param] = pool[param][0]
            else:
                break
        else:
            return AgentAction(name, arguments)
    return None


def tau_plan(entry: KeyEntry, correct: bool, tools: list[dict[str, Any]]) -> AgentPlan:
    """Correct: the gold assistant actions, then a final answer with every required output.
    Wrong: the gold actions with the last write sent to another record (or, when the task
    writes nothing, one unrequested write), then a final answer without the required outputs —
    so the reward is 0 whether the task is graded on the database or on what is said."""
    criteria = entry.secret.get("evaluation_criteria") or {}
    gold = [
        AgentAction(str(a.get("name")), dict(a.get("arguments") or {}))
        for a in criteria.get("actions") or []
        if a.get("requestor", "assistant") == "assistant"
    ]
    info = [str(i) for i in criteria.get("communicate_info") or []]
    if correct:
        summary = f" For your records: {'; '.join(info)}." if info else ""
        return AgentPlan(tuple(gold), f"All done.{summary} {AGENT_CLOSING}")
    pool = _values_by_key(entry.payload.get("db") or {})
    actions = list(gold)
    writes = [i for i, a in enumerate(actions) if not _looks_read_only(a.name)]
    if writes:
        actions[writes[-1]] = _perturbed(actions[writes[-1]], pool)
    else:
        extra = _unrequested_write(gold, tools, pool)
        if extra is not None:
            actions.append(extra)
    return AgentPlan(tuple(actions), f"I have updated your account as requested. {AGENT_CLOSING}")


def split_shell_script(script: str) -> list[str]:
    """A solution script as the commands an agent would type one at a time: blank lines,
    comments and the shebang dropped; a heredoc or a backslash-continued line kept whole."""
    commands: list[str] = []
    current: list[str] = []
    terminator: str | None = None
    for line in script.splitlines():
        if terminator is not None:
            current.append(line)
            if line.strip() == terminator:
                terminator = None
                commands.append("\n".join(current))
                current = []
            continue
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        current.append(line)
        heredoc = _HEREDOC_RE.search(line)
        if heredoc:
            terminator = heredoc.group(2)
        elif not line.endswith("\\"):
            commands.append("\n".join(current))
            current = []
    if current:
        commands.append("\n".join(current))
    return commands


def solution_commands(secret: dict[str, Any]) -> list[str]:
    """The commands of a Terminal-Bench task's reference solution (solve.sh / solution.sh, or a
    legacy solution.yaml's keystroke entries)."""
    files = [f for f in secret.get("solution") or [] if isinstance(f, dict) and "content" in f]
    # Base64 entries are binary files, never a script to type.
    files = [f for f in files if f.get("encoding", "utf-8") == "utf-8"]
    for file in files:
        if str(file.get("path", "")).rsplit("/", 1)[-1] in SOLUTION_SCRIPTS:
            return split_shell_script(str(file["content"]))
    for file in files:
        if str(file.get("path", "")).endswith("solution.yaml"):
            import yaml  # the dataset loaders' dependency; only legacy tasks need it here

            steps = yaml.safe_load(str(file["content"])) or []
            return [str(s["command"]).rstrip("\n") for s in steps if isinstance(s, dict)]
    return []


def terminal_plan(entry: KeyEntry, correct: bool) -> AgentPlan:
    """Correct: the reference solution, one command per call. Wrong: a look around, then the
    first solution command inside a subshell that is never closed — bash rejects it as a syntax
    error before running any of it, so the task is left unsolved."""
    commands = solution_commands(entry.secret)
    if correct:
        actions = [AgentAction(TERMINAL_TOOL_NAME, {"command": c}) for c in commands]
        return AgentPlan(tuple(actions), "The task is complete.")
    broken = ["ls -la"] + ([f"(\n{commands[0]}"] if commands else [])
    actions = [AgentAction(TERMINAL_TOOL_NAME, {"command": c}) for c in broken]
    return AgentPlan(tuple(actions), "I could not get the commands to work.")


def _calls_made(messages: list[dict[str, Any]]) -> int:
    """The agent's progress through its plan: the tool calls it has already made."""
    count = 0
    for message in messages:
        calls = message.get("tool_calls")
        if message.get("role") == "assistant" and isinstance(calls, list):
            count += len(calls)
    return count


def agent_turn(
    key: AnswerKey,
    *,
    model: str,
    seed: int,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    accuracy_for: Any,
) -> AgentTurn | None:
    """The simulated agent's next turn on a known agent task, or None (not an agent task: the
    caller falls back to its generic tool behaviour). Correctness is rolled once per (seed,
    model, task), as for single-turn questions, so every turn of one conversation follows the
    same plan — provided the driver sends the same ``seed`` on every call of the episode."""
    opening = first_user_text(messages)
    entry = key.lookup(opening)
    if entry is None or opening is None or entry.kind != "agent":
        return None
    offered = [t for t in tools if isinstance(t, dict) and isinstance(t.get("function"), dict)]
    names = {str(t["function"].get("name")) for t in offered}
    sha = prompt_sha256(opening)
    correct = is_correct(seed, model, sha, float(accuracy_for(entry.benchmark)))
    if "evaluation_criteria" in entry.secret:
        plan = tau_plan(entry, correct, offered)
    elif TERMINAL_TOOL_NAME in names and "solution" in entry.secret:
        plan = terminal_plan(entry, correct)
    else:
        return None
    done = _calls_made(messages)
    if done < len(plan.actions):
        action = plan.actions[done]
        arguments = json.dumps(action.arguments, ensure_ascii=False, sort_keys=True)
        return AgentTurn("", action.name, arguments, entry.benchmark, correct)
    return AgentTurn(plan.final, None, None, entry.benchmark, correct)
