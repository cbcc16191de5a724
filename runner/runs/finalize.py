"""A run's end: one gate verdict per case, the strata, the paired test and the alerts, written
to disagreement.json and summary.json, and the exit code they add up to."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from runner import logs
from runner.batch.summary import batch_block
from runner.ceiling import detect, strata_rates
from runner.config import LoadedConfig
from runner.cost.budget import Budget, alert_fields
from runner.cost.regressions import finished_fields, fired, regressions
from runner.cost.regressions import log_alerts as log_regressions
from runner.cost.usage import usage_fields
from runner.gate import (
    FLAKY,
    GATE_CLASSES,
    INCOMPLETE,
    RETIRED_CASE,
    REVIEW,
    SCHEMA_MISS,
    TRANSPORT_MISS,
    Folds,
    SideView,
    Verdict,
    classify,
    disagreement,
    drifted,
    fold,
    unscored_by,
)
from runner.grading.graders import GRADER_TIMEOUT
from runner.ledger import disk_refusal, write_json, write_json_map
from runner.model import NOISE, SIDES, STRATA, Schema
from runner.request import sha as requestsha
from runner.runs.rundir import read_manifest
from runner.runs.summary import SUMMARY_VERSION
from runner.stats import Claim, describe, paired_test
from runner.suite import Suite
from runner.unscored import unscored_summary

DISAGREEMENT_VERSION = 1


def verdicts(
    suite: Suite, folds: Folds, snapshot: Mapping[str, Any]
) -> tuple[list[Verdict], dict[str, SideView]]:
    """One gate verdict per case of today's fixtures, and the noise-check folds by case id."""
    noise = {
        case_id: found
        for case_id in suite.refs.ids
        if (found := folds.view(case_id, NOISE)) is not None
    }
    result = []
    for case in suite.refs:
        sides = {side: folds.view(case.id, side) or fold([]) for side in SIDES}
        result.append(
            classify(
                case.id,
                stratum=case.stratum,
                fixture_sha=case.fixture_sha,
                reference=sides["reference"],
                candidate=sides["candidate"],
                accepted=snapshot.get(case.id),
            )
        )
    return result, noise


def _scopes(results: Sequence[Verdict]) -> tuple[str, ...]:
    """Overall, then each stratum when the suite has strata (a stratum is never None then)."""
    return ("overall", *STRATA) if any(v.stratum for v in results) else ("overall",)


def noise_floor(results: Sequence[Verdict], noise: Mapping[str, SideView]) -> dict[str, Any]:
    """Per stratum, how often the reference disagrees with itself: the floor under all deltas."""
    floor: dict[str, Any] = {}
    for scope in _scopes(results):
        rows = [
            (v.reference, noise[v.case_id])
            for v in results
            if v.case_id in noise
            and scope in ("overall", v.stratum)
            and v.reference.admitted
            and noise[v.case_id].admitted
        ]
        moved = sum(1 for ref, again in rows if disagreement(ref.misses, again.misses))
        floor[scope] = {
            "n": len(rows),
            "disagreeing": moved,
            "rate": moved / len(rows) if rows else None,
        }
    return floor


def paired(results: Sequence[Verdict], alpha: float, margin: float | None = None) -> dict[str, Any]:
    """The paired test overall and per stratum, on each side's majority pass per case (the case
    is the unit whatever `samples` is), and, with a margin, whether the candidate is
    non-inferior (None without one: the question was not asked)."""
    out: dict[str, Any] = {}
    for scope in _scopes(results):
        result = paired_test(
            (bool(v.reference.passed), bool(v.candidate.passed))
            for v in results
            if v.admitted and scope in ("overall", v.stratum)
        )
        out[scope] = result.to_json() | {
            "significant": result.significant(alpha),
            "text": describe(result, scope, alpha),
            "non_inferiority": (
                None if margin is None else result.non_inferiority(margin, alpha).to_json()
            ),
        }
    return out


