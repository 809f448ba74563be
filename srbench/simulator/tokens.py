"""The simulator's stated tokenisation and its per-model prompt-prefix cache.

Tokenisation (deterministic, documented so tests and users can predict counts):

- a text's tokens are the matches of ``TOKEN_RE`` = ``\\w+|[^\\w\\s]`` (a run of word characters,
  or any single character that is neither a word character nor whitespace);
- a prompt costs ``MESSAGE_OVERHEAD_TOKENS`` per message (role marker) + the tokens of its text
  (content string or text parts, tool-call names and arguments, tool results) + 1 + the tokens
  of the canonical JSON of ``tools`` if present + ``REPLY_PRIMING_TOKENS`` for the reply turn;
- a completion costs the tokens of its reasoning, its content and its tool-call arguments.

The prefix cache works on the prompt's token *sequence* in blocks of ``block_tokens``: a request
reports as cached the longest whole-block prefix that an earlier request to the same model
already wrote, then writes all of its own whole blocks. The first request therefore reports 0.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import re
import threading
from dataclasses import dataclass
from typing import Any

TOKEN_RE = re.compile(r"\w+|[^\w\s]")
MESSAGE_OVERHEAD_TOKENS = 4
REPLY_PRIMING_TOKENS = 2


# A completion's texts repeat from request to request (a model's configured reasoning, the
# few answers of a benchmark), and every request counts, cuts and splits them: their token
# offsets are kept for texts up to this size, in a small cache (and their rendered delta
# chunks, srbench.simulator.generation).
CACHED_TEXT_CHARS = 16_384


@functools.lru_cache(maxsize=64)
def _cached_starts(text: str) -> tuple[int, ...]:
    return tuple(m.start() for m in TOKEN_RE.finditer(text))


def token_starts(text: str) -> tuple[int, ...]:
    """Where each of ``text``'s tokens starts."""
    if len(text) <= CACHED_TEXT_CHARS:
        return _cached_starts(text)
    return tuple(m.start() for m in TOKEN_RE.finditer(text))


def count_tokens(text: str) -> int:
    return len(token_starts(text))


def text_tokens(text: str) -> list[str]:
    return TOKEN_RE.findall(text)


def split_into_pieces(text: str, tokens_per_piece: int) -> list[str]:
    """Cut ``text`` before every ``tokens_per_piece``-th token so that the pieces concatenate
    back to exactly ``text`` (whitespace rides with the token after it)."""
    starts = token_starts(text)
    if not starts:
        return [text] if text else []
    cuts = [0, *starts[tokens_per_piece::tokens_per_piece], len(text)]
    return [text[a:b] for a, b in itertools.pairwise(cuts) if b > a]


def truncate_to_tokens(text: str, budget: int) -> tuple[str, bool]:
    """The longest prefix of ``text`` holding at most ``budget`` tokens; True when cut."""
    starts = token_starts(text)
    if 0 <= budget < len(starts):
        return text[: starts[budget]].rstrip(), True
    return text, False


def content_text(content: Any) -> str:
    """A message ``content`` as text: the string itself or its text parts joined by newlines."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content)


def prompt_token_sequence(messages: list[dict[str, Any]], tools: Any = None) -> list[str]:
    """The prompt as a token sequence. Role markers are tokens too, so two prompts that differ
    only in who said what do not share a cached prefix."""
    seq: list[str] = []
    if tools:
        seq.append("<|tools|>")
        seq.extend(text_tokens(json.dumps(tools, sort_keys=True, separators=(",", ":"))))
    for message in messages:
        role = str(message.get("role", ""))
        seq.extend([f"<|{role}|>", "<|name|>", str(message.get("name", "")), "<|content|>"])
        seq.extend(text_tokens(content_text(message.get("content"))))
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            seq.extend(text_tokens(str(function.get("name", ""))))
            seq.extend(text_tokens(str(function.get("arguments", ""))))
    seq.extend(["<|assistant|>", "<|reply|>"])
    return seq


@dataclass(frozen=True)
class CacheOutcome:
    prompt_tokens: int
    cached_tokens: int
    written_tokens: int


class PrefixCache:
    """Whole-block prefix hashes per model. Thread-safe because ``running_simulator`` tests
    may read stats from another thread while the server writes."""

    def __init__(self) -> None:
        self._blocks: dict[str, set[bytes]] = {}
        self._lock = threading.Lock()

    def clear(self) -> None:
        with self._lock:
            self._blocks.clear()

    def lookup_and_write(self, model: str, sequence: list[str], block_tokens: int) -> CacheOutcome:
        digests: list[bytes] = []
        running = hashlib.sha256()
        for start in range(0, len(sequence) - block_tokens + 1, block_tokens):
            for token in sequence[start : start + block_tokens]:
                # surrogatepass: a lone surrogate a request carried hashes too.
                running.update(token.encode("utf-8", "surrogatepass"))
                running.update(b"\x00")
            digests.append(running.copy().digest())
        with self._lock:
            known = self._blocks.setdefault(model, set())
            hit_blocks = 0
            for digest in digests:
                if digest not in known:
                    break
                hit_blocks += 1
            known.update(digests)
        cached = hit_blocks * block_tokens
        return CacheOutcome(
            prompt_tokens=len(sequence),
            cached_tokens=cached,
            written_tokens=len(digests) * block_tokens - cached,
        )
