"""Disagreement per case, and its gate class against the accepted snapshot.

With several samples per side, only *stable* misses (seen in more than half the samples)
enter the disagreement; misses seen in fewer are the case's noise. A case whose stable misses
are as accepted but whose noise grew is `flaky`, not `disagreement_changed`: a gate that fires
on every flip of a temperature-0 model gets ignored.

Pass rates saturate; the disagreement between a frozen reference and the candidate keeps
moving. Each case gets exactly one gate class, first rule that matches (DESIGN's order), and
only admitted pairs ever reach a disagreement.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from runner.cost.regressions import PairFold
from runner.cost.usage import Call, UsageFold, call_of
from runner.model import Outcome, Schema, Transport, record
from runner.text import shared

if TYPE_CHECKING:  # annotations only: the gate needs no fixture parsing
    from runner.config import Price
    from runner.fixtures.refs import CaseRef

NEW_CASE = "new_case"
FIXTURE_MOVE = "fixture_move"
TRANSPORT_MISS = "transport_miss"
SCHEMA_MISS = "schema_miss"
ALIAS_SWAP = "alias_swap"
DISAGREEMENT_CHANGED = "disagreement_changed"
FLAKY = "flaky"
UNCHANGED = "unchanged"
RETIRED_CASE = "retired_case"
GATE_CLASSES = (
    NEW_CASE,
    FIXTURE_MOVE,
    TRANSPORT_MISS,
    SCHEMA_MISS,
    ALIAS_SWAP,
    DISAGREEMENT_CHANGED,
    FLAKY,
    UNCHANGED,
    RETIRED_CASE,
)
REVIEW = frozenset({DISAGREEMENT_CHANGED, ALIAS_SWAP})
INCOMPLETE = frozenset({TRANSPORT_MISS, SCHEMA_MISS})


def disagreement(reference_misses: Sequence[str], candidate_misses: Sequence[str]) -> list[str]:
    return sorted(set(reference_misses) ^ set(candidate_misses))


@dataclass(frozen=True, slots=True)
class SideView:
    """One side of one case, folded over its samples."""

    transport: str
    schema: str
    admitted: bool
    misses: tuple[str, ...]  # stable misses: seen in more than half the samples
    noise: tuple[str, ...]  # misses seen in some samples but not most: the case's flakiness
    passed: bool | None  # majority pass over samples; None when unadmitted
    pass_fraction: float | None  # share of samples that passed; None when unadmitted
    task_score: float | None  # mean over samples; None when unadmitted
    response_model: str | None
    system_fingerprint: str | None
    samples: int
    detail: str
    # every model the served calls of this side named, whatever their schema stamp (None for
    # a reply that passed its schema naming none; a body that broke says nothing), sorted: one
    # sample that fell back to another model is drift too. In memory only: the gate and the
    # alerts read it, the files do not.
    models: tuple[str | None, ...] = ()
    # the request_sha its calls were shaped by (None: rows from before it was recorded); one
    # per side, since a run is never resumed or retried under another request
    request_sha: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "transport": self.transport,
            "schema": self.schema,
            "admitted": self.admitted,
            "misses": list(self.misses),
            "noise": list(self.noise),
            "passed": self.passed,
            "pass_fraction": self.pass_fraction,
            "task_score": self.task_score,
            "response_model": self.response_model,
            "system_fingerprint": self.system_fingerprint,
            "samples": self.samples,
            "detail": self.detail,
            "request_sha": self.request_sha,
        }


def fold(outcomes: Sequence[Outcome]) -> SideView:
    """A side is admitted only if every sample is; misses count when most samples show them.

    Its strings are shared (interned): a run holds one SideView per case and side.
    """
    return _fold_one(outcomes[0]) if len(outcomes) == 1 else _fold_many(outcomes)


def _fold_one(row: Outcome) -> SideView:
    """`_fold_many([row])` without the bookkeeping samples need: one sample is the usual case,
    and this runs for every call (tests/test_gate.py checks the two agree)."""
    model, fingerprint = shared(row.response_model or None), shared(row.system_fingerprint or None)
    models = (model,) if _names_a_model(row) else ()
    request = shared(row.request_sha)
    if row.transport != Transport.OK or not row.admitted:
        return _unscored(row, model, fingerprint, 1, models, request=request)
    assert row.task_score is not None  # admitted
    stable = tuple(sorted({shared(m) for m in row.misses}))
    return _scored(
        stable,
        (),
        pass_fraction=0.0 if stable else 1.0,
        task_score=row.task_score / 1,  # a float, as the mean over several samples is
        model=model,
        fingerprint=fingerprint,
        samples=1,
        models=models,
        request=request,
    )


def _fold_many(outcomes: Sequence[Outcome]) -> SideView:
    rows = sorted(outcomes, key=_sample)
    # Transport outranks schema (DESIGN's rule order), whichever sample it happened in.
    bad = next((o for o in rows if o.transport != Transport.OK), None) or next(
        (o for o in rows if not o.admitted), None
    )
    model = shared(next((o.response_model for o in rows if o.response_model), None))
    fingerprint = shared(next((o.system_fingerprint for o in rows if o.system_fingerprint), None))
    served = {shared(o.response_model or None) for o in rows if _names_a_model(o)}
    models = tuple(sorted(served, key=_model_order))
    request = shared(next((o.request_sha for o in rows if o.request_sha), None))
    if bad is not None or not rows:
        return _unscored(bad, model, fingerprint, len(rows), models, request=request)
    counts: dict[str, int] = {}
    for row in rows:
        for miss in set(row.misses):
            counts[miss] = counts.get(miss, 0) + 1
    stable = tuple(sorted(shared(m) for m, c in counts.items() if c * 2 > len(rows)))
    noise = tuple(sorted(shared(m) for m, c in counts.items() if c * 2 <= len(rows)))
    passes = sum(1 for o in rows if o.passed)
    scores = [o.task_score for o in rows if o.task_score is not None]
    return _scored(
        stable,
        noise,
        pass_fraction=passes / len(rows),
        task_score=sum(scores) / len(scores),
        model=model,
        fingerprint=fingerprint,
        samples=len(rows),
        models=models,
        request=request,
    )


def _names_a_model(row: Outcome) -> bool:
    """Whether a row tells which model served it: a served reply that names one, or one that
    passed its schema naming none. A body that broke (not JSON, an HTML page) says nothing."""
    return row.transport == Transport.OK and (bool(row.response_model) or row.schema == Schema.OK)


def _model_order(model: str | None) -> tuple[bool, str]:
    return (model is not None, model or "")


def _unscored(
    bad: Outcome | None,
    model: str | None,
    fingerprint: str | None,
    samples: int,
    models: tuple[str | None, ...],
    *,
    request: str | None,
) -> SideView:
    """An unadmitted side, named by its first failing row (or by having no row at all)."""
    return SideView(
        transport=shared(bad.transport) if bad else Transport.CANCELLED.value,
        schema=shared(bad.schema) if bad else Schema.SKIPPED.value,
        admitted=False,
        misses=(),
        noise=(),
        passed=None,
        pass_fraction=None,
        task_score=None,
        response_model=model,
        system_fingerprint=fingerprint,
        samples=samples,
        detail=shared(bad.detail) if bad else "no outcome",
        models=models,
        request_sha=request,
    )


def _scored(
    stable: tuple[str, ...],
    noise: tuple[str, ...],
    *,
    pass_fraction: float,
    task_score: float,
    model: str | None,
    fingerprint: str | None,
    samples: int,
    models: tuple[str | None, ...],
    request: str | None,
) -> SideView:
    """An admitted side; it passes when most of its samples did."""
    return SideView(
        transport=Transport.OK.value,
        schema=Schema.OK.value,
        admitted=True,
        misses=stable,
        noise=noise,
        passed=pass_fraction > 0.5,
        pass_fraction=pass_fraction,
        task_score=task_score,
        response_model=model,
        system_fingerprint=fingerprint,
        samples=samples,
        detail=shared(",".join(stable)) if stable else "ok",
        models=models,
        request_sha=request,
    )


def _sample(outcome: Outcome) -> int:
    return outcome.sample


class Folds:
    """Outcome rows folded per (case, side) as they are written.

    A side is folded as soon as its `samples` rows are in, so a run holds one SideView per
    case and side instead of every row (at 20,000 cases the rows were the largest part of the
    peak), and the gate never reads outcomes.jsonl back. Only today's samples count: rows a
    run with more samples wrote are left out when it is replayed with fewer, and so is a second
    row for one key, which the ledgers never hold (resume skips what raw.jsonl has).
    """

    def __init__(
        self,
        samples: int,
        prices: Mapping[str, Price | None] | None = None,
        kinds: Mapping[str, str] | None = None,
    ) -> None:
        self._samples = samples
        self._kinds = kinds or {}  # per side the protocol its endpoint speaks: its usage's
        self._pending: dict[tuple[str, str], list[Outcome]] = {}
        self._views: dict[str, dict[str, SideView]] = {}  # side -> case id -> fold
        # Most sides of a run fold to equal views (ok, no misses, same model): one object each.
        self._distinct: dict[SideView, SideView] = {}
        self._ones: dict[tuple[Any, ...], SideView] = {}  # one-row folds by what they read
        self.usage = UsageFold()  # tokens, cost and latency of the rows kept
        # per case and side its latency and cost at `prices`, for the regression gates
        self.pairs = PairFold(samples, prices or {})

    def add(self, outcome: Outcome, case: CaseRef) -> None:
        self.put(outcome.key, self.entry(outcome, case), self.call(outcome))

    def call(self, outcome: Outcome) -> Call:
        """What the usage and pair folds read of a row, its usage read by its side's protocol
        (`kinds`; a side with none has no usage to read)."""
        return call_of(outcome, self._kinds.get(outcome.side, ""))

    def entry(self, outcome: Outcome, case: CaseRef) -> SideView | Outcome | None:
        """What `put` keeps of a row, made apart from it so a worker process can make it:
        with one sample the side's fold itself, with more the row's lean copy."""
        if not 0 <= outcome.sample < self._samples:
            return None
        if self._samples == 1:  # the usual case: folded at once, nothing kept of the row
            # the fold of one row is a function of these fields alone, and most rows repeat them
            seen = (
                outcome.transport,
                outcome.schema,
                outcome.task_score,
                outcome.misses,
                outcome.detail,
                outcome.response_model,
                outcome.system_fingerprint,
                outcome.request_sha,
            )
            view = self._ones.get(seen)
            if view is None:
                view = self._ones[seen] = self._share(fold((outcome,)))
            return view
        return _lean(outcome, case)

    def put(self, key: tuple[str, str, int], entry: SideView | Outcome | None, call: Call) -> None:
        """Keep a row's `entry` and its `call` (`runner.cost.usage`); the first row of a (case,
        side, sample) is the one that counts."""
        if entry is None:
            return
        case_id, side, sample = key
        side = shared(side)
        views = self._views.setdefault(side, {})
        if case_id in views:
            return
        if isinstance(entry, SideView):
            views[case_id] = self._share(entry)
            self.usage.add(side, call)
            self.pairs.add(case_id, side, call)
            return
        rows = self._pending.setdefault((case_id, side), [])
        if any(row.sample == sample for row in rows):
            return
        rows.append(entry)
        self.usage.add(side, call)
        self.pairs.add(case_id, side, call)
        if len(rows) == self._samples:
            views[case_id] = self._share(fold(rows))
            del self._pending[(case_id, side)]

    def _share(self, view: SideView) -> SideView:
        return self._distinct.setdefault(view, view)

    def view(self, case_id: str, side: str) -> SideView | None:
        """The side's fold, or None when no row of it was written."""
        found = self._views.get(side, {}).get(case_id)
        if found is None and (case_id, side) in self._pending:  # not all samples are in
            found = fold(self._pending[(case_id, side)])
        return found


