"""`benchmark regrade RUN --rejudge --confirm-judge-cost USD`: follow the re-judge child run
(runs/settlement/rejudge.py) to its report and print the re-judged scores (issue 22 point 4)."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from runs.interfaces.cli import report_text
from runs.interfaces.follow import run_followed
from runs.vocabulary.run_states import TERMINAL_RUN_STATES
from srbench.api_client import ApiClient, CliError

FOLLOW_POLL_S = 0.5  # each long poll holds at most this long, so --wait is kept to about it


def rejudge_follow(client: ApiClient, doc: dict[str, Any], options: dict[str, Any]) -> int:
    """Follow the child run until it ends or `--wait` runs out, then print its report (the
    re-judged scores). Exit 0 when the child completed, 1 otherwise."""
    child = doc["child_run"]
    print(
        f"re-judge of run {doc['run']}: child run {child} "
        f"{'created' if doc['created'] else 'already existed for this confirmation'}; "
        f"{doc['judge_calls']} judge call(s), budget {doc['max_cost_usd']} USD, "
        "subject requests: 0",
        file=sys.stderr,
    )
    # Pushed by the server's events long poll, else polled (runs.interfaces.follow), until --wait.
    run = run_followed(
        client,
        client.json("GET", f"runs/{child}/"),
        poll=FOLLOW_POLL_S,
        seen=lambda _run: None,
        say=lambda line: print(line, file=sys.stderr),
        until=time.monotonic() + float(options.get("wait") or 0),
    )
    if run["status"] not in TERMINAL_RUN_STATES:
        raise CliError(
            f"re-judge child run {child} is still {run['status']}; follow it with "
            f"`srbench show {child}` and `srbench report {child}`"
        )
    report = client.json("GET", f"runs/{child}/report/")
    if options.get("json"):
        print(json.dumps({"rejudge": doc, "report": report}, indent=2))
    else:
        print(report_text(report))
    return 0 if report["run"]["status"] == "completed" else 1
