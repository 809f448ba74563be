"""CLI verbs of runs: plan, run, runs, show, report, cancel, targets — all through the API."""

from __future__ import annotations

import json
import shlex
import sys
import time
import uuid
from typing import Any

from runs.interfaces.follow import run_followed
from runs.reporting.official_metrics import metric_text, official_metrics
from runs.vocabulary.not_run import not_run_reason
from srbench.api_client import (
    ApiUnreachable,
    CliError,
    add_connection_arguments,
    api_error_message,
    cli_guard,
    client_from,
    json_file_read,
    text_file_write,
)
from srbench.figures_text import (
    ACCURACY_DIGITS,
    SCORE_DIGITS,
    WALL_SECONDS_DIGITS,
    figure_text,
)
from srbench.money import usd_text

# Fields only a frozen manifest has (the review's answer), never a plan request: a file with
# them is what `plan --output` wrote, and the API would list them as unknown fields.
MANIFEST_ONLY_FIELDS = {"version", "cases"}


def _plan_arguments(p: Any) -> None:
    p.add_argument(
        "--plan-file",
        help="a JSON plan: the fields of POST /api/v1/plans/review/ (name, dataset, targets, "
        "benchmarks, limits, …), not the manifest `plan --output` writes; the other plan "
        "options override it",
    )
    p.add_argument("--name")
    p.add_argument("--dataset", type=int)
    p.add_argument("--target", action="append", dest="targets", metavar="SLUG")
    p.add_argument("--benchmark", action="append", dest="benchmarks", metavar="KEY")
    p.add_argument(
        "--judge",
        action="append",
        dest="judges",
        metavar="BENCHMARK=SLUG",
        help="the judge target of a judged benchmark (simpleqa, hle; optional for tau3)",
    )
    p.add_argument(
        "--simulator",
        action="append",
        dest="simulators",
        metavar="BENCHMARK=SLUG",
        help="the single-model target that plays the user in tau3",
    )
    p.add_argument("--attempts", type=int, dest="slots", help="attempts per case (slots)")
    p.add_argument("--concurrency", type=int)
    p.add_argument("--max-cost", dest="max_cost_usd")
    p.add_argument("--max-output-tokens", type=int)
    p.add_argument("--temperature", type=float)
    p.add_argument("--seed", type=int)
    p.add_argument("--failure-policy", choices=["stop", "continue"])
    # Sent as text: the server validates and freezes the decimal (0 < margin < 1, 4 places).
    p.add_argument(
        "--non-inferiority-margin",
        dest="non_inferiority_margin",
        metavar="MARGIN",
        help="parity margin on the weighted quality difference, fixed before the run (R5.5)",
    )


def plan_from(options: dict[str, Any], *, default_name: str | None = None) -> dict[str, Any]:
    plan: dict[str, Any] = {}
    if options.get("plan_file"):
        plan = json_file_read(options["plan_file"], "plan file")
        if not isinstance(plan, dict):
            raise CliError("a plan file must hold a JSON object")
        if plan.keys() >= MANIFEST_ONLY_FIELDS:
            raise CliError(
                f"{options['plan_file']} is a frozen manifest (what `plan --output` writes), "
                "not a plan: a plan file holds the fields of POST /api/v1/plans/review/ "
                "(name, dataset, targets, benchmarks, limits, …); to run the plan you reviewed, "
                "give `run` the same options"
            )
    for key in (
        "name",
        "dataset",
        "targets",
        "benchmarks",
        "failure_policy",
        "non_inferiority_margin",
    ):
        if options.get(key) is not None:
            plan[key] = options[key]
    if options.get("slots") is not None:
        plan["slots"] = options["slots"]
    for key in ("limits", "sampling", "judges", "simulators"):
        if plan.get(key) is not None and not isinstance(plan[key], dict):
            raise CliError(f"plan field {key} must be a JSON object")
    for key, flag in (("judges", "--judge"), ("simulators", "--simulator")):
        if options.get(key):
            chosen = dict(plan.get(key) or {})
            for item in options[key]:
                benchmark, sep, slug = item.partition("=")
                if not sep or not benchmark.strip() or not slug.strip():
                    raise CliError(f"{flag} wants BENCHMARK=SLUG, got “{item}”")
                chosen[benchmark.strip()] = slug.strip()
            plan[key] = chosen
    limits = dict(plan.get("limits") or {})
    for key in ("concurrency", "max_cost_usd", "max_output_tokens"):
        if options.get(key) is not None:
            limits[key] = options[key]
    if limits:
        plan["limits"] = limits
    sampling = dict(plan.get("sampling") or {})
    for key in ("temperature", "seed"):
        if options.get(key) is not None:
            sampling[key] = options[key]
    if sampling:
        plan["sampling"] = sampling
    plan.setdefault("name", default_name or f"cli {time.strftime('%Y-%m-%d %H:%M')}")
    return plan