def _lean(outcome: Outcome, case: CaseRef) -> Outcome:
    """What `fold` reads, with the strings every row repeats shared."""
    return Outcome(
        case_id=case.id,
        side=shared(outcome.side),
        sample=outcome.sample,
        fixture_sha=case.fixture_sha,
        stratum=case.stratum,
        model_alias=None,
        response_model=shared(outcome.response_model),
        response_id=None,
        system_fingerprint=shared(outcome.system_fingerprint),
        transport=shared(outcome.transport),
        schema=shared(outcome.schema),
        task_score=outcome.task_score,
        misses=tuple(shared(m) for m in outcome.misses),
        detail=shared(outcome.detail),
        http_status=None,
        attempts=outcome.attempts,
        elapsed_ms=0,
        request_sha=shared(outcome.request_sha),
    )


@record
class Verdict:
    """The gate's word on one case."""

    case_id: str
    stratum: str | None
    fixture_sha: str
    gate: str
    detail: str
    reference: SideView
    candidate: SideView
    disagreement: list[str] | None = field(default=None)
    # the sides whose stable misses left the ones the snapshot accepted for them, whatever the
    # gate class: a report's "which side moved", and the frozen path's alert
    moved: tuple[str, ...] = ()

    @property
    def admitted(self) -> bool:
        return self.reference.admitted and self.candidate.admitted

    def to_json(self) -> dict[str, Any]:
        return {
            "stratum": self.stratum,
            "fixture_sha": self.fixture_sha,
            "gate": self.gate,
            "detail": self.detail,
            "admitted": self.admitted,
            "disagreement": self.disagreement,
            "moved": list(self.moved),
            "reference": self.reference.to_json(),
            "candidate": self.candidate.to_json(),
        }


