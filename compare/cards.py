"""The Compare page's result cards (SPEC R11, issue 9): each comparison's numbers as the card
and the legend show them, formatted here through the shared presenters (srbench/presenters.py),
so "unknown" is decided in one place and is never rendered as 0.

Read from the comparison document (`compare.services.comparison_build`); the page, the API and
the exports share that document, and tests/compare/test_page_matches_api.py holds the card to it.
"""

from __future__ import annotations

from typing import Any

from django.utils.safestring import SafeString

from datasets.provenance import provenance_summary
from runs.reporting.official_metrics import METRICS as OFFICIAL_METRICS
from runs.reporting.official_metrics import metric_value_text
from srbench.money import percent_text
from srbench.presenters import (
    UNKNOWN_HTML,
    known_or_unknown,
    percent_html,
    signed_interval_text,
    signed_text,
    unknown_html,
    usd_html,
    verdict_class,
)

UNKNOWN = UNKNOWN_HTML  # the one marker (srbench/presenters.py)


# --- formatting: the shared presenters (srbench/presenters.py, issue 36 item 3) ---------------


def fmt_signed(value: float | None, digits: int = 4) -> str | SafeString:
    return signed_text(value, digits)


def fmt_interval(interval: dict[str, Any] | None) -> str | SafeString:
    """The displayed bounds (a difference of proportions lies in [−1, 1]); a clipped
    Hoeffding bound says so rather than pretending to be narrower."""
    if interval is None:
        return UNKNOWN
    text = signed_interval_text(
        interval.get("display_lower", interval["lower"]),
        interval.get("display_upper", interval["upper"]),
    )
    return f"{text} (clipped to [−1, +1])" if interval.get("clipped") else text


def fmt_pct(value: str | None) -> str | SafeString:
    return percent_html(value)


def fmt_savings_interval(interval: dict[str, Any] | None) -> str | SafeString:
    """Savings % bounds; None is unknown (some case cost unknown, or the savings are)."""
    if interval is None:
        return UNKNOWN
    return f"[{percent_text(interval['lower'])}, {percent_text(interval['upper'])}]"


def fmt_usd(value: str | None) -> str | SafeString:
    return usd_html(value)


def fmt_int(value: int | None) -> str | SafeString:
    return known_or_unknown(value, None if value is None else f"{value:,}")


def fmt_ms(value: float | None) -> str | SafeString:
    return known_or_unknown(value, None if value is None else f"{value:,.0f} ms")


def fmt_seconds(value: float | None) -> str | SafeString:
    return known_or_unknown(value, None if value is None else f"{value:,.1f} s")


def fmt_quality(value: float | None) -> str | SafeString:
    return known_or_unknown(value, None if value is None else f"{value:.4f}")


def verdict(c: dict[str, Any]) -> tuple[str, str]:
    """(css class, words) of a comparison's one verdict (compare.verdict, R11.5): its label
    (better, non-inferior with its margin, inconclusive, worse) and its reason in words."""
    return verdict_class(c["verdict"]), f"{c['verdict_label']}: {c['verdict_reason']}."


# --- result cards ----------------------------------------------------------------------------


