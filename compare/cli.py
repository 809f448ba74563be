"""`benchmark compare | reconcile-usage | regrade | export`: thin verbs over the API (over
HTTP with --url, else in-process through the same views).

All four read saved evidence only and make no model call. Human tables by default, ``--json``
for machines; an error is one line on stderr and exit code 2.
"""

from __future__ import annotations

import csv
import io
import json
import sys
import time
import uuid
from typing import Any

from compare.headline import headline_sentence
from runs.interfaces.rejudge_cli import rejudge_follow
from runs.reporting.official_metrics import METRICS as OFFICIAL_METRICS
from runs.reporting.official_metrics import metric_value_text
from srbench.api_client import (
    ApiClient,
    CliError,
    add_connection_arguments,
    api_error_message,
    cli_guard,
    client_from,
    refused_text,
    text_file_write,
)
from srbench.figures_text import level_text, signed_figure, signed_interval_text
from srbench.money import percent_text, usd_text


def register(verbs: Any) -> None:
    p = verbs.add_parser(
        "compare", help="compare candidate runs with the strongest single model of a baseline run"
    )
    p.add_argument("baseline_run", type=int, metavar="BASELINE_RUN")
    p.add_argument("candidate_runs", type=int, nargs="+", metavar="CANDIDATE_RUN")
    p.add_argument(
        "--baseline-target", default=None, help="one of the tied strongest single models"
    )
    add_connection_arguments(p)
    p.set_defaults(handler=cli_guard(compare))

    p = verbs.add_parser(
        "reconcile-usage", help="rebuild a finished run's usage from its saved SSE evidence"
    )
    p.add_argument("run_id", type=int, metavar="RUN_ID")
    add_connection_arguments(p)
    p.set_defaults(handler=cli_guard(reconcile_usage))

    p = verbs.add_parser(
        "regrade", help="re-grade saved answers with today's graders (code in the sandbox)"
    )
    p.add_argument("run_id", type=int, metavar="RUN_ID")
    p.add_argument(
        "--rejudge",
        action="store_true",
        help="re-judge judged answers too (states the worst-case judge cost first)",
    )
    p.add_argument(
        "--confirm-judge-cost",
        default=None,
        metavar="USD",
        help="the worst-case judge cost --rejudge stated, to proceed: re-judges in a child "
        "run budgeted at that amount (--wait follows it to its report)",
    )
    p.add_argument(
        "--wait",
        type=float,
        default=1800.0,
        metavar="SECONDS",
        help="how long to wait for a worker's sandbox regrade or re-judge (default 1800)",
    )
    add_connection_arguments(p)
    p.set_defaults(handler=cli_guard(regrade))

    p = verbs.add_parser("export", help="per-question answer matrix of a dev-split run")
    p.add_argument("run_id", type=int, metavar="RUN_ID")
    p.add_argument("--format", choices=["csv", "json"], default="csv")
    p.add_argument("--output", default=None, metavar="FILE", help="default: standard output")
    add_connection_arguments(p)
    p.set_defaults(handler=cli_guard(export))


def _call(client: ApiClient, method: str, path: str, **kwargs: Any) -> Any:
    response = client.request(method, path, **kwargs)
    if response.status_code not in (200, 201):
        raise CliError(api_error_message(response))
    return response


def compare(options: dict[str, Any]) -> int:
    """THE comparison endpoint, POST compare/ (issue 24): refused candidate runs are listed
    and the rest compared; exit 2 only when every candidate run is refused (409)."""
    body: dict[str, Any] = {
        "baseline": options["baseline_run"],
        "candidates": options["candidate_runs"],
    }
    if options["baseline_target"]:
        body["baseline_target"] = options["baseline_target"]
    # A comparison reads only: repeated like a GET when the connection is lost.
    doc = _call(client_from(options), "POST", "compare/", json=body, reads_only=True).json()
    if options["json"]:
        print(json.dumps(doc, indent=2))
        return 0
    b = doc["baseline"]
    tied = ", ".join(b["tied"])
    print(
        f"Baseline: run {b['run']} / {b['target']}  quality {b['quality']:.4f} "
        f"(exact value {b['quality_exact']}, a weighted mean, not a count)  subject cost {usd_text(b['subject_cost_usd'])}  tied: {tied}"
    )
    comps = doc["comparisons"]
    level = f"{1 - doc['alpha']:.0%}"
    # The family-wise level as the comparison states it (compare.results), not recomputed here.
    family = comps[0]["family_interval"]["level"] if comps else 1 - doc["alpha"]
    family_level = level_text(family)
    print(
        f"{'candidate':<32} {'Δ':>8} {level + ' Hoeffding':>22} {family_level + ' family':>22} "
        f"{'W/L/T':>12} {'savings':>9} {'cache-neutral':>13}  verdict"
    )
    for c in comps:
        i, fam = c["interval"], c["family_interval"]
        name = f"run {c['run']} / {c['target']}"
        # The bounds as the page and the verdict quote them: clipped to [−1, 1] (display_*).
        interval = signed_interval_text(i["display_lower"], i["display_upper"])
        family_interval = signed_interval_text(fam["display_lower"], fam["display_upper"])
        wlt = f"{c['wins']}/{c['losses']}/{c['ties']}"
        print(
            f"{name:<32} {signed_figure(c['delta']):>8} {interval:>22} {family_interval:>22} "
            f"{wlt:>12} "
            f"{percent_text(c['savings']['subject_cost_pct']):>9} "
            f"{percent_text(c['savings']['cache_neutral_pct']):>13}  "
            f"{c['verdict_label']}"
        )
        # THE verdict's reason (compare.verdict): the interval it read, the margin or why none.
        print(f"    {c['verdict']}: {c['verdict_reason']}")
        # The headline question answered in one sentence, as the demo and the page say it.
        print(f"    {headline_sentence(doc, c['target'], c['run'])}")
        if c["savings"]["subject_cost_unknown_reason"]:
            print(f"    {c['savings']['subject_cost_unknown_reason']}")
        if c["savings"]["caution"]:  # known savings that may be a gateway's estimate
            print(f"    caution: {c['savings']['caution']}")
        for line in official_lines(b.get("official"), c.get("official")):
            print(line)
    for r in doc["refused"]:
        print(f"refused: {refused_text(r)}")
    print()
    for text in doc["statements"].values():
        print(f"* {text}")
    return 0


