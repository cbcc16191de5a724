"""Hostile inputs: every reader of a file a user hands parallax, fuzzed with Hypothesis.

Arbitrary bytes and arbitrary JSON must give a result or one ParallaxError with the documented
exit code (65 bad data, 78 bad config, 64 usage), never another exception. Case ids that look
like paths must never let a file be written outside the run directory.
"""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from relkit import record

from runner.cli import main
from runner.config import load_config
from runner.diff import compare
from runner.errors import ConfigError, DataError, Errors, ParallaxError, UsageError
from runner.fixtures.load import load_cases
from runner.ledger import read_jsonl
from runner.recorded.endpoint import load_cassette
from runner.regrade import read_exchanges, read_outcomes
from runner.runs.run import run_suite
from runner.runs.rundir import read_manifest
from runner.snapshot import load_snapshot, promote

FUZZ = settings(
    max_examples=150,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
blobs = st.binary(max_size=400) | st.text(max_size=400).map(lambda t: t.encode("utf-8"))


@contextmanager
def scratch() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="parallax-fuzz-") as name:
        yield Path(name)


def _dump(value: Any) -> bytes:
    return json.dumps(value, allow_nan=True).encode("utf-8")


def _jsonl(rows: list[Any]) -> bytes:
    return b"".join(_dump(r) + b"\n" for r in rows)


def one_clear_error(
    fn: Callable[[Path], Any], data: bytes, allowed: tuple[type[ParallaxError], ...]
) -> str:
    """Run a reader on `data`: a result, or errors of `allowed` (one, or several found in one
    pass) with their exit code and a one-line message each."""
    with scratch() as root:
        path = root / "input"
        path.write_bytes(data)
        try:
            fn(path)
        except (*allowed, Errors) as exc:
            assert exc.exit_code in (64, 65, 78)
            for error in exc.each:
                assert isinstance(error, allowed), error
                assert str(error) and "\n" not in str(error).strip("\n")
            return "error"
    return "ok"


READERS: dict[str, tuple[Callable[[Path], Any], tuple[type[ParallaxError], ...]]] = {
    "fixtures": (load_cases, (DataError,)),
    "config": (load_config, (ConfigError,)),
    "cassette": (load_cassette, (DataError,)),
    "ledger": (lambda p: list(read_jsonl(p)), (DataError,)),
    "exchanges": (lambda p: list(read_exchanges(p)), (DataError,)),
    "outcomes": (lambda p: list(read_outcomes(p)), (DataError,)),
    "snapshot": (load_snapshot, (DataError,)),
    "diff": (lambda p: compare(p, p), (DataError, UsageError)),  # 64: nothing shared
}


@pytest.mark.parametrize("reader", sorted(READERS))
@FUZZ
@given(data=blobs)
def test_arbitrary_bytes_give_a_result_or_one_clear_error(reader: str, data: bytes) -> None:
    """Any bytes at all: each reader returns or raises its one documented error class."""
    fn, allowed = READERS[reader]
    one_clear_error(fn, data, allowed)
    record("fuzz", inputs=1)


@pytest.mark.parametrize("reader", sorted(set(READERS) - {"config"}))
@FUZZ
@given(rows=st.lists(json_values, max_size=5), document=st.booleans())
def test_arbitrary_json_gives_a_result_or_one_clear_error(
    reader: str, rows: list[Any], document: bool
) -> None:
    """Arbitrary JSON rows (or one document): a result or the reader's documented error."""
    fn, allowed = READERS[reader]
    data = _dump({"version": 1, "cases": rows}) if document else _jsonl(rows)
    one_clear_error(fn, data, allowed)
    record("fuzz", inputs=1)


ROW_KEYS = ["id", "case_id", "prompt", "stratum", "expect", "tags", "system", "grader"]
ROW_KEYS += ["completion", "must_include", "max_chars", "fixture_sha", "owner"]
EXPECT_KEYS = ["must_include", "must_not_include", "max_chars", "max_sentences", "regex"]
EXPECT_KEYS += ["not_regex", "json_fields", "json_schema"]


