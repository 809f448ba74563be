"""Compare iterations (SPEC R11, issue 9): choose a baseline, tick candidates, compare.

Everything is a plain GET: the selection lives in the URL (R11.3), so the page works without
JavaScript and a link reproduces the comparison. A change of selection arrives as ``op`` plus
the page's tick boxes; it is applied server-side and answered with a redirect to the canonical
URL *without* ``compare=1``, which is what hides an old comparison until "Compare runs" is
pressed again (R11.2). Results are computed afresh by ``comparison_build`` on every view, so
every pair is re-verified each time.

Numbers are formatted here, not in templates, so "unknown" is decided in one place and can
never be rendered as 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe
from django.views.decorators.http import require_GET

from compare.compatibility import run_comparison_problems
from compare.forms import CompareForm, ids_format
from compare.results import STATEMENTS
from compare.selectors import RunOption, baseline_options, candidate_options, comparable_pool
from compare.services import CandidatesRefused, ComparisonError, comparison_build
from datasets.provenance import provenance_summary
from runs.models import Run
from runs.reporting.official_metrics import METRICS as OFFICIAL_METRICS
from runs.reporting.official_metrics import metric_value_text
from srbench.money import percent_text, usd_text

PAGE_SIZE = 25  # baseline and candidate tables
CARDS_PER_PAGE = 25  # result cards (issue 9); charts and exports keep every comparison

UNKNOWN: SafeString = mark_safe(
    '<span class="unknown">unknown</span>'
)  # a constant: nothing to escape


# --- formatting ------------------------------------------------------------------------------


def fmt_signed(value: float | None, digits: int = 4) -> str | SafeString:
    return UNKNOWN if value is None else f"{value:+.{digits}f}"


def fmt_interval(interval: dict[str, Any] | None) -> str | SafeString:
    """The displayed bounds (a difference of proportions lies in [−1, 1]); a clipped
    Hoeffding bound says so rather than pretending to be narrower."""
    if interval is None:
        return UNKNOWN
    lo, hi = (
        interval.get("display_lower", interval["lower"]),
        interval.get("display_upper", interval["upper"]),
    )
    text = f"[{lo:+.4f}, {hi:+.4f}]"
    return f"{text} (clipped to [−1, +1])" if interval.get("clipped") else text


def fmt_pct(value: str | None) -> str | SafeString:
    return UNKNOWN if value is None else percent_text(value)


def fmt_savings_interval(interval: dict[str, Any] | None) -> str | SafeString:
    """Savings % bounds; None is unknown (some case cost unknown, or the savings are)."""
    if interval is None:
        return UNKNOWN
    return f"[{interval['lower']:.1f}%, {interval['upper']:.1f}%]"


def fmt_usd(value: str | None) -> str | SafeString:
    return UNKNOWN if value is None else usd_text(value)


def fmt_int(value: int | None) -> str | SafeString:
    return UNKNOWN if value is None else f"{value:,}"


def fmt_ms(value: float | None) -> str | SafeString:
    return UNKNOWN if value is None else f"{value:,.0f} ms"


def fmt_seconds(value: float | None) -> str | SafeString:
    return UNKNOWN if value is None else f"{value:,.1f} s"


def fmt_quality(value: float | None) -> str | SafeString:
    return UNKNOWN if value is None else f"{value:.4f}"


VERDICT_CLASS = {"better": "ok", "non_inferior": "ok", "inconclusive": "warning", "worse": "bad"}


def verdict(c: dict[str, Any]) -> tuple[str, str]:
    """(css class, words) of a comparison's one verdict (compare.verdict, R11.5): its label
    (better, non-inferior with its margin, inconclusive, worse) and its reason in words."""
    return VERDICT_CLASS[c["verdict"]], f"{c['verdict_label']}: {c['verdict_reason']}."


# --- URL state -------------------------------------------------------------------------------


def compare_url(**params: Any) -> str:
    """``/compare/`` with the given non-empty parameters, candidates in canonical spelling."""
    if "candidates" in params and not isinstance(params["candidates"], str):
        params["candidates"] = ids_format(params["candidates"])
    query = {k: v for k, v in params.items() if v not in (None, "", False, [])}
    if query.get("compare") is True:
        query["compare"] = 1
    base = reverse("compare:index")
    return f"{base}?{urlencode(query)}" if query else base


def _apply(
    form: CompareForm, pool: dict[int, RunOption], request: HttpRequest
) -> HttpResponseRedirect:
    """A change of selection: apply the page's ticks, then the operation, then redirect."""
    d = form.cleaned_data
    before = set(d["candidates"])
    selection = (before - set(d["shown"])) | set(d["pick"])
    op = d["op"] or "apply"
    if op in ("select_all", "deselect_all"):
        # "Select all" means every run matching the search, on every page (R11.2).
        matching = {o.id for o in candidate_options(d["baseline"], d["q"] or "", pool=pool)}
        selection = selection | matching if op == "select_all" else selection - matching
    elif op == "clear":
        selection = set()
    if op == "compare":
        compare = bool(selection)
    else:
        # The old comparison stays only while the selection is exactly the compared one.
        compare = d["compare"] and selection == before
        if d["compare"] and not compare:
            messages.info(
                request,
                "The selection changed, so the previous comparison is hidden. Press "
                "“Compare runs” to compare the new selection.",
            )
    return HttpResponseRedirect(
        compare_url(
            baseline=d["baseline"],
            bt=d["bt"],
            candidates=sorted(selection),
            q=d["q"],
            page=d["goto"] or d["page"],
            compare=compare,
        )
    )


