"""The savings bootstrap at scale (issue 38): what a comparison pays for its savings interval
at 10,000 and 100,000 cases, drawn a block of rows at a time (what the product does) beside
one (draws × cases) block (what it did before), on the same machine in alternating rounds.

Prints per size and layout: wall and CPU seconds per call of
`srbench.savings_bootstrap.savings_bootstrap_intervals`, its peak of allocated memory (tracemalloc), and whether
the intervals of both layouts are identical (they must be: the generator's stream is the same).
No database, no network.

    .venv/bin/python bench/bootstrap_scale.py [--cases 10000 100000] [--candidates 3] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "srbench.settings")

from srbench import savings_bootstrap as stats  # noqa: E402
from srbench.stats import DEFAULT_BOOTSTRAP_DRAWS  # noqa: E402

# The nine benchmarks' shares of a composed dataset's cases (the demo's proportions).
SHARES = (0.30, 0.20, 0.15, 0.10, 0.10, 0.05, 0.05, 0.03, 0.02)


def costs(cases: int, candidates: int) -> tuple[dict, list[dict]]:
    rng = np.random.default_rng(3)
    sizes = [max(1, round(cases * share)) for share in SHARES]
    base = {f"b{i}": np.round(rng.uniform(1e-4, 0.02, n), 10) for i, n in enumerate(sizes)}
    cands = [
        {k: np.round(v * rng.uniform(0.2, 1.5, v.size), 10) for k, v in base.items()}
        for _ in range(candidates)
    ]
    return base, cands


def timed(base: dict, cands: list[dict], block: int) -> tuple[float, float, float, list]:
    stats.BOOTSTRAP_BLOCK_ELEMENTS = block
    tracemalloc.start()  # numpy reports its arrays to tracemalloc
    wall, cpu = time.perf_counter(), time.process_time()
    got = stats.savings_bootstrap_intervals(base, cands)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return wall, cpu, peak, [(g.lower, g.upper) if g else None for g in got]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--candidates", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    blocked = stats.BOOTSTRAP_BLOCK_ELEMENTS
    print(f"load {os.getloadavg()[0]:.1f}; draws {DEFAULT_BOOTSTRAP_DRAWS}")
    print("cases   candidates  layout            wall s   cpu s   peak MB  identical")
    for cases in args.cases:
        base, cands = costs(cases, args.candidates)
        one_block = DEFAULT_BOOTSTRAP_DRAWS * cases
        for _ in range(args.rounds):
            a = timed(base, cands, one_block)
            b = timed(base, cands, blocked)
            for name, r in (("one block (before)", a), ("blocked (now)", b)):
                print(
                    f"{cases:>7} {args.candidates:>10}  {name:<18} {r[0]:>6.2f} {r[1]:>7.2f}"
                    f" {r[2]:>8.0f}  {a[3] == b[3]}"
                )
    stats.BOOTSTRAP_BLOCK_ELEMENTS = blocked


if __name__ == "__main__":
    main()
