"""What a member may see of a cell and of a call: the one rule (R9.3, issue 19).

Every surface that shows a cell's grade or error, a call's content or a run event to a member
reads it from here: the run pages (questions, question result, calls, call, evidence), the REST
API (results, calls, call, events; the CLI's `show` prints what the API answers) and the
exports. So the pages and the API cannot disagree on what is secret.

Never shown:

- **reference answers** and what may quote them: a judge call's request *and* its reply
  (content, reasoning, tool calls), and the judge reply a "malformed judge verdict" error quotes;
- **hidden tests**: LiveCodeBench and SciCode grades keep per-test statuses by index only;
  Terminal-Bench's verifier output (its tests' own assertions, paths and expected values) is
  dropped, its exit code, reason and reward are kept;
- **τ³ criteria**: natural-language assertion texts (also the keys of the judge's verdicts),
  the expected values of required outputs, gold action ids and their replay errors, the gold
  database hash (and the final one, which equals it when they match);
- **deployment details**: host paths in a grader's set-up error. Credentials never reach a
  cell or call (target keys live in ``TargetSecret``; request bodies carry no headers).

Grades pass through an allow-list per grader, so a field a grader adds later stays hidden until
it is named here. Members get their verdict and its reasons in words that count what was missed
without naming it ("2 of 5 expected actions missing"). Shown as stored: a cell's status,
correct, scored and the subject's own final answer (all the answer-matrix export reads).

A call's cost is shown twice, both labelled: as the ledger recorded it (``cost_usd``,
``cache_neutral_cost_usd``, ``cost_note``: the evidence, never rewritten) and as every report
counts it (``effective_*``, `with_effective_costs`: after a usage correction, or a known $0 for
an HTTP error its target does not bill), so a call has one cost on every surface. Likewise its
token buckets: recorded (``input_tokens`` …) and as the report counts them
(``effective_input_tokens`` …: a usage correction's).
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from runs.engine.sandbox_pythons import PYTHON_START_REFUSED
from runs.reporting.effective import call_effective_costs

__all__ = [
    "EFFECTIVE_COST_FIELDS",
    "EFFECTIVE_TOKEN_FIELDS",
    "JUDGE_WITHHELD",
    "call_usage_rows",
    "grade_reasons",
    "public_call_content",
    "public_cell",
    "public_cell_error",
    "public_event_payload",
    "public_grade",
    "public_headers",
    "public_transcript",
    "with_effective_costs",
]

JUDGE_WITHHELD = (
    "a judge's request contains the reference answer and its reply may quote it; neither is shown"
)
MALFORMED_VERDICT = (
    "malformed judge verdict (the judge's reply is withheld: it may quote the reference answer)"
)
SCICODE_DATA_MISSING = (
    "SciCode's test data (test_data.h5) is not configured on this server: the case cannot be graded"
)
# A value a grader writes from a fixed vocabulary (status, verdict, version, model name, hash).
# Anything longer or freer (prose, test output, a quoted answer) is not shown.
_TOKEN = re.compile(r"[\w .:/@+-]{0,100}")
_HOST_PATH = re.compile(r"(?<![\w:/])/(?:[^\s/'\"]+/)*[^\s/'\"]+")
HEADER_PREFIXES = ("x-", "openai-", "anthropic-", "retry-", "content-type", "date")
HEADER_NAMES = ("server", "via")


# --- values ------------------------------------------------------------------------------------


def _token(value: Any) -> Any:
    """A scalar as stored when it is a number, a boolean or a short token; else None."""
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str) and _TOKEN.fullmatch(value):
        return value
    return None


def _count(value: Any) -> int | None:
    """How many items a hidden list has (the list itself is not shown)."""
    if isinstance(value, list | tuple | dict):
        return len(value)
    return None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _pick(source: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: _token(source[k]) for k in keys if k in source}


def _inner(grade: Mapping[str, Any]) -> Mapping[str, Any]:
    inner = grade.get("detail")
    return inner if isinstance(inner, Mapping) else {}


# --- grades ------------------------------------------------------------------------------------

_FLAT_KEYS: dict[str, tuple[str, ...]] = {
    "mcq": ("grader", "version", "correct", "extracted", "status", "strict_format"),
    "grid": ("grader", "status", "pairs_correct", "pairs_total"),
    "judge": ("grader", "verdict"),
    "truncated": ("grader", "finish_reason"),
    "livecodebench": ("grader", "version", "status", "correct", "tests_total", "tests_passed"),
    "scicode": ("grader", "version", "status", "correct", "steps_total", "steps_passed"),
}
# Per-test (per-step) rows of the code graders: index and outcome, never the test itself.
_ROWS: dict[str, tuple[str, tuple[str, ...]]] = {
    "livecodebench": ("tests", ("index", "status", "wall_s")),
    "scicode": ("steps", ("index", "step_number", "status", "wall_s")),
}
_PREVIEW_KEYS = ("selected_model", "decision", "selection_status", "config_hash")


def _terminal_bench(grade: Mapping[str, Any]) -> dict[str, Any]:
    inner = _inner(grade)
    reward = inner.get("reward")
    return {
        "grader": "terminal-bench",
        "version": _token(inner.get("version")),
        "reward": _token(grade.get("reward")),
        "steps": _int(grade.get("steps")),
        "commands_run": _int(inner.get("commands_run")),
        "verifier_reason": _token(inner.get("verifier_reason")),
        "verifier_exit_code": _int(inner.get("verifier_exit_code")),
        "reward_source": _token(inner.get("reward_source")),
        "verifier_reward": reward if isinstance(reward, int | float) else None,
        "agent_stopped": _token(grade.get("agent_stopped")),
        "agent_timeout_s": _token(grade.get("agent_timeout_s")),
    }


def _tau3(grade: Mapping[str, Any]) -> dict[str, Any]:
    inner = _inner(grade)
    pending = inner.get("not_evaluated")
    pending = pending if isinstance(pending, Mapping) else {}
    verdicts = grade.get("nl_verdicts")
    judged = len(verdicts) if isinstance(verdicts, Mapping) else 0
    satisfied = sum(1 for v in verdicts.values() if v is True) if judged else None
    left = _count(pending.get("NL_ASSERTION"))
    components = inner.get("components")
    return {
        "grader": "tau3",
        "version": _token(inner.get("version")),
        "domain": _token(inner.get("domain")),
        "termination": _token(grade.get("termination", inner.get("termination"))),
        "reward": _token(grade.get("reward")),
        "complete": _token(grade.get("complete")),
        "reward_basis": [_token(c) for c in inner.get("reward_basis") or []],
        "components": {
            str(_token(k)): v if isinstance(v, bool) or v == "not evaluated" else None
            for k, v in (components.items() if isinstance(components, Mapping) else ())
        },
        "db_match": _token(grade.get("db_match")),
        "outputs_ok": _token(grade.get("outputs_ok")),
        "expected_actions_missing": _count(inner.get("unmatched_actions")),
        "expected_actions_total": _int(inner.get("actions_total")),
        "required_outputs_missing": _count(inner.get("missing_info")),
        "required_outputs_total": _int(inner.get("info_total")),
        "nl_assertions_judged": judged,
        "nl_assertions_satisfied": satisfied,
        # The judge's verdicts settle the assertions the grader left (the list stays stored).
        "nl_assertions_unjudged": max(0, (left or 0) - judged),
        "env_assertions_unevaluated": _count(pending.get("ENV_ASSERTION")) or 0,
        "expected_actions_not_replayable": _count(inner.get("gold_action_errors")) or 0,
        "tool_calls": _int(inner.get("tool_calls")),
        "tool_errors": _int(inner.get("tool_errors")),
        # Issue 37 item 2: the agent-turn limit, and the package's own evaluator beside ours.
        "capped": grade.get("capped") is True,
        "agent_turns": _int(grade.get("agent_turns")),
        "max_turns": _int(grade.get("max_turns")),
        "graded_by": _token(grade.get("graded_by")),
        "official": _tau_official(grade.get("official")),
    }


def _tau_official(official: Any) -> dict[str, Any] | None:
    """The official τ² grade's verdict (its trajectory stays hidden)."""
    if not isinstance(official, Mapping):
        return None
    shown = _pick(official, ("grader", "status", "reward", "termination", "db_match"))
    shown["package"] = str(official.get("package") or "")[:60] or None
    return shown