# --- charts ----------------------------------------------------------------------------------


@dataclass
class Axis:
    low: float
    high: float
    start: float  # pixels
    end: float

    def __call__(self, value: float) -> float:
        span = self.high - self.low or 1.0
        return round(self.start + (value - self.low) / span * (self.end - self.start), 2)

    def ticks(self, count: int = 5, suffix: str = "") -> list[tuple[float, str]]:
        step = _nice_step((self.high - self.low) / max(count - 1, 1))
        digits = next(n for n in range(8) if abs(round(step, n) - step) < step * 1e-9)
        out = []
        k = math.ceil(self.low / step)
        while k * step <= self.high + step * 1e-9:
            value = k * step
            label = "0" if abs(value) < step * 1e-6 else f"{value:+.{digits}f}"
            out.append((self(value), label + suffix))
            k += 1
        return out


def diamond_points(x: float, y: float, r: float = 7) -> str:
    """The baseline's diamond around (x, y) as SVG points, each rounded again after the ±r:
    64.04 - 7 is 57.040000000000006 in binary floating point."""
    corners = ((0, -r), (r, 0), (0, r), (-r, 0))
    return " ".join(f"{round(x + dx, 2)},{round(y + dy, 2)}" for dx, dy in corners)


def _nice_step(raw: float) -> float:
    if raw <= 0:
        return 1.0
    magnitude = 10 ** math.floor(math.log10(raw))
    for factor in (1, 2, 2.5, 5, 10):
        if raw <= factor * magnitude:
            return factor * magnitude
    return 10 * magnitude


def _range(
    values: Sequence[float], *, include: float = 0.0, pad: float = 0.08
) -> tuple[float, float]:
    low, high = min([*values, include]), max([*values, include])
    if high - low < 1e-9:
        low, high = low - 0.5, high + 0.5
    margin = (high - low) * pad
    return low - margin, high + margin


LABEL_CHAR_PX, LABEL_HEIGHT_PX = 7.0, 12.0


def _spread_labels(marks: list[dict[str, Any]], *, top: float, bottom: float) -> None:
    """Place each mark's number where it overlaps no number placed before it (issue 23: the
    scatter's labels overlapped when candidates sat close together): beside its point first,
    then stepping up and down a line at a time, then further right."""
    placed: list[tuple[float, float, float]] = []  # (left, baseline, right) of each number

    def free(x0: float, y0: float, w: float) -> bool:
        return all(
            x0 + w <= left or right <= x0 or abs(y0 - base) >= LABEL_HEIGHT_PX
            for left, base, right in placed
        )

    for m in marks:
        w = LABEL_CHAR_PX * len(str(m["n"])) + 2
        x0, y0 = m["cap_r"], m["label_y"]
        spots = [
            (x0 + dx, y0 + dy * LABEL_HEIGHT_PX)
            for dx in (0.0, 14.0, 28.0)
            for dy in (0, -1, 1, -2, 2, -3, 3)
        ]
        spot = next(
            (
                (sx, sy)
                for sx, sy in spots
                if top + LABEL_HEIGHT_PX <= sy <= bottom and free(sx, sy, w)
            ),
            (x0, y0),
        )
        m["label_x"], m["label_y"] = round(spot[0], 2), round(spot[1], 2)
        placed.append((spot[0], spot[1], spot[0] + w))


