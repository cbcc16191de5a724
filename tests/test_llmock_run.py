"""End to end against a real third-party server: `parallax run` and `parallax replay` on llmock.

One config per protocol points every endpoint at llmock (tests/llmockkit.py) on 127.0.0.1, each
with its own model name, because llmock's scenarios match requests by model, never by prompt.
Each suite pairs the one plain reference with a candidate whose model carries one behaviour
for as long as the test runs: an exact tool call, malformed arguments, an unknown tool, a
stream, and each of the four stream faults. Its cases cover tools (a call generated from the
tool's schema, a case that must not call any), a structured output and a conversation that
carries a tool's result. The run is a real subprocess; every stamp, miss, tool call and
finish reason in outcomes.jsonl is checked, and `parallax replay` of each run directory must
write the same outcomes and disagreement bytes with no server to ask.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from llmockcases import ANSWER_SCHEMA, SCRIPTED_ARGS, TOOL_RESULT, TOOLS
from llmockkit import (
    UNKNOWN_TOOL_NAME,
    Behavior,
    Flags,
    LlmockPool,
    LlmockServer,
    Match,
    Protocol,
    ResponseStyle,
    StreamFault,
    ToolFault,
    break_tool_call,
    stream_fault,
    tool_call,
)
from relkit import RUN_TIMEOUT, run_parallax

from runner.history import run_dirs

PREFIX = {
    Protocol.OPENAI: "oa",
    Protocol.ANTHROPIC: "an",
    Protocol.RESPONSES: "rs",
    Protocol.GEMINI: "gm",
}
TOOL_FINISH = {
    Protocol.OPENAI: "tool_calls",
    Protocol.ANTHROPIC: "tool_use",
    Protocol.RESPONSES: "completed",
    Protocol.GEMINI: "STOP",
}
TEXT_FINISH = {
    Protocol.OPENAI: "stop",
    Protocol.ANTHROPIC: "end_turn",
    Protocol.RESPONSES: "completed",
    Protocol.GEMINI: "STOP",
}
STALL_SECONDS = 4.0  # far longer than the stalled side's read timeout
STALL_READ_TIMEOUT = 1.0

# echo: a text reply repeats the conversation's text ("Hello! You said: ..."), so text keys can
# be checked (the default style names the model, which differs per side)
ECHO = Flags(response_style=ResponseStyle.ECHO)
PROMPT = "What is the weather in Paris?"
CALL_WEATHER = {"tool_calls": [{"name": "get_weather"}]}


def _row(case_id: str, **fields: Any) -> dict[str, Any]:
    return {"id": case_id, **fields}


WEATHER_CALL = _row(
    "weather-call",
    prompt=PROMPT,
    tools="tools.json",
    expect={**CALL_WEATHER, "tool_args_schema": True},
)
NO_TOOL = _row(
    "no-tool",
    prompt=PROMPT,
    tools="tools.json",
    tool_choice="none",
    expect={"no_tool_calls": True, "must_include": ["Hello"]},
)
WEATHER_JSON = _row(
    "weather-json",
    prompt="Report the weather in Paris as JSON.",
    response_format={
        "type": "json_schema",
        "json_schema": {"name": "weather", "schema": ANSWER_SCHEMA, "strict": True},
    },
    expect={"json_schema": ANSWER_SCHEMA},
)
ANSWERED = _row(
    "answered",
    messages=[
        {"role": "system", "content": "You are a weather assistant."},
        {"role": "user", "content": PROMPT},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": TOOL_RESULT},
    ],
    tools="tools.json",
    expect={"must_include": [TOOL_RESULT], "no_tool_calls": True},
)
WEATHER_PARIS = _row(
    "weather-paris",
    prompt=PROMPT,
    tools="tools.json",
    expect={"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]},
)
# the same call by matchers: a city like Paris, a unit from a list
WEATHER_LIKE_PARIS = _row(
    "weather-like-paris",
    prompt=PROMPT,
    tools="tools.json",
    expect={
        "tool_calls": [
            {
                "name": "get_weather",
                "arguments": {"city": {"$regex": "^Par"}, "unit": {"$one_of": ["celsius", "k"]}},
            }
        ]
    },
)
HELLO = _row("hello", prompt="Say hello.", expect={"must_include": ["Hello"]})


@dataclass(frozen=True)
class Expected:
    """What one outcome row must say; `detail` is a part of its detail, when given."""

    transport: str = "ok"
    schema: str = "ok"
    misses: tuple[str, ...] = ()
    tool_calls: tuple[str, ...] = ()
    finish: str | None = "text"  # "text", "tool", or None (no reply was graded)
    detail: str | None = None
    # the event (0-based) a stream fault ends the stream at: a token before it keeps its ttft
    broken_at: int | None = None

    def row(self, protocol: Protocol) -> dict[str, Any]:
        finish = {"text": TEXT_FINISH[protocol], "tool": TOOL_FINISH[protocol], None: None}
        return {
            "transport": self.transport,
            "schema": self.schema,
            "misses": list(self.misses),
            "tool_calls": list(self.tool_calls),
            "finish_reason": finish[self.finish],
        }


OK = Expected()
CALLED = Expected(tool_calls=("get_weather",), finish="tool")
LOST = Expected(transport="connection_lost", schema="skipped", finish=None, broken_at=2)
# the event llmock streams its first token in: after OpenAI's role chunk, after Anthropic's
# message_start, empty text block and ping, after the Responses API's created, in_progress,
# added item and content part; Gemini's first response carries it
FIRST_TOKEN = {Protocol.OPENAI: 1, Protocol.ANTHROPIC: 3, Protocol.RESPONSES: 4, Protocol.GEMINI: 0}


@dataclass(frozen=True)
class Suite:
    """One suite: its cases, the candidate's behaviour and endpoint keys, and what each case's
    reference and candidate rows must say."""

    name: str
    cases: tuple[dict[str, Any], ...]
    reference: Mapping[str, Expected]
    candidate: Mapping[str, Expected]
    behaviour: tuple[Behavior, ...] = ()
    candidate_toml: str = ""
    streamed: bool = False


def _malformed_args(protocol: Protocol) -> Expected:
    """The candidate whose calls llmock breaks: cut JSON fails the schema, the called tool and
    finish kept; Gemini's `args` are an object llmock sends as {}, a call that then misses
    the tool's required argument."""
    if protocol is Protocol.GEMINI:
        return Expected(
            misses=("tool_args_schema:get_weather:$",), tool_calls=("get_weather",), finish="tool"
        )
    return Expected(
        schema="fail", detail="tool_args_not_json", tool_calls=("get_weather",), finish="tool"
    )


