"""Simulator configuration: TOML in, frozen dataclasses out, plus the router's config hashes.

Schema (see ``default.toml`` for a commented example)::

    seed = 20260918              # default sampling seed when a request has no ``seed``
    stall_seconds = 5.0          # default for the stall faults
    [models.<name>]              # one physical model
    [routers.<name>]             # one virtual MoM model routed to physical members
    [answer_key] file = "key.json"   # an AnswerKey saved as JSON (relative: to this file)
    [answer_key] sources = [["mmlu-pro", "path/to/file"], ...]

The simulator plays an answer key; it reads no benchmark file itself (it stands below the
datasets layer). ``file`` names a key written by ``AnswerKey.save`` and is read at start-up.
``sources`` (official-format dataset files by benchmark) are read by the project:
``srbench simulator --config …`` and ``make demo`` build the key through the benchmark adapters
(``datasets/answer_key.py``) and hand it over. The simulator started on its own
(``python -m srbench.simulator``) with ``sources`` and no key refuses to start, rather than
answering every question generically.
"""

from __future__ import annotations

import copy
import tomllib
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from srbench.canonical import sha256_hex

DEFAULT_CONFIG_PATH = Path(__file__).with_name("default.toml")

ModelRole = Literal["subject", "judge", "user"]
UsageStyle = Literal["openai", "anthropic"]

FAULTS = frozenset(
    {
        "429",
        "500",
        "stall-first-byte",
        "stall-mid",
        "disconnect",
        "no-usage",
        "no-done",
        "malformed-chunk",
        "u2028",
        "unstorable",
        "hostile-headers",
        "wrong-config-hash",
        "no-receipt",
        # Quirks of real servers a target preflight finds (issue 39): a new request to the model
        # cuts the stream in progress (llama-cpp-python's interrupt_requests), a max_tokens cut
        # reported as "stop", usage without its cached-token details.
        "cut-on-concurrent",
        "length-as-stop",
        "no-cache-details",
    }
)
ContextAdvertise = Literal["none", "models", "props"]


class ConfigError(ValueError):
    pass


@dataclass(frozen=True)
class ModelSpec:
    name: str
    role: ModelRole = "subject"
    accuracy: float = 0.5
    benchmark_accuracy: dict[str, float] = field(default_factory=dict)
    # By benchmark, then the question's domain (its ``category``), before benchmark_accuracy:
    # a cheap model as good as a strong one on some domains and far worse on others is what
    # makes routing by domain pay (the demo's headline, issue 35).
    domain_accuracy: dict[str, dict[str, float]] = field(default_factory=dict)
    ttft_s: float = 0.0
    # 0 means "no pacing": every chunk is sent as soon as the previous one.
    tokens_per_second: float = 0.0
    chunk_tokens: int = 1
    reasoning: str | None = None
    usage_style: UsageStyle = "openai"
    prefix_cache: bool = True
    cache_block_tokens: int = 16
    # When true the model calls the first offered tool whenever ``tools`` are present and the
    # last message is not a tool result; ``tool_choice`` "required"/named forces it regardless.
    use_tools: bool = False
    faults: tuple[str, ...] = ()
    stop_after_turns: int = 3
    # Streams of this model that stay whole at once (0: no limit): the next request cuts the
    # oldest open stream (role chunk and [DONE], no finish_reason). The ``cut-on-concurrent``
    # fault is the same with a limit of 1 (issue 39).
    max_whole_streams: int = 0
    # The largest prompt accepted, in the simulator's tokens (0: no limit). A longer prompt is
    # refused non-streamed with llama-cpp-python's 400 ``context_length_exceeded``; streamed, it
    # answers 200 and stops after the role chunk without [DONE]. Where the limit is said:
    # ``models`` (``max_model_len`` on GET /v1/models), ``props`` (llama.cpp's GET /props) or
    # ``none`` (only a probe finds it).
    context_tokens: int = 0
    context_advertise: ContextAdvertise = "none"

    def whole_streams_limit(self, faults: frozenset[str]) -> int:
        """How many streams of this model stay whole at once under ``faults`` (0: no limit)."""
        if self.max_whole_streams:
            return self.max_whole_streams
        return 1 if "cut-on-concurrent" in faults else 0

    def accuracy_for(self, benchmark: str | None, domain: str | None = None) -> float:
        by_domain = self.domain_accuracy.get(benchmark or "", {})
        if domain is not None and domain in by_domain:
            return by_domain[domain]
        if benchmark is not None and benchmark in self.benchmark_accuracy:
            return self.benchmark_accuracy[benchmark]
        return self.accuracy