def finalize(
    loaded: LoadedConfig,
    suite: Suite,
    run_dir: Path,
    folds: Folds,
    log: Any,
    *,
    budget: Budget | None = None,
) -> tuple[int, dict[str, Any]]:
    """Gate, strata, alerts and the exit code; writes disagreement.json and summary.json.

    Its steps, in order: a verdict per case (and disagreement.json), the strata and their
    alerts, the release questions the suite asks, the exit code they add up to, the alerts,
    and summary.json (with the manifest's end)."""
    snapshot = suite.snapshot
    results, noise = verdicts(suite, folds, snapshot)
    # a partial run's gate covers its cases: the others are not retired, only not selected
    retired = sorted(set(snapshot) - set(suite.refs.ids)) if suite.selection is None else []
    _write_disagreement(run_dir, suite, results, retired)
    strata, stratum_alerts = _strata(suite, results)
    asked = _Questions.of(suite, results, folds)
    requests = requestsha.request_changes(results, snapshot)
    needs_review = (
        any(v.gate in REVIEW for v in results)
        or any(stratum_alerts.values())
        or asked.gates(suite.fail_on)
        or requestsha.reference_changed(requests)  # a moved reference request needs review
    )
    # Unscoreable rows make a run incomplete whatever their gate class (a new case can time out).
    incomplete = [v.case_id for v in results if v.gate in INCOMPLETE or not v.admitted]
    exit_code = (1 if needs_review else 0) | (2 if incomplete else 0)
    _log_alerts(log, results, snapshot, stratum_alerts, strata, requests=requests)
    asked.log_alerts(log, results, suite.fail_on)
    summary = _summary(
        loaded,
        suite,
        run_dir=run_dir,
        folds=folds,
        results=results,
        exit_code=exit_code,
        incomplete=incomplete,
        retired=retired,
        strata=(strata, stratum_alerts),
        requests=requests,
        asked=asked,
        budget=budget,
    )
    spend = summary["budget"]
    if spend is not None and (fields := alert_fields(spend)) is not None:
        log.warning(logs.ALERT_BUDGET, **fields)  # once a run: the calls the budget cut
    if suite.noise_check:
        summary["noise_floor"] = noise_floor(results, noise)
    if suite.shard is not None:  # one shard's cases: `parallax merge` makes the suite's verdict
        summary["shard"] = suite.shard.to_json()
    if not suite.stratified:
        summary["strata_note"] = "unstratified suite: no case names a stratum, detector skipped"
    elif suite.selection is not None:
        summary["strata_note"] = (
            "partial run: only the easy and medium floors are checked; missing or thin strata "
            "and the ceiling are a whole run's to judge"
        )
    _record(run_dir / "summary.json", summary)
    manifest = read_manifest(run_dir)
    manifest["finished_at"] = summary["finished_at"]
    _record(run_dir / "manifest.json", manifest)  # the last write: now the run is finished
    return exit_code, summary