def unscored_by(reference: SideView, candidate: SideView) -> tuple[str, str] | None:
    """The stamp that keeps a pair out of the comparison, as (gate class, detail), or None.

    Rules 3 and 4 of the gate, and also what the transport and schema alerts page on for a
    case whose gate class came earlier (a new or edited case that timed out). The detail names
    every side with that stamp: with both endpoints down, the candidate's outage shows too.
    """
    sides = (("reference", reference), ("candidate", candidate))
    for gate, bad in (
        (TRANSPORT_MISS, [(s, v) for s, v in sides if v.transport != Transport.OK]),
        (SCHEMA_MISS, [(s, v) for s, v in sides if v.schema != Schema.OK or not v.admitted]),
    ):
        if bad:
            return gate, "; ".join(f"{side}: {view.detail}" for side, view in bad)
    return None


def drifted(view: SideView, accepted: str | None) -> tuple[str | None, ...]:
    """The models a side's served calls named other than the one the snapshot accepted for
    it, whatever the case's gate class: decided per call, so a reply that broke the schema,
    or one sample of several, served by a fallback model is drift too. A side none of whose
    calls was served, or without an accepted model, has none."""
    if not accepted:
        return ()
    return tuple(model for model in view.models if model != accepted)


def moved_from(view: SideView, accepted: Mapping[str, Any], side: str) -> bool:
    """Whether a side's stable misses left the ones the snapshot accepted for it."""
    return sorted(view.misses) != sorted(accepted.get(f"{side}_misses") or [])