@dataclass(frozen=True)
class Decision:
    name: str
    # The models called, in order; the last one serves the reply. More than one = fan-out.
    models: tuple[str, ...]
    keywords: tuple[str, ...] = ()
    # Session-dependent rule: matches sessions whose stable hash bucket (0-99) is below this.
    session_percent: float | None = None
    # Domain rule: matches prompts the router's classifier puts in one of these domains.
    domains: tuple[str, ...] = ()

    @property
    def served_model(self) -> str:
        return self.models[-1]


@dataclass(frozen=True)
class RouterSpec:
    name: str
    default_model: str
    default_decision: str = "default"
    aliases: tuple[str, ...] = ()
    decisions: tuple[Decision, ...] = ()
    faults: tuple[str, ...] = ()
    # The domain classifier (srbench.simulator.router.classify): the domains it tells apart and
    # how often it is right; a miss names another of them, fixed per prompt.
    classifier_domains: tuple[str, ...] = ()
    classifier_accuracy: float = 1.0

    @property
    def members(self) -> tuple[str, ...]:
        seen: dict[str, None] = {self.default_model: None}
        for decision in self.decisions:
            seen.update(dict.fromkeys(decision.models))
        return tuple(seen)


@dataclass(frozen=True)
class SimConfig:
    raw: dict[str, Any]
    seed: int
    stall_seconds: float
    models: dict[str, ModelSpec]
    routers: dict[str, RouterSpec]
    answer_key_sources: tuple[tuple[str, str], ...]
    answer_key_file: str | None = None

    def resolve(self, name: str) -> ModelSpec | RouterSpec | None:
        if name in self.models:
            return self.models[name]
        if name in self.routers:
            return self.routers[name]
        for router in self.routers.values():
            if name in router.aliases:
                return router
        return None

    def model_ids(self) -> list[str]:
        ids = list(self.models)
        for router in self.routers.values():
            ids.append(router.name)
            ids.extend(router.aliases)
        return ids

    @property
    def source_hash(self) -> str:
        """Hash of the document as written (what an operator edited)."""
        return sha256_hex(self.raw)

    @property
    def generated_hash(self) -> str:
        """Hash of the normalised runtime document (defaults filled in): two sources that mean
        the same thing generate the same runtime hash."""
        return sha256_hex(
            {
                "seed": self.seed,
                "stall_seconds": self.stall_seconds,
                "models": {k: asdict(v) for k, v in sorted(self.models.items())},
                "routers": {k: asdict(v) for k, v in sorted(self.routers.items())},
            }
        )


def _faults(value: Any, where: str) -> tuple[str, ...]:
    faults = tuple(str(f) for f in (value or ()))
    unknown = set(faults) - FAULTS
    if unknown:
        raise ConfigError(f"{where}: unknown faults {sorted(unknown)}")
    return faults


def _model(name: str, raw: dict[str, Any]) -> ModelSpec:
    known = {f for f in ModelSpec.__dataclass_fields__ if f != "name"}
    unknown = set(raw) - known
    if unknown:
        raise ConfigError(f"models.{name}: unknown keys {sorted(unknown)}")
    values = dict(raw)
    values["faults"] = _faults(raw.get("faults"), f"models.{name}")
    values["benchmark_accuracy"] = {
        str(k): float(v) for k, v in (raw.get("benchmark_accuracy") or {}).items()
    }
    values["domain_accuracy"] = {
        str(b): {str(d).lower(): float(v) for d, v in (table or {}).items()}
        for b, table in (raw.get("domain_accuracy") or {}).items()
    }
    spec = ModelSpec(name=name, **values)
    if spec.role not in ("subject", "judge", "user"):
        raise ConfigError(f"models.{name}: role must be subject, judge or user")
    if spec.usage_style not in ("openai", "anthropic"):
        raise ConfigError(f"models.{name}: usage_style must be openai or anthropic")
    if spec.context_advertise not in ("none", "models", "props"):
        raise ConfigError(f"models.{name}: context_advertise must be none, models or props")
    if spec.max_whole_streams < 0 or spec.context_tokens < 0:
        raise ConfigError(f"models.{name}: max_whole_streams and context_tokens must be >= 0")
    if spec.chunk_tokens < 1 or spec.cache_block_tokens < 1:
        raise ConfigError(f"models.{name}: chunk_tokens and cache_block_tokens must be >= 1")
    return spec


