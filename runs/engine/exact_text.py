"""A call's text as the model sent it, where the ledger's copy differs (R15).

The ledger's text columns hold U+FFFD for U+0000 and lone surrogates (runs/models/fields.py),
while the live episode graded, ran and sent back the exact text: a program holding a lone
surrogate is a compile error, a command holding U+0000 is not run. What settles or grades a
cell again from the ledger — the recovery pass and a regrade, through `runs.engine.finish.
stored_calls` — takes the exact text from the call's evidence, so it decides what the live path
decided. Only calls whose stored text holds U+FFFD are read again (a model's own U+FFFD too:
its evidence then gives the same text), and the evidence's text is taken only when it stores
as the stored one, so a call whose evidence says something else keeps its stored text.

A judged answer is the content of its cell's first subject call: what a re-judge or a
judge-only recovery sends the judge is that text as the model sent it (`exact_answers`), as
the live judge call carried it.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from runs.engine.anthropic import stream_reader
from runs.engine.sse import SSEDecoder, SSEError
from runs.models import Call, CallEvidence
from runs.models.evidence import EvidenceUnreadable, evidence_raw
from runs.models.fields import REPLACEMENT, StoredJSONEncoder, storable

__all__ = ["exact_answers", "exact_texts", "may_differ"]


def may_differ(content: str, tool_calls: Any) -> bool:
    """Whether the stored text may not be the text the model sent."""
    return REPLACEMENT in content or (
        tool_calls is not None and REPLACEMENT in json.dumps(tool_calls, ensure_ascii=False)
    )


def exact_texts(calls: dict[int, tuple[str, str, Any]]) -> dict[int, tuple[str, Any]]:
    """{call id: (wire api, stored content, stored tool calls)} → {call id: (content, tool
    calls) as the model sent them}, for the calls whose evidence gives them."""
    out: dict[int, tuple[str, Any]] = {}
    if not calls:
        return out
    for evidence in CallEvidence.objects.filter(call_id__in=list(calls)):
        api, content, tool_calls = calls[evidence.call_id]
        try:
            exact = _read(api, evidence_raw(evidence))
        except (EvidenceUnreadable, SSEError):
            continue
        if _stores_as(exact, content, tool_calls):
            out[evidence.call_id] = exact
    return out


def exact_answers(answers: dict[int, str | None]) -> dict[int, str | None]:
    """{cell: its stored answer, the content of its first subject call} with, for a cell whose
    stored answer holds U+FFFD, the text that call sent where its evidence gives it and it
    stores as the stored answer. One query more only when an answer holds U+FFFD."""
    suspects = {c: a for c, a in answers.items() if a is not None and REPLACEMENT in a}
    if not suspects:
        return answers
    rows = list(
        Call.objects.filter(
            cell_id__in=list(suspects), role=Call.Role.SUBJECT, sequence=0
        ).values_list("pk", "cell_id", "target__api", "content", "tool_calls")
    )
    exact = exact_texts({pk: (api, content, tools) for pk, _, api, content, tools in rows})
    out = dict(answers)
    for pk, cell_id, *_ in rows:
        if pk in exact and storable(exact[pk][0]) == suspects[cell_id]:
            out[cell_id] = exact[pk][0]
    return out


def _read(api: str, raw: bytes) -> tuple[str, Any]:
    """The stream's content and tool calls, read as the live path read them."""
    decoder, acc = SSEDecoder(), stream_reader(api)()
    acc.feed_events(decoder.feed_plain(raw))
    acc.feed_events(decoder.close())
    result = acc.result()
    return result.content, [dataclasses.asdict(t) for t in result.tool_calls] or None


def _stores_as(exact: tuple[str, Any], content: str, tool_calls: Any) -> bool:
    text, calls = exact
    stored_calls = None if calls is None else json.loads(json.dumps(calls, cls=StoredJSONEncoder))
    return storable(text) == content and stored_calls == tool_calls
