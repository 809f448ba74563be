"""`benchmark regrade RUN --rejudge --confirm-judge-cost USD`: follow the re-judge child run
(runs/settlement/rejudge.py) to its report and print the re-judged scores (issue 22 point 4)."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from runs.interfaces.cli import TERMINAL, report_text
from srbench.api_client import ApiClient, CliError, RunFollower


def rejudge_follow(client: ApiClient, doc: dict[str, Any], options: dict[str, Any]) -> int:
    """Poll the child run until it ends or `--wait` runs out, then print its report (the
    re-judged scores). Exit 0 when the child completed, 1 otherwise."""
    child = doc["child_run"]
    print(
        f"re-judge of run {doc['run']}: child run {child} "
        f"{'created' if doc['created'] else 'already existed for this confirmation'}; "
        f"{doc['judge_calls']} judge call(s), budget {doc['max_cost_usd']} USD, "
        "subject requests: 0",
        file=sys.stderr,
    )
    deadline = time.monotonic() + float(options.get("wait") or 0)
    run = client.json("GET", f"runs/{child}/")
    follower = RunFollower(0.5)
    while run["status"] not in TERMINAL:
        if time.monotonic() > deadline:
            raise CliError(
                f"re-judge child run {child} is still {run['status']}; follow it with "
                f"`srbench show {child}` and `srbench report {child}`"
            )
        time.sleep(follower.wait(run))
        run = client.json("GET", f"runs/{child}/")
    report = client.json("GET", f"runs/{child}/report/")
    if options.get("json"):
        print(json.dumps({"rejudge": doc, "report": report}, indent=2))
    else:
        print(report_text(report))
    return 0 if report["run"]["status"] == "completed" else 1
