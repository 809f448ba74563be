"""The report's latency figures (R4.2): TTFT and latency percentiles over completed subject
calls, the request-seconds sum over every timed call, kept apart per (run, target). Expected
values are computed here by hand (linear interpolation between order statistics)."""

from __future__ import annotations

import pytest
from django.utils import timezone

from runs.reporting.report import run_reports
from tests import factories as f
from tests.runs.test_pages import manifest_for

pytestmark = pytest.mark.django_db


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def timed_run(targets, calls_by_target):  # type: ignore[no-untyped-def]
    run = f.run_create(manifest=manifest_for(targets), started_at=timezone.now())
    question = f.question_create()
    for target in targets:
        for slot, (role, status, duration, ttft) in enumerate(calls_by_target[target.slug]):
            cell = f.cell_create(run=run, question=question, target=target, slot=slot)
            f.call_create(cell=cell, role=role, status=status, duration_ms=duration, ttft_ms=ttft)
    return run


def test_latency_figures_per_run_and_target_match_hand_computed_values():
    a, b = f.target_create(), f.target_create()
    first = {
        a.slug: [
            ("subject", "completed", 120.0, 10.0),
            ("subject", "completed", 80.0, None),  # no TTFT known: left out of the TTFT figure
            ("subject", "completed", 300.0, 30.0),
            ("subject", "completed", 50.0, 20.0),
            ("subject", "failed", 900.0, 5.0),  # counts in request seconds only
            ("judge", "completed", 40.0, 1.0),  # likewise
            ("subject", "sent_unknown", None, None),  # untimed: counts nowhere
        ],
        b.slug: [("subject", "completed", 7.0, 3.0), ("subject", "completed", 11.0, 5.0)],
    }
    second = {a.slug: [("subject", "completed", 1000.0, 500.0)]}
    run1 = timed_run([a, b], first)
    run2 = timed_run([a], second)

    reports = run_reports(runs=[run1, run2])

    def target_of(run, target):  # type: ignore[no-untyped-def]
        (t,) = [t for t in reports[run.pk]["targets"] if t["slug"] == target.slug]
        return t

    got = target_of(run1, a)
    assert got["latency_p50_ms"] == pytest.approx(percentile([120, 80, 300, 50], 50))
    assert got["latency_p50_ms"] == pytest.approx(100.0)
    assert got["latency_p95_ms"] == pytest.approx(273.0)
    assert got["ttft_p50_ms"] == pytest.approx(20.0)
    assert got["request_seconds_sum"] == pytest.approx((120 + 80 + 300 + 50 + 900 + 40) / 1000)

    got = target_of(run1, b)
    assert got["latency_p50_ms"] == pytest.approx(9.0)
    assert got["latency_p95_ms"] == pytest.approx(percentile([7, 11], 95))
    assert got["ttft_p50_ms"] == pytest.approx(4.0)
    assert got["request_seconds_sum"] == pytest.approx(0.018)

    got = target_of(run2, a)
    assert got["latency_p50_ms"] == pytest.approx(1000.0)
    assert got["ttft_p50_ms"] == pytest.approx(500.0)
    assert got["request_seconds_sum"] == pytest.approx(1.0)


def test_a_target_without_timed_calls_has_unknown_latency_not_zero():
    a = f.target_create()
    run = timed_run([a], {a.slug: [("subject", "sent_unknown", None, None)]})
    (got,) = run_reports(runs=[run])[run.pk]["targets"]
    assert got["latency_p50_ms"] is None
    assert got["ttft_p50_ms"] is None
    assert got["request_seconds_sum"] is None