def _router(name: str, raw: dict[str, Any], models: dict[str, ModelSpec]) -> RouterSpec:
    decisions = []
    for entry in raw.get("decisions") or []:
        if "fanout" in entry:
            members = tuple(entry["fanout"])
        elif "model" in entry:
            members = (entry["model"],)
        else:
            raise ConfigError(f"routers.{name}: decision needs model or fanout")
        decisions.append(
            Decision(
                name=str(entry["name"]),
                models=members,
                keywords=tuple(str(k).lower() for k in entry.get("keywords") or ()),
                session_percent=entry.get("session_percent"),
                domains=tuple(str(d).lower() for d in entry.get("domains") or ()),
            )
        )
    router = RouterSpec(
        name=name,
        default_model=str(raw["default_model"]),
        default_decision=str(raw.get("default_decision", "default")),
        aliases=tuple(raw.get("aliases") or ()),
        decisions=tuple(decisions),
        faults=_faults(raw.get("faults"), f"routers.{name}"),
        classifier_domains=tuple(str(d).lower() for d in raw.get("classifier_domains") or ()),
        classifier_accuracy=float(raw.get("classifier_accuracy", 1.0)),
    )
    if not 0 <= router.classifier_accuracy <= 1:
        raise ConfigError(f"routers.{name}: classifier_accuracy must be in [0, 1]")
    unclassified = {d for x in router.decisions for d in x.domains} - set(router.classifier_domains)
    if unclassified:
        raise ConfigError(
            f"routers.{name}: decisions name domains the classifier does not know: "
            f"{sorted(unclassified)} (add them to classifier_domains)"
        )
    missing = [m for m in router.members if m not in models]
    if missing:
        raise ConfigError(f"routers.{name}: unknown member models {missing}")
    return router


def parse_config(raw: dict[str, Any]) -> SimConfig:
    models = {name: _model(name, body) for name, body in (raw.get("models") or {}).items()}
    routers = {
        name: _router(name, body, models) for name, body in (raw.get("routers") or {}).items()
    }
    clash = set(models) & set(routers)
    if clash:
        raise ConfigError(f"names used by both a model and a router: {sorted(clash)}")
    answer_key = raw.get("answer_key") or {}
    unknown = set(answer_key) - {"file", "sources"}
    if unknown:
        raise ConfigError(f"answer_key: unknown keys {sorted(unknown)}")
    if answer_key.get("file") and answer_key.get("sources"):
        raise ConfigError("answer_key: give either file or sources, not both")
    sources = answer_key.get("sources") or []
    return SimConfig(
        raw=copy.deepcopy(raw),
        seed=int(raw.get("seed", 20260918)),
        stall_seconds=float(raw.get("stall_seconds", 5.0)),
        models=models,
        routers=routers,
        answer_key_sources=tuple((str(k), str(p)) for k, p in sources),
        answer_key_file=str(answer_key["file"]) if answer_key.get("file") else None,
    )


def deep_merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def load_config(
    path: str | Path | None = None, overrides: dict[str, Any] | None = None
) -> SimConfig:
    """Read a TOML config (the bundled ``default.toml`` when ``path`` is None); ``overrides``
    are deep-merged into the document before it is parsed, and so count in its hashes. A relative
    ``[answer_key] file`` is taken from the directory of the config file."""
    path = Path(path or DEFAULT_CONFIG_PATH)
    with open(path, "rb") as fh:
        raw = tomllib.load(fh)
    config = parse_config(deep_merge(raw, overrides or {}))
    if config.answer_key_file is not None:
        config = replace(config, answer_key_file=str(path.parent / config.answer_key_file))
    return config
