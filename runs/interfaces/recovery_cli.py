"""CLI verbs of recovery (R15.6): recover-plan, recover, lineage — all through the API.

    benchmark recover-plan RUN_ID --mode undispatched --output recovery.json
    # review; `selected_cells` in the file may be cut down to a reviewed subset
    benchmark recover RUN_ID --plan recovery.json --idempotency-key recovery-1
    # judged cells whose answer is stored and whose judge call was never sent:
    benchmark recover-plan RUN_ID --mode judge_only --output judge.json
    benchmark recover RUN_ID --plan judge.json --idempotency-key judge-1 --confirm-judge-cost USD

When the outcome of `recover` is uncertain (a lost response), run the same command again: the
same plan, cells and key return the same child run and dispatch nothing twice.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from decimal import Decimal
from typing import Any

from runs.interfaces.cli import emit, usd
from runs.vocabulary.recovery_modes import RecoveryPlanMode
from srbench.api_client import (
    CliError,
    add_connection_arguments,
    api_error_message,
    cli_guard,
    client_from,
    json_file_read,
    text_file_write,
)

PAGE = 100
MODES = [str(mode) for mode in RecoveryPlanMode]


def _plan_all_pages(client: Any, run_id: int, mode: str) -> dict[str, Any]:
    """Read every page of the plan. Each page is recomputed from the ledger, so all pages
    must carry the same plan_sha256; otherwise the ledger moved while reading."""
    eligible: list[dict[str, Any]] = []
    excluded: list[dict[str, Any]] = []
    params: dict[str, Any] = {"mode": mode, "limit": PAGE}
    first: dict[str, Any] | None = None
    while True:
        page = client.json("GET", f"runs/{run_id}/recovery-plan/", params=params)
        if first is None:
            first = page
        elif page["plan_sha256"] != first["plan_sha256"]:
            raise CliError("the run's ledger changed while the plan was read; ask again")
        eligible += page["eligible_cells"]
        excluded += page["excluded"]
        if page["next_eligible_after"] is None and page["next_excluded_after"] is None:
            break
        params["eligible_after"] = page["next_eligible_after"] or 10**18
        params["excluded_after"] = page["next_excluded_after"] or 10**18
    assert first is not None
    skip = {
        "eligible_cells",
        "excluded",
        "next_eligible_after",
        "next_excluded_after",
        "selected_cells_count",
    }
    plan = {k: v for k, v in first.items() if k not in skip}
    plan["eligible_cells"] = eligible
    plan["excluded"] = excluded
    plan["selected_cells"] = [e["cell"] for e in eligible]
    return plan


def _plan_text(plan: dict[str, Any], output: str | None) -> str:
    parent = plan["parent"]
    p = parent["progress"]
    lines = [
        f"recovery plan {plan['plan_sha256']} ({plan['mode']}) for run {plan['parent_run']}",
        f"parent: {parent['status']}, {p['completed']}/{p['denominator']} completed, "
        f"known spend {usd(parent['known_spend_usd'])}"
        + ("" if parent["spend_complete"] else " (incomplete: some costs are unknown)"),
        f"cells to run: {len(plan['eligible_cells'])}   excluded: {len(plan['excluded'])}",
    ]
    for reason, n in sorted(plan["counts"]["excluded_by_reason"].items()):
        lines.append(f"  excluded {n:>5}  {reason}")
    if plan["mode"] == RecoveryPlanMode.FAILED:
        lines += _previous_cost_lines(plan)
        lines.append(
            "failed mode sends NEW model calls (extra cost); `recover` needs "
            "--acknowledge-new-attempt"
        )
    if plan["mode"] == RecoveryPlanMode.JUDGE_ONLY:
        quote = plan["judge_cost_quote"]
        lines += _judge_only_lines(plan["eligible_cells"])
        lines += [
            f"judge calls: {quote['judge_calls']} (one per selected cell), subject calls: 0, "
            f"worst case {usd(quote['worst_case_usd'])}",
            "`recover` needs --confirm-judge-cost "
            + (quote["worst_case_usd"] or "(none possible: a judge price is missing)"),
        ]
    elif summary := plan.get("judge_only"):
        lines.append(
            f"judge only: {summary['cells']} cell(s) ({summary['reason']}); review them with "
            f"--mode judge_only (worst case {usd(summary['judge_cost_quote']['worst_case_usd'])})"
        )
    if output:
        lines.append(f"written to {output}; edit selected_cells there to recover a subset")
    lines.append("no model was called (model_requests: 0)")
    return "\n".join(lines)


def _judge_only_lines(eligible: list[dict[str, Any]]) -> list[str]:
    """Why the cells of a judge-only plan are in it (judge call never sent, or failed at no
    cost), how many of each, and the billing assumptions behind a failed judge call's $0."""
    whys = Counter(e["why"] for e in eligible)
    lines = [f"  {n:>5}  {why}" for why, n in sorted(whys.items())]
    assumed = sorted({w for e in eligible if (w := e.get("judge_failure_cost_assumes"))})
    lines += [f"         ({words})" for words in assumed]
    return lines


