"""Step 1 of the Compare page (choose a baseline) on an existing database (issue 38).

Measures the page through Django's test client — middleware, auth, rendering — in this process:
one warm-up request (a process's first also reads what it keeps per process), then `--repeat`
requests; prints the median, minimum and maximum and the load. Build the database first with
`bench/million.py` (10,000 runs) on a scratch database; the rows are only read here.

    DATABASE_URL=postgres://…/scratch .venv/bin/python bench/compare_offer.py [--checkout DIR]

`--checkout` measures another checkout's code on the same database (its `compare` app must
read the same tables; extra columns are ignored), so two builds can be timed in alternating
processes. `--freeze` applies the web process's start-up garbage-collector freeze
(`srbench.web_gc`) after Django is set up, as `srbench/asgi.py` and `srbench/wsgi.py` do.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkout", default=str(Path(__file__).resolve().parent.parent))
    parser.add_argument("--repeat", type=int, default=12)
    parser.add_argument("--freeze", action="store_true")
    parser.add_argument("--query", default="", help="the step's search (bq)")
    args = parser.parse_args()
    sys.path.insert(0, args.checkout)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "srbench.settings_test")
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.test import Client
    from django.test.utils import setup_test_environment

    setup_test_environment()
    if args.freeze:
        from srbench.web_gc import web_gc_freeze

        web_gc_freeze()
    user, _ = get_user_model().objects.get_or_create(username="compare-offer-bench")
    client = Client()
    client.force_login(user)
    url = "/compare/" + (f"?bq={args.query}" if args.query else "")
    started = time.perf_counter()
    assert client.get(url).status_code == 200
    first = (time.perf_counter() - started) * 1000
    times = []
    for _ in range(args.repeat):
        started = time.perf_counter()
        response = client.get(url)
        times.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"{Path(args.checkout).name}{' +freeze' if args.freeze else ''}: step 1 median "
        f"{statistics.median(times):.1f} ms (min {min(times):.1f}, max {max(times):.1f}; "
        f"first {first:.0f} ms; {args.repeat} requests; load {load})",
        flush=True,
    )


if __name__ == "__main__":
    main()
