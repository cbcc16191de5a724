"""One shard of a suite: the cases a stable hash of their id gives it, and its share of the
endpoints' quota and of the budget.

A big suite is split across machines (a Kubernetes Indexed Job's pods) and put back together by
`parallax merge`. Which shard calls a case is decided by the case id alone, never by its place
in the file or the order calls came back, so a re-run, a resume or a retry of shard I calls the
same cases, and adding a case moves no other. The provider's quota and the money are shared by
every shard, so each takes `1/N` of `concurrency`, `rpm` and `budget_usd` unless told the whole.
"""

from __future__ import annotations

import copy
import enum
import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.config import LoadedConfig
from runner.errors import DataError, UsageError

INDEX_ENV = "JOB_COMPLETION_INDEX"  # what Kubernetes sets in each pod of an Indexed Job
COUNT_ENV = "PARALLAX_SHARDS"
MAX_SHARDS = 10_000


class Limits(enum.StrEnum):
    """What a shard takes of each endpoint's `concurrency` and `rpm` and of `budget_usd`."""

    DIVIDED = "divided"  # 1/N each: the quota and the money are shared by the shards
    WHOLE = "whole"  # all of it: each shard calls with its own quota and budget


@dataclass(frozen=True, slots=True)
class Shard:
    """Shard `index` (0-based, as `JOB_COMPLETION_INDEX`) of `count`."""

    index: int
    count: int
    limits: Limits = Limits.DIVIDED

    @property
    def label(self) -> str:
        return f"{self.index}/{self.count}"

    @property
    def lock_part(self) -> str:
        """Its own lock's name in the suite's folder: the shards of a suite run side by side."""
        return f"shard-{self.index}-of-{self.count}"

    def holds(self, case_id: str) -> bool:
        return shard_of(case_id, self.count) == self.index

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "count": self.count, "limits": str(self.limits)}

    @classmethod
    def from_json(cls, value: Any, where: str | Path) -> Shard | None:
        """The shard a manifest records (None: not a shard); `where` names the file."""
        if value is None:
            return None
        index = value.get("index") if isinstance(value, dict) else None
        count = value.get("count") if isinstance(value, dict) else None
        limits = value.get("limits", Limits.DIVIDED) if isinstance(value, dict) else None
        if type(index) is not int or type(count) is not int or not 0 <= index < count:
            raise DataError(where, f"not a shard: {value!r}")
        if limits not in tuple(Limits):
            raise DataError(where, f"not a shard's limits: {limits!r}")
        return cls(index, count, Limits(limits))


def shard_of(case_id: str, count: int) -> int:
    """The shard of a case: sha256 of its id, the same on every machine and Python."""
    digest = hashlib.sha256(case_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % count


def parse_shard(
    value: str, limits: Limits = Limits.DIVIDED, environ: Mapping[str, str] | None = None
) -> Shard:
    """`--shard I/N`, or `--shard env` from `JOB_COMPLETION_INDEX` and `PARALLAX_SHARDS`."""
    if value == "env":
        env = os.environ if environ is None else environ
        index = _whole(env.get(INDEX_ENV), f"--shard env: {INDEX_ENV}")
        count = _whole(env.get(COUNT_ENV), f"--shard env: {COUNT_ENV}")
        where = f"--shard env: {INDEX_ENV}={index}, {COUNT_ENV}={count}"
    else:
        index_text, slash, count_text = value.partition("/")
        if not slash:
            raise UsageError(f"--shard {value}: expected I/N (0 <= I < N) or env")
        index = _whole(index_text, f"--shard {value}: I")
        count = _whole(count_text, f"--shard {value}: N")
        where = f"--shard {value}"
    if not 1 <= count <= MAX_SHARDS:
        raise UsageError(f"{where}: N must be from 1 to {MAX_SHARDS}")
    if index >= count:
        raise UsageError(f"{where}: I must be below N (I is 0-based)")
    return Shard(index, count, limits)


def _whole(text: str | None, what: str) -> int:
    if text is None or text == "":
        raise UsageError(f"{what} is not set")
    if not (text.isascii() and text.isdigit()):
        raise UsageError(f"{what} must be a whole number, not {text!r}")
    return int(text)


def shard_config(loaded: LoadedConfig, suite: str, shard: Shard | None) -> LoadedConfig:
    """The config a shard runs with: its share of every endpoint's `concurrency` (at least 1)
    and `rpm`, and of the suite's budget. Its digest stays the file's: every shard ran the same
    config."""
    if shard is None or shard.limits is Limits.WHOLE or shard.count == 1:
        return loaded
    n = shard.count
    config = loaded.config
    endpoints = {
        name: ep.model_copy(
            update={
                "concurrency": max(1, ep.concurrency // n),
                "rpm": ep.rpm / n if ep.rpm is not None else None,
            }
        )
        for name, ep in config.endpoints.items()
    }
    budget = loaded.budget_usd(suite)
    own = config.suites[suite].model_copy(
        update={"budget_usd": budget / n if budget is not None else None}
    )
    out = copy.copy(loaded)
    out.config = config.model_copy(
        update={"endpoints": endpoints, "suites": {**config.suites, suite: own}}
    )
    return out


def recorded_shard(
    loaded: LoadedConfig,
    name: str,
    run_dir: Path,
    manifest: Mapping[str, Any],
    given: str | None = None,
) -> tuple[LoadedConfig, Shard | None]:
    """The config and shard a resume, retry or replay of `run_dir` goes on with: the shard
    its manifest records, with the limits it ran with (`given`, a `--shard` beside it, must
    be that shard); (loaded, None) for a run of a whole suite."""
    shard = Shard.from_json(manifest.get("shard"), run_dir / "manifest.json")
    if given is not None:
        asked = parse_shard(given)
        if shard is None or (asked.index, asked.count) != (shard.index, shard.count):
            was = "no shard" if shard is None else f"shard {shard.label}"
            raise UsageError(f"{run_dir}: is a run of {was}, not --shard {asked.label}")
    return shard_config(loaded, name, shard), shard
