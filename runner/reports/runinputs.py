"""What a run was made from, as far as a report can still find it: the fixture file and the
config its manifest names, the suite's snapshot, and each side's price.

A run dir outlives its inputs: it is copied off a CI machine, the fixture file is edited the
next morning, the snapshot is promoted. So each is looked up as the manifest names it and
checked against what the run recorded (the file's digest, each case's fixture_sha, the
config's digest), and anything missing or moved becomes a note the case view shows, never an
error: the request and the reply are in raw.jsonl whatever happened to the rest.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner import logs
from runner.config import EndpointConfig, LoadedConfig, Price, load_config
from runner.errors import DataError, ParallaxError
from runner.fixtures.load import FixtureFile
from runner.fixtures.refs import CaseRefs
from runner.jsontext import dumps
from runner.ledger import read_json_object
from runner.model import SIDES, Case, record
from runner.protocols import Kind, wire_for
from runner.protocols.wire import Wire, plain, turns
from runner.reports.accepted import Snapshot
from runner.reports.expected import value_text
from runner.reports.requestview import RequestView, Source, request_view
from runner.request.shape import PLAIN, Shape
from runner.runs.rundir import file_digest
from runner.snapshot import aware_time
from runner.suite import Suite

STAND_IN = "a recorded endpoint sends nothing: this is the request it stands in for"
AS_WRITTEN = "nothing was sent and the config is not found: the case as written"


@record
class Expectation:
    """What the case expects, from its fixture row; `known` False when the row is gone."""

    known: bool
    path: str | None
    line: int | None
    keys: tuple[tuple[str, str], ...]  # each expectation key and its value as JSON text
    note: str | None


@record
class Found:
    """A case's row as the fixture file has it now, and what the view should say about it."""

    case: Case | None
    note: str | None

    def expectation(self, cap: int) -> Expectation:
        """The case's expectation keys, each value as JSON text cut at `cap`."""
        if self.case is None:
            return Expectation(False, None, None, (), self.note)
        items = sorted(self.case.expect.items())
        shown = tuple((str(k), value_text(v, cap)) for k, v in items)
        return Expectation(True, self.case.path, self.case.line, shown, self.note)


@dataclass(frozen=True)
class _Sender:
    """A side's endpoint as its stand-in request is rendered: protocol, config and shape."""

    kind: str
    cfg: EndpointConfig
    shape: Shape
    wire: Wire


def _object(path: Path) -> tuple[dict[str, Any], str | None]:
    try:
        return read_json_object(path), None
    except DataError as exc:
        return {}, str(exc)


@dataclass(frozen=True)
class Given:
    """What the process that just finished a run still holds of its inputs: the config and
    the suite (its fixture file validated, its snapshot as the run was gated against it), so
    the run's reports read neither again; on a 20,000-case suite that was a second's work."""

    loaded: LoadedConfig
    suite: Suite


