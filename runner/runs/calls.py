"""The calls of a run: its endpoints, and every (case, side, sample) not yet in raw.jsonl,
written to raw.jsonl and outcomes.jsonl by one writer as they come back."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from runner import logs
from runner.config import LoadedConfig
from runner.cost.budget import Budget, Meter, meter_for
from runner.errors import StorageError
from runner.gate import Folds
from runner.ledger import LedgerWriter
from runner.model import NOISE, SIDES, Case, Endpoint, Exchange
from runner.progress import ProgressBar, start_progress
from runner.shutdown import Interrupted, Shutdown
from runner.stamps import stamp
from runner.suite import Suite


def build_endpoint(
    loaded: LoadedConfig, endpoint_name: str, suite: str, budget: Budget | None = None
) -> Endpoint:
    """A recorded cassette or a live client, behind the same interface, kept to the run's
    budget when it has one."""
    cfg = loaded.endpoint(endpoint_name)
    shape = loaded.shape(endpoint_name)
    meter = None if budget is None else meter_for(budget, cfg, shape)
    if cfg.kind == "recorded":
        from runner.recorded.endpoint import RecordedEndpoint, load_cassette

        cassette = (
            load_cassette(loaded.input(cfg.cassette, f"endpoints.{endpoint_name}.cassette"))
            if cfg.cassette
            else {}
        )
        return RecordedEndpoint(
            endpoint_name,
            suite=suite,
            model=cfg.model,
            cassette=cassette,
            protocol=cfg.protocol,
            stream=cfg.stream,
            request_sha=shape.request_sha,
            meter=meter,
        )
    from runner.client.endpoint import HttpEndpoint

    return HttpEndpoint(endpoint_name, cfg, loaded.api_key(endpoint_name), shape=shape, meter=meter)


def meters(loaded: LoadedConfig, suite: Suite, budget: Budget) -> dict[str, Meter]:
    """Each ledger side's meter, as its endpoint charges it (the noise check's is the
    reference's): what a resume reads the ledgers' spend back with."""
    cfg = loaded.config.suites[suite.name]
    names = {side: getattr(cfg, side) for side in SIDES} | {NOISE: cfg.reference}
    return {
        side: meter_for(budget, loaded.endpoint(name), loaded.shape(name))
        for side, name in names.items()
    }


class Ledgers:
    """raw.jsonl and outcomes.jsonl, written together by the single writer task."""

    def __init__(
        self, run_dir: Path, suite: Suite, folds: Folds, budget: Budget | None = None
    ) -> None:
        self.raw = LedgerWriter(run_dir / "raw.jsonl")
        self.outcomes = LedgerWriter(run_dir / "outcomes.jsonl")
        self.suite = suite
        self.folds = folds
        self.budget = budget
        self.written = 0
        self.transport_misses = 0
        self.progress: ProgressBar | None = None  # a bar on a TTY, fed after every batch

    def write(self, batch: Sequence[Exchange]) -> None:
        """Raw first, then outcomes: a kill between the two is healed by regrading raw."""
        self.raw.write(e.to_json() for e in batch)
        rows = []
        budget = self.budget
        for exchange in batch:
            ref = self.suite.ref(exchange.case_id)
            if ref is None:
                if budget is not None:
                    budget.settle(exchange, None)
                continue
            outcome = stamp(exchange, self.suite.fixtures.load(ref), self.suite.graders)
            if budget is not None:  # the call's holds become what its reply says it spent
                budget.settle(exchange, outcome.usage)
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
        try:
            self.raw.close()
        finally:
            self.outcomes.close()


def build_endpoints(
    loaded: LoadedConfig, suite: Suite, budget: Budget | None = None
) -> dict[str, Endpoint]:
    """The suite's endpoints by ledger side, built before its run dir is: a broken cassette
    is found while nothing exists to resume."""
    cfg = loaded.config.suites[suite.name]
    endpoints = {
        side: build_endpoint(loaded, getattr(cfg, side), suite.name, budget) for side in SIDES
    }
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
    budget: Budget | None = None,
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
    if budget is not None:  # a case's first call reserves all of the case's calls
        sides = meters(loaded, suite, budget)
        budget.plan({side: sides[side] for side in endpoints}, in_flight, suite.samples, done)
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

    ledgers = Ledgers(run_dir, suite, folds, budget)
    ledgers.progress = start_progress(suite.name, suite.refs.ids, suite.samples, done)
    try:
        with stopped.guarded(grace, on_stop=stopping):
            await execute(
                {side: work(side) for side in endpoints},
                dict(endpoints),
                ledgers.write,
                in_flight=in_flight,
            )
    except BaseException:
        # a full disk that stopped the writer refuses the closing flush too: the first
        # refusal is the one reported
        with contextlib.suppress(StorageError):
            ledgers.close()
        raise
    ledgers.close()
    if cut or ledgers.written < handed_out:  # refused, not sent, or cancelled in flight
        assert stopped.signal is not None  # only a signal stops a run from inside
        raise Interrupted(stopped.signal, run_dir)
