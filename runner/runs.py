"""A run directory from start to verdict: plan, call, stamp, gate, summarise.

`runs/<suite>/<UTC timestamp>-<short id>/` holds manifest.json, raw.jsonl, outcomes.jsonl,
disagreement.json and summary.json. Ledgers are appended as results arrive, so a killed run
resumes from what it wrote; everything after the exchange is recomputed from raw.jsonl, which
is also how `replay` regrades a run offline.
"""

from __future__ import annotations

import functools
import os
import platform
import secrets
import shutil
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from runner import __version__, logs, requestsha
from runner.ceiling import detect, strata_rates
from runner.config import LoadedConfig, Thresholds, load_config
from runner.errors import ConfigError, DataError, UsageError
from runner.files import check_writable, file_problem
from runner.fixtures import CaseRef, CaseRefs, FixtureFile
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
    moved_from,
    unscored_by,
)
from runner.grading import GraderSet, check_case, load_graders
from runner.invocation import command, shown_path
from runner.ledger import LedgerWriter, read_json_object, write_json, write_json_map
from runner.lock import holds_suite_lock
from runner.model import NOISE, SIDES, STRATA, Case, Endpoint, Exchange
from runner.progress import ProgressBar, start_progress
from runner.regrade import heal, read_exchanges, read_outcomes
from runner.report import REPORT_FILES, after_run
from runner.shutdown import Interrupted, Shutdown
from runner.snapshot import load_snapshot, snapshot_path
from runner.stamps import stamp
from runner.stats import describe, paired_test
from runner.text import visible
from runner.unscored import next_steps, unscored_summary, why_lines

MANIFEST_VERSION = 1
SUMMARY_VERSION = 1
DISAGREEMENT_VERSION = 1
_RESUMED_FILES = ("manifest.json", "raw.jsonl", "outcomes.jsonl")


@dataclass(frozen=True)
class Suite:
    """A suite ready to run: cases (strata settled), graders and thresholds."""

    name: str
    refs: CaseRefs  # every case, in file order; `fixtures.load` reads one in full
    fixtures: FixtureFile
    graders: GraderSet
    thresholds: Thresholds
    samples: int
    stratified: bool
    snapshot: Mapping[str, Any]  # the accepted entries, read before any call is made
    noise_check: bool = False
    fail_on: tuple[str, ...] = ()
    alpha: float = 0.05

    def ref(self, case_id: str) -> CaseRef | None:
        return self.refs.get(case_id)


def prepare_suite(loaded: LoadedConfig, name: str) -> Suite:
    """Load fixtures, graders and the snapshot, so bad input fails before the first call.

    In a stratified suite a case without a stratum counts as medium.
    """
    cfg = loaded.config.suites[name]
    fixtures_path = loaded.resolve(cfg.fixtures)
    if (problem := file_problem(fixtures_path)) is not None:
        raise ConfigError(loaded.path, f"suites.{name}.fixtures", f"{problem}: {cfg.fixtures}")
    graders = load_graders(
        cfg.graders, loaded.base_dir, config_path=str(loaded.path), key=f"suites.{name}.graders"
    )
    fixtures = FixtureFile(fixtures_path)
    refs = fixtures.validate(functools.partial(check_case, graders=graders))
    if not len(refs):  # an empty or truncated file would retire every case and read clean
        raise DataError(fixtures_path, "no cases: a suite needs at least one")
    stratified = any(r.stratum for r in refs)
    if stratified:
        refs.default_stratum("medium")
    return Suite(
        name=name,
        refs=refs,
        fixtures=fixtures,
        graders=graders,
        thresholds=loaded.thresholds(name),
        samples=cfg.samples,
        stratified=stratified,
        snapshot=load_snapshot(snapshot_path(loaded.snapshots_dir, name)),
        noise_check=cfg.noise_check,
        fail_on=tuple(cfg.fail_on),
        alpha=cfg.alpha,
    )


