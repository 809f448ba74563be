"""Text from outside is stored whatever it holds (runs/models/fields.py): U+0000 and lone
surrogates, which PostgreSQL's text and jsonb refuse, are stored as U+FFFD on every write path;
every other character, backslashes, a literal "\\u0000" and characters past the BMP included,
exactly as given (model output is hostile input, R15)."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runs.ledger.bulk_sql import bulk_insert_sql, bulk_update_sql
from runs.ledger.usage import header_count
from runs.models import Call, RunEvent
from runs.models.fields import StoredJSONEncoder
from tests import factories as f
from tests.runs.test_ledger_bulk_update import _sent_calls

HOSTILE = "a\x00b \\u0000 \\\x00 \\\\u0000 \x00\x00 ü \u2028 \ud800x\udfff 😀 \\ud800"
STORED = re.sub("[\x00\ud800-\udfff]", "\ufffd", HOSTILE)

text = st.text(
    alphabet=st.sampled_from(
        ["\x00", "\\", "u", "0", "d", "8", "a", '"', "\ufffd", "é", "\ud800", "\udc00", "😀"]
    )
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=12,
)


def _replaced(value):
    if isinstance(value, str):
        return re.sub("[\x00\ud800-\udfff]", "\ufffd", value)
    if isinstance(value, list):
        return [_replaced(v) for v in value]
    if isinstance(value, dict):
        return {_replaced(k): _replaced(v) for k, v in value.items()}
    return value


@settings(max_examples=400, deadline=None)
@given(json_values)
def test_the_encoder_replaces_exactly_the_nul_characters(value) -> None:
    encoded = StoredJSONEncoder().encode(value)
    encoded.encode("utf-8")  # no surrogate left
    assert json.loads(encoded) == _replaced(value)


@pytest.mark.django_db(transaction=True)
def test_every_write_path_stores_nul_as_the_replacement_character() -> None:
    calls = _sent_calls(4)
    payload = {"k\x00": [HOSTILE, {"n": HOSTILE}]}
    expected = {"k\ufffd": [STORED, {"n": STORED}]}
    # The ORM's update.
    Call.objects.filter(pk=calls[0].pk).update(content=HOSTILE, usage_raw=payload)
    # One statement for many rows (the engine's close).
    bulk_update_sql(
        Call,
        keys=("id",),
        fields=("content", "reasoning", "served_model", "tool_calls", "error"),
        rows=[(c.pk, HOSTILE, HOSTILE, "m\x00", [payload], HOSTILE) for c in calls[1:3]],
    )
    # A model instance's save.
    calls[3].content = HOSTILE
    calls[3].save(update_fields=["content"])
    # A new call's request (bulk_create): it may hold an earlier turn's answer.
    (asked,) = f.calls_insert(
        [
            Call(
                cell=calls[0].cell,
                role="subject",
                sequence=9,
                target=calls[0].target,
                request=payload,
                sent_at=calls[0].sent_at,
            )
        ]
    )
    run_id = calls[0].cell.run_id
    bulk_insert_sql(
        RunEvent, fields=("run", "seq", "type", "payload"), rows=[(run_id, 901, "x", payload)]
    )
    RunEvent.objects.bulk_create([RunEvent(run_id=run_id, seq=902, type="y", payload=payload)])

    kept = {c.pk: c for c in Call.objects.filter(pk__in=[c.pk for c in calls])}
    assert kept[calls[0].pk].content == STORED and kept[calls[0].pk].usage_raw == expected
    for call in calls[1:3]:
        row = kept[call.pk]
        assert (row.content, row.reasoning, row.error) == (STORED, STORED, STORED)
        assert row.served_model == "m\ufffd" and row.tool_calls == [expected]
    assert kept[calls[3].pk].content == STORED
    assert Call.objects.get(pk=asked.pk).request == expected
    events = RunEvent.objects.filter(run_id=run_id, type__in=["x", "y"]).order_by("seq")
    assert [e.payload for e in events] == [expected, expected]
    # Lookups prepare their value the same way: the stored text is found by what was given.
    assert Call.objects.filter(pk=calls[0].pk, content=HOSTILE).exists()


@pytest.mark.parametrize(
    ("header", "count"),
    [
        ("2", 2),
        ("0", 0),
        (str(2**31 - 1), 2**31 - 1),
        (str(2**31), None),  # past the PositiveIntegerField column
        ("99999999999", None),
        ("\xb2", None),  # "²": str.isdigit says yes, int() refuses
        ("٣", None),  # an Arabic-Indic three: int() would take it, a header should not
        ("", None),
        (" 2 ", 2),  # surrounding whitespace is not part of a header value
        ("-1", None),
    ],
)
def test_a_routers_call_count_is_a_count_the_column_holds_or_unknown(header, count) -> None:
    assert header_count(header) == count
