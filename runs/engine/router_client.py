"""Route preview (R8.7): ask a MoM router which model and decision it would choose for a
prompt, optionally in a session or conversation, without any model answering.

The router's `/api/v1/routing/preview` evaluates its routing only; nothing here talks to the
target's OpenAI listener, so a preview costs no tokens (the answer says `model_requests: 0`).
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx

from runs.engine.router_http import BodyTooLarge, DeadlinePassed, Reply, bounded_request, new_client
from runs.models import Target
from srbench.refusals import Refusal

PREVIEW_TIMEOUT_S = 10.0
MAX_PREVIEW_BYTES = 1024 * 1024


class PreviewError(Refusal):
    """The router could not give a preview; the message is shown to the user as is."""

    http_status = 502
    code = "preview_failed"


class PreviewNotPossible(PreviewError):
    """The request cannot be previewed at all (target or input), before any network call."""

    http_status = 400
    code = "preview_not_possible"


def _router_message(body: bytes) -> str:
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return body[:200].decode("utf-8", "replace").strip() or "no detail"
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict):
            error = error.get("message")
        if error:
            return str(error)[:500]
    return "no detail"


def route_preview(
    *,
    target: Target,
    prompt: str | None = None,
    messages: list[dict[str, Any]] | None = None,
    session_id: str | None = None,
    conversation_id: str | None = None,
    sampling_seed: int | None = None,
    client: httpx.Client | None = None,
) -> dict[str, Any]:
    """The router's choice for one prompt (or message list), with whether the config that
    made it is the target's pinned one. Raises PreviewNotPossible for a non-MoM target, a
    target without preview_url or bad input, and PreviewError for router failures."""
    if target.kind != Target.Kind.MOM:
        raise PreviewNotPossible(
            f"{target.slug} is a single-model target; route preview needs a MoM router."
        )
    if not target.preview_url:
        raise PreviewNotPossible(f"{target.slug} has no preview_url registered.")
    if (prompt is None) == (messages is None):
        raise PreviewNotPossible("Give either a prompt or messages.")

    context = {
        "session_id": session_id,
        "conversation_id": conversation_id,
        "sampling_seed": sampling_seed,
    }
    body: dict[str, Any] = {"model": target.model}
    if prompt is not None:
        body["text"] = prompt
    else:
        body["messages"] = messages
    sent_context = {k: v for k, v in context.items() if v is not None}
    if sent_context:
        body["preview_context"] = sent_context
    result = _preview_answer(_preview_post(target.preview_url, body, client))
    return _preview_result(target, result, context)


def _preview_post(url: str, body: dict[str, Any], client: httpx.Client | None) -> Reply:
    """POST the preview request under the preview's deadline and size cap; every transport
    failure becomes a PreviewError the user can read."""
    own_client = client is None
    http = new_client() if client is None else client
    try:
        return bounded_request(
            http,
            "POST",
            url,
            json=body,
            limit=MAX_PREVIEW_BYTES,
            deadline=time.monotonic() + PREVIEW_TIMEOUT_S,
            per_request_timeout=PREVIEW_TIMEOUT_S,
        )
    except (DeadlinePassed, httpx.TimeoutException):
        raise PreviewError(
            f"The router's preview endpoint did not answer within {PREVIEW_TIMEOUT_S:g} s."
        ) from None
    except BodyTooLarge:
        raise PreviewError("The router's preview answer is too large to show.") from None
    except httpx.HTTPError as exc:
        raise PreviewError(
            f"Could not reach the router's preview endpoint: {type(exc).__name__}: {exc}"
        ) from None
    finally:
        if own_client:
            http.close()


def _preview_answer(reply: Reply) -> dict[str, Any]:
    """The router's answer as a JSON object, or a PreviewError saying why there is none."""
    if reply.status != 200:
        raise PreviewError(
            f"The router refused the preview (HTTP {reply.status}): {_router_message(reply.body)}"
        )
    try:
        result = json.loads(reply.body)
    except (ValueError, RecursionError):
        raise PreviewError("The router's preview answer is not JSON.") from None
    if not isinstance(result, dict):
        raise PreviewError("The router's preview answer is not a JSON object.")
    return result


def _preview_result(
    target: Target, result: dict[str, Any], context: dict[str, Any]
) -> dict[str, Any]:
    """The preview as shown: the router's choice and whether its config is the pinned one."""
    decision_result = result.get("decision_result")
    decision = (
        decision_result.get("decision_name") if isinstance(decision_result, dict) else None
    ) or result.get("routing_decision")
    config_hash = result.get("config_hash")
    config_hash = config_hash if isinstance(config_hash, str) and config_hash else None
    pin = target.config_hash or None
    return {
        "target": target.slug,
        "requested_model": result.get("requested_model", target.model),
        "selected_model": result.get("selected_model"),
        "decision": decision,
        "selection_status": result.get("selection_status"),
        "selection_reason": result.get("selection_reason"),
        "config_hash": config_hash,
        "pinned_config_hash": pin,
        # Unknown when the router did not say which config answered.
        "config_hash_matches": None if config_hash is None or pin is None else config_hash == pin,
        "preview_context": context,
        "model_requests": 0,
        "router_response": result,
    }
