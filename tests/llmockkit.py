"""llmock, a real third-party OpenAI/Anthropic/Gemini server, started on 127.0.0.1 for tests.

llmock (PyPI, pinned in requirements-dev.lock) is not ours: it tells us whether parallax speaks
the providers' wire formats as someone else wrote them, where tests/faultserver.py only checks
that we agree with ourselves. Tests get it through the `llmock` and `llmock_pool` fixtures
(tests/conftest.py); `tests/llmockcases.py` records what it sends into tests/data/llmock/.

A server is a child process, `llmock serve --port P` (run as `python -m llmock.cli`, so it is
this interpreter's llmock), one per set of server-wide `Flags`
(`tool_mode` and `response_style` cannot be changed over HTTP). Everything per request is a
*scenario*: behaviours queued over HTTP at /_llmock/scenario, each consumed by the first
request it matches. A behaviour matches on provider, path, model, stream and whether tools are
offered (`Match`), never on the prompt, so give each side of a run its own model name.

    server.script(tool_call("get_weather", {"city": "Paris"}, match=Match(model="cand")))
    server.script(stream_fault(StreamFault.TRUNCATE, after_chunks=2))
    exchange = server.post(Protocol.OPENAI, {"model": "cand", "stream": True, ...})
    exchange = server.post(Protocol.GEMINI.path("cand", stream=True), {"contents": [...]})
    exchange.body        # every byte received, exactly; exchange.error: what httpx raised

The JSON of each behaviour is llmock 0.2.2's (llmock/scenarios.py): `fail` (status 400-599,
`retry_after` seconds sent as Retry-After and Retry-After-Ms), `delay`, `slow_first_token`,
`stream_fault` (`disconnect`, `truncate`, `malformed` — the HTTP name of what its pytest
helper calls `corrupt` — and `stall` with `stall_seconds`, default 30), `reply` (text and/or
exact `tool_calls`, `finish_reason`) and `tool_fault` (`malformed_arguments`, `unknown_tool`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import httpx
import pytest

# Generous (llmock is ready in 1-2 s on a busy two-core machine), yet under the per-test timeout.
READY_WITHIN = 45.0
# Picking a port by binding and closing a socket can lose a race; try a few times.
START_ATTEMPTS = 3


class Protocol(Enum):
    """The protocols parallax speaks to a model, by llmock's path for each (Gemini's names
    the model and the method: `path` fills it in)."""

    OPENAI = "/v1/chat/completions"
    ANTHROPIC = "/anthropic/v1/messages"
    RESPONSES = "/v1/responses"
    GEMINI = "/gemini/v1beta/models/{model}:{method}"

    @property
    def base_path(self) -> str:
        """What an endpoint's base_url adds to the origin (the adapter appends the rest)."""
        return {
            Protocol.OPENAI: "/v1",
            Protocol.ANTHROPIC: "/anthropic",
            Protocol.RESPONSES: "/v1",
            Protocol.GEMINI: "/gemini/v1beta",
        }[self]

    def path(self, model: str = "", *, stream: bool = False) -> str:
        """The path a request for `model` goes to (only Gemini's depends on them)."""
        method = "streamGenerateContent?alt=sse" if stream else "generateContent"
        return self.value.format(model=model, method=method)

    @property
    def headers(self) -> dict[str, str]:
        """Headers a real client of this protocol sends (llmock checks none of them)."""
        return {"anthropic-version": "2023-06-01"} if self is Protocol.ANTHROPIC else {}

    @property
    def kind(self) -> str:
        """The `kind` of a parallax endpoint that speaks this protocol."""
        return {
            Protocol.OPENAI: "openai-chat",
            Protocol.ANTHROPIC: "anthropic-messages",
            Protocol.RESPONSES: "openai-responses",
            Protocol.GEMINI: "gemini",
        }[self]

    @property
    def provider(self) -> str:
        """llmock's name for the provider (a `Match` field): the Responses API is OpenAI's."""
        return {Protocol.ANTHROPIC: "anthropic", Protocol.GEMINI: "gemini"}.get(self, "openai")


class ToolMode(Enum):
    """`--tool-mode`: `auto` answers a request that offers tools with a generated call."""

    AUTO = "auto"
    OFF = "off"


