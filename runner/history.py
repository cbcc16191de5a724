"""A suite's history: one row per run, ceiling candidates and served-model changes.

Everything is read back from `runs/<suite>/*/summary.json` (and `disagreement.json` for the
per-case data), so history needs no database and survives a moved `runs/` volume. Old run
directories can be half-written (a killed run), hand-edited or from an older parallax: any that
cannot be read is skipped with a note, never a crash.

A **ceiling candidate** is a case that both sides passed with an empty disagreement in each of
the suite's last `retire_after` runs: it no longer tells anything apart and can be retired or
made harder. Replays regrade an earlier run's replies, so they never count as a new night:
not toward a ceiling streak, nor as a change of the served model. They are listed as runs.
Nor does a run that a later `--retry-unscored` run retried: a night cut short by a budget or
an outage and then completed is one night, and the retry, which holds the run's scored rows
and the rest called again, stands for it (a retry of a retry, or a second retry of the same
run, stands in turn). It is listed too, naming its retry. A partial run (`run --case`,
`--stratum`: some of the suite's cases) is a quick check, not a night either: listed, marked
partial, counted for neither ceiling candidates nor trends, as a replay. Nor does one shard of
a suite (`run --shard`): the run `parallax merge` makes of all of them is the night.
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from runner.cost.usage import trend, trend_line
from runner.errors import DataError
from runner.gate import GATE_CLASSES
from runner.ledger import read_json_object
from runner.model import SIDES, STRATA
from runner.runs.mode import RunMode
from runner.runs.names import run_order, started_of
from runner.runs.selection import partial_line
from runner.text import visible

SUMMARY_VERSION = 1
NOT_A_NIGHT = frozenset({RunMode.REPLAY})  # modes that regrade old replies instead of calling


@dataclass(frozen=True)
class RunRow:
    """What one run directory says about its night."""

    run_id: str
    run_dir: Path
    started_at: str | None
    finished_at: str | None
    mode: str | None
    exit_code: int | None
    verdict: str | None
    gate_counts: Mapping[str, int]
    strata: Mapping[str, Mapping[str, Mapping[str, Any]]]  # side -> stratum -> {pass_rate, n}
    stratified: bool
    stratum_alerts: Mapping[str, Sequence[str]]
    served_models: Mapping[str, Sequence[str]]
    # cases both sides passed with an empty disagreement; None when disagreement.json is
    # unreadable. Only the ids are kept: a year of 20,000-case nights must fit in memory.
    quiet: frozenset[str] | None
    paired: Mapping[str, Any] = field(default_factory=dict)  # the overall paired test
    noise_floor: Mapping[str, Any] = field(default_factory=dict)  # overall self-disagreement
    usage: Mapping[str, Any] = field(default_factory=dict)  # per side: cost, tokens, p50 (`trend`)
    flaky: int = 0  # cases whose repeated samples disagreed
    # per side: its calls, those with usage, those whose cost is unknown (missing usage is no 0)
    calls: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    # per side, how many cases were called with another request than the snapshot accepted
    request_changes: Mapping[str, int] = field(default_factory=dict)
    parent: str | None = None  # the run dir a retry or replay started from
    retried_by: str | None = None  # the later --retry-unscored run that stands for this night
    partial: Mapping[str, Any] | None = None  # a partial run's selection (summary's `partial`)
    shard: str | None = None  # one shard's cases (`1/4`): the merge of all stands for the night

    @property
    def counts_as_night(self) -> bool:
        return (
            self.retried_by is None
            and self.partial is None
            and self.shard is None
            and RunMode.read(self.mode) not in NOT_A_NIGHT
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "run_dir": str(self.run_dir),
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "mode": self.mode,
            "exit_code": self.exit_code,
            "verdict": self.verdict,
            "gate_counts": dict(self.gate_counts),
            "strata": {
                side: {
                    name: {"pass_rate": pass_rate_of(rate), "n": count_of(rate)}
                    for name, rate in by_stratum.items()
                }
                for side, by_stratum in self.strata.items()
            },
            "stratified": self.stratified,
            "stratum_alerts": {k: list(v) for k, v in self.stratum_alerts.items()},
            "served_models": {k: list(v) for k, v in self.served_models.items()},
            "parent": self.parent,
            "retried_by": self.retried_by,
            "partial": dict(self.partial) if self.partial is not None else None,
            "shard": self.shard,
            "paired": finite(self.paired),
            "noise_floor": finite(self.noise_floor),
            "usage": finite(self.usage),
        }


@dataclass
class History:
    """The readable runs of one suite, oldest first, and what could not be read."""

    suite: str
    suite_dir: Path
    rows: list[RunRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _read_object(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """A JSON object from `path`, or (None, why not)."""
    try:
        return read_json_object(path, missing="missing"), None
    except DataError as exc:
        return None, f"{path.name}: {exc.reason.split(':')[0]}"


def mapping_of(value: Any) -> dict[str, Any]:
    """A value read from a run's JSON that should be an object; anything else reads as {}."""
    return value if isinstance(value, dict) else {}


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def pass_rate_of(rate: Mapping[str, Any]) -> float | None:
    """A stratum's `pass_rate` as a share from 0 to 1, or None when it is anything else: a
    hand-edited summary must not stop a report (a 400-digit integer overflowed a float)."""
    value = rate.get("pass_rate")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if 0 <= value <= 1 else None


