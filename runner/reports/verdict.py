"""Why a run is clean, needs review or is incomplete: the verdict's reasons, in words.

A verdict word alone sends the person on call hunting: `REVIEW+INCOMPLETE` over an empty review
list, because the reason was a candidate stratum alert shown small further down. Each reason
here says what happened, on how many cases, and names the view of the case table that shows
them (a URL fragment the page's filters read), from summary.json and one pass over
disagreement.json (`Tally`), so the report needs nothing but the run directory.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any
from urllib.parse import urlencode

from runner.gate import ALIAS_SWAP, DISAGREEMENT_CHANGED, FIXTURE_MOVE, FLAKY, NEW_CASE, REVIEW
from runner.history import mapping_of, strings_of
from runner.model import SIDES
from runner.request.sha import REFERENCE
from runner.text import visible
from runner.unscored import blame

DRIFT_SHOWN = 3  # served-model changes named in the alias drift reason
CODE_CAP = 200  # characters of one miss code kept for the table's filter
MOVED = ("reference", "candidate", "both")  # the table's `moved` filter: `both` is in the others
View = tuple[tuple[str, str], ...]  # a view of the case table: its filters, as (key, value)
# the cases the candidate lost: the paired test's discordant pairs against it, worst first
LOST = (("passed", "reference"), ("failed", "candidate"), ("sort", "delta"))


class Kind(StrEnum):
    """What a reason is about: `data-reason` on the page."""

    DISAGREEMENT_CHANGED = "disagreement_changed"
    REFERENCE_MOVED = "reference_moved"
    REQUEST_CHANGED = "request_changed"
    ALIAS_DRIFT = "alias_drift"
    STRATUM_ALERT = "stratum_alert"
    SIGNIFICANT_REGRESSION = "significant_regression"
    NOT_NON_INFERIOR = "not_non_inferior"
    LATENCY_REGRESSION = "latency_regression"
    COST_REGRESSION = "cost_regression"
    UNSCORED = "unscored"
    NEW_CASE = "new_case"
    FIXTURE_MOVE = "fixture_move"
    FLAKY = "flaky"


class Weight(StrEnum):
    """What a reason does to the exit code: the review bit, the incomplete bit, or nothing.
    The verdict lists its reasons in these groups, in this order."""

    REVIEW = "review"
    INCOMPLETE = "incomplete"
    NOTE = "note"

    @property
    def heading(self) -> str:
        """The group's heading over its reasons."""
        return {
            Weight.REVIEW: "Needs review: what gates",
            Weight.INCOMPLETE: "Unscored, per side: not compared, so the run is incomplete",
            Weight.NOTE: "Notes: reported, not gated on",
        }[self]


@dataclass(frozen=True)
class Reason:
    """One reason, its count, and the table view (filter pairs) that shows its cases."""

    kind: Kind
    weight: Weight
    count: int
    text: str
    view: tuple[tuple[str, str], ...] = ()
    side: str | None = None
    note: str = ""  # what it means, said after the reason on the page
    blame: str = ""  # an unscored reason's: infrastructure, or the side's own format failure

    @property
    def href(self) -> str:
        """The fragment of that view, in URLSearchParams form (`#` alone: every case)."""
        return "#" + urlencode(self.view)


@dataclass(frozen=True)
class Marks:
    """What the case table says about one case, beyond its gate class and stratum."""

    moved: str  # "reference", "candidate", "both" or "": whose misses left the accepted ones
    # per side (in SIDES order), its miss codes and, when it was left unscored, its stamp
    sided: tuple[tuple[str, tuple[str, ...]], ...]
    stamps: tuple[tuple[str, str], ...]  # (side, stamp code) of each side left unscored
    delta: float | None  # candidate task score minus reference task score
    # the sides scored that failed and passed it (an unscored side is in neither): what the
    # strata rates and the paired test's discordant pairs count, and the table's `failed`
    # and `passed` filters read
    failed: tuple[str, ...] = ()
    passed: tuple[str, ...] = ()

    @property
    def misses(self) -> tuple[str, ...]:
        """Every code either side has, once, sorted: what the `miss` filter counts."""
        return tuple(sorted({code for _, codes in self.sided for code in codes}))

    def of(self, side: str) -> tuple[str, ...]:
        """One side's codes."""
        return next((codes for name, codes in self.sided if name == side), ())