class ResponseStyle(Enum):
    """`--response-style`: `varied` picks one of a few sentences by a hash of model and prompt
    (deterministic), `echo` repeats the prompt, `static` and `hello` are fixed sentences."""

    VARIED = "varied"
    ECHO = "echo"
    STATIC = "static"
    HELLO = "hello"


class StreamFault(Enum):
    """How a `stream_fault` breaks the event numbered `after_chunks` (0-based)."""

    DISCONNECT = "disconnect"  # the connection is dropped before it: no chunked terminator
    TRUNCATE = "truncate"  # the body ends cleanly before it: no finish event
    MALFORMED = "malformed"  # its `data:` payload is cut in half; the stream then goes on
    STALL = "stall"  # nothing is sent for `stall_seconds`, then it and the rest come


class ToolFault(Enum):
    """How a `tool_fault` breaks the first tool call of a request that offers tools."""

    MALFORMED_ARGUMENTS = "malformed_arguments"  # the arguments' JSON is cut in half
    UNKNOWN_TOOL = "unknown_tool"  # the call is renamed `llmock_unknown_tool`


UNKNOWN_TOOL_NAME = "llmock_unknown_tool"


@dataclass(frozen=True)
class Flags:
    """The server-wide settings of one llmock process (its CLI flags)."""

    tool_mode: ToolMode = ToolMode.AUTO
    response_style: ResponseStyle = ResponseStyle.VARIED

    def argv(self) -> list[str]:
        return ["--tool-mode", self.tool_mode.value, "--response-style", self.response_style.value]


@dataclass(frozen=True)
class Match:
    """Which requests a behaviour applies to; an unset field matches anything.

    `path` and `model` take shell wildcards. `provider` is "openai", "anthropic" or "gemini"
    (`Protocol.provider`).
    """

    provider: str | None = None
    path: str | None = None
    model: str | None = None
    stream: bool | None = None
    tools: bool | None = None

    def to_json(self) -> dict[str, Any]:
        fields = {
            "provider": self.provider,
            "path": self.path,
            "model": self.model,
            "stream": self.stream,
            "tools": self.tools,
        }
        return {k: v for k, v in fields.items() if v is not None}


Behavior = dict[str, Any]


def _behavior(type_: str, match: Match | None, times: int | None, **fields: Any) -> Behavior:
    """One behaviour's JSON; `times=None` keeps it until the scenario is cleared."""
    out: Behavior = {"type": type_, "times": times, **fields}
    if match is not None:
        out["match"] = match.to_json()
    return out


def reply(
    text: str | None = None,
    *,
    tool_calls: tuple[tuple[str, dict[str, Any]], ...] = (),
    finish_reason: str | None = None,
    match: Match | None = None,
    times: int | None = 1,
) -> Behavior:
    """Script the answer: text, exact tool calls (name, arguments), or both."""
    calls = [{"name": name, "arguments": args} for name, args in tool_calls]
    extra: dict[str, Any] = {"tool_calls": calls}
    if text is not None:
        extra["text"] = text
    if finish_reason is not None:
        extra["finish_reason"] = finish_reason
    return _behavior("reply", match, times, **extra)


def tool_call(
    name: str, arguments: dict[str, Any], *, match: Match | None = None, times: int | None = 1
) -> Behavior:
    """Script one exact tool call as the whole answer."""
    return reply(tool_calls=((name, arguments),), match=match, times=times)


def break_tool_call(
    kind: ToolFault, *, match: Match | None = None, times: int | None = 1
) -> Behavior:
    """Break the first tool call of the next request that offers tools (llmock's default match);
    with no call to break (tool_mode off, or a text reply) it makes one first."""
    return _behavior("tool_fault", match, times, kind=kind.value)


def stream_fault(
    kind: StreamFault,
    *,
    after_chunks: int,
    stall_seconds: float | None = None,
    match: Match | None = None,
    times: int | None = 1,
) -> Behavior:
    """Break the next stream at event `after_chunks` (0-based; events before it arrive intact).

    llmock's default match is `stream=True`; a given `match` replaces it, so keep `stream=True`
    in it or a non-streamed request may consume the fault without showing it.
    """
    extra: dict[str, Any] = {"kind": kind.value, "after_chunks": after_chunks}
    if stall_seconds is not None:
        extra["stall_seconds"] = stall_seconds
    return _behavior("stream_fault", match, times, **extra)


