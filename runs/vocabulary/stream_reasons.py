"""Why a model's stream is not a complete answer, in the words the ledger keeps (the rest are
said where they are found, `runs.engine.sse.ChatStreamAccumulator.result`)."""

from __future__ import annotations

__all__ = ["EMPTY_STREAM"]

# A 200 event stream that ended before its first event. llama.cpp's server (llama-cpp-python)
# answers so when it refuses a request after sending its headers, e.g. a prompt longer than its
# context window (tests/real/test_llama_long_prompts.py).
EMPTY_STREAM = (
    "empty stream: the server ended its 200 event stream before any event (a server that"
    " refuses a request after its headers ends so, e.g. a prompt longer than its context window)"
)