def official_lines(
    base: list[dict[str, Any]] | None, cand: list[dict[str, Any]] | None
) -> list[str]:
    """Each benchmark's official metric, baseline beside candidate (issue 35 item 4), named
    apart from Δ and the verdict: the official summaries' values, intervals and n as given."""
    by = [{(m["benchmark"], m["metric"]): m for m in side or []} for side in (base, cand)]
    lines = []
    for spec in OFFICIAL_METRICS:
        key = (spec.benchmark, spec.key)
        if key not in by[0] and key not in by[1]:
            continue
        lines.append(
            f"    official {spec.benchmark} {spec.name} (not part of Δ or the verdict): "
            f"baseline {metric_value_text(by[0].get(key))} | "
            f"candidate {metric_value_text(by[1].get(key))}"
        )
    return lines


def reconcile_usage(options: dict[str, Any]) -> int:
    summary = _call(
        client_from(options), "POST", f"runs/{options['run_id']}/reconcile-usage/"
    ).json()
    if options["json"]:
        print(json.dumps(summary, indent=2))
        return 0
    status = "appended" if summary["created"] else "unchanged (same evidence)"
    print(
        f"{status}  correction v{summary['version']}  evidence sha256 {summary['evidence_sha256']}\n"
        f"  verified {summary['verified']}  changed {summary['changed']}  "
        f"unverifiable {summary['unverifiable']}\n"
        f"  known cost {summary['old_known_cost_usd']} → {summary['new_known_cost_usd']} USD  "
        "model requests: 0"
    )
    return 0


def _regrade_wait(client: ApiClient, options: dict[str, Any]) -> dict[str, Any]:
    """POST the regrade; when a worker has to run code in the sandbox (202), follow it until
    it is stored or `--wait` runs out."""
    path = f"runs/{options['run_id']}/regrade/"
    body: dict[str, Any] = {}
    if options.get("rejudge"):
        body["rejudge"] = True
    headers: dict[str, str] = {}
    if options.get("confirm_judge_cost") is not None:
        body["confirm_judge_cost"] = options["confirm_judge_cost"]
        # A confirmed re-judge creates a child run: keyed, so a lost response is retried safely.
        headers["Idempotency-Key"] = f"cli-rejudge-{uuid.uuid4()}"
    response = client.request("POST", path, json=body, headers=headers)
    if response.status_code == 202 and response.json().get("rejudge"):
        return response.json()  # the re-judge child run: followed by rejudge_follow
    deadline = time.monotonic() + float(options.get("wait") or 0)
    if response.status_code == 202:
        print(
            f"code answers run again in the sandbox on a worker (task {response.json()['task']});"
            " waiting",
            file=sys.stderr,
        )
    while response.status_code == 202:
        task = response.json()["task"]
        if time.monotonic() > deadline:
            raise CliError(
                f"the regrade is still running on a worker (task {task}); "
                f"follow it with GET /api/v1/{path}?task={task}"
            )
        time.sleep(0.5)
        response = client.request("GET", path, params={"task": task})
    if response.status_code != 200:
        raise CliError(api_error_message(response))
    return response.json()


def regrade(options: dict[str, Any]) -> int:
    client = client_from(options)
    doc = _regrade_wait(client, options)
    if doc.get("rejudge"):
        return rejudge_follow(client, doc, options)
    if options["json"]:
        print(json.dumps(doc, indent=2))
        return 0
    status = "appended" if doc["created"] else "unchanged (same answers and graders)"
    print(
        f"{status}  regrade v{doc['version']}  regraded {doc['regraded']}  "
        f"changed {doc['changed']}  skipped {doc['skipped']}  model requests: 0"
    )
    for slug, benchmarks in doc["by_target"].items():
        for benchmark, t in benchmarks.items():
            print(
                f"  {slug:<24} {benchmark:<12} correct {t['old_correct']} → {t['new_correct']} "
                f"of {t['regraded']}"
            )
    quote = doc.get("judge_cost_quote") or {}
    if quote.get("judged_cells"):
        print(
            f"  judged answers not re-judged: {quote['judged_cells']}  worst-case judge cost "
            f"{quote['worst_case_usd'] or 'unknown (a judge price is missing)'} USD (--rejudge)"
        )
    return 0


def export(options: dict[str, Any]) -> int:
    response = _call(
        client_from(options),
        "GET",
        f"runs/{options['run_id']}/export/",
        params={"as": options["format"]},
    )
    if options["format"] == "json":
        matrix = response.json()
        text = json.dumps(matrix, indent=2, ensure_ascii=False)
        rows = len(matrix["rows"])
    else:
        text = response.text
        # Records, not lines: an answer with a line break spans several lines of its record.
        rows = max(sum(1 for _ in csv.reader(io.StringIO(text))) - 1, 0)  # minus the header
    if options["output"]:
        text_file_write(options["output"], text, "export")
        print(f"wrote {rows} rows to {options['output']}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
