"""The run progress bar: drawn on a terminal only, counting cases done and transport misses."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from reportkit import Project

from runner.model import Exchange
from runner.progress import CaseCounter, start_progress


def _exchange(case_id: str, side: str) -> Exchange:
    return Exchange(
        case_id=case_id,
        side=side,
        sample=0,
        fixture_sha="0" * 16,
        endpoint="e",
        adapter="openai-chat",
        model_alias=None,
        request={},
        attempts=(),
        transport="ok",
        response=None,
        started_at="2026-01-01T00:00:00+00:00",
        elapsed_ms=0,
    )


def test_a_case_is_done_when_both_sides_are_written() -> None:
    """One side written leaves the case open; the second side closes it."""
    counter = CaseCounter(["a", "b"], samples=1, done=set())
    counter.update([_exchange("a", "reference")], 0)
    first = counter.done
    counter.update([_exchange("a", "candidate"), _exchange("b", "reference")], 1)
    expected = (0, 1, 1)
    actual = (first, counter.done, counter.transport_misses)
    assert expected == actual


def test_resumed_calls_count_as_done_already() -> None:
    """Cases whose calls are all in raw.jsonl start counted."""
    done = {("a", "reference", 0), ("a", "candidate", 0), ("b", "reference", 0)}
    expected = (1, 2)
    counter = CaseCounter(["a", "b"], samples=1, done=done)
    actual = (counter.done, counter.total)
    assert expected == actual


def test_no_bar_when_the_stream_is_not_a_terminal() -> None:
    """Off a TTY nothing is drawn and no bar object exists."""
    stream = io.StringIO()
    expected = (None, "")
    actual = (start_progress("s", ["a"], 1, set(), stream=stream), stream.getvalue())
    assert expected == actual


def test_bar_on_a_terminal_shows_cases_and_misses() -> None:
    """On a terminal the bar shows cases done of total and the transport misses so far."""
    stream = io.StringIO()
    bar = start_progress("nightly", ["a"], 1, set(), stream=stream, force=True)
    assert bar is not None
    bar.update([_exchange("a", "reference"), _exchange("a", "candidate")], 1)
    bar.stop()
    text = stream.getvalue()
    expected = (True, True, True)
    actual = ("1/1" in text, "1 transport miss" in text, "nightly" in text)
    assert expected == actual


def test_a_run_without_a_terminal_writes_nothing_to_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run under CI (stderr is not a TTY) leaves stderr empty; logs stay on stdout."""
    Project(tmp_path).run()
    expected = ""
    actual = capsys.readouterr().err
    assert expected == actual