@FUZZ
@given(
    overrides=st.dictionaries(st.sampled_from(ROW_KEYS), json_values, max_size=4),
    expect=st.dictionaries(st.sampled_from(EXPECT_KEYS), json_values, max_size=3),
)
def test_near_valid_fixture_rows_load_or_name_file_and_line(
    overrides: dict[str, Any], expect: dict[str, Any]
) -> None:
    """A valid row with arbitrary values swapped in loads, or fails with `file:line: reason`."""
    row = {"id": "a", "prompt": "p", "expect": expect, **overrides}
    data = _jsonl([{"id": "first", "prompt": "ok"}, row])
    one_clear_error(load_cases, data, (DataError,))
    record("fuzz", inputs=1)


def _toml_value(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        items = [v for v in (_toml_value(x) for x in value) if v is not None]
        return "[" + ", ".join(items) + "]"
    pairs = [(k, _toml_value(v)) for k, v in value.items()]
    return "{" + ", ".join(f"{json.dumps(k)} = {v}" for k, v in pairs if v is not None) + "}"


CONFIG_KEYS = {
    "top": ["runs_dir", "snapshots_dir", "serve_grace_seconds", "thresholds", "endpoints"],
    "endpoint": ["kind", "base_url", "model", "cassette", "concurrency", "timeout", "retry"],
    "suite": ["fixtures", "reference", "candidate", "samples", "schedule", "graders"],
}


@FUZZ
@given(
    top=st.dictionaries(st.sampled_from(CONFIG_KEYS["top"]), json_values, max_size=2),
    endpoint=st.dictionaries(st.sampled_from(CONFIG_KEYS["endpoint"]), json_values, max_size=3),
    suite=st.dictionaries(st.sampled_from(CONFIG_KEYS["suite"]), json_values, max_size=3),
    name=st.text(max_size=6),
)
def test_near_valid_configs_load_or_exit_78_naming_the_key(
    top: dict[str, Any], endpoint: dict[str, Any], suite: dict[str, Any], name: str
) -> None:
    """A valid config with arbitrary values swapped in validates, or exits 78 with one line."""
    doc_top = {k: v for k, v in top.items() if k != "endpoints"}
    base_endpoint = {"kind": "recorded", **endpoint}
    base_suite = {"fixtures": "cases.jsonl", "reference": "r", "candidate": "r", **suite}
    pairs = [(k, _toml_value(v)) for k, v in doc_top.items()]
    lines = [f"{json.dumps(k)} = {t}" for k, t in pairs if t is not None]
    lines.append(f"endpoints = {{ r = {_toml_value(base_endpoint)} }}")
    lines.append(f"suites = {{ {json.dumps(name or 's')} = {_toml_value(base_suite)} }}")
    with scratch() as root:
        (root / "cases.jsonl").write_text('{"id": "a", "prompt": "a"}\n')
        config = root / "parallax.toml"
        config.write_text("\n".join(lines) + "\n")
        code = main(["validate", "--config", str(config)])
    assert code in (0, 65, 78)
    record("fuzz", inputs=1)


def _run_dir(root: Path, manifest: Any, disagreement: Any) -> Path:
    run_dir = root / "runs" / "s" / "20260101T000000Z-abcdef"
    run_dir.mkdir(parents=True)
    (run_dir / "manifest.json").write_bytes(_dump(manifest))
    (run_dir / "disagreement.json").write_bytes(_dump(disagreement))
    return run_dir


@FUZZ
@given(
    manifest=st.dictionaries(
        st.sampled_from(["version", "suite", "config", "mode", "samples"]), json_values
    ),
    disagreement=st.dictionaries(
        st.sampled_from(["suite", "cases", "run_id", "version"]),
        json_values
        | st.dictionaries(
            st.text(max_size=4),
            st.fixed_dictionaries({"admitted": st.booleans()}, optional={"fixture_sha": scalars}),
        ),
    ),
)
def test_hand_edited_run_dirs_give_one_clear_error(manifest: Any, disagreement: Any) -> None:
    """A hand-edited manifest or disagreement map: promote, resume, replay, report exit cleanly."""
    with scratch() as root:
        run_dir = _run_dir(root, {"version": 1, **manifest}, disagreement)
        before = set(root.rglob("*"))
        for args in (
            ["promote", str(run_dir), "--allow-partial"],
            ["run", "--resume", str(run_dir)],
            ["replay", str(run_dir)],
            ["report", str(run_dir)],
        ):
            code = main(args)
            assert code in (0, 1, 2, 3, 64, 65, 78), args
        written = set(root.rglob("*")) - before
        assert all(root / "runs" in p.parents or p.name.endswith(".lock") for p in written)
        with pytest.raises(ParallaxError):
            read_manifest(root / "missing")
    record("fuzz", inputs=1)


NASTY_IDS = [
    "../../x",
    "../../../../../../tmp/parallax-escape",
    "/etc/passwd",
    "/tmp/parallax-abs",
    "a\x00b",
    "..",
    ".",
    "x/../../y",
    "C:\\windows\\system32",
    "~/.ssh/id",
    "tab\there\nnewline",
    "名前/../..",
]


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()}


