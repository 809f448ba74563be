"""The type checker of `make test`: mypy with the Django and DRF plugins on the product code
(pyproject.toml [tool.mypy]), failing only on an error that is not in the committed baseline.

The code base had 141 errors when mypy came in (issue 36 item 4), many of them where the stubs
cannot follow the code (Django's dynamic attributes, DRF's serializer fields). They are written
down in scripts/typecheck_baseline.txt as `path: message  [code]`, without line numbers, so an
edit above an old error does not turn it into a new one; the same message twice in a file counts
twice. A new error fails the run with its line; a fixed one is only reported (run with --update
to shrink the baseline: it may only ever shrink, docs/decisions.md says why).

    .venv/bin/python scripts/typecheck.py            # what `make test` runs
    .venv/bin/python scripts/typecheck.py --update   # rewrite the baseline from today's errors
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / "scripts" / "typecheck_baseline.txt"
ERROR = re.compile(r"^(?P<path>[^:\n]+):(?P<line>\d+)(?::\d+)?: error: (?P<message>.*)$")
# Line numbers inside a message ("defined on line 12") move with every edit too.
LINE_IN_MESSAGE = re.compile(r"\bline \d+\b")
# The settings module the Django plugin loads: parsed, never connected to (no lock, no server).
ENV = {
    "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/typecheck-never-connected",
    "CELERY_BROKER_URL": "memory://",
    "SECRET_KEY": "typecheck",
}


def normalise(path: str, message: str) -> str:
    return f"{path}: {LINE_IN_MESSAGE.sub('line N', message.strip())}"


def parse(output: str) -> list[tuple[str, str]]:
    """(normalised error, `path:line`) for every error line of mypy's output."""
    found = []
    for line in output.splitlines():
        match = ERROR.match(line)
        if match:
            where = f"{match['path']}:{match['line']}"
            found.append((normalise(match["path"], match["message"]), where))
    return found


def run_mypy() -> tuple[int, str]:
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary", "--show-error-codes"],
        cwd=ROOT,
        env={**os.environ, **ENV},
        capture_output=True,
        text=True,
    )
    return done.returncode, done.stdout + done.stderr


def read_baseline(path: Path = BASELINE) -> Counter[str]:
    lines = path.read_text().splitlines() if path.exists() else []
    return Counter(line for line in lines if line and not line.startswith("#"))


def write_baseline(errors: Counter[str], path: Path = BASELINE) -> None:
    header = (
        "# mypy errors of the product code accepted as of issue 36 (scripts/typecheck.py).\n"
        "# Only ever remove lines (scripts/typecheck.py --update after fixing); never add.\n"
    )
    path.write_text(header + "".join(f"{e}\n" for e in sorted(errors.elements())))


def compare(current: list[tuple[str, str]], baseline: Counter[str]) -> tuple[list[str], int]:
    """The new errors (with their `path:line`) and how many baseline entries are gone."""
    seen: Counter[str] = Counter()
    new = []
    for error, where in current:
        seen[error] += 1
        if seen[error] > baseline[error]:
            new.append(f"{where}: {error.split(': ', 1)[1]}")
    return new, sum((baseline - seen).values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--update", action="store_true", help="rewrite the baseline")
    parser.add_argument("--baseline", type=Path, default=BASELINE, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    code, output = run_mypy()
    current = parse(output)
    if code not in (0, 1) or (code == 1 and not current):
        print(output, file=sys.stderr)
        print(f"typecheck: mypy itself failed (exit {code})", file=sys.stderr)
        return 2
    if args.update:
        write_baseline(Counter(error for error, _ in current), args.baseline)
        print(f"typecheck: baseline rewritten with {len(current)} errors")
        return 0
    new, fixed = compare(current, read_baseline(args.baseline))
    if fixed:
        print(f"typecheck: {fixed} baseline errors are fixed; shrink it with --update")
    if new:
        print("\n".join(new), file=sys.stderr)
        print(f"typecheck: {len(new)} new mypy errors (not in {args.baseline})", file=sys.stderr)
        return 1
    print(f"typecheck: no new mypy errors ({len(current)} known ones in the baseline)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
