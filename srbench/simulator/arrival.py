"""When a request reached the simulator: stamped by the HTTP protocol as uvicorn parses the
request's first bytes, so that the server's own TTFT (``/_sim/stats`` ``stream_ttft_ms``) also
counts the time a request waits before its handler runs.

At C = 256 the simulator's event loop is busy sending chunks; a request whose bytes have been
read waits in the loop's queue (its ASGI task, then its body) before the handler starts. A
stamp taken in the handler cannot see that wait; this one can. What it still cannot see is the
time before the loop reads the socket at all (bytes in the kernel's receive queue, or a
connection in the accept backlog): that part of the client's TTFT is not in the server's.

``ArrivalStampingProtocol`` is uvicorn's httptools protocol with one addition: when the parser
starts a message (``on_message_begin``, called from ``data_received`` for the read that holds
the request's first byte), the protocol puts ``time.monotonic()`` in the new ASGI scope under
``ARRIVED_AT``. It relies on uvicorn creating the request's scope in ``on_message_begin`` (so in
uvicorn 0.55, and a test checks it); served by another protocol class, ``arrival``
falls back to the handler's own clock.
"""

from __future__ import annotations

import time

from starlette.types import Scope
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

ARRIVED_AT = "srbench.arrived_at"


def arrival(scope: Scope) -> float:
    """The request's arrival (``time.monotonic()``): the protocol's stamp, else now."""
    arrived = scope.get(ARRIVED_AT)
    return arrived if isinstance(arrived, float) else time.monotonic()


class ArrivalStampingProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, stamping each request's arrival in its scope. Pass it as
    ``uvicorn.Config(http=ArrivalStampingProtocol)``."""

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.scope[ARRIVED_AT] = time.monotonic()  # type: ignore[literal-required]
