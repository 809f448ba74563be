"""Canonical JSON (srbench/canonical.py): any value json.loads can give hashes, lone surrogates
included (R15: a model's JSON text may hold `\\ud800`), and every other value's bytes stay what
they were, so no stored hash moves."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from srbench.canonical import canonical_json, json_text, sha256_hex

# Any code point, lone surrogates, NUL, backslashes and the text of an escape among them.
TEXT = st.lists(
    st.one_of(
        st.characters(min_codepoint=0, max_codepoint=0x10FFFF),
        st.sampled_from(["\ud800", "\udfff", "\x00", "\\", "\\ud800", "u", '"']),
    )
).map("".join)
VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), TEXT),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(TEXT, inner, max_size=4)),
    max_leaves=12,
)


@given(VALUES)
def test_every_value_json_can_parse_has_canonical_bytes_that_parse_back_to_it(value):
    # What the value is after JSON's own ASCII round trip (two lone surrogates side by side,
    # as two deltas of a stream joined, read back as the one character they escape).
    same = json.loads(json.dumps(value))
    data = canonical_json(value)
    assert json.loads(data.decode("utf-8")) == same  # strict UTF-8
    assert json.loads(json_text(value).encode("utf-8")) == same


@given(VALUES)
def test_values_utf8_can_carry_keep_their_bytes(value):
    try:
        before = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        old = before.encode("utf-8")
    except UnicodeEncodeError:
        return  # a lone surrogate: no hash existed before
    assert canonical_json(value) == old


def test_a_lone_surrogate_and_the_text_of_its_escape_hash_apart():
    assert canonical_json("\ud800") == b'"\\ud800"'
    assert canonical_json("\\ud800") == b'"\\\\ud800"'
    assert sha256_hex("\ud800") != sha256_hex("\\ud800") != sha256_hex("\ufffd")
