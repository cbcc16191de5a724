"""One run as a report sees it: read from the run directory alone, for every page of it.

A report is rendered from summary.json, disagreement.json, manifest.json and raw.jsonl plus
the suite's earlier run directories for the trend, so `parallax report RUN_DIR` works on a
copied CI artifact. This module only reads; `html.py` and `markdown.py` render what it read.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.errors import DataError, UsageError
from runner.gate import ALIAS_SWAP, DISAGREEMENT_CHANGED, SCHEMA_MISS, TRANSPORT_MISS
from runner.history import History, RunRow, ceiling_candidates, load_history, mapping_of, streaks
from runner.ledger import read_json_map, read_json_object
from runner.model import SIDES, STRATA, record
from runner.reports.caseview import CaseView, RunCases
from runner.reports.runinputs import Given
from runner.reports.verdict import Tally

TREND_RUNS = 14
HTML_TOP_CASES = 200  # cases per review gate and unscored stamp shown in full without JavaScript
BRIEF_MISSES = 5  # miss codes a side's line in brief names before "+N more"
REVIEW_ORDER = (DISAGREEMENT_CHANGED, ALIAS_SWAP)
INCOMPLETE_ORDER = (TRANSPORT_MISS, SCHEMA_MISS)


@record
class BriefSide:
    """One side of a case in brief: its stamps (or its pass), score and first miss codes."""

    side: str
    stamp: str
    misses: tuple[str, ...]
    more: int  # miss codes past those named


@record
class BriefCase:
    """A review or unscored case past the first `top` of its section, as one line of the page
    without JavaScript: what its table row says, from disagreement.json alone, so every such
    case is listed however many there are while the page stays a few bytes a case."""

    case_id: str
    gate: str
    stratum: str
    sides: tuple[BriefSide, ...]


def _brief_side(side: str, view: Mapping[str, Any]) -> BriefSide:
    transport, schema = view.get("transport"), view.get("schema")
    if transport not in (None, "ok"):
        stamp = f"transport: {transport}"
    elif schema not in (None, "ok"):
        stamp = f"schema: {view.get('detail') or schema}"
    elif view.get("admitted", True) is False:
        stamp = "unscored"
    else:
        stamp = "passed" if view.get("passed") else f"score {view.get('task_score')}"
    codes = [str(code) for code in view.get("misses") or () if isinstance(code, str)]
    return BriefSide(side, stamp, tuple(codes[:BRIEF_MISSES]), max(len(codes) - BRIEF_MISSES, 0))


def brief_of(case_id: str, case: Mapping[str, Any]) -> BriefCase:
    return BriefCase(
        case_id,
        str(case.get("gate")),
        str(case.get("stratum") or ""),
        tuple(_brief_side(side, mapping_of(case.get(side))) for side in SIDES),
    )


@dataclass
class RunReport:
    """Everything a rendered report needs, read from a run directory."""

    run_dir: Path
    summary: Mapping[str, Any]
    manifest: Mapping[str, Any]
    cases: Mapping[str, Mapping[str, Any]]  # the cases shown in detail (all when uncapped)
    trend: list[RunRow]
    retire_after: int | None
    ceiling: list[str]
    quiet_runs: dict[str, int]
    notes: list[str] = field(default_factory=list)
    history: list[RunRow] = field(default_factory=list)  # the window read, oldest first
    history_notes: list[str] = field(default_factory=list)  # the run dirs it could not read
    # how many cases each review gate and each unscored stamp has, shown in detail or not
    totals: dict[str, int] = field(default_factory=dict)
    count: int = 0  # cases in disagreement.json
    # every review and unscored case past `top` in its section, in brief (section, then id)
    beyond: dict[str, list[BriefCase]] = field(default_factory=dict)

    tally: Tally = field(default_factory=Tally)  # counts over every case, for the verdict
    given: Given | None = field(default=None, repr=False)  # the run's inputs, if still held
    # False: only the cases' replies are read (JUnit), so the snapshot's entries are not
    tallied: bool = True
    _details: RunCases | None = field(default=None, repr=False)

    def every_case(self) -> Iterator[tuple[str, Mapping[str, Any]]]:
        """Every case of disagreement.json, read again as it is written out: at 20,000 cases,
        held as a list it was the largest part of a report."""
        for case_id, case in read_json_map(self.run_dir / "disagreement.json", "cases"):
            if isinstance(case, dict):
                yield case_id, case

    def details(self) -> RunCases:
        """The run's case details, its ledgers indexed once for every page a report writes
        (`close` ends it); the files' problems join the notes."""
        if self._details is None:
            self._details = RunCases(self.run_dir, self.summary, self.given, accepted=self.tallied)
            self.note(self._details.notes)
        return self._details

    def close(self) -> None:
        """Close the ledgers `details` opened."""
        if self._details is not None:
            self._details.close()
            self._details = None

    def __enter__(self) -> RunReport:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def views(self, wanted: Collection[str]) -> dict[str, CaseView]:
        """The detail of each case in `wanted`, in one pass over disagreement.json."""
        found: dict[str, CaseView] = {}
        if not wanted:
            return found
        cases = self.details()
        for index, (case_id, case) in enumerate(self.every_case()):
            if case_id in wanted:
                found[case_id] = cases.view(index, case_id, case)
        return found

    def note(self, notes: Iterable[str]) -> None:
        """Add notes on what could not be read, each once."""
        self.notes.extend(n for n in notes if n not in self.notes)

    @property
    def suite(self) -> str:
        return str(self.summary.get("suite") or self.run_dir.parent.name)

    def total(self, sections: Sequence[str]) -> int:
        """Cases in these review gates or unscored stamps, whether shown in detail or not."""
        return sum(self.totals.get(s, 0) for s in sections)

    def cases_in(self, gates: Sequence[str]) -> list[tuple[str, Mapping[str, Any]]]:
        """Cases of the given gate classes, in the order of `gates`, then by id."""
        rank = {g: i for i, g in enumerate(gates)}
        chosen = [(k, v) for k, v in self.cases.items() if str(v.get("gate")) in rank]
        return sorted(chosen, key=lambda kv: (rank[str(kv[1].get("gate"))], kv[0]))


