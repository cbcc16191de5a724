"""Specification of the three stamps: a closed socket is never graded, task_score null not 0."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest

from runner.grading.graders import GraderSet
from runner.model import Attempt, Case, Exchange, Outcome, Response, Transport
from runner.stamps import stamp

NONE = GraderSet.empty()
SHA = "f" * 16


def case(expect: Mapping[str, Any] | None = None) -> Case:
    return Case(
        id="c1",
        prompt="Name the SKU.",
        expect=expect if expect is not None else {"must_include": ["SKU-9"]},
        fixture_sha=SHA,
        path="suite.jsonl",
        line=1,
        stratum="medium",
    )


def openai_body(content: Any, **extra: Any) -> str:
    doc = {"choices": [{"message": {"role": "assistant", "content": content}}], **extra}
    return json.dumps(doc)


def exchange(
    *,
    transport: str = "ok",
    status: int | None = 200,
    body: str | None = None,
    attempts: tuple[Attempt, ...] | None = None,
    headers: Mapping[str, str] | None = None,
    served_model_header: str | None = None,
) -> Exchange:
    response = (
        Response(
            status=status,
            headers=headers or {},
            body=body if body is not None else openai_body(""),
        )
        if status is not None
        else None
    )
    return Exchange(
        case_id="c1",
        side="candidate",
        sample=2,
        fixture_sha=SHA,
        endpoint="cand",
        adapter="openai-chat",
        model_alias="alias-1",
        request={"method": "POST", "url": "http://x/chat/completions", "body": {}},
        attempts=attempts
        if attempts is not None
        else (Attempt(n=1, transport=transport, elapsed_ms=3, status=status),),
        transport=transport,
        response=response,
        started_at="2026-01-01T00:00:00+00:00",
        elapsed_ms=42,
        served_model_header=served_model_header,
    )


GRADABLE = openai_body("SKU-9 ships.")
NOT_OK = [t.value for t in Transport if t is not Transport.OK]


@pytest.mark.parametrize("transport", NOT_OK)
def test_a_failed_transport_is_never_graded_even_with_a_good_body(transport: str) -> None:
    """Non-ok transport: schema skipped, task_score None, no misses, whatever the body says."""
    out = stamp(exchange(transport=transport, status=503, body=GRADABLE), case(), NONE)
    assert (transport, "skipped", None, ()) == (
        out.transport,
        out.schema,
        out.task_score,
        out.misses,
    )
    assert out.admitted is False


@pytest.mark.parametrize("transport", NOT_OK)
def test_a_failed_transport_without_a_response_is_not_graded(transport: str) -> None:
    """A closed socket (no response at all) gets no schema and no task score."""
    out = stamp(exchange(transport=transport, status=None), case(), NONE)
    expected = ("skipped", None, (), None)
    assert expected == (out.schema, out.task_score, out.misses, out.http_status)


def test_an_ok_transport_without_a_response_is_not_graded() -> None:
    """No body means nothing to grade, even if the stamp says ok."""
    out = stamp(exchange(transport="ok", status=None), case(), NONE)
    expected = ("skipped", None)
    assert expected == (out.schema, out.task_score)


def test_the_transport_detail_names_status_error_and_message() -> None:
    """The detail of a failed call joins the stamp, HTTP status, error class and message."""
    attempts = (
        Attempt(n=1, transport="timeout", elapsed_ms=1, error="ReadTimeout"),
        Attempt(
            n=2,
            transport="http_error",
            elapsed_ms=1,
            status=502,
            error="HTTPStatusError",
            message="bad gateway",
        ),
    )
    out = stamp(
        exchange(transport="http_error", status=502, body="x", attempts=attempts), case(), NONE
    )
    expected = "http_error: HTTP 502: HTTPStatusError: bad gateway"
    assert expected == out.detail
    expected = (2, 502)
    assert expected == (out.attempts, out.http_status)


def test_the_recorded_error_marker_is_left_out_of_the_detail() -> None:
    """A cassette's `recorded` pseudo-error adds nothing to the detail."""
    attempts = (Attempt(n=1, transport="timeout", elapsed_ms=0, error="recorded"),)
    out = stamp(exchange(transport="timeout", status=None, attempts=attempts), case(), NONE)
    expected = "timeout"
    assert expected == out.detail


def test_a_malformed_body_fails_schema_and_has_no_task_score() -> None:
    """Transport ok but the body is not JSON: schema fail with the detail, score None."""
    out = stamp(exchange(body="<html>busy</html>"), case(), NONE)
    expected = ("ok", "fail", "not_json", None, ())
    assert expected == (
        out.transport,
        out.schema,
        out.detail,
        out.task_score,
        out.misses,
    )
    assert out.admitted is False


def test_a_text_answer_to_a_json_case_fails_schema() -> None:
    """A case expecting JSON fields needs a JSON answer to pass the schema stamp."""
    json_case = case({"json_fields": {"city": "Paris"}})
    out = stamp(exchange(body=openai_body("Paris, France")), json_case, NONE)
    expected = ("fail", "answer_not_json", None)
    assert expected == (out.schema, out.detail, out.task_score)


def test_an_ok_reply_is_graded_with_misses_and_score() -> None:
    """Both stamps ok: the graders run, misses and task_score are recorded."""
    out = stamp(exchange(body=openai_body("No SKU here.")), case(), NONE)
    expected = ("ok", "ok", ("missing:SKU-9",), "missing:SKU-9")
    assert expected == (
        out.transport,
        out.schema,
        out.misses,
        out.detail,
    )
    assert out.task_score is not None
    assert 0.0 < out.task_score < 1.0
    assert out.admitted is True
    assert out.passed is False


