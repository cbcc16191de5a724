"""Specification of the recorded endpoint: cassette rows become the exchanges a server sends."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from runner.adapters import parse
from runner.errors import DataError
from runner.grading import GraderSet
from runner.model import Case, Exchange, Reply
from runner.recorded import RecordedEndpoint, load_cassette
from runner.stamps import stamp

pytestmark = pytest.mark.anyio


def case(case_id: str = "c1", completion: str | None = None) -> Case:
    return Case(
        id=case_id,
        prompt="p",
        expect={"must_include": ["Paris"]},
        fixture_sha="b" * 16,
        path="s.jsonl",
        line=1,
        completion=completion,
    )


def cassette_file(tmp_path: Path, rows: list[Any]) -> Path:
    path = tmp_path / "cassette.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def endpoint(
    tmp_path: Path, rows: list[dict[str, Any]], *, suite: str = "s", model: str | None = "rec-m"
) -> RecordedEndpoint:
    cassette = load_cassette(cassette_file(tmp_path, rows))
    return RecordedEndpoint("cand", suite=suite, model=model, cassette=cassette)


def content_of(exchange: Exchange) -> Any:
    assert exchange.response is not None
    return json.loads(exchange.response.body)["choices"][0]["message"]["content"]


# --- load_cassette -------------------------------------------------------------------------


def test_load_cassette_keys_rows_by_suite_case_and_sample(tmp_path: Path) -> None:
    """Rows are keyed (suite, side, case, sample), None where a row does not narrow."""
    rows = [
        {"case_id": "c1", "completion": "a"},
        {"case_id": "c1", "sample": 1, "completion": "b"},
        {"case_id": "c1", "suite": "s", "completion": "c"},
        {"case_id": "c1", "side": "candidate", "completion": "d"},
    ]
    expected = {
        (None, None, "c1", None),
        (None, None, "c1", 1),
        ("s", None, "c1", None),
        (None, "candidate", "c1", None),
    }
    assert expected == set(load_cassette(cassette_file(tmp_path, rows)))


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        (["c1"], "cassette row must be a JSON object"),
        ({"case_id": "c1", "completoin": "x"}, "unknown cassette key 'completoin'"),
        ({"completion": "x"}, "cassette row needs a string case_id"),
        ({"case_id": "", "completion": "x"}, "cassette row needs a string case_id"),
        ({"case_id": 7}, "cassette row needs a string case_id"),
        ({"case_id": "c1", "fault": "ok"}, "unknown fault 'ok'"),
        ({"case_id": "c1", "fault": "http_error"}, "unknown fault 'http_error'"),
        ({"case_id": "c1", "status": "503"}, "status must be an integer"),
        ({"case_id": "c1", "status": True}, "status must be an integer"),
        ({"case_id": "c1", "body": {"a": 1}}, "body must be a string"),
        ({"case_id": "c1", "sample": "1"}, "sample must be an integer"),
        ({"case_id": "c1", "suite": [1]}, "suite must be a string"),
        ({"case_id": "c1", "suite": 3}, "suite must be a string"),
        ({"case_id": "c1", "side": ["reference"]}, "side must be one of"),
        ({"case_id": "c0", "completion": "dup"}, "duplicate cassette entry for 'c0'"),
        ({"case_id": "c1", "completion": "half \ud800 a pair"}, "lone surrogate escape"),
    ],
)
def test_a_bad_cassette_row_names_file_and_line(tmp_path: Path, row: Any, reason: str) -> None:
    """Each malformed row is a DataError (exit 65) reading `path:line: reason`."""
    path = cassette_file(tmp_path, [{"case_id": "c0", "completion": "ok"}, row])
    with pytest.raises(DataError) as info:
        load_cassette(path)
    assert str(info.value).startswith(f"{path}:2: {reason}")
    expected = 65
    assert expected == info.value.exit_code


def test_a_torn_cassette_line_is_an_error(tmp_path: Path) -> None:
    """Cassettes are written by hand: a truncated last line is reported, not skipped."""
    path = tmp_path / "c.jsonl"
    path.write_text('{"case_id": "c1"}\n{"case_id": ', encoding="utf-8")
    with pytest.raises(DataError) as info:
        load_cassette(path)
    assert f"{path}:2: truncated last line" == str(info.value)


def test_the_same_case_in_two_suites_is_not_a_duplicate(tmp_path: Path) -> None:
    """suite narrows the key, so one case id may appear once per suite."""
    rows = [
        {"case_id": "c1", "suite": "a", "completion": "x"},
        {"case_id": "c1", "suite": "b", "completion": "y"},
    ]
    expected = 2
    assert expected == len(load_cassette(cassette_file(tmp_path, rows)))


# --- RecordedEndpoint.call -----------------------------------------------------------------


async def test_a_text_completion_is_an_ok_openai_body(tmp_path: Path) -> None:
    """A completion becomes a 200 openai-chat body that parses to the same text."""
    ep = endpoint(tmp_path, [{"case_id": "c1", "completion": "Paris", "model": "served-x"}])
    ex = await ep.call(case(), "candidate", 0)
    expected = ("ok", 200, "openai-chat", "cand", "rec-m")
    assert expected == (
        ex.transport,
        ex.response.status if ex.response else None,
        ex.adapter,
        ex.endpoint,
        ex.model_alias,
    )
    expected = (("c1", "candidate", 0), "b" * 16)
    assert expected == (ex.key, ex.fixture_sha)
    reply = parse(ex.adapter, ex.response, expects_json=False) if ex.response else None
    assert isinstance(reply, Reply)
    expected = ("Paris", "served-x", "rec-c1")
    assert expected == (reply.text, reply.facts.response_model, reply.facts.response_id)
    expected = ("ok", None)
    assert expected == (ex.attempts[0].transport, ex.attempts[0].error)


async def test_the_endpoint_model_is_served_when_the_row_names_none(tmp_path: Path) -> None:
    """Without a row model the body reports the endpoint's configured model."""
    ep = endpoint(tmp_path, [{"case_id": "c1", "completion": "x"}])
    ex = await ep.call(case(), "candidate", 0)
    assert ex.response is not None
    expected = "rec-m"
    assert expected == json.loads(ex.response.body)["model"]


