"""The worker process's garbage collector, set for a driver's many live objects (issue 38 item 2).

A driver at concurrency 1,024 keeps hundreds of thousands of objects alive (streams, buffers,
accumulators, pending ledger writes) on top of Django's and Celery's own. CPython's default
thresholds (700, 10, 10) then run a young collection every 700 net allocations and a full one
— which walks every tracked object of the process, about 130 ms here — eight times in a run
of 4,096 calls: 1.3 s of the worker's 7.6 s of CPU (`bench/engine_throughput.py`, C = 1,024;
docs/performance.md). So, once per process, before its first drive (`runs.tasks.run_drive`):

- what the process holds by then (modules, settings, Celery's and Django's state) is collected
  once and frozen (`gc.freeze`): later collections never walk it again;
- young collections come every 20,000 net allocations and the older generations every tenth of
  the one below, so a full collection walks only the objects made since the freeze, about once
  per two million allocations.

Nothing is left uncollected: reference counting frees what it always freed, and cyclic garbage
waits at most one collection of its generation. What the policy costs is memory, the cyclic
garbage that waits (measured at C = 1,024: peak RSS per in-flight stream 56–61 KiB, was 53).
"""

from __future__ import annotations

import gc
import os
import threading

THRESHOLDS = (20_000, 10, 10)

_lock = threading.Lock()
_applied_in: int | None = None  # the pid that applied it (a forked child applies its own)


def worker_gc_policy() -> bool:
    """Apply the policy in this process once; True when this call applied it."""
    global _applied_in
    with _lock:
        if _applied_in == os.getpid():
            return False
        gc.collect()
        gc.freeze()
        gc.set_threshold(*THRESHOLDS)
        _applied_in = os.getpid()
        return True
