"""Trend charts as numbers: what each chart draws for a few runs, before any SVG is made."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from runner.gate import GATE_CLASSES
from runner.history import RunRow, run_labels
from runner.reports.trend import (
    GAP,
    MAX_LABELS,
    Chart,
    Label,
    axis,
    colour,
    gate_chart,
    noise_chart,
    rate_chart,
    served_chart,
    text_width,
    usage_chart,
)


def _row(i: int, **fields: Any) -> RunRow:
    name = f"202603{i + 1:02d}T030000Z-{i:06x}"
    base: dict[str, Any] = {
        "run_id": name,
        "run_dir": Path("/runs/s") / name,
        "started_at": f"2026-03-{i + 1:02d}T03:00:00+00:00",
        "finished_at": None,
        "mode": "run",
        "exit_code": 0,
        "verdict": "clean",
        "gate_counts": dict.fromkeys(GATE_CLASSES, 0),
        "strata": {},
        "stratified": True,
        "stratum_alerts": {},
        "served_models": {},
        "quiet": frozenset(),
    }
    return RunRow(**(base | fields))


def _counts(**counts: int) -> dict[str, int]:
    return {g: counts.get(g, 0) for g in GATE_CLASSES}


def test_gate_bars_stack_each_runs_classes_to_scale() -> None:
    """A run of 4 unchanged and 2 changed cases stands twice as tall as one of 3, in gate
    order from the bottom, each part coloured by its class and titled with its run."""
    rows = [
        _row(0, gate_counts=_counts(unchanged=3)),
        _row(1, gate_counts=_counts(disagreement_changed=2, unchanged=4)),
    ]
    chart = gate_chart(rows, run_labels(rows))
    parts = [(r.fill, r.h, r.title) for r in chart.rects]
    tall = chart.rects[1].h + chart.rects[2].h
    expected = (
        [colour("unchanged"), colour("disagreement_changed"), colour("unchanged")],
        2.0,
        f"03-02 03:00 ({rows[1].run_id}): disagreement_changed 2",
    )
    actual = ([p[0] for p in parts], round(tall / chart.rects[0].h, 3), parts[1][2])
    assert expected == actual


def test_column_labels_thin_out_but_every_run_keeps_its_tooltip() -> None:
    """Past 16 runs every k-th column is labelled (at most 12 labels); each bar is still
    titled with its own unique label."""
    rows = [_row(i, gate_counts=_counts(unchanged=1)) for i in range(30)]
    chart = gate_chart(rows, run_labels(rows))
    titles = [r.title.split(" (")[0] for r in chart.rects]
    expected = (True, 30)
    actual = (len(chart.labels) <= MAX_LABELS, len(set(titles)))
    assert expected == actual


def test_a_stratum_with_no_admitted_row_breaks_its_line() -> None:
    """A night where the easy stratum has no pass rate is a gap: two lines, no zero drawn."""
    rates = [1.0, None, 0.5, 0.5]
    rows = [
        _row(i, strata={"candidate": {"easy": {"n": 2, "pass_rate": r}}})
        for i, r in enumerate(rates)
    ]
    chart = rate_chart(rows, run_labels(rows), "candidate")
    expected = (1, 3)
    actual = (len(chart.lines), len(chart.dots))  # one run of 1 point draws no line
    assert expected == actual


def test_served_models_are_named_where_they_change() -> None:
    """A side that served a, a, then b has two colours and names a at the start and b where
    it changed; a night that served nothing is no change."""
    served = [["a"], ["a"], [], ["b"]]
    rows = [_row(i, served_models={"candidate": s}) for i, s in enumerate(served)]
    chart = served_chart(rows, run_labels(rows))
    named = [t.text for t in chart.labels if t.anchor == "start"]
    expected = (["a", "b"], 2, 3)
    actual = (named, len({r.fill for r in chart.rects}), len(chart.rects))
    assert expected == actual


def test_noise_chart_draws_flaky_cases_and_the_noise_floor() -> None:
    """Flaky cases and the reference's self-disagreement are two series on one count axis."""
    rows = [
        _row(0, flaky=1, noise_floor={"n": 10, "disagreeing": 2}),
        _row(1, flaky=3, noise_floor={"n": 10, "disagreeing": 0}),
    ]
    chart = noise_chart(rows, run_labels(rows))
    expected = (2, ["flaky cases", "reference self-disagreement"], ["0", "1", "2", "3"])
    actual = (len(chart.lines), [name for name, _ in chart.legend], [t.text for t in chart.ticks])
    assert expected == actual