def _previous_cost_lines(plan: dict[str, Any]) -> list[str]:
    """What the previous attempts of the eligible cells cost, unknown if any is (never $0 for
    unknown), with the billing assumptions behind the figure (failed mode)."""
    costs = [e.get("previous_attempt_cost_usd") for e in plan["eligible_cells"]]
    if not costs:
        return []
    total = None if None in costs else sum((Decimal(c) for c in costs), Decimal(0))
    lines = [f"previous attempts of the cells to run cost {usd(total)} in total"]
    lines += [f"  {words}" for words in plan.get("previous_attempt_cost_assumptions") or []]
    return lines


def _recover_plan(options: dict[str, Any]) -> int:
    client = client_from(options)
    plan = _plan_all_pages(client, options["run_id"], options["mode"])
    if options.get("output"):
        text_file_write(options["output"], json.dumps(plan, indent=2) + "\n", "recovery plan")
    emit(options, plan, _plan_text(plan, options.get("output")))
    return 0


def _recover(options: dict[str, Any]) -> int:
    plan = json_file_read(options["plan"], "recovery plan")
    if not isinstance(plan, dict):
        raise CliError("a recovery plan file must hold a JSON object")
    if plan.get("parent_run") not in (None, options["run_id"]):
        raise CliError(f"this plan is for run {plan['parent_run']}, not run {options['run_id']}")
    body = {
        "plan_sha256": plan.get("plan_sha256"),
        "mode": plan.get("mode"),
        "selected_cells": plan.get("selected_cells"),
        "acknowledge_new_attempt": bool(options.get("acknowledge_new_attempt")),
    }
    if options.get("confirm_judge_cost") is not None:
        body["confirm_judge_cost"] = options["confirm_judge_cost"]
    client = client_from(options)
    key = options["idempotency_key"]
    response = client.request(
        "POST",
        f"runs/{options['run_id']}/recover/",
        json=body,
        headers={"Idempotency-Key": key},
    )
    if response.status_code not in (200, 201):
        raise CliError(api_error_message(response))
    child = response.json()
    replayed = response.headers.get("Idempotent-Replayed") == "true"
    print(
        f"child run {child['id']} "
        + ("already existed for this idempotency key" if replayed else "created")
        + f" (idempotency key {key})",
        file=sys.stderr,
    )
    emit(
        options,
        child,
        f"run {child['id']}: {child['status']}, {child['progress']['denominator']} cells "
        f"(recovery of run {options['run_id']}, {plan.get('mode')} mode); its cells: "
        f"benchmark show {child['id']} --results",
    )
    return 0


# The lineage API's `mode` of a re-judge child (the server's runs.settlement.lineage.REJUDGE_MODE): the
# CLI reads the API's documents and imports no server module, so a remote verb runs without
# Django (tests/cli/test_console_remote.py); tests/runs/test_rejudge_lineage.py reads a
# re-judge child's lineage through the API and this CLI.
REJUDGE_MODE = "rejudge"


def _mode_text(mode: str | None) -> str:
    """How a run came from its parent, as the lineage's `mode` says: a re-judge, or a recovery
    in its mode; "" for a run that is neither."""
    if mode is None:
        return ""
    return "  (re-judge)" if mode == REJUDGE_MODE else f"  ({mode} recovery)"


