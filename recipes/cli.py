"""`benchmark route-preview`: which model and decision a MoM router would choose, through the
API like every other verb. No model answers; the output says so (`model requests: 0`)."""

from __future__ import annotations

import json
import sys
from typing import Any

from srbench.api_client import CliError, add_connection_arguments, client_from, json_file_read


def register(verbs: Any) -> None:
    p = verbs.add_parser(
        "route-preview", help="preview a MoM target's routing for a prompt (no model call)"
    )
    p.add_argument("target", metavar="TARGET", help="slug of a MoM target with a preview_url")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--prompt", help="the user prompt to route")
    source.add_argument("--messages-file", help="a JSON file holding a chat messages list")
    p.add_argument("--session-id")
    p.add_argument("--conversation-id")
    p.add_argument("--sampling-seed", type=int)
    add_connection_arguments(p)
    p.set_defaults(handler=route_preview_verb)


def _request_body(options: dict[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if options.get("messages_file"):
        messages = json_file_read(options["messages_file"], "messages file")
        if not isinstance(messages, list):
            raise CliError("a messages file must hold a JSON list of chat messages")
        body["messages"] = messages
    else:
        body["prompt"] = options["prompt"]
    for key in ("session_id", "conversation_id", "sampling_seed"):
        if options.get(key) is not None:
            body[key] = options[key]
    return body


def preview_text(result: dict[str, Any]) -> str:
    def shown(value: Any) -> str:
        return "unknown" if value is None else str(value)

    matches = result.get("config_hash_matches")
    if matches is None:
        pin_note = "not comparable with the target's pin"
    else:
        pin_note = "matches the target's pin" if matches else "DIFFERS from the target's pin"
    context = {k: v for k, v in (result.get("preview_context") or {}).items() if v is not None}
    lines = [
        f"target:          {result.get('target')} (model {shown(result.get('requested_model'))})",
        f"selected model:  {shown(result.get('selected_model'))}",
        f"decision:        {shown(result.get('decision'))}",
        f"status:          {shown(result.get('selection_status'))}",
        f"reason:          {shown(result.get('selection_reason'))}",
        f"config hash:     {shown(result.get('config_hash'))} ({pin_note})",
    ]
    if context:
        lines.append("context:         " + ", ".join(f"{k}={v}" for k, v in context.items()))
    lines.append(f"model requests:  {result.get('model_requests')}")
    return "\n".join(lines)


def route_preview_verb(options: dict[str, Any]) -> int:
    try:
        body = _request_body(options)
        client = client_from(options)
        result = client.json("POST", f"targets/{options['target']}/route-preview/", json=body)
    except CliError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2) if options.get("json") else preview_text(result))
    return 0