def finished_event(exit_code: int, summary: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of `run.finished`, one list for a run and a merge alike: an alert rule
    written for one reads the other."""
    return {
        "exit_code": exit_code,
        "verdict": summary["verdict"],
        "gate_counts": summary["gate_counts"],
        "admitted": summary["admitted"],
        "unadmitted": summary["unadmitted"],
        **usage_fields(summary),
        **finished_fields(summary),
    }


def _write_disagreement(
    run_dir: Path, suite: Suite, results: Sequence[Verdict], retired: Sequence[str]
) -> None:
    """disagreement.json: every case's verdict, by case id, streamed."""
    path = run_dir / "disagreement.json"
    with disk_refusal(path):
        write_json_map(
            path,
            {"version": DISAGREEMENT_VERSION, "suite": suite.name, "retired": list(retired)},
            "cases",
            ((v.case_id, v.to_json()) for v in sorted(results, key=lambda v: v.case_id)),
        )


def _strata(
    suite: Suite, results: Sequence[Verdict]
) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """Each side's strata pass rates and the ceiling detector's alerts on them (none for an
    unstratified suite)."""
    strata: dict[str, Any] = {}
    alerts: dict[str, list[str]] = {}
    for side in SIDES:
        rates = strata_rates((v.stratum, getattr(v, side).passed) for v in results)
        strata[side] = rates
        whole = suite.selection is None
        alerts[side] = detect(rates, suite.thresholds, whole=whole) if suite.stratified else []
    return strata, alerts


@dataclass(frozen=True, slots=True)
class _Questions:
    """The release questions a run answers beside the gate: is the candidate significantly
    worse (the paired test), not shown non-inferior, slower or dearer per case."""

    tests: dict[str, Any]
    ratios: dict[str, Any]
    slower: dict[str, bool]

    @classmethod
    def of(cls, suite: Suite, results: Sequence[Verdict], folds: Folds) -> _Questions:
        tests = paired(results, suite.alpha, suite.thresholds.non_inferiority_margin)
        # per case, slower or dearer than the limit allows (or too few pairs to rule it out)
        ratios = regressions(folds.pairs, suite.thresholds, suite.fail_on, suite.alpha)
        return cls(tests, ratios, fired(ratios))

    @property
    def regression(self) -> bool:
        overall = self.tests["overall"]
        return bool(overall["significant"]) and (overall["diff"] or 0) < 0

    @property
    def inferior(self) -> bool:
        """Not shown non-inferior: undecided (no paired case) is no claim either, so a release
        gate fails closed."""
        claim = (self.tests["overall"]["non_inferiority"] or {}).get("claim")
        return claim not in (None, Claim.NON_INFERIOR)

    def gates(self, fail_on: Sequence[str]) -> bool:
        """Whether an answer the suite's `fail_on` gates on needs review."""
        return (
            (self.regression and "significant_regression" in fail_on)
            or (self.inferior and "not_non_inferior" in fail_on)
            or any(on and gate in fail_on for gate, on in self.slower.items())
        )

    def log_alerts(self, log: Any, results: Sequence[Verdict], fail_on: Sequence[str]) -> None:
        overall = self.tests["overall"]
        if self.regression:
            log.warning(
                logs.ALERT_SIGNIFICANT_REGRESSION,
                text=overall["text"],
                p_value=overall["p_value"],
                diff=overall["diff"],
                count=overall["ref_only"],
                case_ids=[
                    v.case_id
                    for v in results
                    if v.admitted and v.reference.passed and not v.candidate.passed
                ],
                gating="significant_regression" in fail_on,
            )
        if self.inferior:
            claim = overall["non_inferiority"]
            log.warning(
                logs.ALERT_NOT_NON_INFERIOR,
                text=claim["text"],
                claim=claim["claim"],
                bound=claim["bound"],
                margin=claim["margin"],
                interval_level=claim["level"],  # `level` is the log line's own
                gating="not_non_inferior" in fail_on,
            )
        log_regressions(log, self.ratios)


def _summary(
    loaded: LoadedConfig,
    suite: Suite,
    *,
    run_dir: Path,
    folds: Folds,
    results: Sequence[Verdict],
    exit_code: int,
    incomplete: list[str],
    retired: list[str],
    strata: tuple[dict[str, Any], dict[str, list[str]]],
    requests: dict[str, Any],
    asked: _Questions,
    budget: Budget | None,
) -> dict[str, Any]:
    """summary.json, from what the other steps found: verdict, counts, the cases of each
    list, strata, models, the release questions' answers, usage and the budget."""
    manifest = read_manifest(run_dir)
    counts = dict.fromkeys(GATE_CLASSES, 0)
    for v in results:
        counts[v.gate] += 1
    counts[RETIRED_CASE] = len(retired)  # retired cases have no verdict, only a count
    snapshot = suite.snapshot
    return {
        "version": SUMMARY_VERSION,
        "run_id": run_dir.name,
        "suite": suite.name,
        "mode": manifest.get("mode"),
        "partial": suite.partial,  # the selection of a partial run, else null
        "parent": manifest.get("parent"),
        "parent_finished": manifest.get("parent_finished"),
        "started_at": manifest.get("started_at"),
        # to the millisecond: two runs of one second sort by it (`runner.runs.names.run_order`)
        "finished_at": datetime.now(UTC).isoformat(timespec="milliseconds"),
        "exit_code": exit_code,
        "verdict": _verdict_word(exit_code),
        "cases": len(results),
        "samples": suite.samples,
        "admitted": sum(1 for v in results if v.admitted),
        "unadmitted": sum(1 for v in results if not v.admitted),
        "gate_counts": counts,
        "review": [v.case_id for v in results if v.gate in REVIEW],
        "flaky": [v.case_id for v in results if v.gate == FLAKY],  # exit 0, but listed
        # a broken custom grader misses on both sides alike, so no gate sees it: named apart
        "grader_errors": [
            v.case_id for v in results if _grader_failed(v.reference) or _grader_failed(v.candidate)
        ],
        "incomplete": incomplete,
        "retired": retired,
        "stratified": suite.stratified,
        "strata": strata[0],
        "stratum_alerts": strata[1],
        # every served call counts, whatever its stamps: a fallback that broke the schema too
        "served_models": {
            side: sorted({m for v in results for m in getattr(v, side).models if m})
            for side in SIDES
        },
        # the accepted model a side was served another instead of, and on how many cases
        "alias_drift": [
            {k: drift[k] for k in ("side", "accepted", "served", "count")}
            for drift in alias_drift(results, snapshot)
        ],
        "request_changed": requests,
        "unscored": unscored_summary(results),
        "paired": asked.tests,
        "significant_regression": asked.regression,
        "not_non_inferior": asked.inferior,
        "regressions": asked.ratios,
        **asked.slower,
        # both sides passed and agree: history counts these nights toward ceiling candidates
        "quiet_cases": sorted(
            v.case_id
            for v in results
            if v.admitted
            and v.reference.passed
            and v.candidate.passed
            and v.disagreement == []
            and not v.reference.noise
            and not v.candidate.noise
        ),
        "fail_on": list(suite.fail_on),
        "usage": folds.usage.summary(
            side_prices(loaded, suite), SIDES, stratified=suite.stratified
        ),
        "budget": budget.summary() if budget is not None else None,
        "batch": batch_block(run_dir, manifest),  # the sides that ran as a batch
    }


def _record(path: Path, value: Mapping[str, Any]) -> None:
    """summary.json or manifest.json; a write the disk refuses is a StorageError naming it."""
    with disk_refusal(path):
        write_json(path, value)


def side_prices(loaded: LoadedConfig, suite: Suite) -> dict[str, Any]:
    """Each ledger side's endpoint price, as its calls are charged (a batch endpoint's at its
    batch_discount); the noise check calls the reference's endpoint."""
    cfg = loaded.config.suites[suite.name]
    prices = {side: loaded.endpoint(getattr(cfg, side)).charged_price for side in SIDES}
    return prices | {NOISE: prices["reference"]}


def side_kinds(loaded: LoadedConfig, suite: Suite) -> dict[str, str]:
    """Each ledger side's protocol, which reads its replies' usage as its price prices them;
    the noise check calls the reference's endpoint."""
    cfg = loaded.config.suites[suite.name]
    kinds = {side: loaded.endpoint(getattr(cfg, side)).wire_kind for side in SIDES}
    return kinds | {NOISE: kinds["reference"]}


def _grader_failed(view: SideView) -> bool:
    """A grader error among its misses, or a grader that ran out of time: an unscored side
    whose reply was read (schema ok) and whose detail names it."""
    if any(m.startswith("grader_error:") for m in (*view.misses, *view.noise)):
        return True
    return view.schema == Schema.OK and GRADER_TIMEOUT in view.detail.split(",")


def _verdict_word(exit_code: int) -> str:
    return {0: "clean", 1: "review", 2: "incomplete", 3: "review+incomplete"}[exit_code]


def alias_drift(results: Sequence[Verdict], snapshot: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per side, accepted model and model served instead: the cases it was served on. Per call,
    whatever the gate class: a transport or schema miss must not hide a swap."""
    drift: dict[tuple[str, str, str | None], list[str]] = {}
    for v in results:
        accepted = (snapshot.get(v.case_id) or {}).get("models") or {}
        for side in SIDES:
            was: str = accepted.get(side) or ""
            for served in drifted(getattr(v, side), was):
                drift.setdefault((side, was, served), []).append(v.case_id)
    return [
        {"side": side, "accepted": was, "served": served, "count": len(ids), "case_ids": ids}
        for (side, was, served), ids in drift.items()
    ]


def _log_alerts(
    log: Any,
    results: Sequence[Verdict],
    snapshot: Mapping[str, Any],
    stratum_alerts: Mapping[str, list[str]],
    strata: Mapping[str, Any],
    *,
    requests: Mapping[str, Sequence[Mapping[str, Any]]],
) -> None:
    changed = [v for v in results if v.gate == "disagreement_changed"]
    if changed:
        log.warning(
            logs.ALERT_DISAGREEMENT_CHANGED,
            count=len(changed),
            case_ids=[v.case_id for v in changed],
        )
    # The frozen path is not frozen whatever the gate: a reference whose stable misses left the
    # accepted ones moved even when the candidate moved alike (`unchanged`) or a served model
    # changed first (`alias_swap`).
    moved = [v.case_id for v in results if "reference" in v.moved]
    if moved:
        log.warning(
            logs.ALERT_REFERENCE_MOVED, reason="misses_moved", count=len(moved), case_ids=moved
        )
    requestsha.log_alerts(log, requests)  # its request moved: the frozen path moved too
    # by the stamp, not the gate class: a new or edited case that timed out pages too
    unscored: dict[str, dict[str, str]] = {TRANSPORT_MISS: {}, SCHEMA_MISS: {}}
    for v in results:
        if (found := unscored_by(v.reference, v.candidate)) is not None:
            unscored[found[0]][v.case_id] = found[1]
    for gate, event in ((TRANSPORT_MISS, logs.ALERT_TRANSPORT), (SCHEMA_MISS, logs.ALERT_SCHEMA)):
        if details := unscored[gate]:
            log.warning(event, count=len(details), case_ids=list(details), details=details)
    for drift in alias_drift(results, snapshot):
        log.warning(logs.ALERT_ALIAS_DRIFT, **drift)
    for side, alerts in stratum_alerts.items():
        if alerts:
            log.warning(logs.ALERT_STRATUM, side=side, alerts=alerts, rates=strata[side])
