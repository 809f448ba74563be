"""The simulator's stated tokenisation (R13: the simulator's usage is predictable): counting,
cutting and splitting a text, checked against the rule written out here — a token is a run of
word characters or one character that is neither a word character nor whitespace — on hostile
and random texts, the first time a text is seen and again once its offsets are cached, and
for texts too long for the cache."""

from __future__ import annotations

import random
import re

import pytest

from srbench.simulator import tokens
from srbench.simulator.tokens import count_tokens, split_into_pieces, truncate_to_tokens


def rule_tokens(text: str) -> list[tuple[int, int]]:
    """(start, end) of every token, by a scan written without the module's regex."""
    spans, i = [], 0
    while i < len(text):
        ch = text[i]
        if re.fullmatch(r"\w", ch):
            j = i
            while j < len(text) and re.fullmatch(r"\w", text[j]):
                j += 1
            spans.append((i, j))
            i = j
        elif ch.isspace():
            i += 1
        else:
            spans.append((i, i + 1))
            i += 1
    return spans


def random_text(rng: random.Random, size: int) -> str:
    alphabet = ["a", "Z", "7", "_", " ", "  ", "\n", "\t", ".", ",", "«", "»", "—", "é", "中"]
    alphabet += ["\u2028", "\u00a0", "'", '"', "\\", "(B)", "step", "🙂"]
    return "".join(rng.choice(alphabet) for _ in range(size))


TEXTS = [
    "",
    " ",
    "  leading and trailing  ",
    "The answer is (B).",
    "Let me think it over — «carefully».",
    "line\u2028separator and\u00a0nbsp",
    '{"json": "in \\"quotes\\""}',
    "🙂🙂 emoji run",
]


def check(text: str) -> None:
    spans = rule_tokens(text)
    assert count_tokens(text) == len(spans)
    for size in (1, 2, 3, 7):
        pieces = split_into_pieces(text, size)
        assert "".join(pieces) == text
        # Every piece but the first starts at a token and holds `size` tokens, but the last.
        assert [count_tokens(p) for p in pieces[:-1]] == [size] * (len(pieces) - 1) or (
            len(pieces) == 1
        )
        if spans:
            cuts = [spans[k][0] for k in range(size, len(spans), size)]
            assert [len("".join(pieces[: i + 1])) for i in range(len(pieces) - 1)] == cuts
    for budget in (-1, 0, 1, 2, len(spans) - 1, len(spans), len(spans) + 5):
        cut, was_cut = truncate_to_tokens(text, budget)
        if 0 <= budget < len(spans):
            assert was_cut and cut == text[: spans[budget][0]].rstrip()
        else:
            assert not was_cut and cut == text


@pytest.mark.parametrize("text", TEXTS)
def test_counts_cuts_and_pieces_follow_the_stated_rule_first_time_and_cached(text: str):
    tokens._cached_starts.cache_clear()
    check(text)
    assert tokens._cached_starts.cache_info().misses >= 1
    check(text)  # now from the cache
    assert tokens._cached_starts.cache_info().hits >= 1


def test_random_texts_and_texts_longer_than_the_cache_takes():
    rng = random.Random(2026)
    for _ in range(200):
        check(random_text(rng, rng.randrange(0, 80)))
    long_text = random_text(rng, tokens.CACHED_TEXT_CHARS + 500)
    check(long_text)
    tokens._cached_starts.cache_clear()
    assert count_tokens(long_text) == len(rule_tokens(long_text))
    assert tokens._cached_starts.cache_info().currsize == 0  # a long text is not kept
