"""The Compare page's charts (SPEC R11, issue 9): quality against savings per comparison, and
the iteration series, as SVG geometry computed here (axes, ticks, marks, labels that do not
overlap); the template only draws what this returns."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from srbench.money import percent_text


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


LABEL_CHAR_PX, LABEL_HEIGHT_PX = 7.0, 12.0  # a label's box, a little larger than drawn
Box = tuple[float, float, float, float]  # left, top, right, bottom


def _label_box(x: float, y: float, text: str) -> Box:
    """The box of a label drawn with its baseline at y (a little room under it for descenders)."""
    return (x, y - LABEL_HEIGHT_PX + 2, x + LABEL_CHAR_PX * len(text) + 2, y + 2)


def _point_box(x: float, y: float, r: float) -> Box:
    return (x - r, y - r, x + r, y + r)


def _free(box: Box, taken: list[Box]) -> bool:
    left, top, right, bottom = box
    return all(right <= x0 or x1 <= left or bottom <= y0 or y1 <= top for x0, y0, x1, y1 in taken)


def _place(
    spots: list[tuple[float, float]], text: str, taken: list[Box], top: float, bottom: float
) -> tuple[float, float]:
    """The first spot whose label covers nothing taken and stays inside the plot; the first
    spot when every one is taken."""
    for x, y in spots:
        box = _label_box(x, y, text)
        if top <= box[1] and box[3] <= bottom and _free(box, taken):
            return x, y
    return spots[0]


def _spread_labels(
    marks: list[dict[str, Any]], baseline: tuple[float, float], *, top: float, bottom: float
) -> dict[str, float]:
    """Place the baseline's label and each mark's number where they cover no point and no
    label placed before them (issue 23; outside probe, session 5: the baseline's label lay
    over the points beside it): the baseline's label below or above its diamond, each number
    beside its point first, then stepping up and down a line at a time, then further right.
    Returns where the baseline's label goes."""
    zx, zy = baseline
    taken = [_point_box(zx, zy, 8)] + [_point_box(m["cx"], m["cy"], 6) for m in marks]
    word = "baseline"
    width = LABEL_CHAR_PX * len(word) + 2
    spots = [
        (zx + sx, zy + dy)
        for dy in (18, -10, 30, -22, 42, -34)
        for sx in (9.0, -9.0 - width, -width / 2)
    ]
    bx, by = _place(spots, word, taken, top, bottom)
    taken.append(_label_box(bx, by, word))
    for m in marks:
        text = str(m["n"])
        x0, y0 = m["cap_r"], m["label_y"]
        spots = [
            (x0 + dx, y0 + dy * LABEL_HEIGHT_PX)
            for dx in (0.0, 14.0, 28.0, 42.0)
            for dy in (0, -1, 1, -2, 2, -3, 3, -4, 4)
        ]
        x, y = _place(spots, text, taken, top, bottom)
        m["label_x"], m["label_y"] = round(x, 2), round(y, 2)
        taken.append(_label_box(x, y, text))
    return {"x": round(bx, 2), "y": round(by, 2)}


@dataclass(frozen=True)
class ChartPoint:
    """One candidate as the charts place it: Δ with its displayed Hoeffding and family-wise
    bounds, and its subject-cost savings in percent (None: unknown, drawn in its own lane)."""

    run: int
    target: str
    delta: float
    lower: float
    upper: float
    family_lower: float
    family_upper: float
    savings: Decimal | None