def _offline_suite(root: Path, ids: list[str], suite: str = "s") -> Path:
    rows = [{"id": i, "prompt": f"p{n}", "completion": f"p{n}"} for n, i in enumerate(ids)]
    (root / "cases.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cassette = [{"case_id": i, "completion": "answer"} for i in ids[::2]]
    (root / "cassette.jsonl").write_text("".join(json.dumps(r) + "\n" for r in cassette))
    config = root / "parallax.toml"
    config.write_text(
        'runs_dir = "runs"\nsnapshots_dir = "snapshots"\n'
        '[endpoints.rec]\nkind = "recorded"\ncassette = "cassette.jsonl"\n'
        f'[suites.{suite}]\nfixtures = "cases.jsonl"\nreference = "rec"\ncandidate = "rec"\n'
    )
    return config


def _assert_contained(root: Path, before: set[Path], suite: str = "s") -> int:
    new = _files(root) - before
    allowed = {root / "snapshots" / f"{suite}.json", root / "snapshots" / ".promote.lock"}
    outside = [p for p in new if (root / "runs") not in p.parents and p not in allowed]
    assert not outside, outside
    return len(new)


def test_path_like_case_ids_never_write_outside_the_run_directory(tmp_path: Path) -> None:
    """Ids such as ../../x, /etc/passwd or a\\0b end up only inside runs/ and the snapshot."""
    root = tmp_path / "project"
    root.mkdir()
    config = _offline_suite(root, NASTY_IDS)
    before = _files(tmp_path)

    run_dir, code, _ = run_suite(load_config(config), "s")
    assert main(["report", str(run_dir), "--junit", str(run_dir / "junit.xml")]) == code
    assert main(["promote", str(run_dir)]) == 0
    replayed = main(["replay", str(run_dir)])

    assert replayed == code
    written = _assert_contained(root, before)
    assert written >= 5
    assert set(load_snapshot(root / "snapshots" / "s.json")) == set(NASTY_IDS)
    assert not list(tmp_path.parent.glob("x")) and not Path("/tmp/parallax-escape").exists()
    record("fuzz", path_ids=len(NASTY_IDS))


@settings(max_examples=25)
@given(
    ids=st.lists(
        st.text(min_size=1, max_size=12).filter(str.strip), min_size=1, max_size=6, unique=True
    )
)
def test_arbitrary_case_ids_stay_inside_the_run_directory(ids: list[str]) -> None:
    """Any unique ids at all: a run and a promote write only inside runs/ and snapshots/."""
    with scratch() as root:
        config = _offline_suite(root, ids)
        before = _files(root)
        run_dir, _, _ = run_suite(load_config(config), "s")
        assert main(["promote", str(run_dir), "--allow-partial"]) == 0
        _assert_contained(root, before)
    record("fuzz", path_ids=len(ids))


def test_a_disagreement_map_naming_a_path_as_its_suite_cannot_escape_snapshots(
    tmp_path: Path,
) -> None:
    """promote refuses a suite name like ../../evil (exit 65) and writes nothing."""
    run_dir = _run_dir(
        tmp_path,
        {"version": 1, "suite": "s", "config": {"path": str(tmp_path / "none.toml")}},
        {"suite": "../../evil", "cases": {}},
    )
    snapshots = tmp_path / "a" / "b" / "snapshots"
    with pytest.raises(DataError, match="not a valid suite name"):
        promote(run_dir, snapshots, suite="s")
    assert not list(tmp_path.rglob("evil*"))