def public_grade(grade: Any) -> dict[str, Any] | None:
    """A cell's grade as a member sees it: per grader, only the fields named here."""
    if not isinstance(grade, Mapping):
        return None
    preview = grade.get("preview")
    if isinstance(preview, Mapping):
        routing = _pick(preview, _PREVIEW_KEYS)
        if "config_hash_matches" in preview:
            routing["config_hash_matches"] = _token(preview["config_hash_matches"])
        return {"preview": routing}
    grader = grade.get("grader")
    if grader == "terminal-bench":
        return _terminal_bench(grade)
    if grader == "tau3":
        return _tau3(grade)
    if grader in _FLAT_KEYS:
        shown = _pick(grade, _FLAT_KEYS[grader])
        if grader in _ROWS:
            key, fields = _ROWS[grader]
            rows = grade.get(key)
            shown[key] = [_pick(row, fields) for row in rows or [] if isinstance(row, Mapping)]
        official = grade.get("official")
        if grader == "judge" and isinstance(official, Mapping):
            # The official judge's outcome (issue 22 point 5); its reason may quote the judge's
            # reply, which may quote the reference answer: withheld.
            shown["official"] = _pick(
                official, ("scorer", "status", "verdict", "correct", "confidence")
            )
        return shown
    # A grader this module does not know: its verdict only.
    return {"grader": _token(grader), "status": _token(grade.get("status"))}