def test_a_passing_reply_scores_one_with_detail_ok() -> None:
    """No misses: task_score 1.0, detail ok, passed."""
    out = stamp(exchange(body=GRADABLE), case(), NONE)
    expected = (1.0, (), "ok", True)
    assert expected == (out.task_score, out.misses, out.detail, out.passed)


def test_an_empty_completion_is_a_task_miss_not_a_schema_fail() -> None:
    """An empty string is a valid schema and the task miss empty_completion."""
    out = stamp(exchange(body=openai_body("")), case({}), NONE)
    expected = ("ok", ("empty_completion",))
    assert expected == (out.schema, out.misses)
    assert out.task_score is not None


def test_a_json_case_is_graded_on_its_parsed_answer() -> None:
    """A JSON answer to a json_fields case is graded field by field."""
    json_case = case({"json_fields": {"city": "Paris", "country": "France"}})
    body = openai_body('{"city": "Paris", "country": "Spain"}')
    out = stamp(exchange(body=body), json_case, NONE)
    # four checks: non-empty, max_chars, and one per field; only country misses
    expected = (("field_mismatch:country",), 0.75)
    assert expected == (out.misses, out.task_score)


def test_the_outcome_carries_keys_and_reply_metadata() -> None:
    """Case, side, sample, sha, alias and the reply's model, id, fingerprint, usage are kept."""
    body = openai_body(
        "SKU-9",
        model="served-1",
        id="resp-1",
        system_fingerprint="fp_1",
        usage={"total_tokens": 7},
    )
    out = stamp(exchange(body=body), case(), NONE)
    expected = (("c1", "candidate", 2), SHA, "medium", "alias-1")
    assert expected == (
        out.key,
        out.fixture_sha,
        out.stratum,
        out.model_alias,
    )
    expected = ("served-1", "resp-1", "fp_1", {"total_tokens": 7})
    assert expected == (
        out.response_model,
        out.response_id,
        out.system_fingerprint,
        out.usage,
    )
    expected = (200, 1, 42)
    assert expected == (out.http_status, out.attempts, out.elapsed_ms)


SELF = {"model": "served-2", "id": "resp-2", "system_fingerprint": "fp_2", "usage": {"n": 9}}


def facts_of(out: Outcome) -> tuple[Any, ...]:
    return (out.response_model, out.response_id, out.system_fingerprint, out.usage)


@pytest.mark.parametrize(
    ("body", "expect", "detail"),
    [
        (
            openai_body("Paris, France", **SELF),
            {"json_fields": {"city": "Paris"}},
            "answer_not_json",
        ),
        (json.dumps({"choices": [], **SELF}), {}, "missing_choices"),
        (openai_body(None, **SELF), {}, "missing_content"),
    ],
)
def test_a_reply_that_fails_the_schema_still_says_what_served_it(
    body: str, expect: Mapping[str, Any], detail: str
) -> None:
    """A served body that parsed keeps its model, id, fingerprint and usage on a schema fail."""
    out = stamp(exchange(body=body), case(expect), NONE)
    expected = ("fail", detail, None, ("served-2", "resp-2", "fp_2", {"n": 9}))
    assert expected == (out.schema, out.detail, out.task_score, facts_of(out))


def test_a_body_that_is_no_json_object_says_nothing_about_itself() -> None:
    """A schema fail whose body is not JSON has no model, id, fingerprint or usage."""
    out = stamp(exchange(body="<html>busy</html>"), case(), NONE)
    expected = (None, None, None, None)
    assert expected == facts_of(out)


def test_an_error_reply_names_no_served_model() -> None:
    """A call that was not served (a 500, even with a model in its body) records no facts."""
    failed = exchange(transport="http_error", status=500, body=json.dumps(SELF))
    out = stamp(failed, case(), NONE)
    expected = (None, None, None, None)
    assert expected == facts_of(out)


GATEWAY = {"x-litellm-model-name": "azure/gpt-b", "x-backend": "vllm/llama-3"}


@pytest.mark.parametrize(
    ("header", "headers", "served"),
    [
        (None, GATEWAY, "azure/gpt-b"),  # unset: a known gateway's header, when present
        (None, {}, "served-2"),  # unset, no gateway header: the body's model
        (None, {"x-litellm-model-name": " "}, "served-2"),  # a blank header names nothing
        ("x-backend", GATEWAY, "vllm/llama-3"),  # named: that header
        ("x-backend", {"x-litellm-model-name": "azure/gpt-b"}, "served-2"),  # named, absent
        ("", GATEWAY, "served-2"),  # "": the body's model only
    ],
)
def test_the_served_model_is_the_header_before_the_body(
    header: str | None, headers: Mapping[str, str], served: str
) -> None:
    """The served model is the named header, else a known gateway's, else the body's model."""
    ex = exchange(body=openai_body("SKU-9", **SELF), headers=headers, served_model_header=header)
    out = stamp(ex, case(), NONE)
    expected = (served, "resp-2")
    assert expected == (out.response_model, out.response_id)


def test_a_schema_fail_behind_a_gateway_names_the_backend() -> None:
    """The gateway's header names the served model of a reply that failed its schema too."""
    body = openai_body("Paris", **SELF)
    out = stamp(exchange(body=body, headers=GATEWAY), case({"json_fields": {"a": 1}}), NONE)
    expected = ("fail", "azure/gpt-b")
    assert expected == (out.schema, out.response_model)


def test_stamping_is_a_pure_function_of_its_inputs() -> None:
    """The same exchange and case always give the same outcome row."""
    ex = exchange(body=openai_body("maybe SKU-9"))
    assert stamp(ex, case(), NONE).to_json() == stamp(ex, case(), NONE).to_json()
