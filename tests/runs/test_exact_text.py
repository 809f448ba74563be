"""What settles or grades a cell again from the ledger reads the text the model sent (R15,
runs/engine/exact_text.py): the ledger's copy has U+FFFD for U+0000 and lone surrogates, and a
program or a command holding them fails live where the copy would not (a compile error, a
command not run), so the recovery pass and a regrade would decide otherwise."""

from __future__ import annotations

import json

import pytest

from runs.engine.finish import stored_calls
from runs.models import Call, CallEvidence
from runs.models.evidence import evidence_fields
from tests import factories as f

pytestmark = pytest.mark.django_db

CODE = "```python\nprint(1)  # \x00\ud800\n```"
ARGUMENTS = '{"command": "echo a\x00b\ud800 > out.txt"}'  # the characters themselves


def openai_stream(content: str, arguments: str) -> bytes:
    tool = {"index": 0, "id": "c1", "type": "function"}
    chunks = [
        {"model": "m", "choices": [{"index": 0, "delta": {"content": content}}]},
        {
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            tool | {"function": {"name": "terminal", "arguments": arguments}}
                        ]
                    },
                }
            ],
        },
        {"model": "m", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        "[DONE]",
    ]
    # json.dumps escapes U+0000 and the surrogate (\u0000, \ud800), as a server does.
    return b"".join(
        f"data: {c if isinstance(c, str) else json.dumps(c)}\n\n".encode() for c in chunks
    )


def anthropic_stream(content: str) -> bytes:
    events = [
        ("message_start", {"type": "message_start", "message": {"model": "m", "usage": {}}}),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}},
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": content},
            },
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {}},
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return b"".join(
        f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events
    )


def tool_calls(arguments: str) -> list[dict]:
    return [
        {"index": 0, "id": "c1", "type": "function", "name": "terminal", "arguments": arguments}
    ]


def call_with(raw: bytes, content: str, tools: list[dict] | None, **fields) -> Call:
    call = f.call_create(status="completed", content=content, tool_calls=tools, **fields)
    CallEvidence.objects.create(call=call, **evidence_fields(raw))
    return call


def test_a_call_whose_copy_has_replacement_characters_is_read_from_its_evidence():
    call = call_with(openai_stream(CODE, ARGUMENTS), CODE, tool_calls(ARGUMENTS))
    stored = Call.objects.get(pk=call.pk)
    assert "\x00" not in stored.content and "\ufffd\ufffd" in stored.content  # the copy

    (got,) = stored_calls([call.cell_id])[call.cell_id]

    assert got.content == CODE
    assert got.tool_calls == tool_calls(ARGUMENTS)


def test_an_anthropic_call_is_read_with_the_messages_reader():
    target = f.target_create(api="anthropic")
    cell = f.cell_create(target=target)
    call_with(anthropic_stream(CODE), CODE, None, cell=cell, target=target)
    (got,) = stored_calls([cell.pk])[cell.pk]
    assert got.content == CODE


def test_evidence_that_does_not_store_as_the_copy_is_not_taken():
    """A copy the evidence does not give (edited, or another reading) stays as stored."""
    call = call_with(openai_stream(CODE, ARGUMENTS), "other \ufffd text", None)
    (got,) = stored_calls([call.cell_id])[call.cell_id]
    assert (got.content, got.tool_calls) == ("other \ufffd text", None)


def test_a_call_without_replacement_characters_is_not_read_again(django_assert_num_queries):
    call = call_with(openai_stream("plain", "{}"), "plain", tool_calls("{}"))
    with django_assert_num_queries(1):  # the calls only, no evidence
        (got,) = stored_calls([call.cell_id])[call.cell_id]
    assert got.content == "plain"


def test_a_models_own_replacement_character_reads_as_itself():
    text = "a real \ufffd from the model"
    call = call_with(openai_stream(text, "{}"), text, tool_calls("{}"))
    (got,) = stored_calls([call.cell_id])[call.cell_id]
    assert got.content == text