def _n(count: int, one: str, many: str | None = None) -> str:
    return f"{count} {one if count == 1 else (many or one + 's')}"


def _of(missing: int, total: int | None, one: str, many: str | None = None) -> str:
    if total is None:
        return _n(missing, one, many)
    return f"{missing} of {_n(total, one, many)}"


def _tau3_reasons(g: Mapping[str, Any]) -> list[str]:
    words: list[str] = []
    termination = g.get("termination")
    official = g.get("official") or {}
    if official.get("reward") is not None:
        words.append(
            f"the official τ² evaluator ({official.get('package')}) gives {official['reward']:g}"
        )
    if g.get("capped"):
        words.append(
            f"capped: the agent-turn limit of {g.get('max_turns')} was reached (reward 0 by the "
            "official rule)"
        )
    elif termination not in (None, "user_stop", "agent_stop"):
        words.append(f"the episode ended by {termination}, not by the user or the agent")
    basis = g.get("reward_basis") or []
    if g.get("db_match") is True:
        words.append("the final database matches the expected state")
    elif g.get("db_match") is False:
        words.append("the final database differs from the expected state")
    missing = g.get("expected_actions_missing")
    if missing:
        words.append(_of(missing, g.get("expected_actions_total"), "expected action") + " missing")
    elif missing == 0 and "ACTION" in basis:
        words.append("every expected action was taken")
    missing = g.get("required_outputs_missing")
    if missing:
        words.append(
            _of(missing, g.get("required_outputs_total"), "required output") + " not communicated"
        )
    elif missing == 0 and "COMMUNICATE" in basis:
        words.append("every required output was communicated")
    if g.get("nl_assertions_judged"):
        words.append(
            f"{g.get('nl_assertions_satisfied')} of "
            f"{_n(g['nl_assertions_judged'], 'natural-language assertion')} judged satisfied"
        )
    if g.get("nl_assertions_unjudged"):
        words.append(
            _n(g["nl_assertions_unjudged"], "natural-language assertion")
            + " left to the judge (not scored)"
        )
    if g.get("env_assertions_unevaluated"):
        words.append(
            _n(g["env_assertions_unevaluated"], "environment assertion") + " not evaluated"
        )
    if g.get("expected_actions_not_replayable"):
        words.append(
            _n(g["expected_actions_not_replayable"], "expected action")
            + " could not be replayed (a problem of the task's data)"
        )
    return words


