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


ANSWER = "Paris\x00 \ud800(capital)"  # a SimpleQA answer holding U+0000 and a lone surrogate


def test_a_judge_only_recovery_judges_the_answer_as_the_model_sent_it():
    """The answer a judge-only recovery child quotes, hashes and judges
    (`judge_only.stored_answers`) is the text its live judge call would have carried."""
    from runs.engine.judge_only import stored_answers

    call = call_with(openai_stream(ANSWER, "{}"), ANSWER, tool_calls("{}"))
    assert "\ufffd" in Call.objects.get(pk=call.pk).content  # the copy
    assert stored_answers([call.cell_id]) == {call.cell_id: ANSWER}


def test_a_rejudge_judges_the_parent_answer_as_the_model_sent_it():
    """A re-judge child's cell reads its parent's final answer (`finish.parent_answers`) as the
    model sent it; a parent whose subject call's evidence does not give the stored answer keeps
    the stored one."""
    from runs.engine.finish import parent_answers
    from runs.models import Cell

    parent = f.run_create()
    child = f.run_create()
    answered = f.cell_create(run=parent, status="completed", final_answer=ANSWER)
    call_with(openai_stream(ANSWER, "{}"), ANSWER, tool_calls("{}"), cell=answered)
    other = f.cell_create(run=parent, status="completed", final_answer="edited \ufffd")
    call_with(openai_stream(ANSWER, "{}"), ANSWER, tool_calls("{}"), cell=other)
    mirrors = [
        f.cell_create(run=child, question=c.question, target=c.target, slot=c.slot)
        for c in (answered, other)
    ]
    assert Cell.objects.get(pk=answered.pk).final_answer != ANSWER  # the copy

    got = parent_answers({m.pk: parent.pk for m in mirrors})

    assert got == {mirrors[0].pk: ANSWER, mirrors[1].pk: "edited \ufffd"}


def test_a_rejudge_identity_hashes_the_exact_answer():
    """The re-judge child's identity names each answer by its hash: the exact text's, by its
    surrogatepass bytes (`.encode()` raised on the lone surrogate), so two answers whose
    copies are the same but whose texts differ are two identities."""
    import hashlib

    from runs.settlement.rejudge import _judged_content

    parent = f.run_create(manifest={"judges": {}, "plan": "p"})
    content = _judged_content(parent, [(1, 2, "t", 0, "simpleqa", ANSWER)], {})
    other = _judged_content(parent, [(1, 2, "t", 0, "simpleqa", "Paris\ufffd \ufffd(capital)")], {})

    digest = hashlib.sha256(ANSWER.encode("utf-8", "surrogatepass")).hexdigest()
    assert content["cells"] == [[1, 2, "t", 0, "simpleqa", digest]]
    assert content["cells"] != other["cells"]


def test_clean_answers_cost_no_evidence_query(django_assert_num_queries):
    from runs.engine.exact_text import exact_answers

    with django_assert_num_queries(0):
        assert exact_answers({1: "plain", 2: None}) == {1: "plain", 2: None}
