"""Regrading raw.jsonl in worker processes gives what one process gives, byte for byte.

The ledgers come from real runs against the loopback fault server (ok replies, garbage, 503s),
then are regraded both ways: in this process, and in forked workers two at a time, in chunks
of three lines so that every run spans many chunks.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from faultserver import FaultServer
from test_live import write_config, write_suite

from runner import regrade
from runner.config import load_config
from runner.errors import ConfigError, DataError, FixtureError
from runner.gate import Folds
from runner.model import SIDES
from runner.runs.mode import RunMode
from runner.runs.run import run_suite
from runner.suite import prepare_suite

T = TypeVar("T")
R = TypeVar("R")


def _in_workers(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Send every regrade to two forked workers; returns a list of the pools it started."""
    pools: list[int] = []
    real = regrade.ordered

    def spy(task: Callable[[T], R], chunks: Iterable[T], workers: int) -> Iterator[R]:
        pools.append(workers)
        yield from real(task, chunks, workers)

    monkeypatch.setattr(regrade, "PARALLEL_BYTES", 0)
    monkeypatch.setattr(regrade, "CHUNK_LINES", 3)
    monkeypatch.setattr(regrade, "available", lambda: 2)
    monkeypatch.setattr(regrade, "ordered", spy)
    return pools


_grade_chunk = regrade._grade_chunk


def _dying_chunk(job: regrade._Job) -> Callable[[tuple[int, int, int]], list[regrade.Graded]]:
    """A worker grading anything past line 3 dies as the OOM killer would end it."""
    task, parent = _grade_chunk(job), os.getpid()

    def dying(chunk: tuple[int, int, int]) -> list[regrade.Graded]:
        if chunk[0] > 3 and os.getpid() != parent:
            os._exit(9)
        return task(chunk)

    return dying


def _in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(regrade, "PARALLEL_BYTES", 1 << 60)


def _live_run(root: Path, server: FaultServer, *, samples: int = 1) -> tuple[Path, Path, int]:
    """A finished run with every kind of row: admitted, schema misses and transport misses."""
    prompts = write_suite(root, 12)
    for prompt, mode in zip(prompts, ["ok", "garbage", "status:503", "ok"] * 3, strict=True):
        server.prompt_modes[prompt] = mode
    config = write_config(root, server.url("ok", "ref"), server.url("ok", "cand"))
    if samples > 1:  # [suites.live] is the config's last table
        config.write_text(config.read_text() + f"samples = {samples}\n")
    run_dir, code, _ = run_suite(load_config(config), "live")
    server.stop()  # a regrade never calls anything
    return config, run_dir, code


def _assert_replayed_as_run(config: Path, source: Path, code: int) -> None:
    replayed, replay_code, _ = run_suite(
        load_config(config), "live", parent_dir=source, mode=RunMode.REPLAY
    )
    for name in ("outcomes.jsonl", "disagreement.json"):
        assert (replayed / name).read_bytes() == (source / name).read_bytes(), name
    assert replay_code == code


@pytest.mark.parametrize("samples", [1, 3])
def test_a_replay_in_workers_is_byte_identical(
    tmp_path: Path, fault_server: FaultServer, monkeypatch: pytest.MonkeyPatch, samples: int
) -> None:
    config, source, code = _live_run(tmp_path, fault_server, samples=samples)
    pools = _in_workers(monkeypatch)

    _assert_replayed_as_run(config, source, code)
    assert pools == [2]