def _code(text: str) -> str:
    """A miss code as the table's `miss` filter holds it: as it is (spaces kept, so a link
    naming the real code finds it), on one line (a newline or tab in a needle shown as its
    escape, so a newline can separate codes in an attribute), at most CODE_CAP characters."""
    found = _CODES.get(text)
    if found is None:
        found = visible(text, one_line=True)[:CODE_CAP]
        if len(text) <= CODE_CAP:  # a hostile run's codes are each new and long: kept bounded
            if len(_CODES) >= _CODES_KEPT:
                _CODES.clear()
            _CODES[text] = found
    return found


# a run's miss codes are a handful, read twice for each of 20,000 cases (the tally and the row)
_CODES: dict[str, str] = {}
_CODES_KEPT = 4096


def stamp_code(view: Mapping[str, Any]) -> str | None:
    """`transport:timeout` or `schema:not_json` for a side left unscored, else None."""
    transport = view.get("transport")
    if transport not in (None, "ok"):
        return _code(f"transport:{transport}")
    if view.get("admitted", True) is not False and view.get("schema") in (None, "ok"):
        return None
    detail = str(view.get("detail") or view.get("schema"))
    return _code(f"schema:{detail.split(':', maxsplit=1)[0]}")


def _score(view: Mapping[str, Any]) -> float | None:
    score = view.get("task_score")
    return float(score) if isinstance(score, int | float) and not isinstance(score, bool) else None


def marks_of(case: Mapping[str, Any]) -> Marks:
    """The table's marks of one case of disagreement.json (a hand-edited one reads as empty).
    Read twice for every case of a run (the tally, then the case's row): one pass a side."""
    moved_by = strings_of(case.get("moved"))
    moved_sides = [s for s in SIDES if s in moved_by]
    moved = "both" if len(moved_sides) == len(SIDES) else "".join(moved_sides)
    sided, stamps, scores = [], [], []
    failed, passed = [], []
    for side in SIDES:
        view = mapping_of(case.get(side))
        codes = {_code(m) for m in strings_of(view.get("misses")) if m.strip()}
        stamp = stamp_code(view)
        if stamp is not None:
            stamps.append((side, stamp))
            codes.add(stamp)
        sided.append((side, tuple(sorted(codes))))
        scores.append(_score(view))
        verdict = view.get("passed")
        if verdict is False:
            failed.append(side)
        elif verdict is True:
            passed.append(side)
    ref, cand = scores
    delta = cand - ref if ref is not None and cand is not None else None
    return Marks(moved, tuple(sided), tuple(stamps), delta, tuple(failed), tuple(passed))