def _load_object(path: Path) -> dict[str, Any]:
    return read_json_object(path, missing="no such file: not a finished parallax run")


def history_window(trend_runs: int, retire_after: int | None, page_runs: int = 0) -> int:
    """How many runs back a report reads: the trend, or a full streak plus the run before, or
    the runs of the history page a finished run rewrites from the same window."""
    return max(trend_runs, (retire_after or 0) + 1, page_runs)


def _wants_detail(case: Mapping[str, Any]) -> str | None:
    """The section a case is shown in detail in: a review gate, an unscored stamp, or none."""
    gate = str(case.get("gate"))  # a hand-edited map may hold anything here
    if gate in INCOMPLETE_ORDER or not case.get("admitted", True):
        return _stamp_of(case)
    return gate if gate in REVIEW_ORDER else None


@dataclass
class Read:
    """disagreement.json as a report reads it in one pass (`read_cases`)."""

    cases: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    totals: dict[str, int] = field(default_factory=dict)
    tally: Tally = field(default_factory=Tally)
    beyond: dict[str, list[BriefCase]] = field(default_factory=dict)


def read_cases(path: Path, top: int | None) -> Read:
    """Stream disagreement.json: the cases to show in detail, section totals, the tally.

    With `top`, each review gate and each unscored stamp keeps its first `top` cases by id
    (the map is sorted by id) whole, and the rest of its cases in brief (`beyond`), so a
    report's memory grows by a line a case, not by a case's detail.
    """
    read = Read()
    for case_id, case in read_json_map(path, "cases"):
        if not isinstance(case, dict):
            continue
        read.tally.add(case)
        section = _wants_detail(case)
        if section is not None:
            read.totals[section] = read.totals.get(section, 0) + 1
        if top is None or (section is not None and read.totals[section] <= top):
            read.cases[case_id] = case
        elif section is not None:
            read.beyond.setdefault(section, []).append(brief_of(case_id, case))
    return read