def _terminal_reasons(public: Mapping[str, Any]) -> list[str]:
    passed = public.get("reward") == 1
    words = ["the task's tests passed" if passed else "the task's tests did not pass"]
    if public.get("verifier_reason") == "disk_quota_exceeded":
        words.append("the session went past its disk budget: disk quota exceeded")
    elif public.get("verifier_reason") == "startup_module_planted":
        words.append(
            "not verified: the agent left a module the test script's Python would import "
            "at start-up (e.g. encodings, sitecustomize)"
        )
    elif public.get("verifier_reason") == PYTHON_START_REFUSED:
        words.append(
            "not verified: the test script started a Python the verifier cannot guard (from a "
            "virtualenv made in the sandbox, or under a name in a writable place)"
        )
    elif public.get("verifier_reason") not in (None, "ok"):
        words.append(f"the verifier stopped: {public['verifier_reason']}")
    if public.get("reward_source") == "missing":
        words.append("the verifier wrote no reward")
    if public.get("agent_stopped") == "agent_timeout":
        limit = public.get("agent_timeout_s")
        words.append(
            "the agent was stopped at the task's agent timeout"
            + (f" ({limit:g} s)" if isinstance(limit, int | float) else "")
        )
    return words


def grade_reasons(public: Mapping[str, Any] | None) -> list[str]:
    """The verdict's reasons in words, from the public grade only (so they cannot say more)."""
    if not public:
        return []
    if "preview" in public:
        p = public["preview"]
        return [
            f"the router chose {p.get('selected_model') or 'an unknown model'}"
            f" ({p.get('decision') or 'unknown decision'})"
        ]
    grader, status = public.get("grader"), public.get("status")
    if grader == "mcq":
        if status == "ok":
            return [f"the answer was read as {public.get('extracted')}"]
        if status == "ambiguous":
            return ["the answer names several different options (ambiguous, graded wrong)"]
        return ["no answer letter was found (unparsed, graded wrong)"]
    if grader == "grid":
        if status == "ok":
            return [f"{public.get('pairs_correct')} of {public.get('pairs_total')} grids correct"]
        if status == "wrong_count":
            return [f"the answer has the wrong number of grids ({public.get('pairs_total')} asked)"]
        return ["no grid could be read from the answer"]
    if grader == "judge":
        return [f"judge verdict: {str(public.get('verdict')).replace('_', ' ')}"]
    if grader == "truncated":
        return ["the answer was cut off at the output limit (graded wrong)"]
    if grader == "livecodebench":
        if status == "unparsed":
            return ["no Python code block was found in the answer"]
        if status == "compile_error":
            return ["the program does not compile"]
        words = [f"{public.get('tests_passed')} of {public.get('tests_total')} hidden tests passed"]
        failed = [t["status"] for t in public.get("tests") or [] if t.get("status") != "passed"]
        if failed and failed[0] != "not_run":
            words.append(f"first failure: {str(failed[0]).replace('_', ' ')}")
        return words
    if grader == "scicode":
        words = [f"{public.get('steps_passed')} of {public.get('steps_total')} sub-steps passed"]
        for outcome in (
            "failed",
            "exited_early",
            "untestable",
            "timeout",
            "unparsed",
            "memory",
            "disk_quota_exceeded",
        ):
            n = sum(1 for s in public.get("steps") or [] if s.get("status") == outcome)
            if n:
                words.append(f"{_n(n, 'sub-step')} {outcome.replace('_', ' ')}")
        return words
    if grader == "terminal-bench":
        return _terminal_reasons(public)
    if grader == "tau3":
        return _tau3_reasons(public)
    return ["the details of this grader are not shown"]


# --- cells -------------------------------------------------------------------------------------


def public_cell_error(error: str) -> str:
    """A cell's error as a member sees it: no quoted judge reply, no host path."""
    if not error:
        return error
    if error.startswith("malformed judge verdict"):
        return MALFORMED_VERDICT
    if "test_data.h5 not found" in error:
        return SCICODE_DATA_MISSING
    if error.startswith("task set-up failed"):
        return _HOST_PATH.sub("<path>", error)
    return error


