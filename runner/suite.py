"""A suite ready to run: its cases (strata settled), graders, thresholds and snapshot.

Everything a run checks before its first call is loaded here, so bad input fails first.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runner.config import LoadedConfig, Thresholds
from runner.errors import ConfigError, DataError
from runner.files import file_problem
from runner.fixtures.load import FixtureFile
from runner.fixtures.refs import CaseRef, CaseRefs
from runner.grading.graders import GraderSet, check_case, load_graders
from runner.model import SIDES, Case
from runner.protocols.wire import turns
from runner.request.shape import Shape
from runner.snapshot import load_snapshot, snapshot_path


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
    """Load fixtures, graders and the snapshot, and render both sides' templates for every
    case, so bad input fails before the first call.

    In a stratified suite a case without a stratum counts as medium.
    """
    cfg = loaded.config.suites[name]
    key = f"suites.{name}.fixtures"
    fixtures_path = loaded.resolve(cfg.fixtures)  # as named in messages; opened inside the root
    if (problem := file_problem(loaded.input(cfg.fixtures, key))) is not None:
        raise ConfigError(loaded.path, key, f"{problem}: {cfg.fixtures}")
    graders = load_graders(
        cfg.graders,
        loaded.base_dir,
        config_path=str(loaded.path),
        key=f"suites.{name}.graders",
        root=loaded.input_root,
        seconds=cfg.grader_timeout_seconds,
    )
    fixtures = FixtureFile(fixtures_path, root=loaded.input_root)
    shapes = [loaded.shape(getattr(cfg, side)) for side in SIDES]
    refs = fixtures.validate(functools.partial(_check_case, graders=graders, shapes=shapes))
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


def _check_case(case: Case, *, graders: GraderSet, shapes: Sequence[Shape]) -> None:
    """What every case must pass before the first call: no key that nothing grades, and each
    side's templates rendered for it by the rule a run sends it with (`wire.turns`: for a
    conversation the template sees its leading system turn), calling nothing. A name the
    case lacks is its FixtureError naming file:line, the case, the name and the template's
    key (exit 65), found by `validate` and before a run's first call, not mid-run."""
    check_case(case, graders)
    for shape in shapes:
        if shape.system is not None or shape.user_template is not None:
            turns(shape, case)