def _usage_rows(base: dict[str, Any], cand: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    rows: list[tuple[str, Any, Any]] = []
    for bucket, label in (
        ("input", "Uncached input tokens"),
        ("cached_input", "Cache-read input tokens"),
        ("cache_write", "Cache-write input tokens"),
        ("output", "Output tokens"),
    ):
        rows.append(
            (label, fmt_int(base["tokens"].get(bucket)), fmt_int(cand["tokens"].get(bucket)))
        )
    rows += [
        ("TTFT p50", fmt_ms(base["ttft_p50_ms"]), fmt_ms(cand["ttft_p50_ms"])),
        ("Latency p50", fmt_ms(base["latency_p50_ms"]), fmt_ms(cand["latency_p50_ms"])),
        ("Latency p95", fmt_ms(base["latency_p95_ms"]), fmt_ms(cand["latency_p95_ms"])),
        (
            "Sum of request durations",
            fmt_seconds(base["request_seconds_sum"]),
            fmt_seconds(cand["request_seconds_sum"]),
        ),
        (
            "Wall time of the run",
            fmt_seconds(base["wall_seconds"]),
            fmt_seconds(cand["wall_seconds"]),
        ),
    ]
    return rows


def fmt_official(m: dict[str, Any] | None) -> str | SafeString:
    """An official metric's value [interval], n; unknown (with why) is never 0; a side
    without that benchmark's official scorer says so."""
    if m is None:
        return unknown_html("not scored")
    if m["value"] is None:
        return unknown_html(reason=m["unknown_reason"])
    return metric_value_text(m)


def official_rows(
    base: list[dict[str, Any]] | None, cand: list[dict[str, Any]] | None
) -> list[dict[str, Any]]:
    """Each benchmark's official metric, baseline beside candidate (issue 35 item 4): the
    official summaries' own values, n and intervals — no new statistic, no difference."""
    by = [{(m["benchmark"], m["metric"]): m for m in side or []} for side in (base, cand)]
    rows = []
    for spec in OFFICIAL_METRICS:
        key = (spec.benchmark, spec.key)
        b, c = by[0].get(key), by[1].get(key)
        if b is None and c is None:
            continue
        rows.append(
            {
                "benchmark": spec.benchmark,
                "metric": spec.key,
                "name": spec.name,
                "scorer": (b or c or {}).get("scorer"),
                "baseline": fmt_official(b),
                "candidate": fmt_official(c),
            }
        )
    return rows


def card(index: int, c: dict[str, Any], doc: dict[str, Any]) -> dict[str, Any]:
    base_usage = doc["baseline"]["usage"]
    usage = c["usage"]
    s = c["savings"]
    css, words = verdict(c)
    ni = c["non_inferiority"]
    return {
        "n": index + 1,
        "c": c,
        "verdict_class": css,
        "verdict": words,
        "quality": fmt_quality(c["quality"]),
        # Beside the quality: where the benchmarks' questions came from (issue 35).
        "data": provenance_summary(c["provenance"]),
        "delta": fmt_signed(c["delta"]),
        "micro_delta": fmt_signed(c["micro_delta"]),
        "interval": fmt_interval(c["interval"]),
        "interval_level": f"{c['interval']['level']:.0%}",
        "family_interval": fmt_interval(c["family_interval"])
        if c["family_interval"]["family_size"] > 1
        else None,
        "family_level": f"{c['family_interval']['level']:.2%}",
        "bootstrap": None
        if c["bootstrap"] is None
        else signed_interval_text(c["bootstrap"]["lower"], c["bootstrap"]["upper"]),
        "non_inferiority": ni,
        "savings_interval": fmt_savings_interval(c.get("savings_interval")),
        "costs": [
            (
                "Subject cost (measured, four token classes)",
                fmt_usd(base_usage["subject_cost_usd"]),
                fmt_usd(usage["subject_cost_usd"]),
                fmt_pct(s["subject_cost_pct"]),
                s["subject_cost_unknown_reason"],
            ),
            (
                "Total spend (subject + judge + simulator)",
                fmt_usd(base_usage["total_spend_usd"]),
                fmt_usd(usage["total_spend_usd"]),
                fmt_pct(s["total_spend_pct"]),
                s["total_spend_unknown_reason"],
            ),
            (
                "Cache-neutral cost (counterfactual)",
                fmt_usd(base_usage["cache_neutral_cost_usd"]),
                fmt_usd(usage["cache_neutral_cost_usd"]),
                fmt_pct(s["cache_neutral_pct"]),
                s["cache_neutral_unknown_reason"],
            ),
        ],
        "usage": _usage_rows(base_usage, usage),
        "official": official_rows(doc["baseline"].get("official"), c.get("official")),
    }


def legend_row(i: int, c: dict[str, Any]) -> dict[str, Any]:
    """One comparison in the legend under the charts: its number, Δ and interval, savings and
    verdict."""
    return {
        "n": i + 1,
        "c": c,
        "delta": fmt_signed(c["delta"]),
        "interval": fmt_interval(c["interval"]),
        "savings": fmt_pct(c["savings"]["subject_cost_pct"]),
        "neutral": fmt_pct(c["savings"]["cache_neutral_pct"]),
        "verdict": c["verdict_label"],
        "verdict_class": verdict_class(c["verdict"]),
    }