def fail(
    status: int,
    *,
    retry_after: float | None = None,
    message: str | None = None,
    match: Match | None = None,
    times: int | None = 1,
) -> Behavior:
    """Answer with the provider's own error body; 429, 503, 504 and 529 carry Retry-After
    (1 s unless `retry_after` says otherwise, as whole seconds plus Retry-After-Ms)."""
    extra: dict[str, Any] = {"status": status}
    if retry_after is not None:
        extra["retry_after"] = retry_after
    if message is not None:
        extra["message"] = message
    return _behavior("fail", match, times, **extra)


def delay(seconds: float, *, match: Match | None = None, times: int | None = 1) -> Behavior:
    """Hold the whole response for `seconds` before the status line."""
    return _behavior("delay", match, times, seconds=seconds)


def slow_first_token(
    seconds: float, *, match: Match | None = None, times: int | None = 1
) -> Behavior:
    """Send the stream's headers, then wait `seconds` before its first event."""
    return _behavior("slow_first_token", match, times, seconds=seconds)


@dataclass(frozen=True)
class Exchange:
    """One raw POST as the client saw it: nothing parsed, nothing retried."""

    request: bytes
    status: int
    headers: httpx.Headers
    body: bytes  # every body byte received, in order, chunked framing removed
    error: str | None  # `ClassName: message` of the httpx error that ended the read, if any
    # (seconds since the request was sent, bytes) per read, to see a stall's gap
    reads: tuple[tuple[float, bytes], ...] = field(repr=False)

    @property
    def error_class(self) -> str | None:
        return None if self.error is None else self.error.split(":", 1)[0]

    def events(self) -> list[bytes]:
        """The SSE events of the body, each without its blank-line terminator."""
        return [e for e in self.body.split(b"\n\n") if e]