def _error_lines(detail: Any, prefix: str = "") -> list[str]:
    """A plan's errors as "field: message" items (nested fields joined with a dot), never a
    Python repr of the error document."""
    if isinstance(detail, dict):
        lines = []
        for key, value in detail.items():
            # "_" and "_needless" name no field: their message says what it is about.
            name = prefix if str(key).startswith("_") else f"{prefix}.{key}" if prefix else key
            lines.extend(_error_lines(value, str(name)))
        return lines
    if isinstance(detail, (list, tuple)):
        if all(not isinstance(v, (dict, list, tuple)) for v in detail):
            text = " ".join(str(v) for v in detail)
            return [f"{prefix}: {text}" if prefix else text]
        return [line for v in detail for line in _error_lines(v, prefix)]
    return [f"{prefix}: {detail}" if prefix else str(detail)]


def plan_error_text(response: Any) -> str:
    """An API refusal in words; an invalid plan lists "field: message" for each error."""
    try:
        body = response.json()
    except ValueError:
        return api_error_message(response)
    if isinstance(body, dict) and body.get("code") == "invalid_plan":
        lines = _error_lines(body.get("detail") or {})
        return "the plan is not valid: " + "; ".join(lines) if lines else str(body.get("error"))
    return api_error_message(response)


def emit(options: dict[str, Any], data: Any, human: str) -> None:
    print(json.dumps(data, indent=2, default=str) if options.get("json") else human)


def fmt(value: Any, suffix: str = "") -> str:
    return "unknown" if value is None else f"{value}{suffix}"


# A report's money text with its dollar sign, or "unknown" (never "$unknown", never $0).
usd = usd_text


def spent_text(total: str | None, known: str | None) -> str:
    """A complete amount, or "unknown" with the known part beside it when there is one."""
    if total is not None or known is None:
        return usd(total)
    return f"unknown (known {usd(known)})"


def subject_cost_text(total: str | None, known: str | None) -> str:
    """A target's subject cost and its known part; when no subject call's cost is known it
    says so, never "unknown (known unknown)" (issue 35 item 7)."""
    if known is None:
        return "unknown: no subject call has a known cost"
    return f"{usd(total)} (known {usd(known)})"


def benchmark_score_text(v: dict[str, Any]) -> str:
    """A benchmark row's `correct/planned = accuracy [interval]`; with several attempts per
    question the counts are attempts and the interval's n is said in questions (issue 35
    item 4): `24/36 attempts = 0.667 [0.391, 0.862], n = 12 questions`."""
    interval = v["wilson_95"]
    ci = "" if interval is None else f" [{interval[0]:.3f}, {interval[1]:.3f}]"
    questions = v.get("questions")
    attempts = bool(questions) and questions != v["planned"]
    acc = figure_text(v["accuracy"], ACCURACY_DIGITS)  # the page's digits
    text = f"{v['correct']}/{v['planned']}{' attempts' if attempts else ''} = {acc}{ci}"
    if attempts and interval is not None:
        text += f", n = {questions} question{'' if questions == 1 else 's'}"
    return text


