"""What the verifier's wrapper costs a Python start (docs/decisions.md, "hv: the verifier's
Pythons under -S, in a script's own virtualenv, under another name").

In one verifier-like sandbox (the guard's site files, so every base interpreter is wrapped and
its `encodings` loads the guard), times N starts of `python3.11 -c pass` by its runtime path
(the wrapper: bash, two `realpath`, then the real interpreter) and by the hidden real one (the
same interpreter, guard and `encodings`, without the wrapper). Prints the median and the 90th
percentile of each, in milliseconds, and the load average.

    .venv/bin/python bench/verifier_python_start.py [--starts 40]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runs.engine.sandbox import sandbox_run  # noqa: E402
from runs.engine.sandbox_command import SandboxLimits  # noqa: E402
from runs.engine.sandbox_files import fresh_directory  # noqa: E402
from runs.engine.sandbox_pythons import HIDDEN_DIR  # noqa: E402

SITE = Path(__file__).resolve().parents[1] / "runs" / "engine" / "verifier_site"
PTH = "srbench-verifier.pth"
LOOP = (
    "for i in $(seq {n}); do s=$(date +%s%N); {python} -c pass; e=$(date +%s%N); "
    'echo "{label} $(( (e - s) / 1000 ))"; done'
)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--starts", type=int, default=40)
    args = parser.parse_args()
    script = "\n".join(
        LOOP.format(n=args.starts, python=python, label=label)
        for label, python in (
            ("wrapper", "/usr/bin/python3.11"),
            ("real", f"/usr/{HIDDEN_DIR}/bin_python3_11"),
        )
    )
    workdir = fresh_directory("srbench-bench-")
    result = sandbox_run(
        argv=["bash", "-c", script],
        files={},
        limits=SandboxLimits(wall_s=120, cpu_s=120),
        workdir=workdir,
        save=False,
        ro_binds={"/srbench/verifier-site": SITE},
        site_files={PTH: SITE / PTH},
    )
    times: dict[str, list[float]] = {}
    for line in result.stdout.decode().splitlines():
        label, micros = line.split()
        times.setdefault(label, []).append(int(micros) / 1000)
    for label, values in times.items():
        values.sort()
        p90 = values[int(0.9 * (len(values) - 1))]
        print(
            f"{label}: median {statistics.median(values):.1f} ms, p90 {p90:.1f} ms, n={len(values)}"
        )
    print("load average:", " ".join(f"{x:.2f}" for x in os.getloadavg()))
    if result.stderr:
        print(result.stderr.decode()[-500:], file=sys.stderr)


if __name__ == "__main__":
    main()
