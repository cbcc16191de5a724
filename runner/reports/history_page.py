"""A suite's history as one page: `runs/<suite>/index.html`, beside the run directories.

The page is what `parallax history` prints, for a person: a row per run (newest first) linking
to that run's report, and the trends over nights of gate classes, pass rates, noise, served
models and usage. Its links are relative and it loads nothing, so the suite's folder can be
copied as a CI artifact and opened anywhere. `parallax history --html` writes it, and every
finished run rewrites it (`reports.write.after_run`) from the window of runs its own report has
read already, so keeping it current reads no run twice. Replays, and runs a later
`--retry-unscored` run completed, are listed, marked, but are not nights: the trends and the
served-model changes leave them out, as `history` does.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from markupsafe import Markup

from runner.errors import UsageError
from runner.files import check_writable
from runner.gate import GATE_CLASSES
from runner.history import (
    RunRow,
    ceiling_candidates,
    count_of,
    model_changes,
    pass_rate_of,
    run_labels,
    streaks,
)
from runner.ledger import write_atomic
from runner.model import SIDES, STRATA
from runner.reports.render import content_security_policy, environment
from runner.reports.trend import Chart, charts

PAGE_NAME = "index.html"  # in runs/<suite>/, beside the run directories
PAGE_RUNS = 30  # the runs a page shows unless `history --html --last N` says otherwise
CEILING_SHOWN = 200  # candidates listed by id; `parallax history` lists them all
REPORT = "report.html"


@dataclass(frozen=True)
class Rate:
    """One stratum's pass rate on one side, as the table shows it."""

    stratum: str
    text: str


@dataclass(frozen=True)
class Served:
    """The models one side served in a run; `changed` when they differ from the night before."""

    side: str
    models: tuple[str, ...]
    changed: bool


@dataclass(frozen=True)
class Usage:
    side: str
    cost: str
    tokens: str
    p50: str  # "p50 12 ms", or "no latency" where none was measured (a recorded run)


@dataclass(frozen=True)
class RunLine:
    """One run as a row of the page's table."""

    run: str  # the run directory's name
    label: str  # unique among the page's runs
    href: str  # relative to the page: the run's report.html
    night: bool  # False for a replay, a partial run and a run a later retry stands for
    partial: bool  # a partial run (`run --case`, `--stratum`)
    shard: str  # one shard's run (`1/4`, as `--shard` names it), or ""
    retried_by: str  # the label of the retry that stands for this run's night, or ""
    mode: str
    verdict: str
    exit_code: str
    gates: tuple[tuple[str, int], ...]  # the classes with cases, in gate order
    rates: tuple[tuple[str, tuple[Rate, ...]], ...]  # per side
    alerts: tuple[str, ...]  # "candidate: easy_regression"
    paired: str
    noise: str
    flaky: int
    served: tuple[Served, ...]
    usage: tuple[Usage, ...]
    requests: tuple[tuple[str, int], ...]  # per side with changed requests, cases


@dataclass(frozen=True)
class Page:
    suite: str
    runs: tuple[RunLine, ...]  # newest first
    nights: int
    replays: int
    retried: int  # runs a later --retry-unscored run stands for
    partials: int  # partial runs (`run --case`, `--stratum`) a later retry does not stand for
    shards: int  # whole shards' runs a later retry does not stand for (their merge is the night)
    charts: Mapping[str, Chart]
    changes: tuple[Mapping[str, Any], ...]  # history.model_changes, oldest first, labelled
    retire_after: int | None  # None: not known (no config), no ceiling candidates shown
    ceiling: tuple[tuple[str, int], ...]  # (case id, runs quiet in a row), the first CEILING_SHOWN
    ceiling_total: int
    notes: tuple[str, ...]
    generated_at: str


def page_path(suite_dir: Path) -> Path:
    """Where a suite's history page is written by default: beside its run directories."""
    return suite_dir / PAGE_NAME


def _href(row: RunRow, page_dir: Path) -> str:
    """A relative link from the page to the run's report (its summary when it has none)."""
    target = row.run_dir / REPORT
    if not target.is_file():
        target = row.run_dir / "summary.json"
    rel = os.path.relpath(target.resolve(), page_dir.resolve())
    return quote(Path(rel).as_posix(), safe="/")  # a name is never read as a scheme or query


def _rates(row: RunRow, side: str) -> tuple[Rate, ...]:
    strata = STRATA if row.stratified else ("medium",)  # unstratified: every case in medium
    rates = []
    for name in strata:
        rate = row.strata.get(side, {}).get(name)
        if rate is None:
            continue
        value, n = pass_rate_of(rate), count_of(rate)
        shown = "-" if value is None else f"{value:.0%}"
        rates.append(Rate(name if row.stratified else "all", f"{shown} (n={n})"))
    return tuple(rates)


def _noise(row: RunRow) -> str:
    floor = row.noise_floor
    n, disagreeing = count_of(floor), floor.get("disagreeing")
    if not n or type(disagreeing) is not int:
        return ""
    return f"reference self-disagreement {disagreeing}/{n}"


def _figure(value: Any, unit: str = "") -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "?"
    return f"{value:g}{unit}"