def test_a_worker_that_dies_leaves_the_rest_to_the_parent(
    tmp_path: Path, fault_server: FaultServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pool breaks; the chunks not yet back are graded in the parent, nothing is lost."""
    config, source, code = _live_run(tmp_path, fault_server)
    pools = _in_workers(monkeypatch)
    monkeypatch.setattr(regrade, "_grade_chunk", _dying_chunk)

    _assert_replayed_as_run(config, source, code)
    assert pools == [2]


def _heal(
    run_dir: Path, config: Path, monkeypatch: pytest.MonkeyPatch, *, workers: bool
) -> tuple[set[tuple[str, str, int]], bytes, dict[tuple[str, str], object]]:
    with monkeypatch.context() as patch:
        pools = _in_workers(patch) if workers else []
        if not workers:
            _in_process(patch)
        suite = prepare_suite(load_config(config), "live")
        folds = Folds(suite.samples)
        done = regrade.heal(run_dir, suite, folds)
        suite.fixtures.close()
    assert pools == ([2] if workers else [])
    views = {(ref.id, side): folds.view(ref.id, side) for ref in suite.refs for side in SIDES}
    return done, (run_dir / "outcomes.jsonl").read_bytes(), views


def test_healing_a_messy_ledger_in_workers_matches_one_process(
    tmp_path: Path, fault_server: FaultServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows already graded, a second row for one key, a case no longer in the suite, a blank
    line, a carriage return between a row's JSON tokens: the workers keep the first row of each
    key and skip the rest, as one process does."""
    config, source, _ = _live_run(tmp_path, fault_server, samples=2)
    raw = source.joinpath("raw.jsonl").read_bytes().splitlines(keepends=True)
    graded = source.joinpath("outcomes.jsonl").read_bytes().splitlines(keepends=True)
    first = raw[0].replace(b"word", b"w0rd")  # a key outcomes.jsonl has: not graded again
    second = raw[3].replace(b"word", b"w0rd")  # a key graded on line 4: must not count again
    gone = json.loads(raw[1])
    gone["case_id"] = "case-retired"
    spaced = raw[2].replace(b'{"', b'{\r"', 1)  # JSON whitespace, but no line break
    messy = [*raw[:5], first, second, b"\n", json.dumps(gone).encode() + b"\n", spaced]
    messy += [*raw[5:], second]
    copies = []
    for name in ("one", "many"):
        run_dir = tmp_path / name
        run_dir.mkdir()
        run_dir.joinpath("raw.jsonl").write_bytes(b"".join(messy))
        run_dir.joinpath("outcomes.jsonl").write_bytes(b"".join(graded[:2]))
        copies.append(run_dir)

    one = _heal(copies[0], config, monkeypatch, workers=False)
    many = _heal(copies[1], config, monkeypatch, workers=True)

    assert many == one
    done, written, views = one
    assert "case-retired" in {case_id for case_id, _, _ in done}
    assert written == source.joinpath("outcomes.jsonl").read_bytes()
    assert all(view is not None for view in views.values())


def test_a_corrupt_line_in_a_worker_is_the_same_one_line_error(
    tmp_path: Path, fault_server: FaultServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    config, source, _ = _live_run(tmp_path, fault_server)
    lines = source.joinpath("raw.jsonl").read_bytes().splitlines(keepends=True)
    lines[6] = b"{not json}\n"
    messages = []
    for workers in (False, True):
        run_dir = tmp_path / f"corrupt-{workers}"
        run_dir.mkdir()
        run_dir.joinpath("raw.jsonl").write_bytes(b"".join(lines))
        with pytest.raises(DataError) as info:
            _heal(run_dir, config, monkeypatch, workers=workers)
        messages.append(str(info.value).replace(str(run_dir), "<run>"))
    assert messages[0] == messages[1]
    assert messages[0].startswith("<run>/raw.jsonl:7: invalid JSON")


@pytest.mark.parametrize(
    "error",
    [
        DataError("runs/x/raw.jsonl", "invalid JSON", 7),
        FixtureError("cases.jsonl", "changed during the run", 3),
        DataError("manifest.json", "no such file"),
        ConfigError("parallax.toml", "suites.x.graders", "no module"),
    ],
)
def test_errors_cross_a_process_boundary_whole(error: Exception) -> None:
    back = pickle.loads(pickle.dumps(error))
    assert (type(back), str(back), vars(back)) == (type(error), str(error), vars(error))


def test_a_small_ledger_is_regraded_in_process(
    tmp_path: Path, fault_server: FaultServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Below PARALLEL_BYTES no pool is started: forking would cost more than the rows."""
    config, source, _ = _live_run(tmp_path, fault_server)
    started: list[int] = []
    monkeypatch.setattr(regrade, "ordered", lambda task, chunks, n: started.append(n))
    run_dir = tmp_path / "small"
    run_dir.mkdir()
    shutil.copy(source / "raw.jsonl", run_dir / "raw.jsonl")
    suite = prepare_suite(load_config(config), "live")
    regrade.heal(run_dir, suite, Folds(suite.samples))
    assert started == []
    assert (run_dir / "outcomes.jsonl").read_bytes() == (source / "outcomes.jsonl").read_bytes()