def build_endpoint(loaded: LoadedConfig, endpoint_name: str, suite: str) -> Endpoint:
    """A recorded cassette or a live client, behind the same interface."""
    cfg = loaded.endpoint(endpoint_name)
    sha = loaded.shape(endpoint_name).request_sha
    if cfg.kind == "recorded":
        from runner.recorded import RecordedEndpoint, load_cassette

        cassette = load_cassette(loaded.resolve(cfg.cassette)) if cfg.cassette else {}
        return RecordedEndpoint(
            endpoint_name,
            suite=suite,
            model=cfg.model,
            cassette=cassette,
            protocol=cfg.protocol,
            stream=cfg.stream,
            request_sha=sha,
        )
    from runner.client import HttpEndpoint

    return HttpEndpoint(endpoint_name, cfg, loaded.api_key(endpoint_name), request_sha=sha)


def _public_url(url: str | None) -> str | None:
    """Drop any user:password@ from a URL before it is written anywhere."""
    if not url:
        return url
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def _file_digest(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def resume_problem(loaded: LoadedConfig, suite: str, manifest: Mapping[str, Any]) -> str | None:
    """Why an interrupted run cannot be finished in place, or None.

    Its rows were called for the cases and samples it started with: finished against edited
    fixtures or another `samples`, one run would grade two suites and read as one verdict.
    """
    if manifest.get("mode") == "replay":
        parent = manifest.get("parent")
        again = (
            command("replay", loaded.runs_dir / suite / parent)
            if isinstance(parent, str)
            else command("replay", "RUN_DIR")
        )
        return f"an interrupted replay calls nothing; run `{again}` again"
    cfg = loaded.config.suites[suite]
    fixtures = manifest.get("fixtures") or {}
    if not isinstance(fixtures, dict):  # a hand-edited manifest: nothing to check it against
        return "its manifest has no fixtures object"
    try:
        digest: str | None = _file_digest(loaded.resolve(cfg.fixtures))
    except OSError:
        digest = None
    if fixtures.get("digest") != digest:
        return "the fixtures changed since it started"
    if manifest.get("samples") != cfg.samples:
        return "samples changed since it started"
    return requestsha.request_problem(loaded, suite, manifest)


RUN_STAMP = "%Y%m%dT%H%M%SZ"  # a run dir's name starts with its start, so names sort by it


def new_run_dir(runs_dir: Path, suite: str) -> Path:
    stamp_ = datetime.now(UTC).strftime(RUN_STAMP)
    run_dir = runs_dir / suite / f"{stamp_}-{secrets.token_hex(3)}"
    try:
        run_dir.mkdir(parents=True)
    except OSError as exc:
        raise UsageError(f"{runs_dir}: cannot create a run directory: {exc.strerror}") from None
    if not os.access(run_dir, os.W_OK):
        raise UsageError(f"{run_dir}: run directory is not writable")
    return run_dir


@functools.cache
def _versions() -> dict[str, str]:
    """The installed versions of the libraries a run's bytes pass through, read from their
    package metadata: anyio has no `__version__`, and a replay need not import httpx."""
    from importlib.metadata import version

    return {name: version(name) for name in ("httpx", "aiohttp", "anyio", "structlog", "orjson")}


def manifest_for(
    loaded: LoadedConfig,
    suite: Suite,
    run_dir: Path,
    *,
    mode: str,
    parent: str | None,
    parent_finished: bool | None = None,
) -> dict[str, Any]:
    cfg = loaded.config.suites[suite.name]
    endpoints = {}
    for side in SIDES:
        name = getattr(cfg, side)
        ep = loaded.endpoint(name)
        endpoints[side] = {
            "name": name,
            "kind": ep.kind,
            "base_url": _public_url(ep.base_url),
            "model": ep.model,
            "request_sha": loaded.shape(name).request_sha,
        }
    return {
        "version": MANIFEST_VERSION,
        "run_id": run_dir.name,
        "suite": suite.name,
        "mode": mode,
        "parent": parent,
        "parent_finished": parent_finished,  # a parent killed mid-run never made some calls
        "config": {"path": str(loaded.path.resolve()), "digest": loaded.digest},
        "fixtures": {
            "path": str(suite.fixtures.path.resolve()),
            "digest": _file_digest(suite.fixtures.path),
            "cases": len(suite.refs),
        },
        "samples": suite.samples,
        "endpoints": endpoints,
        "versions": {
            "parallax": __version__,
            "python": platform.python_version(),
            **_versions(),
        },
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "finished_at": None,
    }


def read_manifest(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "manifest.json"
    if not run_dir.is_dir():
        raise UsageError(f"{run_dir}: no such run directory")
    if not path.exists():  # a suite's folder, or any other: the argument is wrong, not data
        raise UsageError(f"{run_dir}: not a parallax run directory (no manifest.json)")
    manifest = read_json_object(path)
    if manifest.get("version") != MANIFEST_VERSION:
        raise DataError(path, "not a parallax manifest (missing or unknown version)")
    if not isinstance(manifest.get("suite"), str):
        raise DataError(path, "not a parallax manifest (no suite name)")
    return manifest


def config_for_run(run_dir: Path, config_path: Path | None) -> LoadedConfig:
    """The config a run was made with, unless the user names another one."""
    if config_path is not None:
        return load_config(config_path)
    manifest = read_manifest(run_dir)
    config = manifest.get("config")
    if not isinstance(config, dict) or not isinstance(config.get("path"), str):
        raise DataError(run_dir / "manifest.json", "no config path; pass --config")
    if "\x00" in config["path"]:
        raise DataError(run_dir / "manifest.json", "config path holds a NUL; pass --config")
    path = Path(config["path"])
    if not path.exists():  # a run copied from another machine names that machine's config
        raise ConfigError(
            path, None, f"no such config file (named by {run_dir / 'manifest.json'}; pass --config)"
        )
    return load_config(path)


class Ledgers:
    """raw.jsonl and outcomes.jsonl, written together by the single writer task."""

    def __init__(self, run_dir: Path, suite: Suite, folds: Folds) -> None:
        self.raw = LedgerWriter(run_dir / "raw.jsonl")
        self.outcomes = LedgerWriter(run_dir / "outcomes.jsonl")
        self.suite = suite
        self.folds = folds
        self.written = 0
        self.transport_misses = 0
        self.progress: ProgressBar | None = None  # a bar on a TTY, fed after every batch

    def write(self, batch: Sequence[Exchange]) -> None:
        """Raw first, then outcomes: a kill between the two is healed by regrading raw."""
        self.raw.write(e.to_json() for e in batch)
        rows = []
        for exchange in batch:
            ref = self.suite.ref(exchange.case_id)
            if ref is None:
                continue
            outcome = stamp(exchange, self.suite.fixtures.load(ref), self.suite.graders)
            self.transport_misses += outcome.transport != "ok"
            rows.append(outcome.to_json())
            self.folds.add(outcome, ref)
        self.outcomes.write(rows)
        self.written += len(batch)
        if self.progress is not None:
            self.progress.update(batch, self.transport_misses)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
        self.raw.close()
        self.outcomes.close()


def build_endpoints(loaded: LoadedConfig, suite: Suite) -> dict[str, Endpoint]:
    """The suite's endpoints by ledger side, built before its run dir is: a broken cassette
    is found while nothing exists to resume."""
    cfg = loaded.config.suites[suite.name]
    endpoints = {side: build_endpoint(loaded, getattr(cfg, side), suite.name) for side in SIDES}
    if suite.noise_check:  # the reference a second, independent time: its noise floor
        endpoints[NOISE] = endpoints["reference"]
    return endpoints


async def close_endpoints(endpoints: Mapping[str, Endpoint]) -> None:
    import anyio

    # cleanup must also run when the run is cancelled (serve's shutdown): shielded, bounded
    with anyio.move_on_after(10, shield=True):
        for endpoint in {id(e): e for e in endpoints.values()}.values():
            await endpoint.aclose()


async def call_all(
    loaded: LoadedConfig,
    suite: Suite,
    run_dir: Path,
    done: set[tuple[str, str, int]],
    folds: Folds,
    *,
    endpoints: Mapping[str, Endpoint],
    shutdown: Shutdown | None = None,
) -> None:
    """Call every (case, side, sample) not yet in raw.jsonl.

    After a stop signal no new call starts, and the calls in flight get `run_grace_seconds`
    to finish before they are cancelled (re-called on resume); `Interrupted` then says so.
    """
    from runner.engine import execute

    cfg = loaded.config.suites[suite.name]
    in_flight = {side: loaded.endpoint(getattr(cfg, side)).concurrency * 2 for side in SIDES}
    if suite.noise_check:
        in_flight[NOISE] = in_flight["reference"]
    stopped = shutdown or Shutdown()  # a run `serve` drives is stopped by cancelling it
    handed_out, cut = 0, False

    def work(side: str) -> Iterator[tuple[Case, int]]:
        nonlocal handed_out, cut
        for ref in suite.refs:
            for sample in range(suite.samples):
                if (ref.id, side, sample) not in done:
                    if stopped.requested:
                        cut = True
                        return
                    handed_out += 1
                    yield suite.fixtures.load(ref), sample

    grace = loaded.config.run_grace_seconds

    def stopping() -> None:  # from the loop, outside the run's bound context
        log = logs.get_logger().bind(run_id=run_dir.name, suite=suite.name)
        log.warning(logs.RUN_STOPPING, signal=stopped.reason, grace_seconds=grace)

    ledgers = Ledgers(run_dir, suite, folds)
    ledgers.progress = start_progress(suite.name, suite.refs.ids, suite.samples, done)
    try:
        with stopped.guarded(grace, on_stop=stopping):
            await execute(
                {side: work(side) for side in endpoints},
                dict(endpoints),
                ledgers.write,
                in_flight=in_flight,
            )
    finally:
        ledgers.close()
    if cut or ledgers.written < handed_out:  # refused, not sent, or cancelled in flight
        assert stopped.signal is not None  # only a signal stops a run from inside
        raise Interrupted(stopped.signal, run_dir)


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


def paired(results: Sequence[Verdict], alpha: float) -> dict[str, Any]:
    """The paired test overall and per stratum, on each side's majority pass per case."""
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
        }
    return out


def finalize(
    loaded: LoadedConfig, suite: Suite, run_dir: Path, folds: Folds, log: Any
) -> tuple[int, dict[str, Any]]:
    """Gate, strata, alerts and the exit code; writes disagreement.json and summary.json."""
    snapshot = suite.snapshot
    results, noise = verdicts(suite, folds, snapshot)
    retired = sorted(set(snapshot) - set(suite.refs.ids))
    counts = dict.fromkeys(GATE_CLASSES, 0)
    for v in results:
        counts[v.gate] += 1
    counts[RETIRED_CASE] = len(retired)  # retired cases have no verdict, only a count
    write_json_map(
        run_dir / "disagreement.json",
        {"version": DISAGREEMENT_VERSION, "suite": suite.name, "retired": retired},
        "cases",
        ((v.case_id, v.to_json()) for v in sorted(results, key=lambda v: v.case_id)),
    )
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
    tests = paired(results, suite.alpha)
    overall = tests["overall"]
    regression = bool(overall["significant"]) and (overall["diff"] or 0) < 0
    gate_on_regression = regression and "significant_regression" in suite.fail_on
    requests = requestsha.request_changes(
        results, snapshot
    )  # a moved reference request needs review
    needs_review = (
        bool(review)
        or any(stratum_alerts.values())
        or gate_on_regression
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
    # every served call counts, whatever its stamps: a fallback that broke the schema too
    served = {
        side: sorted({m for v in results for m in getattr(v, side).models if m}) for side in SIDES
    }
    manifest = read_manifest(run_dir)
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
    }
    if suite.noise_check:
        summary["noise_floor"] = noise_floor(results, noise)
    if not suite.stratified:
        summary["strata_note"] = "unstratified suite: no case names a stratum, detector skipped"
    write_json(run_dir / "summary.json", summary)
    manifest["finished_at"] = summary["finished_at"]
    write_json(run_dir / "manifest.json", manifest)
    return exit_code, summary


def _reference_moved(verdict: Verdict, accepted: Mapping[str, Any] | None) -> bool:
    reference = verdict.reference  # scored, whatever happened to the candidate's call
    if not reference.admitted or not accepted or accepted.get("fixture_sha") != verdict.fixture_sha:
        return False
    return moved_from(reference, accepted, "reference")


def _grader_failed(view: SideView) -> bool:
    return any(m.startswith("grader_error:") for m in (*view.misses, *view.noise))


def _recorded(run_dir: Path) -> dict[str, Any] | None:
    """A finished run's summary when it holds a verdict (an exit code 0 to 3), else None."""
    try:
        summary = read_json_object(run_dir / "summary.json")
    except DataError:
        return None
    from runner.history import verdict_code_of

    if summary.get("version") != SUMMARY_VERSION or verdict_code_of(summary) is None:
        return None
    return summary


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
    moved = [v.case_id for v in results if _reference_moved(v, snapshot.get(v.case_id))]
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


SHOWN = 8  # case ids a summary line names before it counts the rest


def print_summary(summary: Mapping[str, Any], run_dir: Path) -> None:
    """A few human lines on stderr; stdout stays one JSON object a line for log shippers.

    The summary may be one a run recorded earlier (a resumed finished run), so every field is
    read through history's tolerant readers: a hand-edited file prints as unknown, no crash.
    """
    from runner.history import mapping_of, strings_of

    counts = mapping_of(summary.get("gate_counts"))
    shown = ", ".join(f"{k} {v}" for k, v in counts.items() if v)
    verdict = summary.get("verdict")
    lines = [
        f"parallax · {summary.get('suite')}: {str(verdict).upper()} "
        f"(exit {summary.get('exit_code')})",
        f"  cases {summary.get('cases', '?')} · admitted {summary.get('admitted', '?')} · "
        f"unadmitted {summary.get('unadmitted', '?')} · {shown or 'nothing to report'}",
    ]
    for key in ("review", "flaky", "incomplete", "grader_errors", "retired"):
        if ids := strings_of(summary.get(key)):
            more = f" (+{len(ids) - SHOWN} more)" if len(ids) > SHOWN else ""
            lines.append(f"  {key.replace('_', ' ')}: {', '.join(ids[:SHOWN])}{more}")
    lines.extend(f"  {line}" for line in requestsha.request_lines(summary))
    lines.extend(why_lines(summary))  # what kept the incomplete ones unscored, per side
    for side, alerts in mapping_of(summary.get("stratum_alerts")).items():
        if alerts := strings_of(alerts):
            lines.append(f"  strata alert ({side}): {', '.join(alerts)}")
    if isinstance(note := summary.get("strata_note"), str):
        lines.append(f"  {note}")
    paired = mapping_of(mapping_of(summary.get("paired")).get("overall"))
    if isinstance(text := paired.get("text"), str):
        gates = "significant_regression" in strings_of(summary.get("fail_on"))
        lines.append(f"  paired: {text}{' (gates: fail_on)' if gates else ''}")
    if summary.get("parent_finished") is False:
        lines.append(
            f"  parent {summary.get('parent')} never finished: "
            "the calls it never made read `cancelled`"
        )
    lines.extend(next_steps(summary, run_dir))
    lines.append(f"  run dir: {shown_path(run_dir)}")
    # a case id or a suite name is untrusted: a bidi control, a NUL or a newline in it is shown
    logs.say("\n".join(visible(line, one_line=True) for line in lines))


def unscored_keys(run_dir: Path) -> set[tuple[str, str, int]]:
    """Keys of the rows a run could not score (transport or schema misses)."""
    return {o.key for o in read_outcomes(run_dir / "outcomes.jsonl") if not o.admitted}


def _seed_raw(source: Path, target: Path, skip: set[tuple[str, str, int]]) -> None:
    """Copy a parent run's exchanges (except `skip`) so the new run starts from them."""
    writer = LedgerWriter(target / "raw.jsonl")
    try:
        batch: list[dict[str, Any]] = []
        for exchange in read_exchanges(source / "raw.jsonl"):
            if exchange.key not in skip:
                batch.append(exchange.to_json())
            if len(batch) >= 1000:
                writer.write(batch)
                batch = []
        writer.write(batch)
    finally:
        writer.close()


def run_suite(
    loaded: LoadedConfig,
    name: str,
    *,
    resume_dir: Path | None = None,
    parent_dir: Path | None = None,
    mode: str = "run",
    suite: Suite | None = None,
    shutdown: Shutdown | None = None,
) -> tuple[Path, int, dict[str, Any]]:
    """Blocking wrapper of `run_suite_async` for the one-shot commands."""
    import gc

    import anyio

    # Ledger rows are acyclic and freed by reference counting; at the default threshold the
    # cycle collector rescans every live case and outcome over and over in a big run, which
    # took a third of a 40,000-row replay (bench/RESULTS.md).
    thresholds = gc.get_threshold()
    gc.set_threshold(50_000, 20, 100)
    try:
        return anyio.run(
            functools.partial(
                run_suite_async,
                loaded,
                name,
                resume_dir=resume_dir,
                parent_dir=parent_dir,
                mode=mode,
                suite=suite,
                shutdown=shutdown,
            )
        )
    finally:
        gc.set_threshold(*thresholds)


@holds_suite_lock  # runs/<suite>/.lock: one run of a suite at a time (not replay)
async def run_suite_async(
    loaded: LoadedConfig,
    name: str,
    *,
    resume_dir: Path | None = None,
    parent_dir: Path | None = None,
    mode: str = "run",
    suite: Suite | None = None,
    shutdown: Shutdown | None = None,
) -> tuple[Path, int, dict[str, Any]]:
    """One run of one suite; returns the run dir, exit code and summary.

    mode "run" calls everything; "resume" finishes `resume_dir` in place; "retry" starts a new
    run from `parent_dir`'s scored rows and re-calls the rest; "replay" regrades `parent_dir`'s
    raw.jsonl with today's fixtures and graders and calls nothing. `suite` is the suite as
    `prepare_suite` already loaded it, if the caller has it; `shutdown` is the one-shot
    command's stop (see `call_all`).
    """

    if suite is None:
        suite = prepare_suite(loaded, name)
    try:
        endpoints = build_endpoints(loaded, suite) if mode != "replay" else {}
        try:
            return await _run_prepared(
                loaded,
                suite,
                endpoints,
                resume_dir=resume_dir,
                parent_dir=parent_dir,
                mode=mode,
                shutdown=shutdown,
            )
        finally:
            await close_endpoints(endpoints)
    finally:
        suite.fixtures.close()


def _start(
    loaded: LoadedConfig, suite: Suite, run_dir: Path, *, parent_dir: Path | None, mode: str
) -> None:
    """A new run directory's manifest, and for a replay or retry its parent's exchanges."""
    parent = parent_dir.name if parent_dir is not None else None
    finished = None
    if parent_dir is not None:
        finished = read_manifest(parent_dir).get("finished_at") is not None
    write_json(
        run_dir / "manifest.json",
        manifest_for(loaded, suite, run_dir, mode=mode, parent=parent, parent_finished=finished),
    )
    if mode == "replay" and parent_dir is not None:  # the raw ledger, as it was written
        source = parent_dir / "raw.jsonl"
        if not source.is_file():
            raise DataError(source, "no such file: nothing to replay")
        shutil.copyfile(source, run_dir / "raw.jsonl")
    elif parent_dir is not None:
        _seed_raw(parent_dir, run_dir, unscored_keys(parent_dir))


async def _run_prepared(
    loaded: LoadedConfig,
    suite: Suite,
    endpoints: Mapping[str, Endpoint],
    *,
    resume_dir: Path | None,
    parent_dir: Path | None,
    mode: str,
    shutdown: Shutdown | None,
) -> tuple[Path, int, dict[str, Any]]:
    import structlog

    name = suite.name
    folds = Folds(suite.samples)
    if mode == "resume":
        assert resume_dir is not None
        run_dir = resume_dir
        manifest = read_manifest(run_dir)
        if manifest.get("suite") != name:
            raise UsageError(
                f"{run_dir}: is a run of suite {manifest.get('suite')!r}, not {name!r}"
            )
        recorded = _recorded(run_dir) if manifest.get("finished_at") is not None else None
        if recorded is not None:
            # A finished run's verdict is a record: resuming it (after a crash in its reports)
            # writes what is missing and never regrades it against today's snapshot.
            if not all((run_dir / n).is_file() for n in REPORT_FILES):
                after_run(
                    run_dir, retire_after=suite.thresholds.retire_after, log=logs.get_logger()
                )
            return run_dir, recorded["exit_code"], recorded
        if (why := resume_problem(loaded, name, manifest)) is not None:
            anew = "" if manifest.get("mode") == "replay" else "; start a new run instead"
            raise UsageError(f"{run_dir}: cannot resume: {why}{anew}")
        # resume appends to the ledgers in place: refuse before any call if it cannot
        check_writable(run_dir, _RESUMED_FILES, action="resume this run here")
        done = heal(run_dir, suite, folds)
    else:
        run_dir = new_run_dir(loaded.runs_dir, name)
        try:
            _start(loaded, suite, run_dir, parent_dir=parent_dir, mode=mode)
            done = heal(run_dir, suite, folds)
        except DataError as exc:
            # nothing was called: the new directory holds only a manifest and copies, and a
            # broken parent is reported where the user can mend it, not in the copy
            shutil.rmtree(run_dir, ignore_errors=True)
            if parent_dir is not None and exc.path == str(run_dir / "raw.jsonl"):
                raise DataError(parent_dir / "raw.jsonl", exc.reason, exc.line) from None
            raise
    structlog.contextvars.bind_contextvars(run_id=run_dir.name, suite=name)
    log = logs.get_logger()
    try:
        log.info(
            logs.RUN_RESUMED if mode == "resume" else logs.RUN_STARTED,
            mode=mode,
            cases=len(suite.refs),
            samples=suite.samples,
            already_done=len(done),
            parent=parent_dir.name if parent_dir is not None else None,
            run_dir=str(run_dir),
        )
        if mode != "replay":
            await call_all(
                loaded, suite, run_dir, done, folds, endpoints=endpoints, shutdown=shutdown
            )
        exit_code, summary = finalize(loaded, suite, run_dir, folds, log)
        del folds, done  # a run's largest structures: the reports read disagreement.json back
        after_run(run_dir, retire_after=suite.thresholds.retire_after, log=log)
        log.info(
            logs.RUN_FINISHED,
            exit_code=exit_code,
            verdict=summary["verdict"],
            gate_counts=summary["gate_counts"],
            admitted=summary["admitted"],
            unadmitted=summary["unadmitted"],
        )
    finally:
        structlog.contextvars.unbind_contextvars("run_id", "suite")
    return run_dir, exit_code, summary
