"""The trend charts of a suite's recent runs, as numbers for the `trend.svg.j2` macros.

The geometry is worked out here, where it can be tested as numbers; the SVG markup comes from
the template, so a run id or a gate class in a tooltip is escaped like any other text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from runner.gate import GATE_CLASSES
from runner.history import RunRow, mapping_of, pass_rate_of
from runner.model import STRATA

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


def colour(gate: str) -> str:
    """A gate class's colour."""
    return GATE_COLOURS.get(gate, OTHER_COLOUR)


@dataclass(frozen=True)
class Gridline:
    y: float
    label: str


@dataclass(frozen=True)
class Bar:
    """One gate class's part of one run's stacked bar."""

    x: float
    y: float
    width: float
    height: float
    fill: str
    title: str


@dataclass(frozen=True)
class Label:
    x: float
    text: str


@dataclass(frozen=True)
class GatesChart:
    """Stacked bars of gate classes, one bar per run, oldest left."""

    width: int
    height: int
    left: int
    right_x: int
    gridlines: tuple[Gridline, ...]
    bars: tuple[Bar, ...]
    labels: tuple[Label, ...]
    label_y: int


@dataclass(frozen=True)
class Point:
    x: float
    y: float
    title: str


@dataclass(frozen=True)
class Line:
    """One stratum's pass rate per run: a polyline where two or more runs have one."""

    name: str
    colour: str
    points: tuple[Point, ...]

    @property
    def path(self) -> str:
        return " ".join(f"{p.x:.1f},{p.y:.1f}" for p in self.points)


@dataclass(frozen=True)
class Legend:
    x: int
    name: str
    colour: str


@dataclass(frozen=True)
class StrataChart:
    """One side's pass rate per stratum per run (gaps where no row was admitted)."""

    side: str
    width: int
    height: int
    left: int
    right_x: int
    gridlines: tuple[Gridline, ...]
    lines: tuple[Line, ...]
    legend: tuple[Legend, ...]


def _label(row: RunRow) -> str:
    stamp_ = row.started_at or row.run_id
    return stamp_[5:16].replace("T", " ")


def gates_chart(rows: Sequence[RunRow], width: int = 1100, height: int = 200) -> GatesChart:
    """The stacked bars of `rows`; the template says so when there are none."""
    left, bottom, top = 36, 34, 10
    plot_w, plot_h = width - left - 10, height - bottom - top
    most = max(1, *(sum(r.gate_counts.values()) for r in rows)) if rows else 1
    slot = plot_w / max(1, len(rows))
    bar_w = min(42.0, slot * 0.7)
    gridlines = tuple(
        Gridline(top + plot_h * (1 - frac), str(round(most * frac))) for frac in (0, 0.5, 1)
    )
    bars: list[Bar] = []
    labels: list[Label] = []
    for i, row in enumerate(rows):
        x = left + slot * i + (slot - bar_w) / 2
        y: float = top + plot_h
        for gate in GATE_CLASSES:
            n = row.gate_counts.get(gate, 0)
            if not n:
                continue
            h = plot_h * n / most
            y -= h
            bars.append(Bar(x, y, bar_w, h, colour(gate), f"{row.run_id}: {gate} {n}"))
        if len(rows) <= 16 or i % max(1, len(rows) // 12) == 0:
            labels.append(Label(x + bar_w / 2, _label(row)))
    return GatesChart(
        width, height, left, width - 10, gridlines, tuple(bars), tuple(labels), height - 14
    )


def strata_chart(
    rows: Sequence[RunRow], side: str, width: int = 540, height: int = 180
) -> StrataChart:
    """One line per stratum: that side's pass rate per run."""
    left, bottom, top, right = 36, 24, 10, 10
    plot_w, plot_h = width - left - right, height - bottom - top
    step = plot_w / max(1, len(rows) - 1)
    gridlines = tuple(Gridline(top + plot_h * (1 - frac), f"{frac:.0%}") for frac in (0, 0.5, 1))
    lines = []
    for name in STRATA:
        points = []
        for i, row in enumerate(rows):
            rate = mapping_of(row.strata.get(side, {}).get(name))
            value = pass_rate_of(rate)
            if value is not None:
                x = left + (step * i if len(rows) > 1 else plot_w / 2)
                y = top + plot_h * (1 - value)
                points.append(Point(x, y, f"{row.run_id}: {name} {value:.0%} (n={rate.get('n')})"))
        lines.append(Line(name, STRATUM_COLOURS[name], tuple(points)))
    legend = tuple(
        Legend(left + 80 * i, name, STRATUM_COLOURS[name]) for i, name in enumerate(STRATA)
    )
    return StrataChart(side, width, height, left, width - right, gridlines, tuple(lines), legend)