def spend_text(spend: dict[str, Any], answers_of: int | None) -> str:
    """The run's spend line: total, waste, and why a total is unknown or known only at least."""
    unknown = spend["waste_calls_cost_unknown"]
    return (
        f"total spend {spent_text(spend['total_spend_usd'], spend['known_total_spend_usd'])}  "
        f"waste {spent_text(spend['waste_usd'], spend['known_waste_usd'])} on "
        f"{spend['waste_calls']} failed or unknown-outcome calls"
        + (f" ({unknown} of unknown cost)" if unknown else "")
        + (
            f"; at least {usd(spend['known_total_spend_usd'])}: a gateway re-sent "
            f"{spend['gateway_resent_calls']} calls upstream, their earlier attempts' cost "
            "unknown"
            if spend.get("gateway_resent_calls") and spend["total_spend_usd"] is None
            else ""
        )
        + (
            f" — judge calls only: the answers judged are run {answers_of}'s, bought "
            "and counted there"
            if answers_of
            else ""
        )
    )


def report_text(report: dict[str, Any]) -> str:
    r = report["run"]
    counts = report["counts"]
    wall = r["wall_seconds"]
    lines = [
        f"run {r['id']} {r['name']!r}: {r['status']}"
        + (
            ""
            if report["complete"]
            else f" (not a complete evaluation: {'; '.join(report['incomplete_reasons'])})"
        ),
        f"denominator {report['denominator']}  completed {counts['completed']}  "
        f"correct {counts['correct']}  failed {counts['failed']}  "
        f"pending {counts['pending']}"
        + "".join(
            f"  {label} {counts[key]}"
            for key, label in (("cancelled", "cancelled"), ("sent_unknown", "outcome unknown"))
            if counts.get(key)
        )
        # The page's digits (srbench.figures_text); --json keeps the full value.
        + f"  wall {fmt(None if wall is None else figure_text(wall, WALL_SECONDS_DIGITS), 's')}",
    ]
    lines += not_run_lines(report.get("not_run", []))
    spend = report.get("spend")
    if spend is not None:
        lines.append(spend_text(spend, r.get("answers_of")))
    correction = report.get("usage_correction")
    if correction is not None:
        lines.append(
            f"usage correction v{correction['version']} (evidence sha256 "
            f"{correction['evidence_sha256']}): verified {correction['verified']}  "
            f"changed {correction['changed']}  unverifiable {correction['unverifiable']}  "
            f"known cost {usd(correction['old_known_cost_usd'])} → "
            f"{usd(correction['new_known_cost_usd'])}; the figures below are the corrected ones"
        )
    for t in report["targets"]:
        score = t["score"]
        # A subset's score is sr-bench's weights rescaled to its benchmarks (R4.2), not a macro
        # average; the report's own label says the rest.
        label = {"sr-bench": "sr-bench score", "subset": "weighted subset average"}.get(
            score["kind"], "score"
        )
        lines.append(
            f"  {t['slug']} ({t['kind']}): {label} {figure_text(score.get('value'), SCORE_DIGITS)}  "
            f"subject cost {subject_cost_text(t['subject_cost_usd'], t['known_cost_usd'])}  "
            f"judge {usd(t['evaluation_cost_usd'])}  cache-neutral {usd(t['cache_neutral_cost_usd'])}  "
            f"TTFT p50 {fmt(t['ttft_p50_ms'] and round(t['ttft_p50_ms']), 'ms')}"
        )
        for b, v in t["benchmarks"].items():
            lines.append(
                f"    {b:<15} {benchmark_score_text(v)}"
                f"  failed {v['failed']}  pending {v['pending']}"
                + "".join(
                    f"  {label} {v[key]}"
                    for key, label in (
                        ("cancelled", "cancelled"),
                        ("sent_unknown", "outcome unknown"),
                    )
                    if v.get(key)
                )
                # Where the questions came from (datasets.provenance), one tag per line.
                + f"  data: {v.get('provenance') or 'unknown'}"
            )
        tokens = t["tokens"]
        lines.append("    tokens: " + "  ".join(f"{k} {fmt(v)}" for k, v in tokens.items()))
        if t.get("usage_unknown_reason"):  # once per target (issue 39)
            lines.append(f"    usage: {t['usage_unknown_reason']}")
        if t.get("usage_caution"):  # an unchecked gateway answered: its usage may be estimated
            lines.append(f"    usage: {t['usage_caution']}")
        if t.get("empty_answers_note"):
            lines.append(f"    answers: {t['empty_answers_note']}")
        lines += official_lines(t.get("official"))
    lines += report_version_lines(report.get("report_version"))
    return "\n".join(lines)