class RunInputs:
    """The run's manifest and summary, and the inputs they name, opened once."""

    def __init__(
        self, run_dir: Path, summary: Mapping[str, Any] | None = None, given: Given | None = None
    ) -> None:
        """`summary`: summary.json as the caller already read it (a report holds it: a
        20,000-case run's is over a megabyte parsed), else it is read here; `given`: the
        run's own inputs, when this process made the run."""
        self.run_dir = run_dir
        self._given = given
        self.notes: list[str] = []
        self.manifest, problem = _object(run_dir / "manifest.json")
        if problem:
            self.notes.append(f"{problem}: the fixture file and config are not known")
        self.summary: Mapping[str, Any]
        if summary is not None:
            self.summary = summary
        else:
            self.summary, problem = _object(run_dir / "summary.json")
            if problem:
                self.notes.append(problem)
        self._fixtures: FixtureFile | None = None
        self._refs: CaseRefs | None = None
        self._fixture_note: str | None = None
        if given is not None:
            self.config: LoadedConfig | None = given.loaded
            self._fixtures, self._refs = given.suite.fixtures, given.suite.refs
        else:
            self.config = self._load_config()  # first: its input root is where tools may be
            self._open_fixtures()
        self._prices = {side: self._price(side) for side in SIDES}
        self._senders: dict[str, _Sender | None] = {}

    # ------------------------------------------------------------------ fixtures

    def _open_fixtures(self) -> None:
        pinned = self.manifest.get("fixtures")
        named = pinned.get("path") if isinstance(pinned, Mapping) else None
        if not isinstance(named, str) or "\x00" in named:
            self._fixture_note = "manifest.json names no fixture file: the expectation is unknown"
            return
        path = Path(named)
        try:
            digest = file_digest(path)
        except OSError:
            self._fixture_note = (
                f"{path} (the fixture file manifest.json names) is not there: the expectation "
                "is unknown; the request and reply are raw.jsonl's"
            )
            return
        assert isinstance(pinned, Mapping)
        if digest != pinned.get("digest"):
            self.notes.append(f"{path} changed since this run: a case whose row was edited says so")
        fixtures = FixtureFile(path, root=self.config.input_root if self.config else None)
        fixtures.KEEP = 8  # a report reads each case once: a run's cache of 2,048 is no use
        self._fixtures = fixtures  # validated when a case is first read (`validate`)

    def validate(self) -> bool:
        """Whether the fixture file reads, validated the first time a case is wanted: JUnit
        reads only replies, and a 20,000-case file takes a second to validate."""
        if self._refs is None and self._fixtures is not None:
            try:
                self._refs = self._fixtures.validate()
            except ParallaxError as exc:
                self._fixtures.close()
                self._fixtures = None
                self._fixture_note = (
                    f"the fixture file no longer reads ({exc}): expectation unknown"
                )
        return self._refs is not None

    def case(self, case_id: str, fixture_sha: str | None) -> Found:
        """The case's row as the fixture file has it, with a note when it is not the run's."""
        if not self.validate() or self._fixtures is None or self._refs is None:
            return Found(None, self._fixture_note)
        ref = self._refs.get(case_id)
        where = self._fixtures.path
        if ref is None:
            return Found(None, f"{where} has no case {case_id!r} any more: expectation unknown")
        try:
            case = self._fixtures.load(ref)
        except ParallaxError as exc:
            return Found(None, f"{exc}: the expectation is unknown")
        if fixture_sha is not None and ref.fixture_sha != fixture_sha:
            return Found(
                case,
                f"{where}:{ref.line} was edited since this run (fixture_sha {fixture_sha} then, "
                f"{ref.fixture_sha} now): the expectation shown is today's, the misses the run's",
            )
        return Found(case, None)

    # ------------------------------------------------------------------ config and requests

    def _load_config(self) -> LoadedConfig | None:
        named = self.manifest.get("config")
        path = named.get("path") if isinstance(named, Mapping) else None
        if not isinstance(path, str) or "\x00" in path:
            return None
        try:
            loaded = load_config(Path(path))
        except ParallaxError as exc:
            self.notes.append(
                f"the run's config is not readable ({exc}): the snapshot entry and the "
                "requests of recorded endpoints are not shown"
            )
            return None
        if isinstance(named, Mapping) and loaded.digest != named.get("digest"):
            self.notes.append(f"{path} changed since this run: the snapshot shown is today's")
        return loaded

    def endpoint_name(self, side: str) -> str | None:
        endpoints = self.manifest.get("endpoints")
        block = endpoints.get(side) if isinstance(endpoints, Mapping) else None
        name = block.get("name") if isinstance(block, Mapping) else None
        return name if isinstance(name, str) else None

    def _sender(self, side: str) -> _Sender | None:
        """The side's endpoint as the run's config has it, found once a side: every case of
        a recorded endpoint asks for its stand-in request."""
        if side not in self._senders:
            found = None
            name = self.endpoint_name(side)
            if (
                self.config is not None
                and name is not None
                and name in self.config.config.endpoints
            ):
                cfg = self.config.endpoint(name)
                kind = (cfg.protocol or Kind.OPENAI_CHAT) if cfg.kind == "recorded" else cfg.kind
                wire = wire_for(kind)
                if wire is not None:
                    found = _Sender(kind, cfg, self.config.shape(name), wire)
            self._senders[side] = found
        return self._senders[side]

    def stand_in(self, side: str, case: Case, cap: int) -> RequestView:
        """What a side that sent nothing (a recorded endpoint, a call never made) would have
        sent: its endpoint's body for the case, templates rendered, from the run's config;
        without the config, the case's own turns and tools."""
        sender = self._sender(side)
        if sender is not None:
            try:
                sent = sender.wire.body(sender.cfg, sender.shape, case)
            except ParallaxError:
                pass
            else:
                # rendered from the config again: a `body_env` secret masked as stored
                body = logs.scrub_body(sent, dumps(sent)) if logs.knows_secrets() else sent
                request = {"method": None, "url": None, "body": body}
                return request_view(sender.kind, request, cap=cap, source=Source.STANDS_IN)
        said: dict[str, Any] = {"messages": turns(PLAIN, case)}
        if case.tools:
            said["tools"] = plain(case.tools)
        for key in ("tool_choice", "response_format"):
            if getattr(case, key) is not None:
                said[key] = plain(getattr(case, key))
        request = {"method": None, "url": None, "body": said}
        return request_view(Kind.OPENAI_CHAT, request, cap=cap, source=Source.CASE)

    def price(self, side: str) -> Price | None:
        """The side's price as the manifest recorded it, else as the run's config has it."""
        return self._prices.get(side)

    def _price(self, side: str) -> Price | None:
        endpoints = self.manifest.get("endpoints")
        block = endpoints.get(side) if isinstance(endpoints, Mapping) else None
        if isinstance(block, Mapping) and "price" in block:
            recorded = block["price"]
            try:
                return Price.model_validate(recorded) if recorded is not None else None
            except ValueError:
                return None
        name = self.endpoint_name(side)
        if self.config is not None and name in self.config.config.endpoints:
            return self.config.endpoint(name).price
        return None

    # ------------------------------------------------------------------ snapshot

    def snapshot(self) -> Snapshot | None:
        suite = self.manifest.get("suite") or self.summary.get("suite")
        if self.config is None or not isinstance(suite, str):
            return None
        held = self._given.suite.snapshot if self._given is not None else None
        return Snapshot(self.config.snapshots_dir / f"{suite}.json", held)

    def snapshot_note(self, snapshot: Snapshot) -> str | None:
        """Whether the snapshot's entry may not be the one this run was gated against."""
        source, at = snapshot.head.get("promoted_from"), snapshot.head.get("promoted_at")
        if source is not None and source == (self.manifest.get("run_id") or self.run_dir.name):
            return "promoted from this run: the entry is what this run accepted"
        finished = aware_time(self.manifest.get("finished_at"))
        promoted = aware_time(at)
        if finished is not None and promoted is not None and promoted > finished:
            return (
                f"promoted since this run (from {source} at {at}): the entry may not be the one "
                "this run was gated against"
            )
        return None

    def close(self) -> None:
        if self._fixtures is not None and self._given is None:  # the suite's is the run's
            self._fixtures.close()