def finite(value: Any) -> Any:
    """A JSON value with every NaN or infinite number (a hand-edited `1e400`) made null: what
    `history --json` prints must parse as JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value


def verdict_code_of(summary: Mapping[str, Any]) -> int | None:
    """A summary's `exit_code` when it is a verdict (0 to 3), else None: CI reads it as one."""
    code = summary.get("exit_code")
    return code if type(code) is int and 0 <= code <= 3 else None


def count_of(rate: Mapping[str, Any]) -> int | None:
    """A stratum's row count `n`, or None when it is not a count."""
    value = rate.get("n")
    return value if type(value) is int and value >= 0 else None


def strings_of(value: Any) -> list[str]:
    """The strings of a value that should be a list of them; anything else is left out."""
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def read_run(run_dir: Path) -> tuple[RunRow | None, list[str]]:
    """One run directory as a row, plus notes; (None, notes) when its summary is unusable."""
    notes: list[str] = []
    summary, why = _read_object(run_dir / "summary.json")
    if summary is None:
        return None, [f"skipped {run_dir.name}: {why} (unfinished or broken run)"]
    if summary.get("version") != SUMMARY_VERSION:
        return None, [f"skipped {run_dir.name}: summary.json has an unknown version"]
    counts = mapping_of(summary.get("gate_counts"))
    for gate in GATE_CLASSES:
        count = counts.get(gate, 0)
        if type(count) is not int or count < 0:  # one bad night must not end every report
            return None, [f"skipped {run_dir.name}: summary.json gate_counts.{gate} is {count!r}"]
    quiet: frozenset[str] | None = None
    listed = summary.get("quiet_cases")
    if isinstance(listed, list):  # written by finalize: no need to parse the whole map
        # interned: the nights of a window share one copy of each id, not one per night
        return _row(run_dir, summary, frozenset(map(sys.intern, strings_of(listed)))), notes
    disagreement, why = _read_object(run_dir / "disagreement.json")
    if disagreement is None:
        notes.append(f"{run_dir.name}: {why}; its cases are left out of ceiling candidates")
    else:
        quiet = frozenset(
            k
            for k, v in mapping_of(disagreement.get("cases")).items()
            if isinstance(v, dict) and _quiet(v)
        )
    return _row(run_dir, summary, quiet), notes