def request_sides(summary: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
    """Per case, the sides whose request_sha is not the one the snapshot accepted for it
    (summary.json's `request_changed` groups): the table's `request` filter."""
    changed = mapping_of(summary.get("request_changed"))
    found: dict[str, tuple[str, ...]] = {}
    for side in SIDES:
        groups = changed.get(side)
        for group in map(mapping_of, groups if isinstance(groups, list) else ()):
            for case_id in map(str, strings_of(group.get("case_ids"))):
                if side not in found.get(case_id, ()):
                    found[case_id] = (*found.get(case_id, ()), side)
    return found


@dataclass
class Tally:
    """Counts over every case of disagreement.json, gathered as it is read once."""

    gates: Counter[str] = field(default_factory=Counter)
    strata: Counter[str] = field(default_factory=Counter)
    moved: Counter[str] = field(default_factory=Counter)  # per side; "both" counts for each
    failed: Counter[str] = field(default_factory=Counter)  # per side, the cases it failed
    passed: Counter[str] = field(default_factory=Counter)  # per side, the cases it passed
    # of those, the cases a review gate holds: the moves the verdict stands on
    moved_in_review: Counter[str] = field(default_factory=Counter)
    misses: Counter[str] = field(default_factory=Counter)  # code -> cases, either side
    missed: Counter[str] = field(default_factory=Counter)  # per side, the cases it missed on
    stamps: dict[str, Counter[str]] = field(default_factory=dict)  # code -> cases per side
    stamped: Counter[str] = field(default_factory=Counter)  # code -> cases, either side
    drift: Counter[str] = field(default_factory=Counter)  # alias_swap details
    both: int = 0  # cases on which both sides moved
    cases: int = 0

    def moved_count(self, moved: str) -> int:
        """How many cases the `moved` filter shows for this choice."""
        return self.both if moved == "both" else self.moved[moved]

    def add(self, case: Mapping[str, Any]) -> None:
        marks = marks_of(case)
        gate = str(case.get("gate"))
        self.cases += 1
        self.gates[gate] += 1
        self.strata[str(case.get("stratum") or "")] += 1
        for side in SIDES:
            self.moved[side] += marks.moved in (side, "both")
            self.moved_in_review[side] += marks.moved in (side, "both") and gate in REVIEW
        self.both += marks.moved == "both"
        self.failed.update(marks.failed)
        self.passed.update(marks.passed)
        self.misses.update(marks.misses)
        self.missed.update(side for side, codes in marks.sided if codes)
        for side, code in marks.stamps:
            self.stamps.setdefault(code, Counter())[side] += 1
        self.stamped.update({code for _, code in marks.stamps})
        if gate == ALIAS_SWAP:
            self.drift[str(case.get("detail"))] += 1


def _int(value: Any) -> int:
    """A count read from a run's JSON; anything but an integer reads as 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def plural(n: int, word: str) -> str:
    """`1 case`, `3 cases`."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _changes(summary: Mapping[str, Any], tally: Tally) -> list[Reason]:
    reasons = []
    if n := tally.gates[DISAGREEMENT_CHANGED]:
        reasons.append(
            Reason(
                Kind.DISAGREEMENT_CHANGED,
                Weight.REVIEW,
                n,
                f"disagreement changed on {plural(n, 'case')}",
                (("gate", DISAGREEMENT_CHANGED),),
                note="the two sides no longer differ as the accepted snapshot says",
            )
        )
    if n := tally.moved[REFERENCE]:
        # moved alike on both sides, the disagreement stays as accepted: alerted, not gated
        gated = tally.moved_in_review[REFERENCE] > 0
        reasons.append(
            Reason(
                Kind.REFERENCE_MOVED,
                Weight.REVIEW if gated else Weight.NOTE,
                n,
                f"the reference moved on {plural(n, 'case')}",
                (("moved", REFERENCE),),
                REFERENCE,
                note="its own misses left the accepted ones: the frozen path is not frozen"
                + ("" if gated else " (the candidate moved alike, so no gate class changed)"),
            )
        )
    changed = mapping_of(summary.get("request_changed"))
    for side in SIDES:
        groups = changed.get(side)
        found = [mapping_of(g) for g in (groups if isinstance(groups, list) else ())]
        if not found:
            continue
        n = sum(_int(group.get("count")) for group in found)
        what = (
            "the frozen path moved"
            if side == REFERENCE
            else "the change under test, not gated on by itself"
        )
        shas = "; ".join(
            f"{g.get('from')} -> {g.get('to')}"
            + (f" ({_int(g.get('count'))})" if len(found) > 1 else "")
            for g in found
        )
        reasons.append(
            Reason(
                Kind.REQUEST_CHANGED,
                Weight.REVIEW if side == REFERENCE else Weight.NOTE,
                n,
                f"the {side}'s request changed on {plural(n, 'case')}",
                (("request", side),),
                side,
                note=f"request_sha {shas}: {what}",
            )
        )
    if n := tally.gates[ALIAS_SWAP]:
        shown = "; ".join(
            f"{detail} ({count})" for detail, count in tally.drift.most_common(DRIFT_SHOWN)
        )
        more = len(tally.drift) - DRIFT_SHOWN
        reasons.append(
            Reason(
                Kind.ALIAS_DRIFT,
                Weight.REVIEW,
                n,
                f"a served model changed on {plural(n, 'case')}",
                (("gate", ALIAS_SWAP),),
                note=shown + (f"; and {more} more" if more > 0 else ""),
            )
        )
    return reasons


_STRATUM_OF = {
    "easy_regression": "easy",
    "medium_regression": "medium",
    "stretch_too_easy": "stretch",
}


def _stratum_alerts(summary: Mapping[str, Any]) -> list[Reason]:
    ranked: list[tuple[bool, Reason]] = []
    alerts = mapping_of(summary.get("stratum_alerts"))
    strata = mapping_of(summary.get("strata"))
    for side in SIDES:
        rates = mapping_of(strata.get(side))
        for alert in strings_of(alerts.get(side)):
            name = _STRATUM_OF.get(alert)
            rate = mapping_of(rates.get(name)) if name else {}
            n, passed = _int(rate.get("n")), _int(rate.get("passed"))
            found: list[tuple[int, str, View]]
            if alert == "stretch_too_easy":
                words = f"it passed {passed} of {n} stretch cases"
                found = [(passed, words, (("stratum", "stretch"), ("passed", side)))]
            elif name:
                words = f"it failed {n - passed} of {n} {name} cases"
                found = [
                    (n - passed, words, (("stratum", name), ("failed", side), ("sort", "delta")))
                ]
            else:
                found = _suite_alert(alert, rates)
            ranked.extend(
                (
                    not alert.endswith("_regression"),
                    Reason(
                        Kind.STRATUM_ALERT,
                        Weight.REVIEW,
                        count,
                        f"stratum alert {alert} on the {side}",
                        view,
                        side,
                        note=words,
                    ),
                )
                for count, words, view in found
            )
    # a regression is the news; a suite too easy to measure (ceiling, stretch_too_easy) after it
    return [r for _, r in sorted(ranked, key=lambda rank_reason: rank_reason[0])]


def _suite_alert(alert: str, rates: Mapping[str, Any]) -> list[tuple[int, str, View]]:
    """The count, the words and the table view of an alert about the strata together: one
    per stratum it is about (an empty stratum, a thin one), each linking to that stratum's
    cases (none, for an empty one: the table then says so), or one about them all."""

    def size(name: str) -> int:
        rate = mapping_of(rates.get(name))
        return sum(v for k in ("n", "unadmitted") if isinstance(v := rate.get(k), int))

    names = [str(name) for name in rates]
    # an alert summary.json's rates do not explain
    unknown: list[tuple[int, str, View]] = [(0, "see the strata below", ())]
    if alert == "missing_stratum":
        empty = [name for name in names if size(name) == 0]
        words = "no case in {}: nothing tells how it does there"
        return [(0, words.format(name), (("stratum", name),)) for name in empty] or unknown
    if alert == "thin_stratum":
        thin = [name for name in names if size(name) == 1]
        words = "only one case in {}: too few to tell"
        return [(1, words.format(name), (("stratum", name),)) for name in thin] or unknown
    if alert == "ceiling":
        total = sum(size(name) for name in names)
        return [(total, f"it passed (nearly) every case of every stratum ({total} cases)", ())]
    return unknown


def _gating(gating: bool) -> str:
    return "gating: fail_on" if gating else "reported, not gated on"


def _tests(summary: Mapping[str, Any]) -> list[Reason]:
    reasons = []
    fail_on = strings_of(summary.get("fail_on"))
    overall = mapping_of(mapping_of(summary.get("paired")).get("overall"))
    lost = _int(overall.get("ref_only"))
    for key, kind, words, text in (
        (
            "significant_regression",
            Kind.SIGNIFICANT_REGRESSION,
            "significant regression",
            overall.get("text"),
        ),
        (
            "not_non_inferior",
            Kind.NOT_NON_INFERIOR,
            "not shown non-inferior",
            mapping_of(overall.get("non_inferiority")).get("text"),
        ),
    ):
        if summary.get(key) is not True:
            continue
        gating = key in fail_on
        reasons.append(
            Reason(
                kind,
                Weight.REVIEW if gating else Weight.NOTE,
                lost,
                f"{words} ({_gating(gating)})",
                LOST,
                note=f"{text or 'see the paired test below'}; the cases behind it are the "
                f"{plural(lost, 'discordant pair')} the candidate lost (the reference passed, "
                "the candidate failed)",
            )
        )
    return reasons


def _ratios(summary: Mapping[str, Any]) -> list[Reason]:
    """The latency and cost gates asked and not cleared (`runner.cost.regressions`)."""
    reasons = []
    block = mapping_of(summary.get("regressions"))
    for metric, kind in (("latency", Kind.LATENCY_REGRESSION), ("cost", Kind.COST_REGRESSION)):
        test = mapping_of(block.get(metric))
        if test.get("fires") is not True:
            continue
        gating = test.get("gating") is True
        pairs = _int(test.get("pairs"))
        words = (
            f"{metric} regression"
            if test.get("finding") == "regression"
            else f"{metric} regression not ruled out"
        )
        reasons.append(
            Reason(
                kind,
                Weight.REVIEW if gating else Weight.NOTE,
                pairs,
                f"{words} ({_gating(gating)})",
                (("paired", metric),),
                note=f"{test.get('text') or 'see Cost and latency below'}; the cases behind it "
                f"are the {plural(pairs, 'case')} it paired, each with its {metric} known on "
                "both sides",
            )
        )
    return reasons


_NOT_IN_FORMAT = (
    "a reply came back, not in the format asked (not JSON, tool arguments that are not a JSON "
    "object, a broken stream)"
)


def _unscored(tally: Tally) -> list[Reason]:
    """Per side, a reason per stamp it left cases unscored with, the most common first."""
    reasons = []
    for side in SIDES:
        found = [(code, sides[side]) for code, sides in tally.stamps.items() if sides[side]]
        for code, n in sorted(found, key=lambda code_n: (-code_n[1], code_n[0])):
            schema = code.startswith("schema:")
            whose = blame(schema, side)
            if not schema:
                what = (
                    "no reply came back to grade (the endpoint, the network, a rate limit or "
                    f"the budget): {whose}, not a grade of the model"
                )
            elif side == REFERENCE:
                what = f"{_NOT_IN_FORMAT}: {whose}, the frozen path broke its format"
            else:
                what = (
                    f"{_NOT_IN_FORMAT}: {whose}; a candidate that stops answering in the "
                    "format asked has regressed in format"
                )
            reasons.append(
                Reason(
                    Kind.UNSCORED,
                    Weight.INCOMPLETE,
                    n,
                    f"{plural(n, 'case')} unscored on the {side}: {code}",
                    (("miss", code), ("missed", side)),
                    side,
                    note=f"{what}; not compared",
                    blame=whose,
                )
            )
    return reasons


def _notes(tally: Tally) -> list[Reason]:
    reasons = []
    for gate, kind, words in (
        (NEW_CASE, Kind.NEW_CASE, "not in the snapshot yet: review their replies, then promote"),
        (FIXTURE_MOVE, Kind.FIXTURE_MOVE, "edited since the snapshot: review, then promote"),
        (FLAKY, Kind.FLAKY, "stable misses as accepted, with new noise between samples"),
    ):
        if n := tally.gates[gate]:
            reasons.append(
                Reason(
                    kind,
                    Weight.NOTE,
                    n,
                    f"{gate} on {plural(n, 'case')}",
                    (("gate", gate),),
                    note=words,
                )
            )
    return reasons


def reasons(summary: Mapping[str, Any], tally: Tally) -> list[Reason]:
    """Every reason of the verdict: what gates (review), what each side left unscored
    (incomplete), then the notes."""
    found = [
        *_changes(summary, tally),
        *_stratum_alerts(summary),
        *_tests(summary),
        *_ratios(summary),
        *_unscored(tally),
        *_notes(tally),
    ]
    order = list(Weight)
    return sorted(found, key=lambda r: order.index(r.weight))


def grouped(found: list[Reason]) -> list[tuple[Weight, list[Reason]]]:
    """The reasons in their groups (what gates, what was unscored per side, notes), each
    group that has any."""
    return [(w, group) for w in Weight if (group := [r for r in found if r.weight is w])]


HEADLINES = {
    "clean": "Clean",
    "review": "Needs review",
    "incomplete": "Incomplete",
    "review+incomplete": "Needs review, and incomplete",
}
CLEAN_WORDS = (
    "Nothing needs review: every case is as the accepted snapshot has it, every case was "
    "scored, and no stratum alert was raised."
)


def said(verdict: str, found: list[Reason]) -> str:
    """Words under the headline when no reason of the list explains the verdict."""
    if any(r.weight is not Weight.NOTE for r in found):
        return ""
    if verdict == "clean":
        return CLEAN_WORDS
    return f"summary.json says {verdict} for a reason this report does not name: see summary.json."


def headline(verdict: str) -> str:
    """The verdict in words, as the top of the page says it."""
    return HEADLINES.get(verdict, f"Verdict {verdict}")