def _origin_rows(data: dict[str, Any]) -> list[str]:
    """What the run itself was made from: the recovery request or the re-judge it came of."""
    rows = []
    if recovered := data.get("recovered_from"):
        rows.append(f"recovery of run {recovered['parent']} ({recovered['mode']} mode)")
    if rejudged := data.get("rejudged_from"):
        rows.append(
            f"re-judge of run {rejudged['parent']}: {rejudged['judge_calls']} judge calls, "
            f"confirmed judge cost {usd(rejudged['confirmed_judge_cost_usd'])}"
        )
    return rows


def _tree_line(child: dict[str, Any], text: str) -> str:
    """A run below this one in the lineage tree: a child as it is, a deeper one indented by
    its depth and naming the run it came from."""
    depth = child.get("depth") or 1
    if depth == 1:
        return "child:    " + text
    return f"child:    {'  ' * (depth - 1)}{text}  (from run {child['parent']})"


def _lineage_whole(client: Any, run_id: int) -> dict[str, Any]:
    """The run's lineage with every run below it. The API pages the children (25 by default:
    the first page alone was printed as the whole tree), so each page is read in turn from
    its `next_children_after`; the answer is the first page's, with every child, no cursor."""
    path = f"runs/{run_id}/lineage/"
    data = client.json("GET", path, params={"limit": PAGE})
    children = list(data["children"])
    cursor = data.get("next_children_after")
    while cursor is not None:
        page = client.json("GET", path, params={"children_after": cursor, "limit": PAGE})
        children += page["children"]
        following = page.get("next_children_after")
        if following is not None and following <= cursor:
            raise CliError(f"the lineage's pages did not advance past child run {cursor}")
        cursor = following
    return {**data, "children": children, "next_children_after": None}


def _lineage(options: dict[str, Any]) -> int:
    data = _lineage_whole(client_from(options), options["run_id"])

    def line(r: dict[str, Any]) -> str:
        p = r["progress"]
        cost = usd(r["known_cost_usd"]) + ("" if r["cost_complete"] else " (partial)")
        return (
            f"run {r['id']} {r['status']:<11} {p['completed']}/{p['denominator']} completed  "
            f"known cost {cost}  {r['name']}{_mode_text(r.get('mode'))}"
        )

    rows = [line(data["run"]), *_origin_rows(data)]
    if data["parent"]:
        rows.append("parent:   " + line(data["parent"]))
    rows += [_tree_line(c, line(c)) for c in data["children"]]
    emit(options, data, "\n".join(rows))
    return 0


def register(verbs: Any) -> None:
    p = verbs.add_parser(
        "recover-plan", help="review which cells of a finished run can be recovered"
    )
    p.add_argument("run_id", type=int)
    p.add_argument("--mode", choices=MODES, required=True)
    p.add_argument("--output", help="write the plan here (then edit selected_cells)")
    add_connection_arguments(p)
    p.set_defaults(handler=cli_guard(_recover_plan))

    p = verbs.add_parser("recover", help="create a child run from a reviewed recovery plan")
    p.add_argument("run_id", type=int)
    p.add_argument("--plan", required=True, help="the file written by recover-plan")
    p.add_argument(
        "--idempotency-key",
        required=True,
        help="reuse with the same plan and cells when the outcome is uncertain",
    )
    p.add_argument(
        "--acknowledge-new-attempt",
        action="store_true",
        help="failed mode: confirm new model calls and their extra cost",
    )
    p.add_argument(
        "--confirm-judge-cost",
        metavar="USD",
        help="judge_only mode: the worst case the plan quotes (judge_cost_quote), exactly",
    )
    add_connection_arguments(p)
    p.set_defaults(handler=cli_guard(_recover))

    p = verbs.add_parser(
        "lineage",
        help="a run's parent and every recovery or re-judge below it (children of children "
        "too), with costs",
    )
    p.add_argument("run_id", type=int)
    add_connection_arguments(p)
    p.set_defaults(handler=cli_guard(_lineage))