def _row(run_dir: Path, summary: Mapping[str, Any], quiet: frozenset[str] | None) -> RunRow:
    counts = mapping_of(summary.get("gate_counts"))
    strata = mapping_of(summary.get("strata"))
    alerts = mapping_of(summary.get("stratum_alerts"))
    served = mapping_of(summary.get("served_models"))
    exit_code = summary.get("exit_code")
    return RunRow(
        run_id=str(summary.get("run_id") or run_dir.name),
        run_dir=run_dir,
        started_at=_str(summary.get("started_at")),
        finished_at=_str(summary.get("finished_at")),
        mode=_str(summary.get("mode")),
        exit_code=exit_code if type(exit_code) is int else None,  # `true` is no exit code
        verdict=_str(summary.get("verdict")),
        gate_counts={g: counts.get(g, 0) for g in GATE_CLASSES},  # checked by read_run
        strata={
            side: {
                name: mapping_of(mapping_of(strata.get(side)).get(name))
                for name in STRATA
                if name in mapping_of(strata.get(side))
            }
            for side in SIDES
        },
        stratified=bool(summary.get("stratified", True)),
        stratum_alerts={s: strings_of(alerts.get(s)) for s in SIDES},
        served_models={s: strings_of(served.get(s)) for s in SIDES},
        quiet=quiet,
        paired=mapping_of(mapping_of(summary.get("paired")).get("overall")),
        noise_floor=mapping_of(mapping_of(summary.get("noise_floor")).get("overall")),
        usage=trend(summary),
        flaky=len(strings_of(summary.get("flaky"))),
        calls=_calls(mapping_of(mapping_of(summary.get("usage")).get("sides"))),
        request_changes=_request_changes(mapping_of(summary.get("request_changed"))),
        parent=_str(summary.get("parent")),
        # anything but null marks it partial: a hand-edited selection is still no night
        partial=None if summary.get("partial") is None else mapping_of(summary.get("partial")),
        shard=_shard(summary.get("shard")),
    )


def _shard(value: Any) -> str | None:
    """`index/count` of a shard's summary (`--shard`'s own form), read tolerantly: anything
    but null marks it a shard, as a hand-edited selection still marks a run partial."""
    if value is None:
        return None
    index, count = (
        (value.get(key) for key in ("index", "count")) if isinstance(value, dict) else (None, None)
    )
    return f"{index}/{count}" if type(index) is int and type(count) is int else "?"