def charts(points: Sequence[ChartPoint]) -> dict[str, Any]:
    """Geometry of the two charts (R11.4) for every comparison, not just a page of cards.

    Quality/cost: Δ with its Hoeffding interval (and the family-wise one when several are
    compared) against subject-cost savings; the baseline is the marked origin. A candidate
    whose savings are unknown is drawn in a separate "unknown" lane with a hollow square —
    never at 0 %. Iteration: Δ with intervals over creation order, and savings below it,
    unknown again as its own mark. Shapes and numbers carry the meaning, not colour.
    """
    width, height, left, right, top, bottom = 760, 320, 64, 20, 16, 44
    unknown_lane = 70  # px on the right of the scatter for unknown savings
    family = len(points) > 1
    lows = [p.lower for p in points] + ([p.family_lower for p in points] if family else [])
    highs = [p.upper for p in points] + ([p.family_upper for p in points] if family else [])
    y_low, y_high = _range([*lows, *highs], pad=0.04)
    y_low, y_high = max(y_low, -1.0), min(y_high, 1.0)

    known = [float(p.savings) for p in points if p.savings is not None]
    has_unknown = any(p.savings is None for p in points)
    x_low, x_high = _range(known)
    plot_right = width - right - (unknown_lane if has_unknown else 0)
    x = Axis(x_low, x_high, left, plot_right)
    y = Axis(y_low, y_high, height - bottom, top)

    def mark(i: int, p: ChartPoint, cx: float, ya: Axis) -> dict[str, Any]:
        return _chart_mark(i, p, cx, ya, family)

    lane_x = round(plot_right + unknown_lane / 2, 2)
    zx, zy = x(0.0), y(0.0)
    quality_cost: dict[str, Any] = {
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
            mark(i, p, lane_x if p.savings is None else x(float(p.savings)), y)
            for i, p in enumerate(points)
        ],
    }
    quality_cost["baseline_label"] = _spread_labels(
        quality_cost["marks"], (zx, zy), top=top, bottom=height - bottom
    )

    iteration = _iteration_chart(points, (y_low, y_high), mark, box=(width, left, right, top))
    return {"quality_cost": quality_cost, "iteration": iteration, "family": family}


def _chart_mark(i: int, p: ChartPoint, cx: float, ya: Axis, family: bool) -> dict[str, Any]:
    """One candidate's mark: Δ with its interval (and the family-wise one) at x = cx."""
    cy = ya(p.delta)
    return {
        "n": i + 1,
        "run": p.run,
        "target": p.target,
        "cx": cx,
        "cy": cy,
        "cap_l": round(cx - 4, 2),
        "cap_r": round(cx + 4, 2),
        "box_x": round(cx - 5, 2),
        "box_y": round(cy - 5, 2),
        "label_y": round(cy - 8, 2),
        "lo": ya(p.lower),
        "hi": ya(p.upper),
        "flo": ya(p.family_lower) if family else None,
        "fhi": ya(p.family_upper) if family else None,
        "savings_unknown": p.savings is None,
        "title": (
            f"#{i + 1} run {p.run} / {p.target}: Δ {p.delta:+.4f}, interval "
            f"[{p.lower:+.4f}, {p.upper:+.4f}], subject savings {percent_text(p.savings)}"
        ),
    }


def _iteration_chart(
    points: Sequence[ChartPoint],
    y_range: tuple[float, float],
    mark: Any,
    *,
    box: tuple[int, int, int, int],
) -> dict[str, Any]:
    """The iteration chart: Δ with intervals over creation order, and savings below it, two
    panels sharing the x axis."""
    width, left, right, top = box
    y_low, y_high = y_range
    known = [float(p.savings) for p in points if p.savings is not None]
    panel, gap = 150, 46
    step = (width - left - right) / max(len(points), 1)
    xs = [round(left + step * (i + 0.5), 2) for i in range(len(points))]
    qy = Axis(y_low, y_high, top + panel, top)
    s_low, s_high = _range(known)
    s_top = top + panel + gap
    sy = Axis(s_low, s_high, s_top + panel, s_top)
    every = max(1, math.ceil(len(points) / 30))  # keep x labels legible for long series
    iteration_marks = []
    for i, p in enumerate(points):
        m = mark(i, p, xs[i], qy)
        m["sy"] = None if p.savings is None else sy(float(p.savings))
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
