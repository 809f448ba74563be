"""`python -m srbench.embedded_pg start|stop|status --pgdata DIR [--port N] [--listen ADDR]`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from srbench import embedded_pg


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m srbench.embedded_pg")
    parser.add_argument("action", choices=["start", "stop", "status"])
    parser.add_argument("--pgdata", type=Path, required=True)
    parser.add_argument("--port", type=int, default=None, help="also listen on TCP (with --listen)")
    parser.add_argument("--listen", default="", help="TCP address, e.g. 127.0.0.1; default none")
    args = parser.parse_args(argv)
    try:
        if args.action == "start":
            started = embedded_pg.start(args.pgdata, port=args.port, listen=args.listen)
            print("started" if started else "already running")
        elif args.action == "stop":
            print("stopped" if embedded_pg.stop(args.pgdata) else "not running")
        else:
            running = embedded_pg.is_running(args.pgdata.absolute())
            print("running" if running else "not running")
            return 0 if running else 3
    except embedded_pg.EmbeddedDatabaseError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
