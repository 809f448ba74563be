"""The recipe projection (R12.4): the routing-relevant part of a router config with every
deployment detail and credential removed, plus a list of what was removed and where.

Pure functions. A recipe is published to every member and downloaded as a file, so the rule
is "when in doubt, remove": a wrongly removed routing value costs a line in the redaction list,
a leaked key or internal address cannot be taken back.

Two independent detectors run on every entry:

* the key name (``api_key``, ``base_url``, ``port``, ``headers``, ``cache_dir`` …), because a
  secret can look like any string (``hunter2``) and a port is just a number;
* the value's shape (URLs, IPv4/IPv6 addresses, ``host:port``, internal host names, absolute
  paths, well-known token formats, long random-looking strings), because a credential can sit
  under an innocent key (``notes``, ``backend``) or inside a list.

Removed dict entries are dropped (a placeholder would make the artefact look like a template
to fill in and deploy); removed list items become ``"[redacted]"`` so the indices the
redaction list names still point at the right item.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Any, NamedTuple

from srbench.canonical import sha256_hex

# Top-level sections that decide a route: sr-bench's projection ({recipes, entrypoints,
# evaluation, routing, learning}), the flat vSR layout (decisions, signals, categories, rules,
# model cards) and the simulator's own (models, routers). Everything else — listeners, API
# servers, observability, caches, classifier weights — describes a deployment and is omitted.
ROUTING_SECTIONS = frozenset(
    {
        "recipes",
        "entrypoints",
        "evaluation",
        "routing",
        "learning",
        "decisions",
        "rules",
        "signals",
        "categories",
        "models",
        "model_config",
        "model_cards",
        "routers",
        "keyword_rules",
        "embedding_rules",
        "default_model",
        "default_decision",
        "default_reasoning_effort",
        "reasoning_families",
    }
)

REDACTED = "[redacted]"
MAX_DEPTH = 64

# Redaction kinds, the vocabulary of the redaction list.
SECRET = "secret"
URL = "url"
HOST = "host"
IP = "ip"
PORT = "port"
PATH = "path"
HEADERS = "headers"
ENDPOINT = "endpoint"
ENV_REFERENCE = "env_reference"
SECTION_OMITTED = "non_routing_section"
TOO_DEEP = "too_deep"

# Key-name tokens (after splitting snake/kebab/camel case). Checked in this order, so
# `api_key_header` is a secret, not just a header.
_SECRET_TOKENS = frozenset(
    {
        "password",
        "passwd",
        "pwd",
        "passphrase",
        "secret",
        "secrets",
        "token",
        "credential",
        "credentials",
        "bearer",
        "authorization",
        "auth",
        "cookie",
        "cookies",
        "apikey",
        "username",
        "login",
        "signature",
        "dsn",
        "cert",
        "certificate",
        "tls",
        "ssl",
    }
)
# `key` is a secret only beside one of these (`api_key`, `private_key`), never alone in
# `sort_key`-like names; a bare `key`/`keys` entry is treated as a secret too.
_KEY_QUALIFIERS = frozenset(
    {"api", "private", "access", "secret", "signing", "encryption", "client", "service", "x"}
)
_DEPLOYMENT_TOKENS: tuple[tuple[str, frozenset[str]], ...] = (
    (HEADERS, frozenset({"header", "headers"})),
    (URL, frozenset({"url", "urls", "uri", "uris", "href", "webhook", "webhooks"})),
    (
        ENDPOINT,
        frozenset({"endpoint", "endpoints", "upstream", "upstreams", "proxy", "listener"}),
    ),
    (HOST, frozenset({"host", "hosts", "hostname", "hostnames", "address", "addr", "bind"})),
    (IP, frozenset({"ip", "ips", "ipv4", "ipv6", "cidr", "subnet"})),
    (PORT, frozenset({"port", "ports"})),
    (
        PATH,
        frozenset(
            {"path", "paths", "file", "files", "filename", "dir", "directory", "folder", "socket"}
        ),
    ),
    (ENV_REFERENCE, frozenset({"env"})),
)

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_SPLIT = re.compile(r"[^A-Za-z0-9]+")

_URL_RE = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s\"'<>]+")
_IPV4_RE = re.compile(r"(?<![\d.])(?:\d{1,3}\.){3}\d{1,3}(?![\d.]*\d)")
# Candidates for IPv6: a standalone run of hex digits, colons and dots with at least two
# colons (so `std::vector` is not one); `ipaddress` decides.
_IPV6_CANDIDATE_RE = re.compile(
    r"(?<![\w.:])[0-9A-Fa-f]*:[0-9A-Fa-f:.]*:[0-9A-Fa-f.]*(?:%[\w.-]+)?(?![\w:])"
)
_HOST_PORT_RE = re.compile(
    r"(?<![\w.-])(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?\.)*"
    r"[A-Za-z](?:[A-Za-z0-9-]*[A-Za-z0-9])?:(\d{2,5})(?![\w])"
)
# Internal and public host names: a dotted name ending in a suffix that names a network
# (public TLDs in common use, and the usual private zones). Model names such as
# `qwen2.5-7b` or `claude-3.5-sonnet` do not end that way.
_HOST_SUFFIXES = (
    "com|net|org|io|ai|dev|app|cloud|co|us|uk|de|fr|eu|cn|jp|in|info|biz|me|sh|tech|"
    "internal|local|localdomain|lan|intranet|corp|home|svc|cluster|example|test|invalid|arpa"
)
_HOSTNAME_RE = re.compile(
    rf"(?<![\w.-])(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?\.)+(?:{_HOST_SUFFIXES})(?![\w-])",
    re.IGNORECASE,
)
_LOCALHOST_RE = re.compile(r"\blocalhost\b", re.IGNORECASE)
_PATH_RE = re.compile(
    r"(?:^|[\s=:\"'(])(?:~|\.{1,2})?/[\w.@%+~-]+(?:/[\w.@%+~-]*)*"  # /abs, ~/home, ./rel
    r"|^[A-Za-z]:[\\/]"  # C:\ or C:/
    r"|\\\\[\w.-]+\\"  # \\share\
)
_ENV_RE = re.compile(r"\$\{?[A-Z_][A-Z0-9_]*\}?")
_TOKEN_SHAPES = re.compile(
    r"\bsk-[A-Za-z0-9_-]{12,}"  # OpenAI / Anthropic style
    r"|\b(?:hf|ghp|gho|ghu|ghs|ghr|glpat|xox[abprs])[_-][A-Za-z0-9_-]{12,}"
    r"|\bgithub_pat_[A-Za-z0-9_]{20,}"
    r"|\bAKIA[0-9A-Z]{16}\b"
    r"|\bAIza[0-9A-Za-z_-]{30,}"
    r"|\beyJ[\w-]{8,}\.[\w-]{8,}\.[\w-]{8,}"  # JWT
    r"|-----BEGIN [A-Z ]*(?:PRIVATE KEY|CERTIFICATE)-----"
    r"|\b(?:Bearer|Basic)\s+[A-Za-z0-9._~+/=-]{8,}",
    re.IGNORECASE,
)
# One long unbroken word mixing upper case, lower case and digits looks like a generated key.
# Model ids (`Qwen2-72B-Instruct`) break into short words at `-`, `/`, `.` and `_`; lowercase
# hex digests (config hashes) have no upper case.
_LONG_RANDOM_RE = re.compile(r"[A-Za-z0-9+=]{24,}")


class Redaction(NamedTuple):
    path: str
    kind: str
    found_by: str  # "key name", "value", "section"

    def as_json(self) -> dict[str, str]:
        return {"path": self.path, "kind": self.kind, "found_by": self.found_by}


class RedactedRecipe(NamedTuple):
    projection: dict[str, Any]
    redactions: list[dict[str, str]]
    projection_sha256: str


def key_tokens(key: str) -> list[str]:
    return [t.lower() for t in _SPLIT.split(_CAMEL.sub("_", key)) if t]


def kind_of_key(key: str) -> str | None:
    """The redaction kind a key name implies, or None for a routing key."""
    tokens = key_tokens(key)
    if not tokens:
        return None
    token_set = set(tokens)
    if token_set & _SECRET_TOKENS:
        return SECRET
    if tokens in (["key"], ["keys"]) or ("key" in token_set and token_set & _KEY_QUALIFIERS):
        return SECRET
    for kind, names in _DEPLOYMENT_TOKENS:
        if token_set & names:
            return kind
    return None


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _has_ipv6(value: str) -> bool:
    for candidate in _IPV6_CANDIDATE_RE.findall(value):
        text = candidate.split("%", 1)[0].rstrip(".")
        if _is_ip(text):
            return True
    return False


def _looks_random(value: str) -> bool:
    for run in _LONG_RANDOM_RE.findall(value):
        if (
            any(c.isupper() for c in run)
            and any(c.islower() for c in run)
            and any(c.isdigit() for c in run)
        ):
            return True
    return False


def kind_of_value(value: str) -> str | None:
    """The redaction kind a string's shape implies, or None when it looks like routing data.
    Secrets are checked first: a URL carrying a token is reported as a secret."""
    if _TOKEN_SHAPES.search(value) or _looks_random(value):
        return SECRET
    if _URL_RE.search(value):
        return URL
    if any(_is_ip(m) for m in _IPV4_RE.findall(value)):
        return IP
    if _has_ipv6(value):
        return IP
    for match in _HOST_PORT_RE.finditer(value):
        if 0 < int(match.group(1)) <= 65535:
            return HOST
    if _HOSTNAME_RE.search(value) or _LOCALHOST_RE.search(value):
        return HOST
    if _PATH_RE.search(value):
        return PATH
    if _ENV_RE.search(value):
        return ENV_REFERENCE
    return None


_SIMPLE_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


def child_path(path: str, key: str) -> str:
    if _SIMPLE_KEY.match(key):
        return f"{path}.{key}"
    escaped = key.replace("\\", "\\\\").replace('"', '\\"')
    return f'{path}["{escaped}"]'


@dataclass
class _Walker:
    found: list[Redaction]

    def value(self, value: Any, path: str, depth: int) -> tuple[bool, Any]:
        """(keep, cleaned value). A string or key that must go is reported, not kept."""
        if depth > MAX_DEPTH:
            self.found.append(Redaction(path, TOO_DEEP, "value"))
            return False, None
        if isinstance(value, dict):
            return True, self.mapping(value, path, depth)
        if isinstance(value, list):
            return True, self.sequence(value, path, depth)
        if isinstance(value, str):
            kind = kind_of_value(value)
            if kind is not None:
                self.found.append(Redaction(path, kind, "value"))
                return False, None
        return True, value

    def mapping(self, mapping: dict[str, Any], path: str, depth: int) -> dict[str, Any]:
        cleaned: dict[str, Any] = {}
        for position, key in enumerate(sorted(mapping, key=str), start=1):
            item = mapping[key]
            key = str(key)
            # A key can itself be an address (`{"http://10.0.0.7:8000": {...}}`); its path
            # must not repeat it, so such a key is named by its position.
            key_shape = kind_of_value(key)
            if key_shape is not None:
                self.found.append(
                    Redaction(f"{path}[<redacted key #{position}>]", key_shape, "key")
                )
                continue
            child = child_path(path, key)
            by_name = kind_of_key(key)
            # A secret-named number or flag (`token_budget: 1000`, `auth: false`) is a
            # setting, not a credential; deployment names go whatever their type (a port is
            # an int).
            if by_name == SECRET and (item is None or isinstance(item, (bool, int, float))):
                by_name = None
            if by_name is not None:
                self.found.append(Redaction(child, by_name, "key name"))
                continue
            keep, value = self.value(item, child, depth + 1)
            if keep:
                cleaned[key] = value
        return cleaned

    def sequence(self, items: list[Any], path: str, depth: int) -> list[Any]:
        cleaned = []
        for index, item in enumerate(items):
            keep, value = self.value(item, f"{path}[{index}]", depth + 1)
            cleaned.append(value if keep else REDACTED)
        return cleaned


def recipe_project(config: dict[str, Any]) -> RedactedRecipe:
    """Project a router config onto its routing sections and strip deployment details and
    secrets. Deterministic: the same config gives the same projection, list and hash."""
    found: list[Redaction] = []
    walker = _Walker(found)
    projection: dict[str, Any] = {}
    for position, key in enumerate(sorted(config, key=str), start=1):
        name = str(key)
        if name not in ROUTING_SECTIONS:
            # Section names are shown so a reader knows what the artefact leaves out — unless
            # the name itself looks like an address or a credential.
            shown = (
                f"$[<redacted key #{position}>]" if kind_of_value(name) else child_path("$", name)
            )
            found.append(Redaction(shown, SECTION_OMITTED, "section"))
            continue
        keep, value = walker.value(config[key], child_path("$", name), 1)
        if keep:
            projection[name] = value
    return RedactedRecipe(
        projection=projection,
        redactions=[r.as_json() for r in found],
        projection_sha256=sha256_hex(projection),
    )