def build_report(
    run_dir: Path,
    *,
    retire_after: int | None = None,
    trend_runs: int = TREND_RUNS,
    top: int | None = HTML_TOP_CASES,
    page_runs: int = 0,
    given: Given | None = None,
    tallied: bool = True,
) -> RunReport:
    """Read a finished run directory (and its suite's earlier runs) into a RunReport.

    `top` caps the cases kept in `cases` per review gate and unscored stamp (report.md and the
    page without JavaScript show those); None keeps every case.
    `page_runs` reads at least that many runs back, for the history page. `given`: the
    run's config and suite, when this process just made the run. `tallied` False: neither
    the tally, the cases shown nor the snapshot are read (JUnit reads each case's replies as
    it writes it).
    """
    if not run_dir.is_dir():
        raise UsageError(f"{run_dir}: no such run directory")  # as replay and promote say
    if not (run_dir / "manifest.json").exists() and not (run_dir / "summary.json").exists():
        raise UsageError(f"{run_dir}: not a parallax run directory (no manifest.json)")
    summary = _load_object(run_dir / "summary.json")
    try:
        manifest: Mapping[str, Any] = _load_object(run_dir / "manifest.json")
    except DataError:
        manifest = {}
    path = run_dir / "disagreement.json"
    if not path.exists():
        raise DataError(path, "no such file: not a finished parallax run")
    read = read_cases(path, top) if tallied else Read()
    notes: list[str] = []
    # a bounded window: the trend and a ceiling streak never need more, and a year of nightly
    # runs must not make every report read the whole history
    history: History = load_history(
        run_dir.parent,
        until=run_dir.name,
        last=history_window(trend_runs, retire_after, page_runs),
    )
    notes.extend(history.notes)
    ceiling = ceiling_candidates(history.rows, retire_after) if retire_after else []
    return RunReport(
        history=history.rows,
        run_dir=run_dir,
        summary=summary,
        manifest=manifest,
        cases=read.cases,
        # a run a later retry completed is that night's draft: the retry is its column; another
        # partial run is a quick check, no night
        trend=[
            row
            for row in history.rows
            if not row.retried_by and (row.partial is None or row.run_dir == run_dir)
        ][-trend_runs:],
        retire_after=retire_after,
        ceiling=ceiling,
        quiet_runs=streaks(history.rows),
        notes=notes,
        history_notes=history.notes,
        totals=read.totals,
        count=read.tally.cases,
        tally=read.tally,
        beyond=read.beyond,
        given=given,
        tallied=tallied,
    )


def _stamp_of(case: Mapping[str, Any]) -> str:
    """`transport: timeout` or `schema: not_json`, from the first side that failed."""
    for side in SIDES:
        view = mapping_of(case.get(side))
        if view.get("transport") not in (None, "ok"):
            return f"transport: {view.get('transport')}"
    for side in SIDES:
        view = mapping_of(case.get(side))
        if view.get("schema") not in (None, "ok"):
            detail = str(view.get("detail") or view.get("schema"))
            return f"schema: {detail.split(':', maxsplit=1)[0]}"
    return "unscored"


def incomplete_groups(rep: RunReport) -> dict[str, list[tuple[str, Mapping[str, Any]]]]:
    """Unscoreable cases grouped by their stamp, so one outage reads as one line."""
    groups: dict[str, list[tuple[str, Mapping[str, Any]]]] = {}
    for case_id, case in sorted(rep.cases.items()):
        if case.get("gate") in INCOMPLETE_ORDER or not case.get("admitted", True):
            groups.setdefault(_stamp_of(case), []).append((case_id, case))
    return dict(sorted(groups.items()))


def signal_lines(summary: Mapping[str, Any]) -> list[str]:
    """The paired test and the noise floor in words, one line each (plain text, unescaped)."""
    lines = []
    paired = mapping_of(summary.get("paired"))
    for scope in ("overall", *STRATA):
        test = mapping_of(paired.get(scope))
        if test.get("text"):
            lines.append(str(test["text"]))
    # the release question is asked of the whole suite: its answer overall only
    claim = mapping_of(mapping_of(paired.get("overall")).get("non_inferiority"))
    if claim.get("text"):
        lines.append(f"non-inferiority: {claim['text']}")
    floor = mapping_of(summary.get("noise_floor"))
    for scope in ("overall", *STRATA):
        row = mapping_of(floor.get(scope))
        if row.get("n"):
            lines.append(
                f"noise floor ({scope}): the reference disagreed with itself on "
                f"{row.get('disagreeing')} of {row.get('n')} cases"
            )
    return lines
