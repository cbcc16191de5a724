"""Trend charts over runs, as geometry a template draws: gate classes, pass rates, noise,
served models and usage, one column per run, oldest left. report.html's trend and the history
page draw the same charts.

Each chart is a `Chart` of plain shapes (rectangles, polylines, dots, texts) with every
coordinate computed here, where it can be tested as numbers; `templates/trend.svg.j2` turns
one into an inline SVG, so model names and run ids in a tooltip or a label are escaped by the
engine like any other text. Columns are labelled by `history.run_labels`, unique among the runs
shown: two runs in one minute show their seconds.

Text is laid out here too, from an estimate of its width (`text_width`): the left margin is as
wide as the widest tick label, so "9649 ms" is never cut to "549 ms"; a value axis is in round
steps up to a round top (`nice_step`); column labels thin out until they no longer touch; a
model's name stops (with "…") where the next name in its lane starts, its tooltip whole.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from runner.gate import GATE_CLASSES
from runner.history import RunRow, mapping_of, pass_rate_of
from runner.model import SIDES, STRATA

GATE_COLOURS = {
    "new_case": "#7c8db5",
    "fixture_move": "#a78bfa",
    "transport_miss": "#64748b",
    "schema_miss": "#94a3b8",
    "alias_swap": "#f59e0b",
    "disagreement_changed": "#e11d48",
    "flaky": "#0ea5e9",
    "unchanged": "#10b981",
    "retired_case": "#d6d3d1",
}
OTHER_COLOUR = "#64748b"  # a gate class added later gets a neutral grey, never a crash
STRATUM_COLOURS = {"easy": "#10b981", "medium": "#3b82f6", "stretch": "#a855f7"}
SIDE_COLOURS = {"reference": "#475569", "candidate": "#e11d48"}
# one colour per distinct set of served models, in the order the sets first appear
MODEL_COLOURS = ("#3b82f6", "#f59e0b", "#10b981", "#a855f7", "#ef4444", "#14b8a6", "#eab308")
MAX_LABELS = 12  # beyond this many columns, every k-th is labelled (each keeps its tooltip)
# an 11 px label's average character width in the chart's units, on the wide side (system-ui
# digits are about 6.1): what a margin or a gap is made wide enough for
CHAR_W = 6.6
GAP = 8  # the least room between two labels, and between a tick label and the plot
MARGIN = 44  # the left margin at the least (the count and percent axes fit in it)


def text_width(text: str) -> float:
    """About how wide `text` is drawn in a chart's 11 px label font."""
    return len(text) * CHAR_W


def nice_step(most: float, *, ticks: int = 4, whole: bool = False) -> float:
    """A round step (1, 2, 2.5 or 5 times a power of ten; 2.5 left out for `whole` counts,
    never below 1 for them) that cuts 0..`most` into at most `ticks` steps."""
    raw = max(most, 1e-12) / ticks
    power = 10.0 ** math.floor(math.log10(raw))
    factors = (1, 2, 5, 10) if whole else (1, 2, 2.5, 5, 10)
    step = next(f * power for f in factors if f * power >= raw * (1 - 1e-9))
    return max(1.0, step) if whole else step


def axis(most: float, *, whole: bool = False) -> tuple[float, list[float]]:
    """The axis's round top, at or above `most`, and its tick values from 0 up to it."""
    step = nice_step(most, whole=whole)
    count = max(1, math.ceil(most / step - 1e-9))
    return step * count, [step * i for i in range(count + 1)]


def colour(gate: str) -> str:
    """A gate class's colour."""
    return GATE_COLOURS.get(gate, OTHER_COLOUR)


@dataclass(frozen=True)
class Tick:
    """A horizontal grid line and its value, left of the plot."""

    y: float
    text: str


@dataclass(frozen=True)
class Rect:
    x: float
    y: float
    w: float
    h: float
    fill: str
    title: str


@dataclass(frozen=True)
class Dot:
    x: float
    y: float
    fill: str
    title: str


@dataclass(frozen=True)
class Line:
    """A polyline through `points` ("x,y x,y ..."); a gap in the data starts a new Line."""

    stroke: str
    points: str


@dataclass(frozen=True)
class Label:
    x: float
    y: float
    text: str
    anchor: str = "middle"


@dataclass(frozen=True)
class Chart:
    """One inline SVG: its size, grid, shapes and legend (name, colour)."""

    label: str  # the SVG's aria-label
    width: int
    height: int
    left: int
    right: int
    ticks: tuple[Tick, ...] = ()
    rects: tuple[Rect, ...] = ()
    lines: tuple[Line, ...] = ()
    dots: tuple[Dot, ...] = ()
    labels: tuple[Label, ...] = ()
    legend: tuple[tuple[str, str], ...] = ()
    empty: bool = False  # nothing to draw: the page says so instead