def public_cell(cell: Any) -> dict[str, Any]:
    """The parts of a cell that need the rule: its grade, the reasons in words, its error."""
    grade = public_grade(cell.grade)
    return {"grade": grade, "reasons": grade_reasons(grade), "error": public_cell_error(cell.error)}


def public_event_payload(event_type: str, payload: Any) -> Any:
    """A run event's payload: a failed cell's error passes the cell rule."""
    if (
        event_type.startswith("cell.")
        and isinstance(payload, Mapping)
        and isinstance(payload.get("error"), str)
    ):
        return {**payload, "error": public_cell_error(payload["error"])}
    return payload


# --- calls -------------------------------------------------------------------------------------


def public_headers(headers: Any) -> dict[str, Any]:
    """Response headers of interest: routing, receipts, rate limits, request ids."""
    if not isinstance(headers, Mapping):
        return {}
    return {
        k: v
        for k, v in headers.items()
        if k.lower().startswith(HEADER_PREFIXES) or k.lower() in HEADER_NAMES
    }


def public_call_content(call: Any) -> dict[str, Any]:
    """A call's request and reply as a member sees them. A judge call shows neither: its request
    holds the reference answer and its reply may quote it; the verdict the grader read is in the
    cell's public grade. Withheld parts are None (not shown), not empty."""
    withheld = JUDGE_WITHHELD if call.role == "judge" else None
    request = None if withheld else dict(call.request or {})
    return {
        "withheld": withheld,
        "request": request,
        "request_messages": None if request is None else request.get("messages"),
        "request_params": None
        if request is None
        else {k: v for k, v in request.items() if k != "messages"},
        "content": None if withheld else call.content,
        "reasoning": None if withheld else call.reasoning,
        "tool_calls": None if withheld else call.tool_calls,
        "response_headers": public_headers(call.response_headers),
    }


# The attributes `with_effective_costs` sets on each call, in `CallEffectiveCost`'s order:
# the costs and their note, then the four token buckets (beside the recorded ``*_tokens``).
EFFECTIVE_COST_FIELDS = (
    "effective_cost_usd",
    "effective_cache_neutral_cost_usd",
    "effective_cost_note",
)
EFFECTIVE_TOKEN_FIELDS = (
    "effective_input_tokens",
    "effective_cached_input_tokens",
    "effective_cache_write_tokens",
    "effective_output_tokens",
)


def with_effective_costs(calls: Sequence[Any], *, run_id: int) -> None:
    """The calls of a run, each given the costs and tokens the report counts for it
    (`runs.reporting.effective.call_effective_costs`, the report's own rule) as
    :data:`EFFECTIVE_COST_FIELDS` and :data:`EFFECTIVE_TOKEN_FIELDS`, beside its recorded
    ``cost_usd`` and ``*_tokens``: every per-call view (Calls tab, call page, question page,
    the API's calls and call, so ``show --calls``) reads them."""
    costs = call_effective_costs(run_id=run_id, call_ids=[c.pk for c in calls])
    names = (*EFFECTIVE_COST_FIELDS, *EFFECTIVE_TOKEN_FIELDS)
    for call in calls:
        for name, value in zip(names, costs[call.pk], strict=True):
            setattr(call, name, value)


_BUCKET_LABELS = (
    ("uncached input", "input_tokens", None),
    ("cache-read input", "cached_input_tokens", "cached_reported"),
    ("cache-write input", "cache_write_tokens", "cache_write_reported"),
    ("output", "output_tokens", None),
)


def call_usage_rows(call: Any) -> list[tuple[str, int | None, int | None, bool]]:
    """A call's four buckets for its page, after `with_effective_costs`: (label, recorded as
    shown — a cache bucket the server did not report is unknown, not 0 —, as the report counts
    it, whether the two differ: a usage correction changed it)."""
    rows = []
    for label, bucket, reported in _BUCKET_LABELS:
        recorded = getattr(call, bucket)
        counted = getattr(call, f"effective_{bucket}")
        shown = None if reported and getattr(call, reported) is False else recorded
        rows.append((label, shown, counted, counted != recorded))
    return rows


