"""`python manage.py benchmark <verb>`: the srbench CLI (also installed as `srbench`).

Each app contributes its verbs through a `register(verbs)` function in its `cli` module; a verb's
parser sets `handler`, a function of the parsed options that returns the exit code.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Any

from django.core.management.base import BaseCommand

from srbench.cli.remote import HTTP_VERB_MODULES

# The console script's name: `srbench VERB` runs this command (srbench/cli/entry.py), whose
# parser Django names "srbench benchmark" — a command line that does not exist.
CONSOLE_SCRIPT = "srbench"

# Local verbs first, then the ones that only talk to the API (also the console script's
# Django-free remote path).
VERB_MODULES = ["srbench.cli.local", "datasets.cli", *HTTP_VERB_MODULES]


class Command(BaseCommand):
    help = "srbench: evaluate LLM serving targets (see `benchmark <verb> --help`)."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        if parser.prog == f"{CONSOLE_SCRIPT} benchmark":
            # Before the verbs are added: each verb's usage line is built from this name.
            parser.prog = CONSOLE_SCRIPT
        verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
        for name in VERB_MODULES:
            try:
                module = importlib.import_module(name)
            except ModuleNotFoundError as exc:
                if exc.name != name:
                    raise
                continue
            module.register(verbs)

    def handle(self, *args: Any, **options: Any) -> None:
        code = options["handler"](options)
        if code:
            sys.exit(code)
