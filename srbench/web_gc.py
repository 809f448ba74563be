"""The web process's garbage collector, frozen once after Django is set up (issue 38).

What a web process holds once Django is set up — settings, apps, models, the URLconf and the
views it imports — lives as long as the process. CPython's full collections walk every tracked
object anyway: in a process that served the Compare page, one took 75–217 ms (docs/
performance.md, session 10). `gc.freeze()` moves what exists at start-up out of the collector's
generations, so later collections walk only what requests made. Nothing is left uncollected
that would have been: reference counting frees what it always freed, and the frozen objects
were never garbage. Called by `srbench/asgi.py` and `srbench/wsgi.py`, once, before the first
request (under a pre-forking server, before the fork, so the children share the pages too).
"""

from __future__ import annotations

import gc

from django.urls import get_resolver


def web_gc_freeze() -> None:
    """Import the URLconf (and so every view module), collect once, freeze what is left."""
    get_resolver().url_patterns  # noqa: B018 - imported for its side effect: the views' modules
    gc.collect()
    gc.freeze()