def report_version_lines(version: dict[str, Any] | None) -> list[str]:
    """Which report this is (issue 38 item 1): the one kept at the run's end, named by its key
    and the usage correction and regrade it reflects, or one computed for this read."""
    if version is None:
        return []
    reflects = "".join(
        f"  {label} v{version[key]}"
        for key, label in (("usage_correction", "usage correction"), ("regrade", "regrade"))
        if version.get(key) is not None
    )
    if not version.get("stored"):
        # No timestamp: a run still going is computed on every read, and two reads of the same
        # ledger must print the same text (the remote and in-process CLIs are compared).
        return [f"report computed for this read (the run has not ended){reflects}"]
    return [
        f"report kept {version['computed_at']} (key {version['key'][:12]}, code "
        f"{version['code']}){reflects}"
    ]


def official_lines(section: dict[str, Any] | None) -> list[str]:
    """A target's official scorers (issue 35 item 4), under their own heading: each
    benchmark's own metric with its n and interval, or unknown with why — never folded into
    the sr-bench score above them."""
    metrics = official_metrics(section)
    if not metrics:
        return []
    return [
        "    official scorers (each benchmark's own metric, not part of the sr-bench score):"
    ] + [f"      {metric_text(m)}" for m in metrics]


def _plan(options: dict[str, Any]) -> int:
    client = client_from(options)
    response = client.request("POST", "plans/review/", json=plan_from(options))
    if response.status_code != 200:
        raise CliError(plan_error_text(response))
    summary = response.json()
    if options.get("output"):
        text_file_write(options["output"], json.dumps(summary["manifest"], indent=2), "manifest")
    emit(
        options,
        summary,
        f"plan {summary['plan_sha256']}\n"
        f"cells {summary['cells']}: "
        + ", ".join(f"{b} {n}" for b, n in summary["cases_per_benchmark"].items())
        + f"\ntargets: {', '.join(t['slug'] for t in summary['targets'])}\n"
        + "".join(f"{line}\n" for line in parity_lines(summary["manifest"]))
        + "".join(f"{line}\n" for line in not_run_lines(summary["manifest"].get("not_run", [])))
        + "".join(
            f"warning: {w['target']}: {w['warning']}\n"
            for w in summary.get("preflight_warnings", [])
        )
        + "no model was called (model_requests: 0)",
    )
    return 0


def parity_lines(manifest: dict[str, Any]) -> list[str]:
    """What a comparison of this run can claim, said before anything is spent (R5.5): a
    non-inferiority verdict needs a margin frozen in the plan and holdout cases. None for a
    routing preview, which answers nothing and is never compared."""
    if manifest.get("mode") == "preview":
        return []
    ds = manifest.get("dataset") or {}
    split = ds.get("split") or "unknown"
    where = f"split {split} ({ds.get('profile') or 'unknown'} profile, seed {ds.get('seed')})"
    margin = manifest.get("non_inferiority_margin")
    if margin is not None and split == "holdout":
        return [f"{where}; non-inferiority margin {margin} frozen in this plan"]
    missing = []
    if margin is None:
        missing.append("no non-inferiority margin is frozen (--non-inferiority-margin)")
    if split != "holdout":
        missing.append("the cases are not the holdout split")
    return [
        f"{where}; {' and '.join(missing)}: a comparison of this run can say better, worse "
        "or inconclusive, never non-inferior (R5.5)"
    ]