def test_nothing_recorded_is_an_empty_chart() -> None:
    """Without any cost, latency, flaky case or noise floor those charts say so, not draw 0."""
    rows = [_row(0), _row(1)]
    labels = run_labels(rows)
    expected = [True, True, True]
    actual = [
        usage_chart(rows, labels, "cost_usd").empty,
        usage_chart(rows, labels, "latency_p50_ms").empty,
        noise_chart(rows, labels).empty,
    ]
    assert expected == actual


def _latency(*p50: float) -> list[RunRow]:
    return [
        _row(i, usage={"reference": {"latency_p50_ms": v}, "candidate": {"latency_p50_ms": v / 2}})
        for i, v in enumerate(p50)
    ]


def _boxes(chart: Chart, labels: tuple[Label, ...]) -> list[tuple[float, float]]:
    """Each label's (left, right) edge, as wide as `text_width` says, by its anchor."""
    out = []
    for label in labels:
        w = text_width(label.text)
        left = {"start": label.x, "middle": label.x - w / 2, "end": label.x - w}[label.anchor]
        out.append((left, left + w))
    return out


def test_a_value_axis_goes_in_round_steps_to_a_round_top() -> None:
    """4824.5 ms was a tick of its own ("4824.5 ms"); the axis now runs in round steps (1, 2,
    2.5 or 5 times a power of ten) to a round top at or above the largest value."""
    expected = [
        (10000.0, [0.0, 2500.0, 5000.0, 7500.0, 10000.0]),
        (6000.0, [0.0, 2000.0, 4000.0, 6000.0]),
        (0.06, [0.0, 0.02, 0.04, 0.06]),
        (3.0, [0.0, 1.0, 2.0, 3.0]),
    ]
    found = [axis(9649), axis(4824.5), axis(0.048), axis(3, whole=True)]
    assert expected == [(top, [round(v, 6) for v in values]) for top, values in found]
    chart = usage_chart(_latency(4824.5, 9649), run_labels(_latency(1, 2)), "latency_p50_ms")
    assert [t.text for t in chart.ticks] == ["0 s", "2.5 s", "5 s", "7.5 s", "10 s"]


def test_the_left_margin_holds_the_widest_tick_label() -> None:
    """ "9649 ms" at the axis read "549 ms": the tick text ran off the chart's left edge. The
    margin is now as wide as the widest tick text, so each starts inside the chart."""
    rows = _latency(999, 640)  # ticks in ms, the widest "1000 ms"
    chart = usage_chart(rows, run_labels(rows), "latency_p50_ms")
    starts = [chart.left - 6 - text_width(t.text) for t in chart.ticks]
    assert "1000 ms" in [t.text for t in chart.ticks]
    assert min(starts) >= 0, (chart.left, [t.text for t in chart.ticks])


def test_nine_runs_date_labels_do_not_touch_and_stay_inside() -> None:
    """With 9 runs a narrow chart drew every date label, overlapping into one string: every
    k-th is labelled now, k as small as keeps them GAP apart, all inside the chart."""
    rows = [_row(i, strata={"candidate": {"easy": {"n": 2, "pass_rate": 1.0}}}) for i in range(9)]
    for chart in (
        rate_chart(rows, run_labels(rows), "candidate"),
        gate_chart(rows, run_labels(rows)),
    ):
        boxes = sorted(_boxes(chart, chart.labels))
        gaps = [b[0] - a[1] for a, b in itertools.pairwise(boxes)]
        assert min(gaps) >= GAP and boxes[0][0] >= 0 and boxes[-1][1] <= chart.width, boxes
        assert len(chart.labels) > 1


def test_a_long_model_name_stops_where_the_next_one_starts() -> None:
    """A long served-model name ran into the next one in its lane: it is cut with "…" GAP
    before the next name, the last one at the chart's edge; the blocks' tooltips keep it."""
    long = "claude-opus-4-5-20251101-with-a-very-long-deployment-name"
    served = [[long], ["gpt-4o-mini"], [long], ["b"]] * 2
    rows = [_row(i, served_models={"candidate": s}) for i, s in enumerate(served)]
    chart = served_chart(rows, run_labels(rows))
    named = tuple(t for t in chart.labels if t.anchor == "start")
    boxes = _boxes(chart, named)
    gaps = [b[0] - a[1] for a, b in itertools.pairwise(boxes)]
    assert min(gaps) >= GAP and max(right for _, right in boxes) <= chart.width - chart.right
    assert any(t.text.endswith("…") and long.startswith(t.text[:-1]) for t in named)
    assert sum(long in r.title for r in chart.rects) == 4
