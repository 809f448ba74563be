"""`python manage.py benchmark <verb>`: the srbench CLI (also installed as `srbench`)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = "srbench: evaluate LLM serving targets (see `benchmark <verb> --help`)."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)

        p = verbs.add_parser("simulator", help="serve the OpenAI-compatible simulator")
        p.add_argument("--config", default=None, help="TOML config (default: bundled)")
        p.add_argument("--host", default="127.0.0.1")
        p.add_argument("--port", type=int, default=8100)

        p = verbs.add_parser("demo", help="run the demo: simulator, worker and web")
        p.add_argument("--port", type=int, default=8000)
        p.add_argument("--simulator-port", type=int, default=8100)
        p.add_argument("--exit-after-ready", action="store_true", help=argparse.SUPPRESS)

        p = verbs.add_parser("doctor", help="check database → broker → worker round trip")
        p.add_argument("--timeout", type=float, default=30.0)

    def handle(self, *args: Any, **options: Any) -> None:
        verb = options["verb"]
        if verb == "simulator":
            from srbench.simulator.server import serve

            serve(options["config"], host=options["host"], port=options["port"])
            return
        from srbench.cli import local

        if verb == "demo":
            code = local.demo(
                port=options["port"],
                simulator_port=options["simulator_port"],
                exit_after_ready=options["exit_after_ready"],
            )
        elif verb == "doctor":
            code = local.doctor(timeout=options["timeout"])
        else:  # pragma: no cover - argparse rejects unknown verbs
            raise CommandError(f"unknown verb {verb}")
        if code:
            sys.exit(code)