def _suites(protocol: Protocol) -> list[Suite]:
    """The suites of each protocol's run."""
    # llmock's echo repeats a conversation's text parts but not Gemini's functionResponse
    # parts, so there the reply cannot show the tool's result (the test sees it was sent)
    answered = Expected(misses=(f"missing:{TOOL_RESULT}",)) if protocol is Protocol.GEMINI else OK
    auto = {"weather-call": CALLED, "no-tool": OK, "weather-json": OK, "answered": answered}
    return [
        Suite(
            "auto",
            (WEATHER_CALL, NO_TOOL, WEATHER_JSON, ANSWERED),
            reference=auto,
            candidate=auto,
        ),
        Suite(
            "exact",
            (WEATHER_PARIS, WEATHER_LIKE_PARIS),
            reference={
                name: Expected(
                    misses=("tool_arg_mismatch:get_weather.city",),
                    tool_calls=("get_weather",),
                    finish="tool",
                )
                for name in ("weather-paris", "weather-like-paris")
            },
            candidate={"weather-paris": CALLED, "weather-like-paris": CALLED},
            behaviour=(tool_call("get_weather", SCRIPTED_ARGS, times=None),),
        ),
        Suite(
            "malformed-args",
            (WEATHER_CALL,),
            reference={"weather-call": CALLED},
            candidate={"weather-call": _malformed_args(protocol)},
            behaviour=(break_tool_call(ToolFault.MALFORMED_ARGUMENTS, times=None),),
            streamed=True,
        ),
        Suite(
            "unknown-tool",
            (WEATHER_CALL,),
            reference={"weather-call": CALLED},
            candidate={
                "weather-call": Expected(
                    misses=("tool_missing:get_weather", f"tool_unknown:{UNKNOWN_TOOL_NAME}"),
                    tool_calls=(UNKNOWN_TOOL_NAME,),
                    finish="tool",
                )
            },
            behaviour=(break_tool_call(ToolFault.UNKNOWN_TOOL, times=None),),
        ),
        Suite(
            "stream",
            (HELLO, WEATHER_CALL),
            reference={"hello": OK, "weather-call": CALLED},
            candidate={
                "hello": OK,
                "weather-call": CALLED,
            },
            streamed=True,
        ),
        Suite(
            "disconnect",
            (HELLO,),
            reference={"hello": OK},
            candidate={"hello": LOST},
            behaviour=(stream_fault(StreamFault.DISCONNECT, after_chunks=2, times=None),),
            streamed=True,
        ),
        Suite(
            "truncate",
            (HELLO,),
            reference={"hello": OK},
            candidate={"hello": replace(LOST, detail="stream_truncated")},
            behaviour=(stream_fault(StreamFault.TRUNCATE, after_chunks=2, times=None),),
            streamed=True,
        ),
        Suite(
            "malformed-stream",
            (HELLO,),
            reference={"hello": OK},
            candidate={"hello": Expected(schema="fail", detail="stream_malformed", finish=None)},
            behaviour=(stream_fault(StreamFault.MALFORMED, after_chunks=2, times=None),),
            streamed=True,
        ),
        Suite(
            "stall",
            (HELLO,),
            reference={"hello": OK},
            candidate={
                "hello": Expected(transport="timeout", schema="skipped", finish=None, broken_at=1)
            },
            behaviour=(
                stream_fault(
                    StreamFault.STALL, after_chunks=1, stall_seconds=STALL_SECONDS, times=None
                ),
            ),
            candidate_toml=(
                f"timeout = {{ connect = 5, read = {STALL_READ_TIMEOUT}, write = 5, pool = 5 }}\n"
            ),
            streamed=True,
        ),
    ]