@dataclass
class LlmockServer:
    """One `llmock serve` child process; `start()` returns once /health answers."""

    flags: Flags
    log_path: Path
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    started_in: float = 0.0  # seconds from spawn to the first healthy answer

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def base_url(self, protocol: Protocol) -> str:
        """The `base_url` of a parallax endpoint of that protocol pointed at this server."""
        return self.origin + protocol.base_path

    def endpoint_toml(
        self,
        name: str,
        protocol: Protocol,
        *,
        concurrency: int = 2,
        price: tuple[float, float] | None = None,
        extra: str = "",
    ) -> str:
        """A live parallax endpoint `name` at this server, whose model is its name too
        (behaviours match on the model): one attempt, as a retry would hide a scripted fault;
        `price` is (input, output) $/Mtok."""
        priced = (
            ""
            if price is None
            else f"price = {{ input_per_mtok = {price[0]}, output_per_mtok = {price[1]} }}\n"
        )
        return (
            f"[endpoints.{name}]\n"
            f'kind = "{protocol.kind}"\nbase_url = "{self.base_url(protocol)}"\n'
            f'model = "{name}"\nconcurrency = {concurrency}\ndeadline = 30\nmax_tokens = 64\n'
            "retry = { attempts = 1 }\n"
            f"{priced}{extra}"
        )

    # lifecycle --------------------------------------------------------------------------

    def start(self) -> LlmockServer:
        for _ in range(START_ATTEMPTS):
            self.port = _free_port()
            if self._spawn_and_wait():
                return self
        raise RuntimeError(f"llmock did not start; its output:\n{self._log_tail()}")

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None

    def __enter__(self) -> LlmockServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _spawn_and_wait(self) -> bool:
        """Start the child and wait for /health; False if it exited first (port taken)."""
        argv = [sys.executable, "-m", "llmock.cli", "serve", "--host", "127.0.0.1"]
        argv += ["--port", str(self.port), "--log-level", "warning", *self.flags.argv()]
        # LLMOCK_* variables would change its behaviour behind the flags' back
        env = {k: v for k, v in os.environ.items() if not k.startswith("LLMOCK_")}
        env["NO_COLOR"] = "1"
        spawned = time.monotonic()
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = spawned + READY_WITHIN
        with httpx.Client(timeout=httpx.Timeout(2.0)) as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    self.proc = None
                    return False
                with contextlib.suppress(httpx.TransportError):
                    if client.get(self.origin + "/health").status_code == 200:
                        self.started_in = time.monotonic() - spawned
                        return True
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"llmock not ready within {READY_WITHIN:.0f} s:\n{self._log_tail()}")

    def _log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-2000:]

    # the control API --------------------------------------------------------------------

    def script(self, *behaviors: Behavior) -> None:
        """Queue behaviours; each incoming request takes the first match per kind."""
        r = httpx.post(self.origin + "/_llmock/scenario", json={"behaviors": list(behaviors)})
        if r.status_code != 201:
            raise ValueError(f"llmock refused the scenario ({r.status_code}): {r.text}")

    def pending(self) -> list[Behavior]:
        """Behaviours not yet consumed."""
        pending: list[Behavior] = httpx.get(self.origin + "/_llmock/scenario").json()["pending"]
        return pending

    def clear(self) -> None:
        """Drop the queued behaviours, keep the journal."""
        httpx.delete(self.origin + "/_llmock/scenario").raise_for_status()

    def reset(self) -> None:
        """Forget queued behaviours and recorded requests (the flags stay)."""
        httpx.post(self.origin + "/_llmock/reset").raise_for_status()

    def requests(self) -> list[dict[str, Any]]:
        """Every request llmock served since the last reset, with its body and the fault it got
        (llmock waits up to 2 s for requests still in flight)."""
        records: list[dict[str, Any]] = httpx.get(
            self.origin + "/_llmock/requests", timeout=10
        ).json()["requests"]
        return records

    # raw traffic ------------------------------------------------------------------------

    def post(
        self,
        protocol: Protocol | str,
        body: Mapping[str, Any] | bytes,
        *,
        headers: Mapping[str, str] | None = None,
        read_timeout: float = 30.0,
    ) -> Exchange:
        """One POST on a fresh connection, reading the reply raw to its end or its failure.
        A protocol posts to its path (Gemini's: `Protocol.GEMINI.path(model)` as a string)."""
        path = protocol.path() if isinstance(protocol, Protocol) else protocol
        sent = headers or (protocol.headers if isinstance(protocol, Protocol) else {})
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        timeout = httpx.Timeout(connect=5.0, read=read_timeout, write=5.0, pool=5.0)
        reads: list[tuple[float, bytes]] = []
        error: str | None = None
        with httpx.Client(timeout=timeout) as client:
            started = time.monotonic()
            request_headers = {"content-type": "application/json", **sent}
            with client.stream(
                "POST", self.origin + path, content=content, headers=request_headers
            ) as response:
                try:
                    for chunk in response.iter_raw():
                        reads.append((time.monotonic() - started, chunk))
                except httpx.TransportError as exc:
                    error = f"{type(exc).__name__}: {exc}"
        return Exchange(
            request=content,
            status=response.status_code,
            headers=response.headers,
            body=b"".join(chunk for _, chunk in reads),
            error=error,
            reads=tuple(reads),
        )


class LlmockPool:
    """The session's llmock servers: one per `Flags`, started on first use."""

    def __init__(self, log_dir: Path) -> None:
        self._log_dir = log_dir
        self._servers: dict[Flags, LlmockServer] = {}

    def get(self, flags: Flags | None = None) -> LlmockServer:
        """A running server with those flags, its scenario and journal reset."""
        flags = flags or Flags()
        server = self._servers.get(flags)
        if server is None:
            name = f"llmock-{flags.tool_mode.value}-{flags.response_style.value}.log"
            server = LlmockServer(flags, self._log_dir / name).start()
            self._servers[flags] = server
        server.reset()
        return server

    def close(self) -> None:
        for server in self._servers.values():
            server.stop()
        self._servers.clear()


def require_llmock() -> None:
    """Skip (with how to get it) where llmock is not installed in this interpreter."""
    if importlib.util.find_spec("llmock") is None:
        pytest.skip(
            "llmock is not installed: it comes with requirements-dev.lock (make .venv/.dev)"
        )


def _free_port() -> int:
    """A loopback port nothing listens on right now (bound, then closed)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