def not_run_lines(not_run: list[dict[str, Any]]) -> list[str]:
    """What the plan leaves out of the suite, one line per benchmark and reason (the plan
    review and the report say the same)."""
    return [
        f"not run here: {e['questions']} {e['benchmark']} question(s) — {not_run_reason(e)} "
        "(left out of the plan; not counted as failed or wrong)"
        for e in not_run
    ]


def _run(options: dict[str, Any]) -> int:
    client = client_from(options)
    given = options.get("idempotency_key")
    key = given or f"cli-{uuid.uuid4()}"
    # Repeating a command with its key must send the same plan: a default name from the clock
    # would differ a minute later, so with a given key the default name is the key's, and the
    # resume hint of a generated key names the clock's.
    default_name = f"cli {given}" if given else f"cli {time.strftime('%Y-%m-%d %H:%M')}"
    plan = plan_from(options, default_name=default_name)
    again = f"repeat this command with --idempotency-key {key}"
    if not given and plan["name"] == default_name:
        again += f" --name {shlex.quote(default_name)}"
    try:
        response = client.request("POST", "runs/", json=plan, headers={"Idempotency-Key": key})
    except ApiUnreachable as exc:
        raise ApiUnreachable(
            f"{exc}. The run may or may not have been created: {again} "
            "(it returns that run, never a second one)"
        ) from exc
    if response.status_code not in (200, 201):
        raise CliError(plan_error_text(response))
    run = response.json()
    replayed = response.headers.get("Idempotent-Replayed") == "true"
    print(
        f"run {run['id']} {'already existed for this idempotency key' if replayed else 'created'}"
        f" (idempotency key {key})",
        file=sys.stderr,
    )
    if options.get("detach"):
        emit(options, run, f"run {run['id']}: {run['status']}")
        return 0
    last: list[tuple[int, int]] = []

    def seen(run: dict[str, Any]) -> None:
        progress = (run["progress"]["completed"], run["progress"]["denominator"])
        if progress not in last[-1:] and not options.get("json"):
            print(f"  {run['status']}: {progress[0]}/{progress[1]} completed", file=sys.stderr)
            last.append(progress)

    try:
        # Pushed by the server's events long poll, else polled (runs.interfaces.follow).
        run = run_followed(
            client,
            run,
            poll=options.get("poll") or 1.0,
            seen=seen,
            say=lambda line: print(line, file=sys.stderr),
        )
        report = client.json("GET", f"runs/{run['id']}/report/")
    except ApiUnreachable as exc:
        # The run is the server's: it goes on without this follower.
        raise ApiUnreachable(
            f"{exc}. Run {run['id']} goes on without this command: follow it with "
            f"`srbench show {run['id']}` and `srbench report {run['id']}`, or {again}"
        ) from exc
    emit(options, report, report_text(report))
    return 0 if report["run"]["status"] == "completed" else 1


def _runs(options: dict[str, Any]) -> int:
    client = client_from(options)
    params = {
        k: options[k] for k in ("name", "model", "status", "mode", "profile") if options.get(k)
    }
    params["limit"] = options.get("limit") or 25
    data = client.json("GET", "runs/", params=params)
    rows = [
        f"{r['id']:>6}  {r['status']:<11} {r['mode']:<7} {r['profile'] or '-':<8} "
        f"{r['progress']['completed']}/{r['progress']['denominator']:<6} failed {r['progress']['failed']:<4} "
        f"{'/'.join(r['target_types'])}  {r['name']}"
        for r in data["results"]
    ]
    emit(options, data, "\n".join(rows) or "no runs")
    return 0


def call_cost_text(call: dict[str, Any]) -> str:
    """A call's cost as the report counts it (the API's ``effective_cost_usd``) and, when that is
    not the recorded one, why, with the recorded one beside it."""
    text = f"cost {usd(call['effective_cost_usd'])}"
    if call["effective_cost_note"]:
        text += (
            f" (as the report counts it: {call['effective_cost_note']}; "
            f"recorded {usd(call['cost_usd'])})"
        )
    return text