async def test_id_fingerprint_and_usage_are_recorded_in_the_body(tmp_path: Path) -> None:
    """id, system_fingerprint and usage from the row reach the body."""
    row = {
        "case_id": "c1",
        "completion": "x",
        "id": "r9",
        "system_fingerprint": "fp9",
        "usage": {"total_tokens": 4},
    }
    ex = await endpoint(tmp_path, [row]).call(case(), "reference", 0)
    assert ex.response is not None
    doc = json.loads(ex.response.body)
    expected = ("r9", "fp9", {"total_tokens": 4})
    assert expected == (
        doc["id"],
        doc["system_fingerprint"],
        doc["usage"],
    )


async def test_a_json_completion_is_sent_as_json_text(tmp_path: Path) -> None:
    """A JSON value as completion is the content as JSON text."""
    ep = endpoint(tmp_path, [{"case_id": "c1", "completion": {"city": "Paris"}}])
    ex = await ep.call(case(), "candidate", 0)
    expected = {"city": "Paris"}
    assert expected == json.loads(content_of(ex))


async def test_a_null_completion_is_a_missing_content_schema_fail(tmp_path: Path) -> None:
    """completion null records a body whose content is null: schema fail missing_content."""
    ep = endpoint(tmp_path, [{"case_id": "c1", "completion": None}])
    ex = await ep.call(case(), "candidate", 0)
    assert content_of(ex) is None
    out = stamp(ex, case(), GraderSet.empty())
    expected = ("ok", "fail", "missing_content", None)
    assert expected == (
        out.transport,
        out.schema,
        out.detail,
        out.task_score,
    )


@pytest.mark.parametrize("fault", ["timeout", "connect_error", "connection_lost", "cancelled"])
async def test_a_fault_row_is_that_transport_stamp_with_no_response(
    tmp_path: Path, fault: str
) -> None:
    """A fault is the transport stamp itself; there is no response to grade."""
    ex = await endpoint(tmp_path, [{"case_id": "c1", "fault": fault}]).call(case(), "c", 0)
    assert (fault, None) == (ex.transport, ex.response)
    assert (fault, "recorded", f"recorded {fault}") == (
        ex.attempts[0].transport,
        ex.attempts[0].error,
        ex.attempts[0].message,
    )
    out = stamp(ex, case(), GraderSet.empty())
    assert ("skipped", None, f"{fault}: recorded {fault}") == (
        out.schema,
        out.task_score,
        out.detail,
    )


@pytest.mark.parametrize(
    ("status", "transport"), [(503, "http_error"), (429, "rate_limited"), (404, "http_error")]
)
async def test_a_status_row_is_stamped_from_the_status(
    tmp_path: Path, status: int, transport: str
) -> None:
    """A non-2xx status gives http_error (429: rate_limited) and keeps status and body."""
    row = {"case_id": "c1", "status": status, "body": "upstream busy"}
    ex = await endpoint(tmp_path, [row]).call(case(), "candidate", 0)
    assert (transport, status, "upstream busy") == (
        ex.transport,
        ex.response.status if ex.response else None,
        ex.response.body if ex.response else None,
    )