def charts(doc: dict[str, Any]) -> dict[str, Any]:
    """Geometry of the two charts (R11.4) for every comparison, not just a page of cards.

    Quality/cost: Δ with its Hoeffding interval (and the family-wise one when several are
    compared) against subject-cost savings; the baseline is the marked origin. A candidate
    whose savings are unknown is drawn in a separate "unknown" lane with a hollow square —
    never at 0 %. Iteration: Δ with intervals over creation order, and savings below it,
    unknown again as its own mark. Shapes and numbers carry the meaning, not colour.
    """
    comps = doc["comparisons"]
    width, height, left, right, top, bottom = 760, 320, 64, 20, 16, 44
    unknown_lane = 70  # px on the right of the scatter for unknown savings
    lows = [c["interval"]["display_lower"] for c in comps]
    highs = [c["interval"]["display_upper"] for c in comps]
    if doc["family_size"] > 1:
        lows += [c["family_interval"]["display_lower"] for c in comps]
        highs += [c["family_interval"]["display_upper"] for c in comps]
    y_low, y_high = _range([*lows, *highs], pad=0.04)
    y_low, y_high = max(y_low, -1.0), min(y_high, 1.0)

    savings = [c["savings"]["subject_cost_pct"] for c in comps]
    known = [float(s) for s in savings if s is not None]
    has_unknown = any(s is None for s in savings)
    x_low, x_high = _range(known)
    plot_right = width - right - (unknown_lane if has_unknown else 0)
    x = Axis(x_low, x_high, left, plot_right)
    y = Axis(y_low, y_high, height - bottom, top)

    family = doc["family_size"] > 1

    def mark(i: int, c: dict[str, Any], cx: float, ya: Axis) -> dict[str, Any]:
        return _chart_mark(i, c, cx, ya, family)

    lane_x = round(plot_right + unknown_lane / 2, 2)
    zx, zy = x(0.0), y(0.0)
    quality_cost = {
        "width": width,
        "height": height,
        "left": left,
        "right": plot_right,
        "top": top,
        "bottom": height - bottom,
        "zero_y": zy,
        "zero_x": zx,
        "diamond": diamond_points(zx, zy),
        "y_ticks": y.ticks(),
        "x_ticks": x.ticks(suffix="%"),
        "unknown_lane": {"x": plot_right, "cx": lane_x, "width": unknown_lane}
        if has_unknown
        else None,
        "marks": [
            mark(i, c, lane_x if s is None else x(float(s)), y)
            for i, (c, s) in enumerate(zip(comps, savings, strict=True))
        ],
    }
    _spread_labels(quality_cost["marks"], top=top, bottom=height - bottom)

    iteration = _iteration_chart(
        comps, savings, (y_low, y_high), mark, box=(width, left, right, top)
    )
    return {"quality_cost": quality_cost, "iteration": iteration, "family": family}


def _chart_mark(i: int, c: dict[str, Any], cx: float, ya: Axis, family: bool) -> dict[str, Any]:
    """One candidate's mark: Δ with its interval (and the family-wise one) at x = cx."""
    fam = c["family_interval"]
    cy = ya(c["delta"])
    return {
        "n": i + 1,
        "run": c["run"],
        "target": c["target"],
        "cx": cx,
        "cy": cy,
        "cap_l": round(cx - 4, 2),
        "cap_r": round(cx + 4, 2),
        "box_x": round(cx - 5, 2),
        "box_y": round(cy - 5, 2),
        "label_y": round(cy - 8, 2),
        "lo": ya(c["interval"]["display_lower"]),
        "hi": ya(c["interval"]["display_upper"]),
        "flo": ya(fam["display_lower"]) if family else None,
        "fhi": ya(fam["display_upper"]) if family else None,
        "savings_unknown": c["savings"]["subject_cost_pct"] is None,
        "title": (
            f"#{i + 1} run {c['run']} / {c['target']}: Δ {c['delta']:+.4f}, interval "
            f"[{c['interval']['display_lower']:+.4f}, {c['interval']['display_upper']:+.4f}]"
            f", subject savings {_plain_pct(c['savings']['subject_cost_pct'])}"
        ),
    }