def _calls(sides: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    """Per side of summary.json's `usage`, how many calls, with usage, of unknown cost."""
    out = {}
    for side in SIDES:
        block = mapping_of(sides.get(side))
        counts = {
            name: block.get(key)
            for name, key in (
                ("calls", "calls"),
                ("with_usage", "calls_with_usage"),
                ("cost_unknown", "cost_unknown_calls"),
            )
        }
        if all(type(v) is int and v >= 0 for v in counts.values()):
            out[side] = {k: int(v) for k, v in counts.items() if isinstance(v, int)}
    return out


def _request_changes(changed: Mapping[str, Any]) -> dict[str, int]:
    """Per side, the cases summary.json's `request_changed` groups count (unreadable: 0)."""
    out = {}
    for side in SIDES:
        groups = changed.get(side)
        out[side] = sum(
            g["count"]
            for g in (groups if isinstance(groups, list) else ())
            if isinstance(g, dict) and type(g.get("count")) is int and g["count"] > 0
        )
    return out


def unique_labels(forms: Sequence[Sequence[str]]) -> list[str]:
    """Per run, the first of its label forms (shortest first) that no other run shares: two
    runs in one minute get their seconds, two in one second their short id too. A run's last
    form must be unique (its directory name) and is kept whatever the others are."""
    levels = [0] * len(forms)
    while True:
        labels = [choices[level] for choices, level in zip(forms, levels, strict=True)]
        counts = Counter(labels)
        bumped = False
        for i, label in enumerate(labels):
            if counts[label] > 1 and levels[i] < len(forms[i]) - 1:
                levels[i] += 1
                bumped = True
        if not bumped:
            return labels


def _started(row: RunRow) -> datetime | None:
    """When a run started, in UTC: its summary's `started_at`, else its directory's name."""
    try:
        at = datetime.fromisoformat(row.started_at or "")
    except ValueError:
        return started_of(row.run_dir.name)
    return at.astimezone(UTC) if at.tzinfo else at.replace(tzinfo=UTC)


def run_labels(rows: Sequence[RunRow]) -> list[str]:
    """The label of each run on a chart or the history page: `MM-DD HH:MM`, unique among
    `rows` (a run in the same minute as another shows its seconds, then its short id)."""
    forms = []
    for row in rows:
        name = row.run_dir.name
        at = _started(row)
        if at is None:
            forms.append([name])
            continue
        seconds = at.strftime("%m-%d %H:%M:%S")
        short = name.partition("-")[2] or name
        forms.append([at.strftime("%m-%d %H:%M"), seconds, f"{seconds} {short}", name])
    return unique_labels(forms)


def _order(run_dir: Path, *, tied: bool) -> tuple[str, str, str]:
    """`run_order`'s key of a run dir. Its end is read only when another dir shares its start
    second (`tied`): a 20,000-case night's summary.json is some 400 KB, and a year of them
    must not be parsed to list a suite's runs."""
    finished = None
    if tied:  # no summary (unfinished) or a broken one: no end to sort by
        with contextlib.suppress(DataError):
            finished = read_json_object(run_dir / "summary.json").get("finished_at")
    return run_order(run_dir.name, finished if isinstance(finished, str) else None)


def run_dirs(suite_dir: Path) -> list[Path]:
    """A suite's run directories, oldest first."""
    if not suite_dir.is_dir():
        return []
    dirs = [p for p in suite_dir.iterdir() if p.is_dir() and not p.name.startswith(".")]
    seconds = Counter(_second(p.name) for p in dirs)
    return sorted(dirs, key=lambda p: _order(p, tied=seconds[_second(p.name)] > 1))


def _second(name: str) -> str:
    return name.partition("-")[0]


def load_history(suite_dir: Path, *, until: str | None = None, last: int | None = None) -> History:
    """Read every run of one suite (up to and including run `until`), keeping the last `last`."""
    history = History(suite=suite_dir.name, suite_dir=suite_dir)
    dirs = run_dirs(suite_dir)
    if until is not None:
        names = [p.name for p in dirs]
        if until in names:
            dirs = dirs[: names.index(until) + 1]
        else:  # no such dir (any more): the runs that started before it
            dirs = [p for p in dirs if run_order(p.name, None) <= run_order(until, None)]
    if last is None:
        for run_dir in dirs:
            row, notes = read_run(run_dir)
            history.notes.extend(notes)
            if row is not None:
                history.rows.append(row)
        history.rows = retried(history.rows)
        return history
    # newest first, until the window is full: a row holds every quiet case id of its night,
    # so rows outside the window are never built. A few broken directories are skipped over.
    for run_dir in reversed(dirs[-(last * 2 + 2) :]):
        if len(history.rows) >= last:
            break
        row, notes = read_run(run_dir)
        history.notes[:0] = notes
        if row is not None:
            history.rows.append(row)
    history.rows = retried(history.rows[::-1])
    return history


def retried(rows: Sequence[RunRow]) -> list[RunRow]:
    """`rows` (oldest first) with `retried_by` set on each run a later `--retry-unscored` run
    retried, to the retry that stands for its night: the last of a chain of retries, and of
    two retries of one run the later. Only what `rows` holds is known: read up to a cut run
    (its own report), no retry of it exists yet, so it is still that night."""
    standing: dict[str, str] = {}  # a run dir's name -> the retry that stands for its night
    out: list[RunRow] = []
    for row in reversed(rows):
        by = standing.get(row.run_dir.name)
        if RunMode.read(row.mode) is RunMode.RETRY and row.parent:
            by = by or standing.get(row.parent)  # its run was retried again, later
            standing.setdefault(row.parent, by or row.run_id)
        out.append(replace(row, retried_by=by) if by else row)
    return out[::-1]


def _quiet(case: Mapping[str, Any]) -> bool:
    """Both sides admitted and passed without noise, and the two agree: the case told nothing
    apart (one that flips now and then still tells something)."""
    ref, cand = mapping_of(case.get("reference")), mapping_of(case.get("candidate"))
    return (
        case.get("admitted") is True
        and ref.get("passed") is True
        and cand.get("passed") is True
        and case.get("disagreement") == []
        and not ref.get("noise")
        and not cand.get("noise")
    )


def streaks(rows: Iterable[RunRow]) -> dict[str, int]:
    """Per case of the latest night, how many nights in a row (newest back) it stayed quiet."""
    nights = [r.quiet for r in rows if r.counts_as_night and r.quiet is not None]
    if not nights:
        return {}
    result: dict[str, int] = {}
    for case_id in nights[-1]:  # a case that is not quiet tonight has a streak of 0
        n = 0
        for quiet in reversed(nights):
            if case_id not in quiet:
                break
            n += 1
        result[case_id] = n
    return result


def ceiling_candidates(rows: Iterable[RunRow], retire_after: int) -> list[str]:
    """Cases both sides passed with an empty disagreement in each of the last `retire_after`
    runs that count (a replay and a run a retry completed do not)."""
    return sorted(case for case, n in streaks(rows).items() if n >= retire_after)


def model_changes(rows: Iterable[RunRow]) -> list[dict[str, Any]]:
    """Every change of the models a side served, oldest first; runs that served none are gaps.

    Only nights count: a replay regrades an old night's replies, so replaying last week's run
    would read as a change back to last week's model, dated today.
    """
    changes: list[dict[str, Any]] = []
    last: dict[str, list[str]] = {}
    for row in rows:
        if not row.counts_as_night:
            continue
        for side in SIDES:
            served = sorted(row.served_models.get(side) or [])
            if not served:
                continue
            before = last.get(side)
            if before is not None and before != served:
                changes.append(
                    {
                        "side": side,
                        "run_id": row.run_id,
                        "at": row.started_at,
                        "from": before,
                        "to": served,
                    }
                )
            last[side] = served
    return changes


def suite_report(
    suite_dir: Path,
    *,
    retire_after: int,
    last: int | None = None,
    recorded: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The JSON `parallax history --json` prints for one suite. `recorded`: the runs only the
    results database holds (their dirs are not here), listed by their start too (text)."""
    from runner.tombstones import read_tombstones

    full = load_history(suite_dir)
    stones, stone_notes = read_tombstones(suite_dir)
    # a record whose run dir is still there (a prune killed before the deletion) is that run's
    pruned = [s for s in stones if not (suite_dir / s.run_id).exists()]
    gone = {s.run_id for s in pruned}  # rows an outage kept from being deleted with the dir
    runs = in_order(
        [r.to_json() for r in full.rows], [r for r in recorded if r["run_id"] not in gone]
    )
    shown = runs[-last:] if last is not None and last > 0 else runs
    if last == 0:
        shown = []
    runs_streak = streaks(full.rows)
    if last is not None:  # those among the shown runs' nights
        since = (shown[0]["started_at"] or "") if shown else None
        pruned = [s for s in pruned if since is not None and (s.started_at or "") >= since]
    return {
        "suite": full.suite,
        "suite_dir": str(suite_dir),
        "runs": shown,
        "pruned": [s.to_json() for s in pruned],
        "retire_after": retire_after,
        "ceiling_candidates": [
            {"case_id": c, "quiet_runs": runs_streak[c]}
            for c in ceiling_candidates(full.rows, retire_after)
        ],
        "nights": sum(1 for r in full.rows if r.counts_as_night and r.quiet is not None),
        "model_changes": model_changes(full.rows),
        "notes": full.notes + stone_notes,
    }


def _rate(rate: Mapping[str, Any] | None) -> str:
    if not rate:
        return "  -   "
    value, n = pass_rate_of(rate), count_of(rate)
    if value is None:
        return f"  -({n})" if n is not None else "  -   "
    return f"{value:.2f}({'?' if n is None else n})"


def _short(gate: str) -> str:
    return {
        "new_case": "new",
        "fixture_move": "moved",
        "transport_miss": "transp",
        "schema_miss": "schema",
        "alias_swap": "alias",
        "disagreement_changed": "changed",
        "unchanged": "same",
        "retired_case": "retired",
    }.get(gate, gate)


def _text_labels(runs: Sequence[Mapping[str, Any]]) -> list[str]:
    """The started column: the UTC second, with the short run id where two runs share one."""
    forms = []
    for run in runs:
        started = (run.get("started_at") or run["run_id"])[:19].replace("T", " ")
        short = run["run_id"].partition("-")[2] or run["run_id"]
        forms.append([started, f"{started} {short}", run["run_id"]])
    return unique_labels(forms)


def in_order(
    runs: Sequence[Mapping[str, Any]], others: Sequence[Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    """The runs in their order with each of `others` (a pruned night's record, a run only the
    results database holds) where its start puts it."""
    stones = sorted(others, key=_start_key)
    merged: list[Mapping[str, Any]] = []
    for run in runs:
        while stones and _start_key(stones[0]) < _start_key(run):
            merged.append(stones.pop(0))
        merged.append(run)
    return merged + stones


def _start_key(run: Mapping[str, Any]) -> str:
    return str(run.get("started_at") or run["run_id"])[:19]


def _under(run: Mapping[str, Any]) -> list[str]:
    """The lines under a run's row in `history`'s text."""
    lines = []
    if "recorded" in run:  # only the results database holds it: no more to say
        lines.append(f"from the results database: {run['recorded']}")
    if (partial := partial_line(run)) is not None:
        lines.append(f"{partial}: not a night")
    if run.get("shard"):
        lines.append(f"shard {run['shard']}: not a night, the merge of all shards stands for it")
    if run.get("retried_by"):
        lines.append(f"retried by {run['retried_by']}: not a night, the retry stands for it")
    if run.get("paired", {}).get("text"):
        lines.append(run["paired"]["text"])
    if line := trend_line(run.get("usage") or {}):
        lines.append(line)
    floor = run.get("noise_floor") or {}
    if floor.get("n"):
        lines.append(
            f"noise floor: reference self-disagreement {floor.get('disagreeing', '?')}/{floor['n']}"
        )
    return lines


def format_text(report: Mapping[str, Any]) -> str:
    """Human-readable history of one suite: a row per run, then candidates and model changes."""
    lines = [f"suite {report['suite']}  ({report['suite_dir']})"]
    runs = in_order(report["runs"], report.get("pruned") or [])
    if not runs:
        lines.append("  no finished runs")
    else:
        labels = _text_labels(runs)
        w = max(20, *(len(label) + 1 for label in labels))  # a run id widens the column
        head = f"  {'started (UTC)':<{w}} {'mode':<7} {'exit':>4} "
        head += " ".join(f"{_short(g):>7}" for g in GATE_CLASSES)
        head += "   reference e/m/s              candidate e/m/s              served"
        lines.append(head)
        for run, started in zip(runs, labels, strict=True):
            exit_code = run.get("exit_code")
            line = f"  {started:<{w}} {(run.get('mode') or '?'):<7} "
            line += f"{exit_code if exit_code is not None else '?':>4} "
            line += " ".join(f"{run['gate_counts'].get(g, 0):>7}" for g in GATE_CLASSES)
            if "pruned_at" in run:  # a night whose run dir retention deleted: its record
                line += f"   pruned {run['pruned_at'][:10]}"
                lines.append(line + (f": {run['verdict']}" if run.get("verdict") else ""))
                continue
            for side in SIDES:
                rates = run["strata"].get(side) or {}
                line += "   " + " ".join(_rate(rates.get(s)) for s in STRATA)
            served = run.get("served_models") or {}
            line += "   " + "; ".join(
                f"{side[:3]}: {', '.join(served.get(side) or ['-'])}" for side in SIDES
            )
            lines.append(line)
            lines.extend(f"  {'':<{w}} {under}" for under in _under(run))
    candidates = report["ceiling_candidates"]
    retire_after = report["retire_after"]
    if candidates:
        lines.append(
            f"  ceiling candidates (quiet for >= {retire_after} runs, both sides pass, "
            "empty disagreement):"
        )
        lines.extend(f"    {c['case_id']}  ({c['quiet_runs']} runs)" for c in candidates)
    else:
        lines.append(
            f"  ceiling candidates: none ({report['nights']} run(s) on record, "
            f"retire_after = {retire_after})"
        )
    changes = report["model_changes"]
    if changes:
        lines.append("  served-model changes:")
        lines.extend(
            f"    {(c['at'] or c['run_id'])[:19].replace('T', ' ')}  {c['side']}: "
            f"{', '.join(c['from'])} -> {', '.join(c['to'])}"
            for c in changes
        )
    else:
        lines.append("  served-model changes: none")
    # case ids and served models are untrusted: hidden characters shown, a newline escaped
    return "\n".join(visible(line, one_line=True) for line in lines)
