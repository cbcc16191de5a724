"""A run's end: one gate verdict per case, the strata, the paired test and the alerts, written
to disagreement.json and summary.json, and the exit code they add up to."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from runner import logs, requestsha
from runner.budget import Budget, alert_fields
from runner.ceiling import detect, strata_rates
from runner.config import LoadedConfig
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
from runner.ledger import disk_refusal, write_json, write_json_map
from runner.model import NOISE, SIDES, STRATA
from runner.regressions import fired, regressions
from runner.regressions import log_alerts as log_regressions
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
    """Gate, strata, alerts and the exit code; writes disagreement.json and summary.json."""
    snapshot = suite.snapshot
    results, noise = verdicts(suite, folds, snapshot)
    retired = sorted(set(snapshot) - set(suite.refs.ids))
    counts = dict.fromkeys(GATE_CLASSES, 0)
    for v in results:
        counts[v.gate] += 1
    counts[RETIRED_CASE] = len(retired)  # retired cases have no verdict, only a count
    _write_map(run_dir, suite.name, retired, results)
    strata: dict[str, Any] = {}
    stratum_alerts: dict[str, list[str]] = {}
    for side in SIDES:
        rates = strata_rates((v.stratum, getattr(v, side).passed) for v in results)
        strata[side] = rates
        stratum_alerts[side] = detect(rates, suite.thresholds) if suite.stratified else []
    review = [v.case_id for v in results if v.gate in REVIEW]
    flaky = [v.case_id for v in results if v.gate == FLAKY]  # exit 0, but listed
    # a broken custom grader misses on both sides alike, so no gate sees it: named apart
    broken = [
        v.case_id for v in results if _grader_failed(v.reference) or _grader_failed(v.candidate)
    ]
    # Unscoreable rows make a run incomplete whatever their gate class (a new case can time out).
    incomplete = [v.case_id for v in results if v.gate in INCOMPLETE or not v.admitted]
    tests = paired(results, suite.alpha, suite.thresholds.non_inferiority_margin)
    overall = tests["overall"]
    regression = bool(overall["significant"]) and (overall["diff"] or 0) < 0
    gate_on_regression = regression and "significant_regression" in suite.fail_on
    # undecided (no paired case) is no claim either: a release gate fails closed
    inferior = (overall["non_inferiority"] or {}).get("claim") not in (None, Claim.NON_INFERIOR)
    gate_on_inferior = inferior and "not_non_inferior" in suite.fail_on
    # per case, slower or dearer than the limit allows (or too few pairs to rule it out)
    ratios = regressions(folds.pairs, suite.thresholds, suite.fail_on, suite.alpha)
    slower = fired(ratios)
    gate_on_ratio = any(on and gate in suite.fail_on for gate, on in slower.items())
    requests = requestsha.request_changes(
        results, snapshot
    )  # a moved reference request needs review
    needs_review = (
        bool(review)
        or any(stratum_alerts.values())
        or gate_on_regression
        or gate_on_inferior
        or gate_on_ratio
        or requestsha.reference_changed(requests)
    )
    exit_code = (1 if needs_review else 0) | (2 if incomplete else 0)
    _log_alerts(log, results, snapshot, stratum_alerts, strata, requests=requests)
    if regression:
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
            gating="significant_regression" in suite.fail_on,
        )
    if inferior:
        claim = overall["non_inferiority"]
        log.warning(
            logs.ALERT_NOT_NON_INFERIOR,
            text=claim["text"],
            claim=claim["claim"],
            bound=claim["bound"],
            margin=claim["margin"],
            interval_level=claim["level"],  # `level` is the log line's own
            gating="not_non_inferior" in suite.fail_on,
        )
    log_regressions(log, ratios)
    # every served call counts, whatever its stamps: a fallback that broke the schema too
    served = {
        side: sorted({m for v in results for m in getattr(v, side).models if m}) for side in SIDES
    }
    manifest = read_manifest(run_dir)
    spend = budget.summary() if budget is not None else None
    summary = {
        "version": SUMMARY_VERSION,
        "run_id": run_dir.name,
        "suite": suite.name,
        "mode": manifest.get("mode"),
        "parent": manifest.get("parent"),
        "parent_finished": manifest.get("parent_finished"),
        "started_at": manifest.get("started_at"),
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "exit_code": exit_code,
        "verdict": _verdict_word(exit_code),
        "cases": len(results),
        "samples": suite.samples,
        "admitted": sum(1 for v in results if v.admitted),
        "unadmitted": sum(1 for v in results if not v.admitted),
        "gate_counts": counts,
        "review": review,
        "flaky": flaky,
        "grader_errors": broken,
        "incomplete": incomplete,
        "retired": retired,
        "stratified": suite.stratified,
        "strata": strata,
        "stratum_alerts": stratum_alerts,
        "served_models": served,
        "request_changed": requests,
        "unscored": unscored_summary(results),
        "paired": tests,
        "significant_regression": regression,
        "not_non_inferior": inferior,
        "regressions": ratios,
        **slower,
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
        "budget": spend,
    }
    if spend is not None and (fields := alert_fields(spend)) is not None:
        log.warning(logs.ALERT_BUDGET, **fields)  # once a run: the calls the budget cut
    if suite.noise_check:
        summary["noise_floor"] = noise_floor(results, noise)
    if not suite.stratified:
        summary["strata_note"] = "unstratified suite: no case names a stratum, detector skipped"
    _record(run_dir / "summary.json", summary)
    manifest["finished_at"] = summary["finished_at"]
    _record(run_dir / "manifest.json", manifest)  # the last write: now the run is finished
    return exit_code, summary


def _write_map(run_dir: Path, suite: str, retired: list[str], results: Sequence[Verdict]) -> None:
    path = run_dir / "disagreement.json"
    with disk_refusal(path):
        write_json_map(
            path,
            {"version": DISAGREEMENT_VERSION, "suite": suite, "retired": retired},
            "cases",
            ((v.case_id, v.to_json()) for v in sorted(results, key=lambda v: v.case_id)),
        )


def _record(path: Path, value: Mapping[str, Any]) -> None:
    """summary.json or manifest.json; a write the disk refuses is a StorageError naming it."""
    with disk_refusal(path):
        write_json(path, value)


def side_prices(loaded: LoadedConfig, suite: Suite) -> dict[str, Any]:
    """Each ledger side's endpoint price; the noise check calls the reference's endpoint."""
    cfg = loaded.config.suites[suite.name]
    prices = {side: loaded.endpoint(getattr(cfg, side)).price for side in SIDES}
    return prices | {NOISE: prices["reference"]}


def _grader_failed(view: SideView) -> bool:
    return any(m.startswith("grader_error:") for m in (*view.misses, *view.noise))


def _verdict_word(exit_code: int) -> str:
    return {0: "clean", 1: "review", 2: "incomplete", 3: "review+incomplete"}[exit_code]


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
    # per call, whatever the gate class: a transport or schema miss must not hide a swap
    drift: dict[tuple[str, str, str | None], list[str]] = {}
    for v in results:
        accepted = (snapshot.get(v.case_id) or {}).get("models") or {}
        for side in SIDES:
            was: str = accepted.get(side) or ""
            for served in drifted(getattr(v, side), was):
                drift.setdefault((side, was, served), []).append(v.case_id)
    for (side, was, served), case_ids in drift.items():
        log.warning(
            logs.ALERT_ALIAS_DRIFT,
            side=side,
            accepted=was,
            served=served,
            count=len(case_ids),
            case_ids=case_ids,
        )
    for side, alerts in stratum_alerts.items():
        if alerts:
            log.warning(logs.ALERT_STRATUM, side=side, alerts=alerts, rates=strata[side])
