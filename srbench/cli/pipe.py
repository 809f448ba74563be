"""A CLI whose output's reader goes away (`srbench runs … | head -1`) stops quietly.

Python ignores SIGPIPE, so a write to a pipe nobody reads raises BrokenPipeError: from the
`print` that hit it, a traceback; from the last flush at exit, "Exception ignored … BrokenPipe".
Restoring SIGPIPE's default action would be quiet, but would also kill the process on a write
to a closed *socket* (httpx to the API) instead of raising there. So both entry points (the
`srbench` console script and `manage.py`) run through `reader_gone_quietly`: when standard
output's reader is gone, the rest of the output goes to /dev/null and the process exits 141,
as a shell reports a command ended by SIGPIPE. A BrokenPipeError of anything else (a socket, a
child's pipe) is raised as before.
"""

from __future__ import annotations

import os
import select
import signal
import sys
from collections.abc import Callable

EXIT_READER_GONE = 128 + signal.SIGPIPE  # 141


def reader_gone_quietly(main: Callable[[], object]) -> None:
    """Run a CLI entry point; exit EXIT_READER_GONE, without a traceback, when the reader of
    standard output closed it."""
    try:
        main()
        sys.stdout.flush()  # the last of the output is written here, not at interpreter exit
    except SystemExit:
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            _quit()
        raise
    except BrokenPipeError:
        if not stdout_reader_gone():
            raise
        _quit()


def stdout_reader_gone() -> bool:
    """Whether standard output is a pipe whose reading end is closed (POLLERR on its writing
    end)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _fd, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):
        return False


def _quit() -> None:
    # Output still buffered would be flushed at exit into the closed pipe: send it to /dev/null.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    sys.exit(EXIT_READER_GONE)