# --- agent episodes ----------------------------------------------------------------------------


def _tool_calls_of(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """An assistant message's tool calls as (id, name, arguments), in the OpenAI shape the
    engine sends back (``runs.engine.tau.assistant_message``) or as a call stores them."""
    out = []
    for call in message.get("tool_calls") or []:
        if not isinstance(call, Mapping):
            continue
        named = call.get("function")
        function: Mapping[str, Any] = named if isinstance(named, Mapping) else call
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            with contextlib.suppress(ValueError):  # else shown as the agent wrote it
                arguments = json.loads(arguments)
        command = arguments.get("command") if isinstance(arguments, Mapping) else None
        out.append(
            {
                "id": call.get("id"),
                "name": function.get("name"),
                "arguments": arguments,
                # A terminal tool's command (Terminal-Bench), shown as a shell line.
                "command": command if isinstance(command, str) else None,
            }
        )
    return out


def _transcript_turn(message: Mapping[str, Any], tool_names: dict[Any, Any]) -> dict[str, Any]:
    """One message of an episode as a transcript turn: who spoke, what was said or called."""
    role = message.get("role")
    text = message.get("content")
    if role == "tool":
        name = tool_names.get(message.get("tool_call_id"))
        return {"kind": "tool_result", "name": name, "text": text}
    if role == "assistant":
        calls = _tool_calls_of(message)
        for call in calls:
            tool_names[call["id"]] = call["name"]
        return {"kind": "agent", "text": text, "tool_calls": calls}
    return {"kind": role if role in ("system", "user") else "other", "text": text}


def public_transcript(calls: list[Any], last_subject: Any | None) -> list[dict[str, Any]]:
    """The public part of every turn of an agent episode (τ³, Terminal-Bench), in order.

    `calls` are the cell's calls in id order (content and tool calls read, requests not);
    `last_subject` is its last subject call with its request. Each subject request carries the
    whole conversation so far (system prompt, task, agent turns with their tool calls, tool
    results, the simulated user's turns), so the last one read through `public_call_content`
    plus its own reply is the episode; the simulated user's turns after it come from the
    simulator calls' replies. A simulator's request (the user's scenario) is never shown, and
    a judge call is named with its verdict withheld, as on the call page (R9.3).
    """
    turns: list[dict[str, Any]] = []
    tool_names: dict[Any, Any] = {}
    if last_subject is not None:
        shown = public_call_content(last_subject)
        for message in shown["request_messages"] or []:
            if isinstance(message, Mapping):
                turns.append(_transcript_turn(message, tool_names))
        reply = {"role": "assistant", "content": shown["content"], "tool_calls": []}
        reply["tool_calls"] = shown["tool_calls"] or []
        turns.append({**_transcript_turn(reply, tool_names), "call": last_subject.pk})
        turns[-1]["status"] = last_subject.status
    _calls_attribute(turns, calls)
    after = last_subject.pk if last_subject is not None else 0
    for call in calls:
        if call.role == "simulator" and call.pk > after:
            turn = {"kind": "user", "text": call.content, "simulated": True}
            turns.append({**turn, "call": call.pk, "status": call.status})
        elif call.role == "judge":
            turns.append({"kind": "judge", "text": JUDGE_WITHHELD, "call": call.pk})
    return turns


def _calls_attribute(turns: list[dict[str, Any]], calls: list[Any]) -> None:
    """Name the call behind each agent turn and each simulated user's turn, in order: the
    k-th agent turn is the k-th subject call's reply; the user's turns after the task's
    opening message are the simulator calls' replies."""
    subject = iter(c for c in calls if c.role == "subject")
    simulator = iter(c for c in calls if c.role == "simulator")
    users = 0
    for turn in turns:
        if turn["kind"] == "agent" and "call" not in turn:
            call = next(subject, None)
            if call is not None:
                turn.update(call=call.pk, status=call.status)
        elif turn["kind"] == "user":
            users += 1
            call = next(simulator, None) if users > 1 else None
            if call is not None:
                turn.update(call=call.pk, status=call.status, simulated=True)