def classify(
    case_id: str,
    *,
    stratum: str | None,
    fixture_sha: str,
    reference: SideView,
    candidate: SideView,
    accepted: Mapping[str, Any] | None,
) -> Verdict:
    """Apply DESIGN's seven rules in order; `accepted` is the snapshot's entry or None."""
    delta = (
        disagreement(reference.misses, candidate.misses)
        if reference.admitted and candidate.admitted
        else None
    )

    sides = (("reference", reference), ("candidate", candidate))
    # a side is compared with the snapshot only on the same test and when it was scored
    moved = (
        tuple(side for side, view in sides if view.admitted and moved_from(view, accepted, side))
        if accepted is not None and accepted.get("fixture_sha") == fixture_sha
        else ()
    )

    def verdict(gate: str, detail: str) -> Verdict:
        return Verdict(
            case_id, stratum, fixture_sha, gate, detail, reference, candidate, delta, moved
        )

    if accepted is None:
        return verdict(NEW_CASE, "not in the snapshot")
    if accepted.get("fixture_sha") != fixture_sha:
        return verdict(FIXTURE_MOVE, f"fixture_sha {accepted.get('fixture_sha')} -> {fixture_sha}")
    unscored = unscored_by(reference, candidate)
    if unscored is not None:
        return verdict(*unscored)
    models = accepted.get("models") or {}
    for side, view in sides:
        was = models.get(side)
        if drifted(view, was):
            served = ", ".join(str(m) for m in view.models)
            return verdict(ALIAS_SWAP, f"{side}: accepted {was}, served {served}")
    assert delta is not None
    if delta != list(accepted.get("disagreement") or []):
        who = " and ".join(moved) if moved else "neither side's misses"
        return verdict(
            DISAGREEMENT_CHANGED,
            f"{who} moved: accepted {accepted.get('disagreement') or []}, now {delta}",
        )
    grown = {
        side: sorted(set(view.noise) - set(accepted.get(f"{side}_noise") or []))
        for side, view in sides
    }
    if any(grown.values()):
        shown = "; ".join(f"{side}: {', '.join(m)}" for side, m in grown.items() if m)
        return verdict(FLAKY, f"stable misses as accepted, new noise ({shown})")
    return verdict(UNCHANGED, "as accepted")
