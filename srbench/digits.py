"""The one test that text is a count (or an id) before `int()` reads it."""

from __future__ import annotations


def ascii_digits(text: str) -> bool:
    """True for a non-empty run of the ASCII digits 0-9. `str.isdigit()` alone also takes "²"
    (which `int()` refuses with a ValueError: a crash where a server, a header or a query sent
    it) and other scripts' digits (which `int()` reads): neither is a count anyone should send."""
    return text.isascii() and text.isdigit()
