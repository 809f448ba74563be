"""How long this project's HTTP clients reuse an idle kept-alive connection.

A server closes an idle connection on its own clock: uvicorn (and so vLLM, SGLang and this
project's own web server and simulator) after 5 s, llama.cpp's server and Node after 5 s,
gunicorn (and a proxy under gunicorn's uvicorn workers) after 2 s. A request written on a
connection whose close is already on its way is lost with "server disconnected without a
response", and neither a model call nor a request that is not repeatable is ever sent again.
The client's idle clock starts when it has read a response's end, later than the server's, and
a busy client notices a peer's close only when it next looks; reusing only within a second
leaves time for both. A new loopback connection costs about 0.1 ms.
"""

from __future__ import annotations

KEEPALIVE_EXPIRY_S = 1.0
