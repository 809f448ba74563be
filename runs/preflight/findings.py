"""A preflight's findings in words, each with what it will do to a run (issue 39).

`findings_build` turns what the preflight's calls got back (`runs.preflight.wire.WireResult`)
into the facts kept on `TargetPreflight` — the plan review reads those — and a list of
findings ``{"key", "verdict", "observed", "effect"}``: ``ok`` (nothing to change), ``quirk``
(it will change a run's numbers or fail it) or ``unknown`` (not found out, and why).
"""

from __future__ import annotations

from typing import Any

from runs.ledger.accounting import PriceError, price_for_model
from runs.ledger.usage import usage_buckets
from runs.models import Target
from runs.preflight.wire import WireResult, stated_context

NO_STREAM_USAGE = "this server reports no usage when streaming: cost unknown"


def _finding(key: str, verdict: str, observed: str, effect: str) -> dict[str, str]:
    return {"key": key, "verdict": verdict, "observed": observed, "effect": effect}


def _answered(result: WireResult) -> bool:
    return result.http_status == 200 and not result.error


def _failure(result: WireResult) -> str:
    if result.http_status is None:
        return f"no answer ({result.error})"
    return result.error or result.incomplete_reason or f"HTTP {result.http_status}"


def _has_cache_fields(usage: Any) -> bool | None:
    buckets = usage_buckets(usage)
    return None if buckets is None else buckets.cached_reported


def _prompt_tokens(usage: Any) -> int | None:
    buckets = usage_buckets(usage)
    if buckets is None:
        return None
    return buckets.input + (buckets.cached_input or 0) + (buckets.cache_write or 0)


def stream_usage_disagreement(usage: WireResult, plain: WireResult) -> str:
    """Why the stream's usage is not the server's own count, or "" when nothing says so. The
    stream and the plain call send the same prompt, so the server counts the same prompt
    tokens for both. A gateway that got no usage from its upstream's stream may count the
    tokens itself and send its own estimate as the stream's usage (LiteLLM's proxy in front of
    llama.cpp: 9 prompt tokens streamed where the server's plain answer says 32, the chat
    template left out), shaped like a receipt; the plain answer carries the server's own."""
    if not _answered(plain) or usage.served_model != plain.served_model:
        return ""  # another model (a router's other route) may count with another tokenizer
    streamed, answered = _prompt_tokens(usage.usage), _prompt_tokens(plain.usage)
    if streamed is None or answered is None or streamed == answered:
        return ""
    return (
        f"the stream's usage counts {streamed:,} prompt tokens where the plain answer to the "
        f"same prompt counts {answered:,}: the stream's usage is not the server's own count "
        "(a gateway in front of the server estimating tokens itself)"
    )


def usage_findings(usage: WireResult, plain: WireResult) -> tuple[dict[str, Any], list]:
    """Usage in a stream, in a plain answer, and the cached-token fields."""
    facts: dict[str, Any] = {"plain_usage": None, "stream_usage": None, "cached_fields": None}
    out = []
    if _answered(plain):
        facts["plain_usage"] = usage_buckets(plain.usage) is not None
    if not _answered(usage):
        out.append(
            _finding(
                "stream_usage",
                "unknown",
                f"the usage stream failed: {_failure(usage)}",
                "a run's streams may fail the same way: check the target before a run",
            )
        )
    elif usage_buckets(usage.usage) is not None:
        facts["stream_usage"] = True
        disagreement = stream_usage_disagreement(usage, plain)
        out.append(
            _finding(
                "stream_usage",
                "quirk",
                disagreement,
                "a run planned after this check records its calls' tokens and cost as unknown, "
                "since the stream's usage is not the server's own count; point the target at "
                "the server itself, or at a gateway that passes the server's usage through",
            )
            if disagreement
            else _finding(
                "stream_usage",
                "ok",
                "a stream carries usage with stream_options.include_usage",
                "token counts and costs of a run will be known",
            )
        )
    else:
        facts["stream_usage"] = False
        evidence = (
            "non-streamed answers do carry usage, but a stream's evidence holds none: only a "
            "server that sends a usage chunk (or the provider's own billing records) can make "
            "it known"
            if facts["plain_usage"]
            else "no answer of this server carried usage: nothing a run saves can make it known"
        )
        out.append(
            _finding(
                "stream_usage",
                "quirk",
                NO_STREAM_USAGE,
                f"every token count and cost of a run will be unknown; {evidence}",
            )
        )
    source = usage.usage if facts["stream_usage"] else plain.usage
    facts["cached_fields"] = _has_cache_fields(source)
    if facts["cached_fields"] is None:
        out.append(_finding("cached_fields", "unknown", "no usage to read", "cache reads unknown"))
    elif facts["cached_fields"]:
        out.append(
            _finding(
                "cached_fields",
                "ok",
                "usage reports cached input tokens",
                "cache reads are priced at the cached-input price",
            )
        )
    else:
        out.append(
            _finding(
                "cached_fields",
                "quirk",
                "usage has no cached-token field",
                "cache reads cannot be seen: all input is priced as fresh input and the "
                "cache-read ratio leaves this target out",
            )
        )
    return facts, out


