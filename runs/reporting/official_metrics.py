"""The official scorers as named metrics, for every surface that shows the sr-bench score
(issue 35 item 4): the CLI report, the run export, comparisons (page, API, CLI, CSV).

`runs.reporting.official_report` computes a target's official section (per benchmark the summary
`datasets.official` gives); this module reads that section's JSON and names each headline
figure — ARC pass@2, SimpleQA F-score, HLE accuracy and RMS calibration error — with the n and
the interval the summary itself computed (none is added here), or unknown with its reason.
Each is labelled as the benchmark's official metric, apart from the sr-bench score and never
part of it. Pure and free of Django: the CLI's remote path imports it without booting Django.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

LABEL = "official scorer"
NOTE = (
    "Official scorers: each benchmark's own metric, reported beside the sr-bench score and "
    "never part of it (not in the weighted quality, Δ or verdict)."
)


@dataclass(frozen=True)
class MetricSpec:
    """Where one official metric sits in a benchmark's official summary."""

    benchmark: str
    key: str  # machine name, also the CSV column stem
    name: str  # for people
    value: str  # field of the summary holding the value
    n: str  # field holding its n
    n_unit: str
    interval: str  # field holding its interval: a [lo, hi] list or {"bounds", "method"}
    method: str | None  # the interval's method when the summary names none beside it


# Every official metric, in the order every surface lists them.
METRICS = (
    MetricSpec(
        "arc", "pass_at_2", "pass@2", "value", "tasks_measured", "tasks", "wilson_95", None
    ),
    MetricSpec(
        "simpleqa", "f_score", "F-score", "f_score", "graded", "graded questions",
        "f_score_interval", None,
    ),
    MetricSpec(
        "hle", "accuracy", "accuracy", "accuracy", "questions", "questions",
        "accuracy_wilson_95", "Wilson",
    ),
    MetricSpec(
        "hle", "calibration_error", "RMS calibration error", "calibration_error", "judged",
        "judged answers", "calibration_error_interval", None,
    ),
    # issue 37 item 3: the package's testing_util on each first attempt (official prompting).
    MetricSpec(
        "livecodebench", "pass_at_1", "pass@1", "pass_at_1", "graded", "graded questions",
        "pass_at_1_wilson_95", "Wilson",
    ),
)  # fmt: skip


def _interval(spec: MetricSpec, summary: Mapping[str, Any]) -> dict[str, Any] | None:
    raw = summary.get(spec.interval)
    if isinstance(raw, Mapping):
        bounds, method = raw.get("bounds"), raw.get("method")
    else:
        bounds = raw
        method = summary.get("interval_method") or spec.method
    if not bounds or bounds[0] is None or bounds[1] is None:
        return None
    return {"lower": float(bounds[0]), "upper": float(bounds[1]), "method": method}


def _metric(spec: MetricSpec, summary: Mapping[str, Any]) -> dict[str, Any]:
    headline = summary.get("value")
    value = None if headline is None else summary.get(spec.value)
    reason = None
    if headline is None:
        reason = summary.get("reason") or "not computed"
    elif value is None:
        reason = "not computed for this run"
    n = summary.get(spec.n)
    if n is None and value is not None and spec.key == "pass_at_2":
        # A report kept before `tasks_measured` existed: a known pass@2 measured every task.
        n = summary.get("tasks")
    return {
        "benchmark": spec.benchmark,
        "metric": spec.key,
        "name": spec.name,
        "label": LABEL,
        "scorer": summary.get("label"),
        "value": None if value is None else float(value),
        "exact": summary.get("exact") if spec.key == "pass_at_2" and value is not None else None,
        "n": n,
        "n_unit": spec.n_unit,
        "interval": None if value is None else _interval(spec, summary),
        "unknown_reason": reason,
    }


def official_metrics(section: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """A report target's ``official`` document as named metrics, in `METRICS` order; empty
    when the target has none (no benchmark whose official scorer differs, or a run not
    ended)."""
    benchmarks = (section or {}).get("benchmarks") or {}
    return [_metric(s, benchmarks[s.benchmark]) for s in METRICS if s.benchmark in benchmarks]


def metric_title(m: Mapping[str, Any]) -> str:
    """`arc pass@2 (official scorer)`: the benchmark, the metric and the label, so it is never
    read as the sr-bench score."""
    return f"{m['benchmark']} {m['name']} ({m['label']})"


def metric_value_text(m: Mapping[str, Any] | None, digits: int = 4) -> str:
    """`0.5000 [0.2000, 0.8000], n = 4 tasks`, or `unknown: <reason>`; never 0 for unknown."""
    if m is None:
        return "not scored"
    if m["value"] is None:
        return f"unknown: {m['unknown_reason']}"
    text = f"{m['value']:.{digits}f}"
    interval = m["interval"]
    if interval is not None:
        text += f" [{interval['lower']:.{digits}f}, {interval['upper']:.{digits}f}]"
    if m["n"] is not None:
        text += f", n = {m['n']} {m['n_unit']}"
    return text


def metric_text(m: Mapping[str, Any]) -> str:
    return f"{metric_title(m)} {metric_value_text(m)}"


def csv_columns() -> list[str]:
    """The official metrics' CSV columns: per metric its value, bounds, n and unknown reason."""
    return [
        f"official_{s.benchmark}_{s.key}{suffix}"
        for s in METRICS
        for suffix in ("", "_lower", "_upper", "_n", "_unknown_reason")
    ]


def csv_cells(metrics: list[dict[str, Any]]) -> dict[str, Any]:
    """One row's official columns; a metric the row has no official scorer for stays empty."""
    out: dict[str, Any] = {}
    for m in metrics:
        stem = f"official_{m['benchmark']}_{m['metric']}"
        interval = m["interval"] or {}
        out[stem] = m["value"]
        out[f"{stem}_lower"] = interval.get("lower")
        out[f"{stem}_upper"] = interval.get("upper")
        out[f"{stem}_n"] = m["n"]
        out[f"{stem}_unknown_reason"] = m["unknown_reason"]
    return out