def _show(options: dict[str, Any]) -> int:
    client = client_from(options)
    run_id = options["run_id"]
    params: dict[str, Any] = {}
    if options.get("after") is not None:
        params["after"] = options["after"]
    if options.get("limit") is not None:
        params["limit"] = options["limit"]
    if options.get("calls"):
        if options.get("active"):
            params["active"] = "true"
        data = client.json("GET", f"runs/{run_id}/calls/", params=params)
        rows = [
            f"{c['id']:>8} cell {c['cell']:<7} {c['role']:<9} {c['status']:<12} {c['live']['stage']:<9} "
            f"{c['live']['elapsed_seconds']:.1f}s  {c['live']['bytes_received']} B  "
            f"last activity {c['live']['last_activity_at'] or 'none'}  {call_cost_text(c)}"
            for c in data["results"]
        ]
        tail = f"\nnext: --after {data['next_after']}" if data["results"] else ""
        emit(options, data, ("\n".join(rows) or "no calls") + tail)
    elif options.get("events"):
        data = client.json("GET", f"runs/{run_id}/events/", params=params)
        rows = [
            f"{e['seq']:>6} {e['created_at']} {e['type']:<22} {json.dumps(e['payload'])}"
            for e in data["results"]
        ]
        emit(options, data, ("\n".join(rows) or "no events") + f"\n{data['loaded']} loaded")
    elif options.get("results"):
        data = client.json("GET", f"runs/{run_id}/results/", params=params)
        rows = [
            f"{c['id']:>8} {c['benchmark']:<15} {c['target']:<14} {c['status']:<12} "
            f"correct {fmt(c['correct'])}  {c['question_native_id']}"
            for c in data["results"]
        ]
        emit(options, data, "\n".join(rows) or "no results")
    else:
        run = client.json("GET", f"runs/{run_id}/")
        emit(
            options,
            run,
            f"run {run['id']} {run['name']!r}: {run['status']}  "
            f"{run['progress']['completed']}/{run['progress']['denominator']} completed, "
            f"{run['progress']['failed']} failed, elapsed {fmt(run['elapsed_seconds'], 's')}",
        )
    return 0


def _report(options: dict[str, Any]) -> int:
    report = client_from(options).json("GET", f"runs/{options['run_id']}/report/")
    emit(options, report, report_text(report))
    return 0


def _cancel(options: dict[str, Any]) -> int:
    data = client_from(options).json("POST", f"runs/{options['run_id']}/cancel/")
    emit(
        options,
        data,
        f"run {data['id']}: {'cancel requested' if data['cancel_requested'] else 'nothing to cancel'} "
        f"(status {data['status']})",
    )
    return 0


def preflight_text(preflight: dict[str, Any]) -> str:
    """A preflight's findings in words, each with what it will do to a run."""
    lines = [
        f"preflight {preflight['id']} of {preflight['target']}: {preflight['status']}, "
        f"{len(preflight['calls'])} call(s), cost {usd(preflight['cost_usd'])}"
        + (
            ""
            if preflight["cost_usd"] is not None
            else f" (known {usd(preflight['known_cost_usd'])})"
        )
    ]
    for f in preflight["findings"]:
        lines.append(f"  [{f['verdict']}] {f['key']}: {f['observed']}\n      → {f['effect']}")
    if preflight.get("error"):
        lines.append(f"  stopped: {preflight['error']}")
    return "\n".join(lines)


def _targets_check(options: dict[str, Any]) -> int:
    """`targets check SLUG` (issue 39): the quote first, then — confirmed — the preflight."""
    slug = options.get("slug")
    if not slug:
        raise CliError("targets check needs a target SLUG")
    client = client_from(options)
    quote = client.json("GET", f"targets/{slug}/preflight/")["quote"]
    print(
        f"preflight of {slug}: {quote['words']}",
        file=sys.stderr if options.get("json") else sys.stdout,
    )
    if not options.get("yes"):
        if not sys.stdin.isatty():
            raise CliError("nothing was sent: add --yes to send the preflight's calls")
        if input("send them? [y/N] ").strip().lower() not in ("y", "yes"):
            raise CliError("nothing was sent")
    body = {"confirm_worst_case_usd": quote["worst_case_usd"]}
    if options.get("context_probe_tokens"):
        body["context_probe_tokens"] = options["context_probe_tokens"]
    preflight = client.json(
        "POST",
        f"targets/{slug}/preflight/",
        json=body,
        headers={"Idempotency-Key": uuid.uuid4().hex},
    )
    emit(options, preflight, preflight_text(preflight))
    return 0 if preflight["status"] == "completed" else 1


