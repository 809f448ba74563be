"""Recipe capture (R12.2): freeze the router config that serves a run, or say why not.

The router is read three times — config hashes, the config with its ETag, the hashes again —
and once more conditionally (If-None-Match) to prove the ETag did not move. A recipe is stored
only if the generated and active runtime hashes equal the run's pinned hash at both hash reads
and the source config (ETag) stayed the same throughout; anything else is a `recipe.not_captured`
event with a readable reason, never a half-matching config.

Worker-safe: plain sync code with no request context, its own short-lived HTTP client, and no
transaction held across the network reads (the insert and its event commit together after).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import httpx
from django.db import IntegrityError, transaction
from django.utils import timezone

from recipes.models import Recipe
from recipes.redaction import RedactedRecipe, child_path, recipe_project
from recipes.selectors import CAPTURED_EVENT, NOT_CAPTURED_EVENT, target_pinned_hash
from runs.engine.router_http import (
    BodyTooLarge,
    DeadlinePassed,
    Reply,
    bounded_request,
    management_base_url,
    new_client,
)
from runs.ledger.events import events_append
from runs.models import Run, Target
from runs.models.fields import storable

HASH_PATH = "/api/v1/config/hash"
CONFIG_PATH = "/api/v1/config"
# sr-bench gives capture 15 s in all; one stalled read may use at most 5 of them.
CAPTURE_DEADLINE_S = 15.0
REQUEST_TIMEOUT_S = 5.0
MAX_CONFIG_BYTES = 2 * 1024 * 1024
MAX_HASH_BYTES = 16 * 1024
MAX_ETAG_CHARS = 200  # Recipe.etag


class CaptureRefused(Exception):
    """Why no recipe: a stable `reason` code for filters and a sentence for people."""

    def __init__(self, reason: str, message: str, **details: Any) -> None:
        self.reason = reason
        self.message = message
        self.details = details
        super().__init__(message)


@dataclass(frozen=True)
class ConfigHashes:
    source: str
    generated: str
    active: str
    activation_status: str | None


@dataclass(frozen=True)
class PinnedConfig:
    config: dict[str, Any]
    etag: str
    hashes: ConfigHashes


def _short(value: str | None) -> str:
    return (value or "nothing")[:12]


_HASH_KEYS = ("source_config_hash", "generated_runtime_hash", "active_runtime_hash")


class _Reader:
    def __init__(self, client: httpx.Client, base_url: str) -> None:
        self.client = client
        self.base_url = base_url
        self.deadline = time.monotonic() + CAPTURE_DEADLINE_S

    def get(self, path: str, *, limit: int, headers: dict[str, str] | None = None) -> Reply:
        try:
            return bounded_request(
                self.client,
                "GET",
                self.base_url + path,
                limit=limit,
                deadline=self.deadline,
                per_request_timeout=REQUEST_TIMEOUT_S,
                headers=headers,
            )
        except BodyTooLarge as exc:
            if path == CONFIG_PATH:
                raise CaptureRefused(
                    "config_too_large",
                    f"The router config is larger than {exc.limit // (1024 * 1024)} MiB; "
                    "recipes are capped to keep run start bounded.",
                ) from None
            raise CaptureRefused(
                "endpoint_error", f"GET {path} answered with an oversized body."
            ) from None
        except (DeadlinePassed, httpx.TimeoutException):
            raise CaptureRefused(
                "timeout",
                f"GET {path} did not finish within the capture's {CAPTURE_DEADLINE_S:g} s "
                f"(at most {REQUEST_TIMEOUT_S:g} s per read).",
            ) from None
        except httpx.HTTPError as exc:
            # The exception text names the error, not the router's address.
            raise CaptureRefused(
                "endpoint_error", f"GET {path} failed: {type(exc).__name__}: {exc}"
            ) from None

    def hashes(self) -> ConfigHashes:
        reply = self.get(HASH_PATH, limit=MAX_HASH_BYTES)
        if reply.status != 200:
            raise CaptureRefused("endpoint_error", f"GET {HASH_PATH} answered HTTP {reply.status}.")
        try:
            data = json.loads(reply.body)
        except ValueError:
            raise CaptureRefused(
                "endpoint_error", f"GET {HASH_PATH} did not answer JSON."
            ) from None
        values = [data.get(k) if isinstance(data, dict) else None for k in _HASH_KEYS]
        hashes = [v for v in values if isinstance(v, str) and 0 < len(v) <= 64]
        if len(hashes) != len(_HASH_KEYS):
            raise CaptureRefused(
                "endpoint_error",
                f"GET {HASH_PATH} did not give source_config_hash, generated_runtime_hash "
                "and active_runtime_hash.",
            )
        status = data.get("activation_status")
        return ConfigHashes(
            source=hashes[0],
            generated=hashes[1],
            active=hashes[2],
            activation_status=status if isinstance(status, str) else None,
        )


def _strip_etag(etag: str) -> str:
    value = etag.strip()
    if value.startswith("W/"):
        value = value[2:]
    return value.strip('"')


def _check_pin(hashes: ConfigHashes, pin: str, when: str) -> None:
    if hashes.generated != pin or hashes.active != pin:
        raise CaptureRefused(
            "hash_mismatch",
            f"At the {when} read the router's generated config is {_short(hashes.generated)}… "
            f"and its active runtime {_short(hashes.active)}…, but the run pinned "
            f"{_short(pin)}…; the router does not run the pinned config"
            + (
                " (a new config is staged but not active)."
                if hashes.activation_status == "pending"
                else "."
            ),
            generated_config_hash=hashes.generated,
            active_config_hash=hashes.active,
            pinned_config_hash=pin,
            activation_status=hashes.activation_status,
        )


def pinned_config_read(*, client: httpx.Client, base_url: str, pin: str) -> PinnedConfig:
    """Read the router's config and prove it is the pinned one throughout (see module doc).
    Raises CaptureRefused with the first reason found."""
    reader = _Reader(client, base_url)
    before = reader.hashes()
    _check_pin(before, pin, "first")

    reply = reader.get(CONFIG_PATH, limit=MAX_CONFIG_BYTES)
    if reply.status != 200:
        raise CaptureRefused("endpoint_error", f"GET {CONFIG_PATH} answered HTTP {reply.status}.")
    etag = reply.headers.get("etag")
    if not etag:
        raise CaptureRefused(
            "endpoint_error",
            f"GET {CONFIG_PATH} sent no ETag, so the config cannot be proven unchanged.",
        )
    if len(etag) > MAX_ETAG_CHARS:
        raise CaptureRefused("endpoint_error", f"GET {CONFIG_PATH} sent an oversized ETag.")
    try:
        config = json.loads(reply.body)
    except (ValueError, RecursionError):
        raise CaptureRefused("endpoint_error", f"GET {CONFIG_PATH} did not answer JSON.") from None
    if not isinstance(config, dict):
        raise CaptureRefused("endpoint_error", f"GET {CONFIG_PATH} did not answer a JSON object.")

    after = reader.hashes()
    if (after.generated, after.active) != (before.generated, before.active):
        raise CaptureRefused(
            "hash_changed",
            "The router's config changed while it was being read (generated "
            f"{_short(before.generated)}… → {_short(after.generated)}…, active "
            f"{_short(before.active)}… → {_short(after.active)}…); no recipe was stored.",
            before={"generated": before.generated, "active": before.active},
            after={"generated": after.generated, "active": after.active},
        )
    _check_pin(after, pin, "second")
    # The router's ETag is its source-config hash (sr-bench's contract): the config read
    # must be the source that both hash reads saw.
    if not (_strip_etag(etag) == before.source == after.source):
        raise CaptureRefused(
            "etag_changed",
            "The router's source config changed while it was being read (source hash "
            f"{_short(before.source)}… → {_short(after.source)}…, config ETag "
            f"{_short(_strip_etag(etag))}…); no recipe was stored.",
            etag=etag,
            source_before=before.source,
            source_after=after.source,
        )
    again = reader.get(CONFIG_PATH, limit=MAX_CONFIG_BYTES, headers={"if-none-match": etag})
    if again.status == 304:
        unchanged = True
    elif again.status == 200:
        # A router that ignores If-None-Match: the same ETag and the same bytes will do.
        unchanged = again.headers.get("etag") == etag and again.body == reply.body
    else:
        raise CaptureRefused(
            "endpoint_error", f"The ETag re-check of {CONFIG_PATH} answered HTTP {again.status}."
        )
    if not unchanged:
        raise CaptureRefused(
            "etag_changed",
            f"The config's ETag changed after it was read ({_short(_strip_etag(etag))}… → "
            f"{_short(_strip_etag(again.headers.get('etag', '')))}…); no recipe was stored.",
            etag=etag,
            etag_after=again.headers.get("etag"),
        )
    return PinnedConfig(config=config, etag=etag, hashes=after)


def _unstorable(text: str) -> bool:
    return storable(text) != text  # the ledger's rule (runs/models/fields.py)


def _unstorable_refusal(redacted: RedactedRecipe) -> CaptureRefused | None:
    """A recipe is the router's config, redacted: text jsonb cannot hold is refused, not
    altered to fit."""
    unstorable = _unstorable_at(redacted.projection, "$") or _unstorable_at(
        redacted.redactions, "the redaction list"
    )
    if unstorable is None:
        return None
    return CaptureRefused(
        "unstorable_text",
        f"The router's config holds text the ledger cannot store (U+0000 or a lone surrogate) "
        f"at {unstorable}; a recipe altered to fit would not be the router's config, so none "
        "was stored.",
        path=unstorable,
    )


def _unstorable_at(value: Any, root: str) -> str | None:
    """Where `value` holds a string (key or value) with U+0000 or a lone surrogate, which
    jsonb and UTF-8 cannot hold: its path, those characters shown as JSON escapes; None if
    nowhere."""
    pending: list[tuple[Any, str]] = [(value, root)]
    while pending:
        item, path = pending.pop()
        if isinstance(item, str) and _unstorable(item):
            return _shown(path)
        if isinstance(item, dict):
            for key, child in item.items():
                if _unstorable(str(key)):
                    return _shown(child_path(path, str(key)))
                pending.append((child, child_path(path, str(key))))
        elif isinstance(item, list):
            pending.extend((child, f"{path}[{i}]") for i, child in enumerate(item))
    return None


def _shown(path: str) -> str:
    """The path with U+0000 and surrogates as JSON escapes (\\u0000, \\ud800)."""
    return "".join(c if storable(c) == c else f"\\u{ord(c):04x}" for c in path)


def _not_captured(*, run: Run, target: Target, refusal: CaptureRefused) -> None:
    payload = {
        "target": target.slug,
        "reason": refusal.reason,
        "message": refusal.message,
        **refusal.details,
    }
    with transaction.atomic():
        events_append(run_id=run.pk, events=[(NOT_CAPTURED_EVENT, payload)])


def recipe_capture(
    *, run: Run, target: Target, client: httpx.Client | None = None
) -> Recipe | None:
    """Capture the redacted recipe of `target` for `run`, or record why not and return None.

    Idempotent: (run, target) has at most one recipe (a DB constraint); a repeated call, or a
    second worker racing this one, returns the stored recipe without reading the router.
    A refusal is recorded each time it happens (every attempt is evidence).
    Call it outside a transaction: the router reads take up to CAPTURE_DEADLINE_S.
    """
    existing = Recipe.objects.filter(run=run, target=target).first()
    if existing is not None:
        return existing
    pin = target_pinned_hash(run=run, target=target)
    base_url = management_base_url(target.preview_url or "")
    try:
        if target.kind != Target.Kind.MOM or not target.capture_recipe:
            raise CaptureRefused(
                "not_enabled", "Recipe capture is not enabled for this target (capture_recipe)."
            )
        if base_url is None:
            raise CaptureRefused(
                "bad_preview_url",
                "The target's preview_url is not the canonical …/api/v1/routing/preview URL, "
                "so the router's management API is unknown.",
            )
        if pin is None:
            raise CaptureRefused("no_pin", "The run pinned no config hash for this target.")
        own_client = client is None
        http = new_client() if client is None else client
        try:
            pinned = pinned_config_read(client=http, base_url=base_url, pin=pin)
        finally:
            if own_client:
                http.close()
    except CaptureRefused as refusal:
        _not_captured(run=run, target=target, refusal=refusal)
        return None

    redacted = recipe_project(pinned.config)
    unstorable = _unstorable_refusal(redacted)
    if unstorable is not None:
        _not_captured(run=run, target=target, refusal=unstorable)
        return None
    try:
        with transaction.atomic():
            recipe = Recipe.objects.create(
                run=run,
                target=target,
                captured_at=timezone.now(),
                projection_sha256=redacted.projection_sha256,
                source_config_hash=pinned.hashes.source,
                generated_config_hash=pinned.hashes.generated,
                active_config_hash=pinned.hashes.active,
                etag=pinned.etag,
                body=redacted.projection,
                redactions=redacted.redactions,
            )
            events_append(
                run_id=run.pk,
                events=[
                    (
                        CAPTURED_EVENT,
                        {
                            "target": target.slug,
                            "recipe": recipe.pk,
                            "projection_sha256": recipe.projection_sha256,
                            "active_config_hash": recipe.active_config_hash,
                            "redactions": len(recipe.redactions),
                        },
                    )
                ],
            )
    except IntegrityError:
        # Another worker stored it between our check and our insert: theirs stands.
        return Recipe.objects.get(run=run, target=target)
    return recipe


def run_recipes_capture(*, run_id: int) -> list[Recipe | None]:
    """Capture recipes for every MoM target of the run that has capture_recipe on — the
    call the run driver makes once, when the run starts (before its first dispatch, so the
    recipe describes the config the calls meet). Idempotent like recipe_capture."""
    run = Run.objects.get(pk=run_id)
    slugs = [s.get("slug") for s in run.manifest.get("targets") or [] if isinstance(s, dict)]
    targets = Target.objects.filter(
        slug__in=slugs, kind=Target.Kind.MOM, capture_recipe=True
    ).order_by("slug")
    return [recipe_capture(run=run, target=target) for target in targets]