def write_project(root: Path, server: LlmockServer, protocol: Protocol) -> list[Suite]:
    """The config, fixtures and tools file of one protocol's run; scripts the candidates."""
    prefix = PREFIX[protocol]
    suites = _suites(protocol)
    tools = [{"type": "function", "function": tool} for tool in TOOLS]
    (root / "tools.json").write_text(json.dumps(tools, indent=2), encoding="utf-8")
    reference = f"{prefix}-ref"
    parts = [
        'runs_dir = "runs"\nsnapshots_dir = "snapshots"\n',
        server.endpoint_toml(reference, protocol),
    ]
    for suite in suites:
        candidate = f"{prefix}-{suite.name}"
        stream = "stream = true\n" if suite.streamed else ""
        parts.append(server.endpoint_toml(candidate, protocol, extra=stream + suite.candidate_toml))
        (root / f"{suite.name}.jsonl").write_text(
            "".join(json.dumps(case) + "\n" for case in suite.cases), encoding="utf-8"
        )
        parts.append(
            f'[suites.{suite.name}]\nfixtures = "{suite.name}.jsonl"\n'
            f'reference = "{reference}"\ncandidate = "{candidate}"\n'
        )
        for behaviour in suite.behaviour:
            server.script({**behaviour, "match": _match(candidate, behaviour)})
    (root / "parallax.toml").write_text("\n".join(parts), encoding="utf-8")
    return suites


def _match(model: str, behaviour: Behavior) -> dict[str, Any]:
    """A behaviour for one candidate model only; a stream fault keeps llmock's stream match."""
    stream = True if behaviour["type"] == "stream_fault" else None
    return Match(model=model, stream=stream).to_json()


def outcomes(run_dir: Path) -> dict[tuple[str, str], dict[str, Any]]:
    rows = [json.loads(line) for line in (run_dir / "outcomes.jsonl").read_text().splitlines()]
    return {(row["case_id"], row["side"]): row for row in rows}


def only_run_dir(root: Path, suite: str) -> Path:
    (run_dir,) = run_dirs(root / "runs" / suite)
    return run_dir


@pytest.mark.slow
@pytest.mark.timeout(RUN_TIMEOUT * 2)
@pytest.mark.parametrize("protocol", list(Protocol), ids=lambda p: p.kind)
def test_a_live_run_against_llmock_stamps_every_tool_and_stream_case_and_replays_byte_identical(
    tmp_path: Path, llmock_pool: LlmockPool, protocol: Protocol
) -> None:
    """A real run on llmock: tools (generated, exact, malformed, unknown), a case that must not
    call a tool, structured output, a conversation with a tool result, a streamed side and the
    four stream faults are each stamped and graded as DESIGN says, and replay (no server) writes
    byte-identical outcomes and disagreement."""
    llmock = llmock_pool.get(ECHO)
    suites = write_project(tmp_path, llmock, protocol)
    run = run_parallax("run", "--config", "parallax.toml", cwd=tmp_path)
    assert "Traceback" not in run.stderr, run.stderr
    assert run.returncode in (0, 1, 2, 3), run.stderr
    for suite in suites:
        run_dir = only_run_dir(tmp_path, suite.name)
        rows = outcomes(run_dir)
        for side, wanted in (("reference", suite.reference), ("candidate", suite.candidate)):
            for case_id, expected in wanted.items():
                row = rows[(case_id, side)]
                where = f"{suite.name}/{case_id}/{side}: {row['detail']}"
                got = {key: row.get(key) for key in expected.row(protocol)}
                assert expected.row(protocol) == got, where
                if expected.detail is not None:
                    assert expected.detail in row["detail"], where
                if expected.schema == "ok":
                    assert row["task_score"] is not None, where
                    assert (row["task_score"] == 1.0) == (not expected.misses), where
                else:
                    assert row["task_score"] is None, where
                # a stream has its first token's time, however it ended, once a token came
                broken = expected.broken_at
                token = broken is None or broken > FIRST_TOKEN[protocol]
                streamed = suite.streamed and side == "candidate" and token
                assert (row.get("ttft_ms") is not None) == streamed, where
                assert row.get("request_sha"), where
        assert set(rows) == {(c["id"], s) for c in suite.cases for s in ("reference", "candidate")}

    served = len(llmock.requests())
    # every protocol sent the conversation's tool result, in its own shape
    assert any(TOOL_RESULT in json.dumps(r["body"]) for r in llmock.requests())
    for suite in suites:
        source = only_run_dir(tmp_path, suite.name)
        replay = run_parallax("replay", source, cwd=tmp_path)
        assert "Traceback" not in replay.stderr, replay.stderr
        replayed = next(d for d in run_dirs(tmp_path / "runs" / suite.name) if d != source)
        for name in ("outcomes.jsonl", "disagreement.json"):
            assert (replayed / name).read_bytes() == (source / name).read_bytes(), (
                suite.name,
                name,
            )
    assert served == len(llmock.requests())  # replay called nothing