def served_model_finding(target: Target, results: list[WireResult]) -> tuple[dict, dict]:
    """The served model named by the answers, against the registered price keys."""
    served = next((r.served_model for r in results if r.served_model), "")
    keys = ", ".join(sorted(target.prices)) or "none"
    if not served:
        return {"served_model": "", "served_model_priced": None}, _finding(
            "served_model", "unknown", "no answer named its model", "prices cannot be checked"
        )
    try:
        priced = price_for_model(target.prices, served) is not None
    except PriceError:
        priced = False
    facts = {"served_model": served[:200], "served_model_priced": priced}
    if target.kind == Target.Kind.MOM:
        return facts, _finding(
            "served_model",
            "ok" if priced else "unknown",
            f"served {served!r} (a router: each call is priced by its own served model)",
            "each served model needs a price; price keys: " + keys,
        )
    if priced:
        return facts, _finding(
            "served_model", "ok", f"served {served!r}, which has a price", "costs can be known"
        )
    return facts, _finding(
        "served_model",
        "quirk",
        f"served {served!r}; price keys: {keys}",
        f"every cost will be unknown: add a price for {served!r} (the lookup is exact)",
    )


def length_finding(usage: WireResult, plain: WireResult) -> tuple[dict, dict]:
    """The finish_reason of a max_tokens cut (both first calls asked for one token)."""
    result = usage if usage.finish_reason or not plain.finish_reason else plain
    reason = result.finish_reason
    facts = {"length_finish_reason": reason[:32]}
    if not _answered(usage) and not _answered(plain):
        return facts, _finding("length_finish_reason", "unknown", "no answer", "unknown")
    if reason == "length":
        return facts, _finding(
            "length_finish_reason",
            "ok",
            'a max_tokens cut ends with finish_reason "length"',
            "answers cut by max output tokens are reported as truncated",
        )
    if not reason:
        return facts, _finding(
            "length_finish_reason",
            "quirk",
            "a max_tokens cut ends with no finish_reason",
            "every answer cut by max output tokens will fail as an incomplete stream",
        )
    return facts, _finding(
        "length_finish_reason",
        "quirk",
        f'a max_tokens cut ends with finish_reason "{reason}"',
        "answers cut by max output tokens will look finished (graded as is, never flagged "
        "truncated)",
    )


def concurrency_finding(levels: dict[int, list[WireResult] | None]) -> tuple[dict, dict]:
    """Whether a second request cut the stream in progress, and the most that stayed whole."""
    whole_at = 1
    for level, results in sorted(levels.items()):
        if results is None:
            continue
        if results[0].ended_before_next:
            return {"max_whole_streams": None, "cuts_at": None}, _finding(
                "concurrency",
                "unknown",
                f"at {level} concurrent streams the first ended before the others were sent",
                "whether a new request cuts a stream is not known",
            )
        if not all(r.whole for r in results):
            cut = sum(1 for r in results if not r.whole)
            why = next(_failure(r) for r in results if not r.whole)
            return {"max_whole_streams": whole_at, "cuts_at": level}, _finding(
                "concurrency",
                "quirk",
                f"at {level} concurrent streams {cut} of {level} were cut ({why})",
                f"use concurrency ≤ {whole_at} with this target: above it, streams in "
                "progress are cut and their cells fail (incomplete_stream)",
            )
        whole_at = level
    return {"max_whole_streams": whole_at, "cuts_at": None}, _finding(
        "concurrency",
        "ok",
        f"streams stayed whole at up to {whole_at} concurrent requests (the most tried)",
        f"concurrency above {whole_at} is untested on this target",
    )


def context_finding(context: dict[str, Any]) -> tuple[dict, dict]:
    """The largest prompt the server accepts: said by the server, or by the bounded probe."""
    if context["tokens"]:
        tokens, source = context["tokens"], context["source"]
        return {"context_tokens": tokens, "context_source": source[:200]}, _context_known(
            tokens, f"the server says a context of {tokens:,} tokens ({source})"
        )
    probe: WireResult = context["probe"]
    stated = stated_context(probe.error) if probe.http_status not in (None, 200) else None
    if stated:
        source = "the refusal of the context probe"
        return {"context_tokens": stated, "context_source": source}, _context_known(
            stated, f"the probe was refused: maximum context length {stated:,} tokens"
        )
    facts: dict[str, Any] = {"context_tokens": None, "context_source": ""}
    if _answered(probe):
        buckets = usage_buckets(probe.usage)
        size = f"{buckets.input + buckets.cached_input:,} tokens" if buckets else "its size"
        return facts, _finding(
            "context",
            "ok",
            f"the probe prompt of {size} was accepted; the limit was not reached",
            "prompts up to that size fit; longer ones are untested",
        )
    return facts, _finding(
        "context",
        "unknown",
        f"the context probe failed and stated no limit: {_failure(probe)}",
        "long prompts may fail a run",
    )


def _context_known(tokens: int, observed: str) -> dict[str, str]:
    return _finding(
        "context",
        "ok",
        observed,
        f"prompts of more than {tokens:,} tokens will not fit: a plan lists such cases as "
        "not run, never sent",
    )


def findings_build(
    *,
    target: Target,
    usage: WireResult,
    plain: WireResult,
    levels: dict[int, list[WireResult] | None],
    context: dict[str, Any],
) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """The facts for `TargetPreflight` and the findings in the order they were checked."""
    facts, findings = usage_findings(usage, plain)
    for more, finding in (
        served_model_finding(target, [usage, plain]),
        length_finding(usage, plain),
        concurrency_finding(levels),
        context_finding(context),
    ):
        facts.update(more)
        findings.append(finding)
    return facts, findings
