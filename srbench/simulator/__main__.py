"""``python -m srbench.simulator [--config PATH] [--host H] [--port P]``."""

import argparse

from srbench.simulator.config import ConfigError
from srbench.simulator.server import serve


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m srbench.simulator")
    parser.add_argument("--config", default=None, help="TOML config (default: bundled)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8100)
    args = parser.parse_args()
    try:
        serve(args.config, host=args.host, port=args.port)
    except ConfigError as exc:
        parser.exit(2, f"python -m srbench.simulator: {exc}\n")


if __name__ == "__main__":
    main()