async def test_a_raw_body_row_is_a_200_with_that_body(tmp_path: Path) -> None:
    """body without status is a 200 whose raw body fails the schema stamp."""
    row = {"case_id": "c1", "body": "<html>not json</html>"}
    ex = await endpoint(tmp_path, [row]).call(case(), "candidate", 0)
    expected = ("ok", "<html>not json</html>")
    assert expected == (
        ex.transport,
        ex.response.body if ex.response else None,
    )
    out = stamp(ex, case(), GraderSet.empty())
    expected = ("fail", "not_json")
    assert expected == (out.schema, out.detail)


async def test_a_suite_row_wins_over_a_plain_row_in_that_suite_only(tmp_path: Path) -> None:
    """A row narrowed to suite s answers in s; other suites get the plain row."""
    rows = [
        {"case_id": "c1", "completion": "plain"},
        {"case_id": "c1", "suite": "s", "completion": "suite-s"},
    ]
    in_s = await endpoint(tmp_path, rows, suite="s").call(case(), "candidate", 0)
    in_t = await endpoint(tmp_path, rows, suite="t").call(case(), "candidate", 0)
    expected = ("suite-s", "plain")
    assert expected == (content_of(in_s), content_of(in_t))


async def test_a_sample_row_wins_over_the_row_for_every_sample(tmp_path: Path) -> None:
    """sample narrows a row to one sample; others fall back to the sample-less row."""
    rows = [
        {"case_id": "c1", "completion": "any"},
        {"case_id": "c1", "sample": 1, "completion": "second"},
    ]
    ep = endpoint(tmp_path, rows)
    first, second = await ep.call(case(), "candidate", 0), await ep.call(case(), "candidate", 1)
    expected = ("any", "second")
    assert expected == (content_of(first), content_of(second))


async def test_suite_narrowing_wins_over_sample_narrowing(tmp_path: Path) -> None:
    """Lookup order: suite+sample, suite, sample, plain."""
    rows = [
        {"case_id": "c1", "sample": 0, "completion": "sample-only"},
        {"case_id": "c1", "suite": "s", "completion": "suite-only"},
        {"case_id": "c1", "suite": "s", "sample": 0, "completion": "both"},
    ]
    ep = endpoint(tmp_path, rows)
    exact, suite_only = await ep.call(case(), "c", 0), await ep.call(case(), "c", 1)
    expected = ("both", "suite-only")
    assert expected == (content_of(exact), content_of(suite_only))


async def test_a_case_completion_is_the_fallback_reply(tmp_path: Path) -> None:
    """With no cassette row a seed-000 case's recorded completion is the reply."""
    ep = endpoint(tmp_path, [{"case_id": "other", "completion": "x"}])
    ex = await ep.call(case(completion="Paris it is"), "reference", 0)
    expected = ("ok", "Paris it is")
    assert expected == (ex.transport, content_of(ex))


async def test_a_cassette_row_wins_over_the_case_completion(tmp_path: Path) -> None:
    """A recorded row for the case replaces its fixture completion."""
    ep = endpoint(tmp_path, [{"case_id": "c1", "completion": "from cassette"}])
    ex = await ep.call(case(completion="from fixture"), "reference", 0)
    expected = "from cassette"
    assert expected == content_of(ex)


async def test_a_case_with_no_recording_is_an_http_404(tmp_path: Path) -> None:
    """No row and no completion: http_error 404 naming the case, never graded."""
    ep = endpoint(tmp_path, [{"case_id": "other", "completion": "x"}])
    ex = await ep.call(case("c1"), "candidate", 0)
    expected = ("http_error", 404)
    assert expected == (ex.transport, ex.response.status if ex.response else None)
    expected = "no recording for case 'c1'"
    assert expected == ex.attempts[0].message
    out = stamp(ex, case("c1"), GraderSet.empty())
    expected = ("skipped", None, ())
    assert expected == (out.schema, out.task_score, out.misses)


def test_a_side_row_answers_only_that_side(tmp_path: Path) -> None:
    """One cassette can hold both sides: a `side` row beats a row without one, for that side."""
    rows = [
        {"case_id": "c1", "completion": "shared"},
        {"case_id": "c1", "side": "candidate", "completion": "candidate only"},
    ]
    endpoint = RecordedEndpoint(
        "rec", suite="s", model="m", cassette=load_cassette(cassette_file(tmp_path, rows))
    )
    ref = anyio.run(endpoint.call, case("c1"), "reference", 0)
    cand = anyio.run(endpoint.call, case("c1"), "candidate", 0)
    assert (content_of(ref), content_of(cand)) == ("shared", "candidate only")