@dataclass
class _Frame:
    """A plot area of `n` equal columns inside a `width` x `height` SVG."""

    n: int
    width: int = 1100
    height: int = 200
    left: int = 44
    right: int = 10
    top: int = 10
    bottom: int = 34
    labels: list[Label] = field(default_factory=list)

    @property
    def plot_h(self) -> float:
        return self.height - self.top - self.bottom

    @property
    def slot(self) -> float:
        return (self.width - self.left - self.right) / max(1, self.n)

    def x(self, i: int) -> float:
        """The centre of column `i`."""
        return self.left + self.slot * (i + 0.5)

    def y(self, frac: float) -> float:
        return self.top + self.plot_h * (1 - frac)

    def ticks(self, marks: Sequence[tuple[float, str]]) -> tuple[Tick, ...]:
        """Grid lines at each (share of the height, text); the left margin widens to hold the
        widest text, so none is cut at the chart's edge. Call before placing anything."""
        self.left = max([self.left, *(math.ceil(text_width(t) + 6 + GAP) for _, t in marks)])
        return tuple(Tick(round(self.y(frac), 1), text) for frac, text in marks)

    def fit_columns(self, names: Sequence[str]) -> None:
        """Widen the right margin until the last column's label fits inside the chart (the
        first fits in the left margin). Call before placing anything."""
        widest = max((text_width(name) for name in names), default=0.0)
        for _ in range(3):  # the slot shrinks as the margin grows: settle it
            self.right = max(self.right, math.ceil(widest / 2 - self.slot / 2 + 2))

    def column_labels(self, names: Sequence[str]) -> tuple[Label, ...]:
        """Every k-th column's label, k as small as keeps them from touching (and at most
        MAX_LABELS of them past MAX_LABELS + 4 columns)."""
        widest = max((text_width(name) for name in names), default=0.0)
        step = max(1, math.ceil((widest + GAP) / self.slot))
        if len(names) > MAX_LABELS + 4:
            step = max(step, -(-len(names) // MAX_LABELS))
        return tuple(
            Label(round(self.x(i), 1), self.height - 14, name)
            for i, name in enumerate(names)
            if i % step == 0
        )

    def chart(self, label: str, **parts: Any) -> Chart:
        return Chart(
            label=label,
            width=self.width,
            height=self.height,
            left=self.left,
            right=self.right,
            **parts,
        )


def _count_axis(most: int) -> tuple[float, tuple[tuple[float, str], ...]]:
    """A count axis's round top and its ticks in whole steps: it never reads 1.5 cases."""
    top, values = axis(most, whole=True)
    return top, tuple((v / top, f"{v:.0f}") for v in values)


def gate_chart(rows: Sequence[RunRow], labels: Sequence[str]) -> Chart:
    """Stacked bars of each run's gate classes."""
    frame = _Frame(len(rows))
    if not rows:
        return frame.chart("gate classes per run", empty=True)
    most, marks = _count_axis(max(1, *(sum(r.gate_counts.values()) for r in rows)))
    ticks = frame.ticks(marks)
    frame.fit_columns(labels)
    bar_w = min(42.0, frame.slot * 0.7)
    rects = []
    for i, (row, name) in enumerate(zip(rows, labels, strict=True)):
        y = frame.y(0)
        for gate in GATE_CLASSES:
            n = row.gate_counts.get(gate, 0)
            if not n:
                continue
            h = frame.plot_h * n / most
            y -= h
            rects.append(
                Rect(
                    round(frame.x(i) - bar_w / 2, 1),
                    round(y, 1),
                    round(bar_w, 1),
                    round(h, 1),
                    colour(gate),
                    f"{name} ({row.run_id}): {gate} {n}",
                )
            )
    return frame.chart(
        "gate classes per run",
        ticks=ticks,
        rects=tuple(rects),
        labels=frame.column_labels(labels),
        legend=tuple((g, colour(g)) for g in GATE_CLASSES),
    )


def _series(
    frame: _Frame,
    rows: Sequence[RunRow],
    labels: Sequence[str],
    named: Sequence[tuple[str, str, Callable[[RunRow], tuple[float, str] | None]]],
) -> tuple[tuple[Line, ...], tuple[Dot, ...]]:
    """Per (name, colour, value of a run as (share of the plot's height, tooltip) or None),
    a line broken where a run has no value, and a dot per value."""
    lines: list[Line] = []
    dots: list[Dot] = []
    for name, ink, value_of in named:
        run: list[str] = []
        for i, (row, label) in enumerate(zip(rows, labels, strict=True)):
            value = value_of(row)
            if value is None:
                if len(run) > 1:
                    lines.append(Line(ink, " ".join(run)))
                run = []
                continue
            frac, text = value
            x, y = round(frame.x(i), 1), round(frame.y(frac), 1)
            run.append(f"{x},{y}")
            dots.append(Dot(x, y, ink, f"{label} ({row.run_id}): {name} {text}"))
        if len(run) > 1:
            lines.append(Line(ink, " ".join(run)))
    return tuple(lines), tuple(dots)


def _stratum_rate(side: str, stratum: str) -> Callable[[RunRow], tuple[float, str] | None]:
    def value_of(row: RunRow) -> tuple[float, str] | None:
        rate = mapping_of(row.strata.get(side, {}).get(stratum))
        value = pass_rate_of(rate)
        return None if value is None else (value, f"{value:.0%} (n={rate.get('n')})")

    return value_of


def rate_chart(rows: Sequence[RunRow], labels: Sequence[str], side: str) -> Chart:
    """One line per stratum: `side`'s pass rate per run (gaps where no row was admitted). An
    unstratified suite counts every case in `medium`, drawn as one line named `all`."""
    frame = _Frame(len(rows), width=540, height=190)
    what = f"{side} pass rates per run"
    if not rows:
        return frame.chart(what, empty=True)
    stratified = any(r.stratified for r in rows)
    strata = STRATA if stratified else ("medium",)
    named = [
        (name if stratified else "all", STRATUM_COLOURS[name], _stratum_rate(side, name))
        for name in strata
    ]
    ticks = frame.ticks(((0, "0%"), (0.5, "50%"), (1, "100%")))
    frame.fit_columns(labels)
    lines, dots = _series(frame, rows, labels, named)
    return frame.chart(
        what,
        ticks=ticks,
        lines=lines,
        dots=dots,
        labels=frame.column_labels(labels),
        legend=tuple((name, ink) for name, ink, _ in named),
    )


def _count(value: Any) -> int | None:
    return value if type(value) is int and value >= 0 else None


def noise_chart(rows: Sequence[RunRow], labels: Sequence[str]) -> Chart:
    """Per run, its flaky cases and the cases on which the reference disagreed with itself
    (the noise floor, where the suite runs a noise check)."""
    frame = _Frame(len(rows), height=180)
    what = "noise floor and flaky cases per run"

    def floor(row: RunRow) -> int | None:
        return _count(row.noise_floor.get("disagreeing"))

    counts = [c for r in rows for c in (r.flaky, floor(r)) if c is not None]
    if not rows or not any(r.flaky or r.noise_floor for r in rows):
        return frame.chart(what, empty=True)
    most, marks = _count_axis(max(1, *counts))
    ticks = frame.ticks(marks)
    frame.fit_columns(labels)

    def flaky(row: RunRow) -> tuple[float, str]:
        return row.flaky / most, str(row.flaky)

    def disagreeing(row: RunRow) -> tuple[float, str] | None:
        n = floor(row)
        return None if n is None else (n / most, f"{n} of {row.noise_floor.get('n')}")

    named = [
        ("flaky cases", GATE_COLOURS["flaky"], flaky),
        ("reference self-disagreement", SIDE_COLOURS["reference"], disagreeing),
    ]
    lines, dots = _series(frame, rows, labels, named)
    return frame.chart(
        what,
        ticks=ticks,
        lines=lines,
        dots=dots,
        labels=frame.column_labels(labels),
        legend=tuple((name, ink) for name, ink, _ in named),
    )


def served_chart(rows: Sequence[RunRow], labels: Sequence[str]) -> Chart:
    """A lane per side, a block per run coloured by the set of models it served, the models
    named where the set changes (and at the start)."""
    lane_h, gap = 26, 12
    frame = _Frame(len(rows), height=10 + len(SIDES) * (lane_h + gap) + 24, left=90, bottom=24)
    what = "served models per run"
    if not rows or not any(r.served_models.get(s) for r in rows for s in SIDES):
        return frame.chart(what, empty=True)
    frame.fit_columns(labels)
    fills: dict[tuple[str, ...], str] = {}
    rects: list[Rect] = []
    texts: list[Label] = []
    for lane, side in enumerate(SIDES):
        top = 10 + lane * (lane_h + gap)
        texts.append(Label(frame.left - 8, top + lane_h / 2 + 4, side, "end"))
        before: tuple[str, ...] | None = None
        names: list[Label] = []  # where this lane's served set changes, named
        for i, (row, label) in enumerate(zip(rows, labels, strict=True)):
            served = tuple(sorted(row.served_models.get(side) or ()))
            if not served:
                continue  # a run that served none is a gap, not a change
            fill = fills.setdefault(served, MODEL_COLOURS[len(fills) % len(MODEL_COLOURS)])
            models = ", ".join(served)
            rects.append(
                Rect(
                    round(frame.x(i) - frame.slot / 2, 1),
                    top,
                    round(frame.slot, 1),
                    lane_h,
                    fill,
                    f"{label} ({row.run_id}): {side} served {models}",
                )
            )
            if served != before:
                names.append(
                    Label(round(frame.x(i) - frame.slot / 2 + 3, 1), top - 2, models, "start")
                )
            before = served
        texts.extend(_cut_to_room(names, frame.width - frame.right))
    return frame.chart(what, rects=tuple(rects), labels=(*texts, *frame.column_labels(labels)))


def _cut_to_room(names: Sequence[Label], end: float) -> list[Label]:
    """Start-anchored names of one lane, each cut (with "…") where the next one starts, the
    last at `end`: a long model name ran into the next. A name with no room for a character
    and "…" is left out; its blocks' tooltips still name it."""
    kept = []
    for name, after in zip(names, [*(n.x for n in names[1:]), end][: len(names)], strict=True):
        room = int((after - name.x - GAP) // CHAR_W)
        text = name.text if len(name.text) <= room else name.text[: room - 1] + "…"
        if room >= 2:
            kept.append(Label(name.x, name.y, text, name.anchor))
    return kept


def _money(value: float) -> str:
    return f"${value:.4f}" if value < 1 else f"${value:.2f}"


def _decimals(step: float) -> int:
    """How many decimals show every tick of a `step` axis as it is (0.25: 2)."""
    return next((d for d in range(12) if abs(round(step, d) - step) < step * 1e-6), 12)


def _tick_text(key: str, value: float, step: float) -> str:
    """A round tick's text: dollars to the step's decimals (at least 2); milliseconds, or
    seconds from a 1 s step up."""
    if key == "cost_usd":
        return f"${value:.{max(2, _decimals(step))}f}"
    return f"{value / 1000:g} s" if step >= 1000 else f"{value:g} ms"


def usage_chart(rows: Sequence[RunRow], labels: Sequence[str], key: str) -> Chart:
    """One line per side: its cost (`cost_usd`) or median latency (`latency_p50_ms`) per run,
    gaps where it is unknown (an unpriced endpoint, missing usage)."""
    frame = _Frame(len(rows), width=540, height=190)
    what = {"cost_usd": "cost per run", "latency_p50_ms": "median latency per run"}[key]
    fmt: Callable[[float], str] = _money if key == "cost_usd" else (lambda v: f"{v:g} ms")
    values = [
        v
        for r in rows
        for side in SIDES
        if isinstance(v := mapping_of(r.usage.get(side)).get(key), int | float)
        and not isinstance(v, bool)
        and 0 <= v < math.inf
    ]
    if not values or not any(values):
        return frame.chart(what, empty=True)
    most, marks = axis(float(max(values)))
    step = marks[1]
    ticks = frame.ticks(tuple((v / most, _tick_text(key, v, step)) for v in marks))
    frame.fit_columns(labels)

    def of(side: str) -> Callable[[RunRow], tuple[float, str] | None]:
        def value_of(row: RunRow) -> tuple[float, str] | None:
            value = mapping_of(row.usage.get(side)).get(key)
            if isinstance(value, bool) or not isinstance(value, int | float):
                return None
            if not 0 <= value < math.inf:
                return None
            text = fmt(float(value))
            if key == "cost_usd" and (calls := row.calls.get(side)):
                unknown = calls["cost_unknown"]
                if unknown >= calls["calls"]:
                    return None  # no call's cost is known: a gap, never a zero
                if unknown:
                    text = f"at least {text} ({unknown} of {calls['calls']} call(s) unknown)"
            return min(1.0, value / most), text

        return value_of

    named = [(side, SIDE_COLOURS[side], of(side)) for side in SIDES]
    lines, dots = _series(frame, rows, labels, named)
    return frame.chart(
        what,
        ticks=ticks,
        lines=lines,
        dots=dots,
        labels=frame.column_labels(labels),
        legend=tuple((name, ink) for name, ink, _ in named),
    )


def charts(rows: Sequence[RunRow], labels: Sequence[str]) -> Mapping[str, Chart]:
    """Every trend of the history page, by name, over `rows` (the nights, oldest first)."""
    return {
        "gates": gate_chart(rows, labels),
        **{f"rates_{side}": rate_chart(rows, labels, side) for side in SIDES},
        "noise": noise_chart(rows, labels),
        "served": served_chart(rows, labels),
        "cost": usage_chart(rows, labels, "cost_usd"),
        "latency": usage_chart(rows, labels, "latency_p50_ms"),
    }