def _targets(options: dict[str, Any]) -> int:
    if options.get("action") == "check":
        return _targets_check(options)
    data = client_from(options).json("GET", "targets/")
    rows = [f"{t['slug']:<20} {t['kind']:<7} {t['model']:<20} {t['base_url']}" for t in data]
    emit(options, data, "\n".join(rows) or "no targets")
    return 0


def register(verbs: Any) -> None:
    p = verbs.add_parser("plan", help="review a frozen plan (no model call)")
    _plan_arguments(p)
    p.add_argument(
        "--output",
        help="write the frozen manifest here (a record of the review; to run the plan, give "
        "`run` the same options)",
    )
    add_connection_arguments(p)
    p.set_defaults(handler=cli_guard(_plan))

    p = verbs.add_parser(
        "run",
        help="start a run (and wait for its report unless --detach)",
        description="Start a run and follow it to its report. Over --url, reads and the "
        "create request (it carries an idempotency key) are retried with backoff while the "
        "web process restarts (SRBENCH_RETRY_SECONDS, default 60). Exit codes: 0 completed, "
        "1 ended without completing, 2 refused or failed, 3 the API stayed unreachable (the "
        "run goes on; the error line says how to resume).",
    )
    _plan_arguments(p)
    p.add_argument("--idempotency-key", help="reuse to make a retried submission safe")
    p.add_argument("--detach", action="store_true")
    p.add_argument("--poll", type=float, default=1.0)
    add_connection_arguments(p)
    p.set_defaults(handler=cli_guard(_run))

    p = verbs.add_parser("runs", help="list runs")
    for name in ("name", "model", "status", "mode", "profile"):
        p.add_argument(f"--{name}")
    p.add_argument("--limit", type=int)
    add_connection_arguments(p)
    p.set_defaults(handler=cli_guard(_runs))

    p = verbs.add_parser("show", help="a run, its results, calls (--active) or events")
    p.add_argument("run_id", type=int)
    group = p.add_mutually_exclusive_group()
    group.add_argument("--results", action="store_true")
    group.add_argument("--calls", action="store_true")
    group.add_argument("--events", action="store_true")
    p.add_argument("--active", action="store_true", help="with --calls: only calls in flight")
    p.add_argument("--after", type=int)
    p.add_argument("--limit", type=int)
    add_connection_arguments(p)
    p.set_defaults(handler=cli_guard(_show))

    p = verbs.add_parser("report", help="the run report")
    p.add_argument("run_id", type=int)
    add_connection_arguments(p)
    p.set_defaults(handler=cli_guard(_report))

    p = verbs.add_parser("cancel", help="stop new dispatch of a run")
    p.add_argument("run_id", type=int)
    add_connection_arguments(p)
    p.set_defaults(handler=cli_guard(_cancel))

    p = verbs.add_parser(
        "targets",
        help="registered targets; `targets check SLUG` runs a preflight",
        description="List the registered targets, or `targets check SLUG`: a preflight of the "
        "target (a handful of tiny calls, their worst case quoted first) that finds its quirks "
        "and says what each will do to a run (issue 39).",
    )
    p.add_argument("action", nargs="?", choices=["check"])
    p.add_argument("slug", nargs="?")
    p.add_argument("--yes", action="store_true", help="send the preflight's calls unasked")
    p.add_argument("--context-probe-tokens", type=int, dest="context_probe_tokens")
    add_connection_arguments(p)
    p.set_defaults(handler=cli_guard(_targets))