def _iteration_chart(
    comps: list[dict[str, Any]],
    savings: list[str | None],
    y_range: tuple[float, float],
    mark: Any,
    *,
    box: tuple[int, int, int, int],
) -> dict[str, Any]:
    """The iteration chart: Δ with intervals over creation order, and savings below it, two
    panels sharing the x axis."""
    width, left, right, top = box
    y_low, y_high = y_range
    known = [float(v) for v in savings if v is not None]
    panel, gap = 150, 46
    step = (width - left - right) / max(len(comps), 1)
    xs = [round(left + step * (i + 0.5), 2) for i in range(len(comps))]
    qy = Axis(y_low, y_high, top + panel, top)
    s_low, s_high = _range(known)
    s_top = top + panel + gap
    sy = Axis(s_low, s_high, s_top + panel, s_top)
    every = max(1, math.ceil(len(comps) / 30))  # keep x labels legible for long series
    iteration_marks = []
    for i, (c, s) in enumerate(zip(comps, savings, strict=True)):
        m = mark(i, c, xs[i], qy)
        m["sy"] = None if s is None else sy(float(s))
        m["s_box_y"] = round(sy(0.0) - 5, 2)
        m["show_label"] = i % every == 0
        iteration_marks.append(m)
    return {
        "width": width,
        "height": s_top + panel + 30,
        "left": left,
        "right": width - right,
        "q_top": top,
        "q_bottom": top + panel,
        "s_top": s_top,
        "s_bottom": s_top + panel,
        "x_label_y": s_top + panel + 16,
        "q_zero": qy(0.0),
        "s_zero": sy(0.0),
        "q_ticks": qy.ticks(),
        "s_ticks": sy.ticks(suffix="%"),
        "marks": iteration_marks,
    }


def _plain_pct(value: str | None) -> str:
    return "unknown" if value is None else f"{float(value):.1f}%"


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
        return mark_safe('<span class="unknown">not scored</span>')  # a constant
    if m["value"] is None:
        return format_html('{} <span class="meta">{}</span>', UNKNOWN, m["unknown_reason"])
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
        else f"[{c['bootstrap']['lower']:+.4f}, {c['bootstrap']['upper']:+.4f}]",
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


# --- the page --------------------------------------------------------------------------------


def _baseline_problem(baseline_id: int, option: RunOption | None) -> str | None:
    """Why a baseline in the URL is not one the page would offer (the link still compares:
    the server re-verifies and says what it refuses)."""
    if option is None:
        run = Run.objects.filter(pk=baseline_id).only("id", "mode", "status", "parent").first()
        if run is None:
            return f"Run {baseline_id} does not exist."
        problems = run_comparison_problems(run)
        return "; ".join(problems) if problems else f"Run {baseline_id} cannot be compared."
    if not option.single_targets:
        return f"Run {option.id} has no single-model target, so it cannot be a baseline."
    if not option.baseline_targets:
        return f"No single-model target of run {option.id} has a result for every planned case."
    if not option.can_be_baseline:
        return f"No other run is comparable with run {option.id}."
    return None


