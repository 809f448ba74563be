"""The test helper that runs an asyncio exchange on a loop of its own works where a plain
`asyncio.run` cannot (a loop already running in the calling thread, as the browser tests leave
one) and hands back the exchange's result and its exception."""

from __future__ import annotations

import asyncio
import threading

import pytest

from tests.runs.async_support import run_on_own_loop


async def _where() -> int:
    await asyncio.sleep(0)
    return threading.get_ident()


def test_it_runs_while_a_loop_is_running_in_the_calling_thread() -> None:
    async def outer() -> tuple[int, int]:
        inner = _where()
        with pytest.raises(RuntimeError):  # what the helper is for
            asyncio.run(inner)
        inner.close()  # never started
        return threading.get_ident(), run_on_own_loop(_where())

    # `outer` itself on a loop of the helper's (the suite's browser tests may leave one running
    # in this thread): inside it a loop runs, and the helper still gets the exchange done.
    caller, ran_on = run_on_own_loop(outer())
    assert ran_on not in (caller, threading.get_ident())


def test_the_exchange_exception_is_raised_in_the_caller() -> None:
    async def fails() -> None:
        raise LookupError("from the exchange")

    with pytest.raises(LookupError, match="from the exchange"):
        run_on_own_loop(fails())
