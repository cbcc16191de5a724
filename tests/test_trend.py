"""Trend charts as numbers: what each chart draws for a few runs, before any SVG is made."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runner.gate import GATE_CLASSES
from runner.history import RunRow, run_labels
from runner.reports.trend import (
    MAX_LABELS,
    colour,
    gate_chart,
    noise_chart,
    rate_chart,
    served_chart,
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
    expected = (2, ["flaky cases", "reference self-disagreement"], ["0", "1", "3"])
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