def _usage(row: RunRow) -> tuple[Usage, ...]:
    out = []
    for side in SIDES:
        figures = row.usage.get(side)
        if not isinstance(figures, Mapping):
            continue
        calls = row.calls.get(side, {})
        cost, tokens = figures.get("cost_usd"), f"{_figure(figures.get('total_tokens'))} tokens"
        unknown, total = calls.get("cost_unknown", 0), calls.get("calls", 0)
        if not isinstance(cost, int | float):
            money = "unpriced"
        elif total and unknown >= total:
            money = "cost unknown"  # missing usage is unknown, never $0
        else:
            money = f"${cost:.4f}" + (f" (+{unknown} call(s) unknown)" if unknown else "")
        if calls and not calls.get("with_usage"):
            tokens = "no usage"
        p50 = figures.get("latency_p50_ms")
        latency = "no latency" if p50 is None else f"p50 {_figure(p50, ' ms')}"  # none measured
        out.append(Usage(side, money, tokens, latency))
    return tuple(out)


def _line(
    row: RunRow, label: str, page_dir: Path, changed: set[tuple[str, str]], by_id: dict[str, str]
) -> RunLine:
    return RunLine(
        run=row.run_dir.name,
        label=label,
        href=_href(row, page_dir),
        night=row.counts_as_night,
        partial=row.partial is not None,
        shard=row.shard or "",
        retried_by=by_id.get(row.retried_by, row.retried_by) if row.retried_by else "",
        mode=row.mode or "?",
        verdict=row.verdict or "?",
        exit_code="?" if row.exit_code is None else str(row.exit_code),
        gates=tuple((g, n) for g in GATE_CLASSES if (n := row.gate_counts.get(g, 0))),
        rates=tuple((side, _rates(row, side)) for side in SIDES),
        alerts=tuple(f"{s}: {a}" for s in SIDES for a in row.stratum_alerts.get(s, ())),
        paired=str(row.paired.get("text") or ""),
        noise=_noise(row),
        flaky=row.flaky,
        served=tuple(
            Served(
                side,
                tuple(sorted(row.served_models.get(side) or ())),
                (row.run_id, side) in changed,
            )
            for side in SIDES
        ),
        usage=_usage(row),
        requests=tuple((s, n) for s in SIDES if (n := row.request_changes.get(s, 0))),
    )


def build_page(
    suite: str,
    rows: Sequence[RunRow],
    page_dir: Path,
    *,
    retire_after: int | None,
    notes: Sequence[str] = (),
) -> Page:
    """The page over `rows` (oldest first), its links relative to `page_dir`."""
    labels = run_labels(rows)
    label_of = {row.run_dir: label for row, label in zip(rows, labels, strict=True)}
    nights = [row for row in rows if row.counts_as_night]
    changes = model_changes(rows)
    quiet = streaks(rows)
    ceiling = ceiling_candidates(rows, retire_after) if retire_after else []
    changed = {(c["run_id"], c["side"]) for c in changes}
    by_id = {row.run_id: label_of[row.run_dir] for row in nights}
    retried = sum(1 for row in rows if row.retried_by)
    partials = sum(1 for row in rows if row.partial is not None and not row.retried_by)
    shards = sum(
        1 for row in rows if row.shard is not None and row.partial is None and not row.retried_by
    )
    return Page(
        suite=suite,
        runs=tuple(
            _line(row, label, page_dir, changed, by_id)
            for row, label in reversed(list(zip(rows, labels, strict=True)))
        ),
        nights=len(nights),
        replays=len(rows) - len(nights) - retried - partials - shards,
        retried=retried,
        partials=partials,
        shards=shards,
        charts=charts(nights, [label_of[row.run_dir] for row in nights]),
        changes=tuple({**c, "label": by_id.get(c["run_id"], c["run_id"])} for c in changes),
        retire_after=retire_after,
        ceiling=tuple((case, quiet[case]) for case in ceiling[:CEILING_SHOWN]),
        ceiling_total=len(ceiling),
        notes=tuple(notes),
        generated_at=datetime.now(UTC).isoformat(timespec="seconds"),
    )


def _css() -> str:
    env = environment()
    source, _, _ = env.loader.get_source(env, "history.css")  # type: ignore[union-attr]
    return source


def render_page(page: Page) -> Iterator[str]:
    """The page's HTML, in parts as the template yields them."""
    css = _css()
    template = environment().get_template("history.html.j2")
    style = Markup(css)  # noqa: S704 - the package's own stylesheet, no untrusted text in it
    csp = content_security_policy(styles=(css,))  # and no script at all
    return template.generate(page=page, style=style, script=None, csp=csp)


def write_page(
    suite: str,
    rows: Sequence[RunRow],
    path: Path,
    *,
    retire_after: int | None,
    notes: Sequence[str] = (),
) -> Path:
    """Write the history page of `rows` to `path` atomically; UsageError (64) when it cannot
    be written there, DataError (65) when the name is taken by something not a file."""
    check_writable(path.parent, [path.name], action="write the history page here")
    page = build_page(suite, rows, path.parent, retire_after=retire_after, notes=notes)
    try:
        write_atomic(path, (part.encode("utf-8") for part in render_page(page)))
    except OSError as exc:  # a missing folder, a full disk
        raise UsageError(f"{path}: cannot write the history page: {exc.strerror or exc}") from None
    return path
