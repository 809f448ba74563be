"""The `srbench` console script's remote path: a verb that only talks HTTP to a server
(`--url`, or SRBENCH_URL) runs without booting Django.

Booting Django (settings, every app's models, DRF, Celery) costs a CLI start about a second of
CPU; a remote verb needs none of it — its handler builds requests with httpx and prints the
answers. The verb modules below import nothing of Django, so the same `register` functions and
handlers serve `manage.py benchmark` (in process or remote) and this path: one parser per verb,
one handler, two ways in. Local verbs (`prepare`, `demo`, `simulator`, …) and a command without
a server always take the Django path.
"""

from __future__ import annotations

import argparse
import importlib
import os
from collections.abc import Sequence

# The verb modules that talk to the API only (no model, no settings at import or at run time
# with --url). `tests/cli/test_console_remote.py` proves a remote verb leaves Django unbooted.
HTTP_VERB_MODULES = (
    "runs.interfaces.cli",
    "recipes.cli",
    "compare.cli",
    "runs.interfaces.recovery_cli",
)


def remote_requested(argv: Sequence[str]) -> bool:
    """Whether the command names a server: `--url X`, `--url=X`, or SRBENCH_URL."""
    if os.environ.get("SRBENCH_URL"):
        return True
    return any(arg == "--url" or arg.startswith("--url=") for arg in argv)


def remote_main(argv: Sequence[str]) -> int | None:
    """Run `argv` (`VERB …`) over HTTP without Django, or None when VERB is not a remote
    verb (the caller then takes the Django path, which knows every verb)."""
    if not argv or argv[0].startswith("-"):
        return None
    parser = argparse.ArgumentParser(
        prog="srbench", description="srbench: evaluate LLM serving targets."
    )
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    for name in HTTP_VERB_MODULES:
        importlib.import_module(name).register(verbs)
    if argv[0] not in verbs.choices:
        return None
    options = vars(parser.parse_args(list(argv)))
    return options["handler"](options)