@require_GET
def compare_page(request: HttpRequest) -> HttpResponse:
    form = CompareForm(request.GET)
    if not form.is_valid():
        # A damaged link: say what is wrong and start over rather than guess a selection.
        return render(
            request,
            "compare/compare.html",
            {"nav": "compare", "form_errors": form.errors, "statements": STATEMENTS},
            status=400,
        )
    d = form.cleaned_data
    baseline_id: int | None = d["baseline"]
    pool = comparable_pool()
    if baseline_id is not None and ("op" in request.GET or d["goto"]):
        return _apply(form, pool, request)

    ctx: dict[str, Any] = {"nav": "compare", "statements": STATEMENTS, "d": d}
    if baseline_id is None:
        offered = baseline_options(d["bq"] or "", pool=pool)
        page = Paginator(offered, PAGE_SIZE).get_page(d["bpage"])
        ctx.update(
            step=1,
            baselines=page,
            baseline_links=[(o, compare_url(baseline=o.id)) for o in page.object_list],
        )
        return render(request, "compare/compare.html", ctx)

    option = pool.get(baseline_id)
    offered_all = candidate_options(baseline_id, pool=pool)
    matching = candidate_options(baseline_id, d["q"], pool=pool) if d["q"] else offered_all
    page = Paginator(matching, PAGE_SIZE).get_page(d["page"])
    selection = d["candidates"]
    selected = set(selection)
    offered_ids = {o.id for o in offered_all}
    state = {
        "baseline": baseline_id,
        "bt": d["bt"],
        "candidates": ids_format(selection),
        "q": d["q"],
        "page": d["page"],
    }
    ctx.update(
        step=2,
        baseline=option,
        baseline_problem=_baseline_problem(baseline_id, option),
        candidates_page=page,
        rows=[(o, o.id in selected) for o in page.object_list],
        shown=ids_format(o.id for o in page.object_list),
        selection=selection,
        selection_text=ids_format(selection),
        selected_not_offered=sorted(selected - offered_ids),
        matching_count=len(matching),
        matching_selected=sum(1 for o in matching if o.id in selected),
        offered_count=len(offered_all),
        state=state,
        change_baseline_url=compare_url(),
        compare_requested=bool(d["compare"]),
        compare_url=compare_url(**state, compare=True),
    )
    if d["compare"] and selection:
        ctx.update(_results(request, d, baseline_id, selection, state))
    return render(request, "compare/compare.html", ctx)


def _results(
    request: HttpRequest,
    d: dict[str, Any],
    baseline_id: int,
    selection: list[int],
    state: dict[str, Any],
) -> dict[str, Any]:
    try:
        doc = comparison_build(
            baseline_run_id=baseline_id,
            candidate_run_ids=selection,
            baseline_target=d["bt"] or None,
        )
    except CandidatesRefused as exc:
        return {"refused": exc.refused, "comparison_error": "Every selected run was refused."}
    except ComparisonError as exc:
        return {"comparison_error": str(exc)}
    comps = doc["comparisons"]
    cards_page = Paginator(range(len(comps)), CARDS_PER_PAGE).get_page(d["rpage"])
    query = {"baseline": baseline_id, "candidates": ids_format(selection)}
    if d["bt"]:
        query["baseline_target"] = d["bt"]
    base = doc["baseline"]
    return {
        "doc": doc,
        "refused": doc["refused"],
        "cards_page": cards_page,
        "cards": [card(i, comps[i], doc) for i in cards_page.object_list],
        "charts": charts(doc),
        "legend": [
            {
                "n": i + 1,
                "c": c,
                "delta": fmt_signed(c["delta"]),
                "interval": fmt_interval(c["interval"]),
                "savings": fmt_pct(c["savings"]["subject_cost_pct"]),
                "neutral": fmt_pct(c["savings"]["cache_neutral_pct"]),
                "verdict": c["verdict_label"],
                "verdict_class": VERDICT_CLASS[c["verdict"]],
            }
            for i, c in enumerate(comps)
        ],
        "baseline_quality": fmt_quality(base["quality"]),
        "baseline_cost": fmt_usd(base["subject_cost_usd"]),
        "baseline_data": provenance_summary(base["provenance"]),
        "tied_links": [
            (slug, compare_url(**{**state, "bt": slug}, compare=True)) for slug in base["tied"]
        ]
        if len(base["tied"]) > 1
        else [],
        "export_csv": f"{reverse('compare-export-csv')}?{urlencode(query)}",
        "export_json": f"{reverse('compare-export-json')}?{urlencode(query)}",
        "alpha_level": f"{1 - doc['alpha']:.0%}",
    }
