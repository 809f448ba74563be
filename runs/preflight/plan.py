"""What a target's preflight means for a plan (issue 39): prompts that cannot fit the known
context are "not run" (never sent), and the review warns, before any call, where the plan asks
for more than a target showed.

The prompt's size is estimated, never measured (freezing a plan calls no server): every run of
letters, every group of up to three digits and every run of other non-space characters counts
as one token, plus four per message and two for the reply. Real tokenizers make at least about
that many (a word is one token or more, punctuation seldom merges with letters, and numbers are
split into digits or groups of at most three — GPT-4's and Llama 3's tokenizers by three, most
others digit by digit), so a prompt estimated above a context almost surely does not fit it;
one just below it may still not fit (the review says so). A number counted as one word made
600 ten-digit numbers 600 tokens where SmolLM2's tokenizer makes 6,643 (an outside probe).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from datasets.benchmarks import get_adapter
from datasets.models import Question
from runs.ledger.accounting import (
    STREAM_USAGE_CHECKED_KEY,
    STREAM_USAGE_ESTIMATE_KEY,
    sent_max_tokens,
)
from runs.models import Target
from runs.models.preflight import PreflightStatus, TargetPreflight

TOKEN_RE = re.compile(r"[^\W\d]+|\d{1,3}|[^\w\s]+")
MESSAGE_TOKENS = 4
REPLY_TOKENS = 2


def _texts(content: Any) -> Iterable[str]:
    if isinstance(content, str):
        yield content
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                yield part["text"]


def prompt_token_estimate(messages: Sequence[Any]) -> int:
    """The estimate of a prompt's tokens described in the module's docstring."""
    total = REPLY_TOKENS
    for message in messages:
        total += MESSAGE_TOKENS
        if isinstance(message, dict):
            total += sum(len(TOKEN_RE.findall(t)) for t in _texts(message.get("content")))
    return total


def latest_preflights(targets: Iterable[Target]) -> dict[str, TargetPreflight]:
    """Each target's latest completed preflight still about its current endpoint and model."""
    found: dict[str, TargetPreflight] = {}
    for target in targets:
        preflight = (
            TargetPreflight.objects.filter(
                target=target,
                status=PreflightStatus.COMPLETED,
                base_url=target.base_url,
                model=target.model,
            )
            .order_by("-created_at", "-pk")
            .first()
        )
        if preflight is not None:
            found[target.slug] = preflight
    return found


def _stream_usage_finding(preflight: TargetPreflight) -> dict[str, Any] | None:
    """The check's finding about the usage in a stream, if it made one."""
    return next((x for x in preflight.findings or [] if x.get("key") == "stream_usage"), None)


def _estimate_finding(preflight: TargetPreflight) -> dict[str, Any] | None:
    """The check's finding that the stream's usage is not the server's own count
    (`runs.preflight.findings.stream_usage_disagreement`), if it made one."""
    finding = _stream_usage_finding(preflight)
    return finding if finding is not None and finding.get("verdict") == "quirk" else None


def stream_usage_snapshot(target: Target) -> dict[str, str]:
    """What the target's latest completed check of its current endpoint and model found of
    its stream usage, as a plan's target snapshot names it: why the usage is a gateway's own
    estimate (`runs.ledger.accounting.STREAM_USAGE_ESTIMATE_KEY`; the engine then records such
    calls' tokens and cost as unknown), else which check found nothing so
    (`STREAM_USAGE_CHECKED_KEY`); nothing when no check looked at it."""
    preflight = latest_preflights([target]).get(target.slug)
    finding = None if preflight is None else _stream_usage_finding(preflight)
    if preflight is None or finding is None:
        return {}
    where = f"target check #{preflight.pk}"
    if finding.get("verdict") == "quirk":
        return {STREAM_USAGE_ESTIMATE_KEY: f"{where}: {finding['observed']}"}
    return {STREAM_USAGE_CHECKED_KEY: where}


def context_reason(slug: str, preflight: TargetPreflight) -> str:
    return (
        f"prompt longer than the {preflight.context_tokens:,}-token context target {slug} "
        f"showed (preflight #{preflight.pk}): left out for every target, never sent"
    )


def not_fitting(
    entries: list[tuple[int, str, str]], chosen: list[str], targets: Iterable[Target]
) -> dict[int, str]:
    """{question id: reason} for the chosen questions whose estimated prompt exceeds the known
    context of a target of the plan (the smallest such context gives the reason). A case is
    left out for every target, so every target answers the same cases."""
    limits = [
        (p.context_tokens, slug, p)
        for slug, p in latest_preflights(targets).items()
        if p.context_tokens
    ]
    if not limits:
        return {}
    limits.sort(key=lambda item: item[0])
    smallest, slug, preflight = limits[0]
    out: dict[int, str] = {}
    for qid, estimate in _estimates(entries, chosen).items():
        if estimate > smallest:
            out[qid] = context_reason(slug, preflight)
    return out


