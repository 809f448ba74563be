"""What every τ³ domain is made of (runs/engine/tau.py runs them): the refusals, a tool and
the check of an agent's arguments against its schema, and a domain (its tools and how its
state is made, hashed, shown and merged). Shared by the self-authored library domain
(runs/engine/tau_library.py) and the packaged ones (runs/engine/tau_domains.py)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


class TauError(RuntimeError):
    """The task cannot be run here (a domain without local tools, an unusable initial state)."""


class ToolError(Exception):
    """A tool refused the request; the message goes back to the agent as the tool result."""


# -- tools -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    # JSON-schema properties of the arguments.
    params: dict[str, dict[str, Any]]
    func: Callable[..., Any]
    writes: bool
    # The required arguments; None: all of them (as in τ² domain tools).
    required: tuple[str, ...] | None = None
    # JSON-schema definitions the properties refer to ("#/$defs/..."), from pydantic.
    defs: dict[str, Any] = field(default_factory=dict)

    @property
    def required_params(self) -> list[str]:
        return list(self.params) if self.required is None else list(self.required)

    def schema(self) -> dict[str, Any]:
        parameters: dict[str, Any] = {
            "type": "object",
            "properties": copy.deepcopy(self.params),
            "required": self.required_params,
            "additionalProperties": False,
        }
        if self.defs:
            parameters["$defs"] = copy.deepcopy(self.defs)
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": parameters,
            },
        }


def string_param(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
}


def _wants_objects(items: Any) -> bool:
    """An array schema's items are all objects (a $ref to a model, or an object)."""
    if not isinstance(items, Mapping):
        return False
    options = items.get("anyOf") or [items]
    return all(
        isinstance(o, Mapping) and ("$ref" in o or o.get("type") == "object") for o in options
    )


def check_arguments(tool: Tool, arguments: Any) -> dict[str, Any]:
    """The agent's arguments against the advertised schema: names, top-level JSON types, enums
    and arrays of objects. Nested fields are left to the tool (the official toolkits validate
    them with pydantic). Model output is hostile input: every refusal is a ToolError."""
    if not isinstance(arguments, dict):
        raise ToolError("arguments must be a JSON object")
    unknown = sorted(str(k) for k in set(arguments) - set(tool.params))
    if unknown:
        raise ToolError(f"unexpected argument(s) {', '.join(unknown)[:200]} for {tool.name}")
    missing = [name for name in tool.required_params if name not in arguments]
    if missing:
        raise ToolError(f"missing required argument(s) {', '.join(missing)} for {tool.name}")
    for name, spec in tool.params.items():
        if name not in arguments:
            continue
        value = arguments[name]
        kind = spec.get("type")  # None for a union or a $ref: left to the tool
        if kind is not None:
            # bool is an int in Python; JSON keeps them apart.
            wrong_bool = isinstance(value, bool) and kind in ("integer", "number")
            if wrong_bool or not isinstance(value, _JSON_TYPES.get(kind, (object,))):
                raise ToolError(f"argument {name} must be of type {kind}")
        if "enum" in spec and value not in spec["enum"]:
            allowed = ", ".join(json.dumps(v) for v in spec["enum"])
            raise ToolError(f"argument {name} must be one of {allowed}")
        objects = kind == "array" and _wants_objects(spec.get("items"))
        if objects and not all(isinstance(item, dict) for item in value):
            raise ToolError(f"argument {name} must be an array of objects")
    return arguments


def render_json(result: Any) -> str:
    return json.dumps(result, ensure_ascii=False)


@dataclass(frozen=True)
class Domain:
    """A domain's tools and how its state is made, hashed and shown to the agent. The library
    domain's state is the database dict itself; a packaged domain's (runs/engine/tau_domains.py)
    is the official pydantic database its toolkit works on."""

    name: str
    tools: tuple[Tool, ...]
    # The initial database (JSON) -> this attempt's private state; the argument is never
    # mutated afterwards.
    new_state: Callable[[Mapping[str, Any]], Any] = copy.deepcopy
    # The state -> the JSON value whose sha256 is the database hash.
    snapshot: Callable[[Any], Any] = lambda state: state
    # A tool's result -> the tool message content.
    render: Callable[[Any], str] = render_json
    # τ² initialisation data merged into the state; returns the new state.
    merge: Callable[[Any, Mapping[str, Any]], Any] | None = None
    # The initial database with this sha256 when the payload does not embed it, or None.
    stored_db: Callable[[str], dict[str, Any] | None] | None = None
    # Where the tools come from (for the grade detail).
    source: str = "srbench (self-authored)"


def merge_dict_state(state: dict[str, Any], data: Mapping[str, Any]) -> dict[str, Any]:
    merge_into(state, data)
    return state


def merge_into(target: dict[str, Any], updates: Mapping[str, Any]) -> None:
    for key, value in updates.items():
        if isinstance(value, Mapping) and isinstance(target.get(key), dict):
            merge_into(target[key], value)
        else:
            target[key] = copy.deepcopy(value)
