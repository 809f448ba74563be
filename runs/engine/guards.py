"""Guards the engine checks while a stream is in flight: a degenerate repeating tail, and the
output caps (characters, and bytes as a loose outer bound). Pure functions, re-exported by
runs.engine.sse where they have always been imported from."""

from __future__ import annotations


def repeated_tail_block(
    text: str, *, min_block: int, repeats: int, max_block: int | None = None
) -> int | None:
    """Length of a block of at least ``min_block`` characters that the end of ``text`` repeats
    ``repeats`` times in a row, or None.

    A degenerate loop with a short period (``"ha "``) is caught too, because any multiple of a
    period is a period: some multiple lands at or above ``min_block``. Candidate block lengths
    come from ``str.rfind`` of the last ``min_block`` characters, and each is verified with one
    slice comparison (a string of length L has period p iff s[:-p] == s[p:]), so the check runs
    at C speed and can be called after every chunk.
    """
    if min_block <= 0 or repeats < 2:
        raise ValueError("min_block must be positive and repeats at least 2")
    length = len(text)
    longest = length // repeats
    if max_block is not None:
        longest = min(longest, max_block)
    if longest < min_block:
        return None
    probe = text[length - min_block :]
    # An occurrence of the probe ending at length - p is necessary for period p.
    search_end = length - min_block  # the probe's copy must end at or before this index
    lowest_start = length - longest - min_block
    while True:
        found = text.rfind(probe, max(lowest_start, 0), search_end)
        if found == -1:
            return None
        period = length - min_block - found
        if period > longest:
            return None
        tail = text[length - period * repeats :]
        if tail[:-period] == tail[period:]:
            return period
        search_end = found + min_block - 1


def stream_byte_cap(max_output_chars: int) -> int:
    """Bytes a stream may carry for a given output character cap: SSE framing and JSON escaping
    cost far more than the text itself, so the byte cap is a loose outer bound."""
    return max(max_output_chars * 30, 1024 * 1024)


def output_cap_violation(
    *,
    content_chars: int,
    reasoning_chars: int,
    received_bytes: int,
    max_output_chars: int,
    max_stream_bytes: int | None = None,
) -> str | None:
    """Why the stream must be stopped now, or None. Reasoning counts toward the character cap
    because a model looping in its reasoning channel burns the same budget."""
    chars = content_chars + reasoning_chars
    if chars > max_output_chars:
        return f"output exceeded {max_output_chars} characters ({chars})"
    byte_cap = stream_byte_cap(max_output_chars) if max_stream_bytes is None else max_stream_bytes
    if received_bytes > byte_cap:
        return f"stream exceeded {byte_cap} bytes ({received_bytes})"
    return None