def _estimates(entries: list[tuple[int, str, str]], chosen: list[str]) -> dict[int, int]:
    ids = [qid for qid, _sha, benchmark in entries if benchmark in chosen]
    rows = Question.objects.filter(pk__in=ids).values_list("pk", "benchmark", "payload")
    return {
        pk: prompt_token_estimate(get_adapter(benchmark).messages(payload))
        for pk, benchmark, payload in rows
    }


def plan_preflight_review(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """Per target of a frozen plan, what its latest preflight showed and the warnings for
    this plan — before any call. A target never checked says so."""
    slugs = [t["slug"] for t in manifest["targets"]]
    targets = list(Target.objects.filter(slug__in=slugs))
    preflights = latest_preflights(targets)
    concurrency = manifest["limits"]["concurrency"]
    # The cases' prompt estimates, read once and only when a context is known.
    estimates = (
        case_estimates(manifest["cases"])
        if any(p.context_tokens for p in preflights.values())
        else []
    )
    rows = []
    for entry in manifest["targets"]:
        slug = entry["slug"]
        preflight = preflights.get(slug)
        if preflight is None:
            rows.append({"slug": slug, "preflight": None, "warnings": [], "findings": []})
            continue
        rows.append(
            {
                "slug": slug,
                "preflight": preflight,
                "findings": preflight.findings,
                "warnings": _warnings(preflight, concurrency)
                + _context_warnings(manifest, entry, preflight, estimates),
            }
        )
    return rows


def case_estimates(cases: list[list[Any]]) -> list[tuple[int, str]]:
    """(estimated prompt tokens, "benchmark/native id") of each of a manifest's cases."""
    rows = Question.objects.filter(pk__in=[qid for qid, _sha, _b in cases]).values_list(
        "benchmark", "native_id", "payload"
    )
    return [
        (prompt_token_estimate(get_adapter(benchmark).messages(payload)), f"{benchmark}/{native}")
        for benchmark, native, payload in rows
    ]


def _warnings(p: TargetPreflight, concurrency: int) -> list[str]:
    warnings = []
    if p.cuts_at is not None and concurrency > (p.max_whole_streams or 0):
        warnings.append(
            f"concurrency {concurrency} exceeds what this target showed: a second request "
            f"cut the stream in progress at {p.cuts_at} concurrent streams (whole up to "
            f"{p.max_whole_streams}); use concurrency ≤ {p.max_whole_streams} or its cells "
            "will fail as incomplete streams"
        )
    if p.stream_usage is False:
        warnings.append("this server reports no usage when streaming: cost unknown")
    if p.stream_usage and (estimate := _estimate_finding(p)) is not None:
        warnings.append(f"{estimate['observed']}: {estimate['effect']}")
    if p.served_model_priced is False:
        warnings.append(
            f"the served model {p.served_model!r} has no price: every cost will be unknown"
        )
    if p.length_finish_reason and p.length_finish_reason != "length":
        warnings.append(
            f'a max_tokens cut ends with finish_reason "{p.length_finish_reason}": truncated '
            "answers will look finished"
        )
    return warnings


def _context_warnings(
    manifest: dict[str, Any],
    target: dict[str, Any],
    p: TargetPreflight,
    estimates: list[tuple[int, str]],
) -> list[str]:
    """What the context the target showed means for this plan: prompts longer are not run; an
    output limit not below it, or a prompt plus its output limit above it, is refused by a
    server that counts the output against the context (vLLM answers 400) while llama.cpp stops
    at the context instead. Said, not decided: servers differ."""
    context = p.context_tokens
    if not context:
        return []
    warnings = [
        f"prompts of more than {context:,} tokens do not fit this target: those "
        "estimated longer are listed as not run; one estimated just below may still not "
        "fit and fail its cell"
    ]
    # What the engine sends as max_tokens: the target's fixed parameter, else the plan's limit.
    fixed = target["fixed_params"].get("max_tokens")
    output = sent_max_tokens(target["fixed_params"], manifest["limits"])
    param = "max_tokens" if fixed else "max_output_tokens"
    name = f"{param} {output:,}" + (" (fixed for this target)" if fixed else "")
    if output >= context:
        warnings.append(
            f"{name} is not below the {context:,}-token context this target showed: a server "
            "that counts the output against the context (vLLM) refuses every call; lower it "
            "below the context"
        )
        return warnings
    over = sorted((e for e in estimates if e[0] + output > context), reverse=True)
    if over:
        longest = over[0][0]
        named = ", ".join(case for _e, case in over[:3]) + (", …" if len(over) > 3 else "")
        room = context - longest
        warnings.append(
            f"{len(over)} of {len(estimates)} case(s) are estimated longer than the "
            f"{context:,}-token context this target showed once their {name} is added "
            f"(the longest: {longest:,} + {output:,}; {named}): a server that counts the "
            "output against the context (vLLM) refuses those calls and fails their cells; "
            + (f"{param} ≤ {room:,} fits them all" if room > 0 else "the longest leaves no room")
        )
    return warnings
