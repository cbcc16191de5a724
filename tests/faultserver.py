"""A real HTTP/1.1 server on 127.0.0.1 that misbehaves on request, for client and engine tests.

Raw sockets and one thread per connection, so a fault is a real socket event (an RST, a FIN
before the body ends, silence), not a mock. Start it with the `fault_server` fixture
(tests/conftest.py) or `with FaultServer() as server:`.

Selecting a fault: by path prefix, never by prompt text, so a prompt stays a real prompt.

    POST /fault/<mode>[/<tag>...]/v1/chat/completions   OpenAI chat (openai-chat endpoints)
    POST /fault/<mode>[/<tag>...]/v1/responses          OpenAI's Responses API (openai-responses)
    POST /fault/<mode>[/<tag>...]/v1/messages           Anthropic messages
    POST /fault/<mode>[/<tag>...]/models/<m>:generateContent (or :streamGenerateContent)  Gemini
    POST /fault/<mode>[/<tag>...]/<anything else>       http-json: replies {"answer": ...}

`server.url(mode)` gives the base_url for an openai-chat or openai-responses endpoint
(`.../fault/<mode>/v1`); `server.url(mode, suffix="")` for anthropic-messages (the adapter
appends `/v1/messages`) and gemini (it appends `/models/<model>:generateContent`).
Tags are free path segments (e.g. the side) that make separate `flaky` counters.

Modes (`<name>[:<arg>[:<arg>]]`):

    ok                     200 chat completion (content scripted, see below)
    slow:<s>               sleep s seconds, then as ok
    together:<n>[:<s>]     hold until n requests have been in flight at once, s (0) seconds
                           more, then as ok: an overlap a test asserts is there however
                           slowly the client's requests arrive
    hang                   read the request, never answer (read timeout)
    gate:<name>            hold the reply until the test opens `server.gate(name)`, then as ok
    drip                   200 headers, then one byte every 0.2 s forever (per-call deadline)
    reset[:<code>]         <code> (200) headers + half the body, then SO_LINGER(1,0) close: an RST
    short[:<code>]         <code> (200), Content-Length larger than the bytes written, then a FIN
    close                  read the request, close without any response
    status:<code>[:<ra>]   that status with an OpenAI-style error body; 429 carries
                           `Retry-After: 1` unless <ra> gives the header value literally
    retrydate:<s>          429 with Retry-After as an HTTP-date s seconds after the Date header
    garbage                200 text/html that is not JSON
    nochoices              200 JSON without `choices`
    nullcontent            200 chat completion whose message content is null
    big:<bytes>            200 chat completion whose content is that many bytes
    badutf8                200 application/json body that is not valid UTF-8
    flaky:<n>[:<code>]     first n requests per (path, prompt) answer <code> (503), then ok
    seq:<m1>+<m2>+...      the i-th request per (path, prompt) acts out mode mi; the last repeats
    farfuture              429, `Retry-After: 1`, and a Date header in the year 99999999999

Hostile replies (tests/test_hostile.py) and the soak's random mix (tests/test_soak.py):

    nested:<depth>         200 JSON body nested <depth> arrays deep inside `choices`
    nestedanswer:<depth>   200 chat completion whose content is JSON nested <depth> deep
    huge:<bytes>           200 JSON whose Content-Length is <bytes>, streamed in 1 MB chunks
    bighead:<bytes>        an ok reply carrying one response header of <bytes> bytes
    manyheads:<n>          an ok reply carrying <n> response headers of 1 KB each
    nul                    200 chat completion whose content holds escaped NULs (\u0000)
    rawnul                 200 application/json body with raw NUL bytes inside a string
    manychoices:<n>        200 chat completion with <n> items in `choices`
    wrongtypes             200 JSON with numbers and lists where strings and objects belong
    badargs                200 reply of one call to get_weather whose arguments are no JSON
                           object, in the request's protocol (Gemini's `args` a list)
    endless                200 chunked reply that streams spaces as fast as it can, forever
    chaos:<seed>           each request draws one mode at random from CHAOS_MODES
    reflect[:<code>]       <code> (401) whose body and X-Request-Id echo the request's auth headers,
                           and whose header `X-RateLimit-<key>` carries the key in its name
    echo[:<code>|sse]      a reply whose text is every request header and the request body: a
                           200 chat completion, <code> (500) as an HTML error page, or (sse) a
                           200 stream, so whatever a request carried comes back in a body
    bomb[:<MB>]            200 whose `gzip, gzip` body of a few hundred KB inflates to <MB> (256) MB

Streams (text/event-stream, in the request's protocol: OpenAI chunks, Responses API events,
Anthropic events or Gemini responses):

    sse                    200 stream of the scripted reply, finished ([DONE] / message_stop)
    sseerror[:<type>]      200 stream of a first piece, then the protocol's in-band error event
                           of that type (`overloaded_error`; the Responses API's `error` event
                           with that code, Gemini's error with that status), then the body ends
    ssefailed[:<code>]     (Responses API) a first piece, then `response.failed` with that error
                           code (`server_error`)
    ssedrip                200 stream of a first piece, then an SSE comment every 0.2 s forever
    ssewait:<s>[:cut]      200 stream whose events before any token come at once (OpenAI's role
                           chunk; Anthropic's message_start, an empty text block and a ping),
                           the Responses API's response.created and added item; Gemini sends
                           none), then after s seconds the first token and the finish; with `cut`,
                           the connection closes right after that token, short of the
                           Content-Length: a stream that fails after its first token

Batch APIs (`batch:<end>[:<polls>]`, the base_url of a `batch = true` endpoint): OpenAI's
`/v1/files` (multipart upload), `/v1/batches`, `/v1/batches/<id>`, `/v1/batches/<id>/cancel`
and `/v1/files/<id>/content`; Anthropic's `/v1/messages/batches`, `.../<id>`,
`.../<id>/results` and `.../<id>/cancel`; and both lists (`GET /v1/batches?limit&after`,
`GET /v1/messages/batches?limit&after_id`, newest first, with `has_more` and `last_id`),
OpenAI's showing each batch's `metadata` and `created_at` (epoch seconds), Anthropic's its
`created_at` (RFC 3339) and `request_counts`, both by `server.now` (a test's fake clock may
stand in for time.time), or `server.list_status`'s error when it is set; a page holds at
most `server.list_cap` batches whatever its `limit` asks (as a provider caps its pages), and
with `server.list_stuck` every page is the first, `has_more` forever. Each create takes the
next of `server.create_faults` first, when there is one: `status:<code>` refuses it with that
status (a 429's `Retry-After: 7`), `cut` makes the batch and closes the connection without
an answer. `server.on_create`,
when set, is called once a batch is made and before its id is sent back (a test kills the
client there). A batch answers `in_progress` to its first <polls> (1) polls, then ends as
<end> says:

    ok                     every request answered by its prompt's mode (below)
    expire                 the provider's window passed: the first request answered, the
                           rest `batch_expired` (OpenAI's error file) or `expired` (Anthropic)
    fail                   refused whole: OpenAI's `failed` with errors.data[0].code
                           `invalid_request`, no results; Anthropic's create answers 400
    cut                    as ok, but a results file of more than one line stops in the
                           middle of its last line
    short                  as ok, but the first download of the results is cut short of its
                           Content-Length (a transport error), the next one whole
    never                  never ends: `in_progress` forever (batch_deadline's case)
    refuse                 the create answers 400, OpenAI's after the file was uploaded

A request in a batch is answered by its prompt's mode (`server.prompt_modes`, with `seq:`
counted per prompt across batches): `ok` (the scripted reply), `status:<code>` (that status
and an error body: OpenAI's error file, Anthropic's `errored` result of the matching error
type) or `drop` (no result line at all). Every batch made is in `server.batches`.

Per-case faults: `server.prompt_modes[prompt] = "<mode>"` overrides the path's mode for
requests carrying that prompt, so one suite can mix faults case by case.

Scripting replies (mode ok and friends): `server.replies[prompt] = "text"` (or None for a null
content); otherwise `server.default_reply(prompt)` (echoes the prompt). `server.model_map`
maps a requested model to the model the reply claims (alias drift), `server.prompt_models`
maps (requested model, prompt) to it (a fallback for some calls only); `server.fingerprint` is the
system_fingerprint. `server.gateway_header = "x-litellm-model-name"` acts as a gateway such
as LiteLLM does: the body's `model` is the alias requested, that header names the model.
Every request is recorded in `server.requests` (path, lower-cased headers, body) so tests can
count attempts and see the Authorization header arrive.

Socket helpers: `refused_port()` (nothing listens: connection refused) and `BacklogFull`
(a listener whose accept queue is full, so a SYN is dropped: connect timeout on Linux).
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import json
import random
import select
import socket
import struct
import threading
import time
import urllib.parse
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    408: "Request Timeout",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
}
DRIP_INTERVAL = 0.2
# every fault DESIGN names that a server can cause (connect_error needs a dead port instead)
CHAOS_MODES = (
    "ok",
    "ok",
    "ok",
    "slow:0.1",
    "hang",
    "drip",
    "reset",
    "short",
    "close",
    "status:429:0",
    "status:500",
    "status:503",
    "status:400",
    "flaky:1",
    "garbage",
    "nochoices",
    "nullcontent",
    "big:5000",
    "badutf8",
    "wrongtypes",
    "endless",
)


@dataclass(frozen=True)
class Received:
    """One request as the server saw it."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def mode(self) -> str:
        parts = self.path.split("/")
        return parts[2] if len(parts) > 2 and parts[1] == "fault" else ""

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def prompt(self) -> str:
        return _prompt(self.body)


CHAT, RESPONSES, ANTHROPIC, GEMINI, JSON = "chat", "responses", "anthropic", "gemini", "json"


def _dialect(path: str) -> str:
    """The protocol a request speaks, by its path (a query string aside)."""
    path = path.partition("?")[0]
    if path.endswith("/v1/messages"):
        return ANTHROPIC
    if path.endswith("/chat/completions"):
        return CHAT
    if path.endswith("/responses"):
        return RESPONSES
    if path.endswith((":generateContent", ":streamGenerateContent")):
        return GEMINI
    return JSON


def _requested(req: Received) -> str:
    """The model a request asked for (Gemini names it in the path)."""
    if _dialect(req.path) == GEMINI:
        return req.path.partition("?")[0].rpartition("/models/")[2].partition(":")[0]
    try:
        return str(json.loads(req.body).get("model") or "fault-model")
    except (ValueError, AttributeError):
        return "fault-model"


def _prompt(body: bytes) -> str:
    """The last user message (chat, messages, Responses input, Gemini contents) or the
    `prompt` field (http-json)."""
    try:
        doc = json.loads(body)
    except ValueError:
        return ""
    if not isinstance(doc, dict):
        return ""
    turns = doc.get("messages") or doc.get("input") or doc.get("contents")
    if isinstance(turns, list):
        for turn in reversed(turns):
            if isinstance(turn, dict) and turn.get("role") == "user":
                content = turn.get("content", turn.get("parts"))
                if isinstance(content, list) and all(
                    isinstance(p, dict) and isinstance(p.get("text"), str) for p in content
                ):
                    return "".join(p["text"] for p in content)
                return content if isinstance(content, str) else json.dumps(content)
    prompt = doc.get("prompt")
    return prompt if isinstance(prompt, str) else ""


@dataclass
class FaultServer:
    """The server; its fields are the script tests may change while it runs."""

    replies: dict[str, str | None] = field(default_factory=dict)
    default_reply: Callable[[str], str] = field(default=lambda prompt: f"echo: {prompt}")
    model_map: dict[str, str] = field(default_factory=dict)
    # (requested model, prompt) -> the model that answers; beats model_map
    prompt_models: dict[tuple[str, str], str] = field(default_factory=dict)
    gateway_header: str | None = None  # the header that names the model; the body says the alias
    prompt_modes: dict[str, str] = field(default_factory=dict)  # prompt -> mode, beats the path
    fingerprint: str = "fp_fault"
    requests: list[Received] = field(default_factory=list)
    max_inflight: int = 0
    batches: dict[str, dict[str, Any]] = field(default_factory=dict)  # id -> the batch
    now: Callable[[], float] = field(default=time.time)  # a batch's created_at
    on_create: Callable[[dict[str, Any]], None] | None = None  # after a batch is made
    list_status: int | None = None  # when set, a batch list is answered this error status
    list_cap: int | None = None  # the most batches one list page holds
    list_stuck: bool = False  # every list page is the first, with has_more
    create_faults: list[str] = field(default_factory=list)  # the next creates' faults, in turn

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._inflight_rose = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._sock: socket.socket | None = None
        self._threads: list[threading.Thread] = []
        self._conns: set[socket.socket] = set()
        self._counts: dict[tuple[str, str], int] = {}
        self._inflight = 0
        self._serial = 0
        self._chaos: dict[str, random.Random] = {}
        self._gates: dict[str, threading.Event] = {}
        self._files: dict[str, bytes] = {}
        self._downloads: dict[str, int] = {}  # file or batch id -> times its results were read
        self.chaos_drawn: dict[str, int] = {}  # mode -> how often chaos picked it
        self.port = 0

    # lifecycle -------------------------------------------------------------------------

    def start(self) -> FaultServer:
        sock = socket.create_server(("127.0.0.1", 0), backlog=128)
        sock.settimeout(0.05)  # the accept loop polls the stop flag
        self._sock = sock
        self.port = sock.getsockname()[1]
        accept = threading.Thread(target=self._accept_loop, name="faultserver", daemon=True)
        accept.start()
        self._threads.append(accept)
        return self

    def stop(self) -> None:
        self._stop.set()
        with self._inflight_rose:  # wakes the `together` requests still waiting
            self._inflight_rose.notify_all()
        accept, workers = self._threads[:1], self._threads[1:]
        if self._sock is not None:  # wakes the accept loop now rather than at its next poll
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)
        for thread in accept:  # first: no connection is accepted after this
            thread.join(timeout=5)
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        with self._lock:
            conns = list(self._conns)
        for conn in conns:  # wake handlers blocked in recv; each closes its own socket
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        for thread in workers:
            thread.join(timeout=5)

    def __enter__(self) -> FaultServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # helpers for tests -----------------------------------------------------------------

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, mode: str, *tags: str, suffix: str = "/v1") -> str:
        """Base URL selecting `mode`; tags become extra path segments (separate counters)."""
        path = "/".join(("fault", mode, *tags))
        return f"{self.origin}/{path}{suffix}"

    def gate(self, name: str) -> threading.Event:
        """The gate `gate:<name>` replies wait for: `.set()` lets them (and later ones) through."""
        with self._lock:
            return self._gates.setdefault(name, threading.Event())

    def received(self, mode: str | None = None) -> list[Received]:
        with self._lock:
            found = list(self.requests)
        return [r for r in found if mode is None or r.mode == mode]

    def clear(self) -> None:
        with self._lock:
            self.requests.clear()
            self._counts.clear()
            self.max_inflight = 0

    # serving ---------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        assert self._sock is not None
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(None)
            # no Nagle: a head and a body in two writes must not wait for a delayed ACK
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._conns.add(conn)
            worker = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(worker)
            worker.start()

    def _serve(self, conn: socket.socket) -> None:
        """Requests on one connection (keep-alive) until the client or a fault closes it."""
        buf = bytearray()
        keep = True
        try:
            while keep and not self._stop.is_set():
                request = self._read(conn, buf)
                if request is None:
                    break
                with self._lock:
                    self.requests.append(request)
                    self._inflight += 1
                    self.max_inflight = max(self.max_inflight, self._inflight)
                    self._inflight_rose.notify_all()
                try:
                    keep = self._respond(conn, request)
                finally:
                    with self._lock:
                        self._inflight -= 1
        except OSError:
            pass  # the client went away mid-fault: that is the point of most modes
        finally:
            with self._lock:
                self._conns.discard(conn)
            conn.close()

    def _read(self, conn: socket.socket, buf: bytearray) -> Received | None:
        while b"\r\n\r\n" not in buf:
            chunk = conn.recv(65536)
            if not chunk:
                return None
            buf += chunk
        head, _, rest = bytes(buf).partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, path, _version = lines[0].split(" ", 2)
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        body = bytearray(rest)
        while len(body) < length:
            chunk = conn.recv(65536)
            if not chunk:
                return None
            body += chunk
        buf[:] = body[length:]
        return Received(method, path, headers, bytes(body[:length]))

    def _respond(self, conn: socket.socket, req: Received) -> bool:
        """Act out the mode; False when the connection must not be reused."""
        parts = req.path.split("/")
        if len(parts) < 3 or parts[1] != "fault":
            return self._error(conn, 404, "no /fault/<mode>/ prefix")
        return self._act(conn, req, self.prompt_modes.get(req.prompt, parts[2]))

    def _act(self, conn: socket.socket, req: Received, mode: str) -> bool:
        name, _, arg = mode.partition(":")
        if name == "chaos":
            with self._lock:
                rng = self._chaos.setdefault(arg, random.Random(arg))
                drawn = rng.choice(CHAOS_MODES)
                self.chaos_drawn[drawn] = self.chaos_drawn.get(drawn, 0) + 1
            name, _, arg = drawn.partition(":")
        if name in _HOSTILE:
            return _HOSTILE[name](self, conn, req, arg)
        if name == "batch":
            return self._batch(conn, req, arg)
        if name == "ok":
            return self._ok(conn, req)
        if name == "slow":
            if self._stop.wait(float(arg or "1")):
                return False
            return self._ok(conn, req)
        if name == "together":
            count, _, more = arg.partition(":")
            with self._inflight_rose:
                self._inflight_rose.wait_for(
                    lambda: self.max_inflight >= int(count) or self._stop.is_set()
                )
            if self._stop.wait(float(more or "0")):
                return False
            return self._ok(conn, req)
        if name == "hang":
            self._hang(conn)
            return False
        if name == "gate":
            if not self._hang(conn, until=self.gate(arg)):
                return False
            return self._ok(conn, req)
        if name == "drip":
            self._send_head(conn, 200, {"Content-Type": "application/json"}, 10**9)
            while not self._stop.wait(DRIP_INTERVAL):
                conn.sendall(b" ")
            return False
        if name == "seq":
            steps = arg.split("+")
            with self._lock:
                seen = self._counts[(req.path, req.prompt)] = (
                    self._counts.get((req.path, req.prompt), 0) + 1
                )
            return self._act(conn, req, steps[min(seen, len(steps)) - 1])
        if name == "reset":
            body = self._completion(req)
            self._send_head(
                conn, int(arg or "200"), {"Content-Type": "application/json"}, len(body)
            )
            conn.sendall(body[: len(body) // 2])
            time.sleep(0.05)  # let the client read headers and the half body first
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            return False  # _serve's close() now sends an RST instead of a FIN
        if name == "short":
            body = self._completion(req)
            code = int(arg or "200")
            self._send_head(conn, code, {"Content-Type": "application/json"}, len(body) + 100)
            conn.sendall(body)
            conn.shutdown(socket.SHUT_WR)
            return False
        if name == "close":
            return False
        if name == "status":
            code, _, retry_after = arg.partition(":")
            extra: dict[str, str] = {}
            if retry_after:
                extra["Retry-After"] = retry_after
            elif code == "429":
                extra["Retry-After"] = "1"
            return self._error(conn, int(code), f"fault status {code}", extra)
        if name == "retrydate":
            now = datetime.now(UTC).replace(microsecond=0)
            later = now + timedelta(seconds=float(arg or "1"))
            headers = {"Date": format_datetime(now, usegmt=True)}
            headers["Retry-After"] = format_datetime(later, usegmt=True)
            return self._error(conn, 429, "fault rate limit (HTTP-date)", headers)
        if name == "farfuture":
            far = {"Date": "Fri, 31 Dec 99999999999 23:59:59 GMT", "Retry-After": "1"}
            return self._error(conn, 429, "fault rate limit from far in the future", far)
        if name == "garbage":
            return self._send(conn, 200, {"Content-Type": "text/html"}, b"<html>not json</html>")
        if name == "nochoices":
            doc = {"id": "chatcmpl-fault", "object": "chat.completion", "model": "fault"}
            return self._send_json(conn, 200, doc)
        if name == "nullcontent":
            return self._send(conn, 200, _JSON, self._completion(req, None, scripted=False))
        if name == "big":
            content = "x" * int(arg or "5000000")
            return self._send(conn, 200, _JSON, self._completion(req, content, scripted=False))
        if name == "badutf8":
            return self._send(conn, 200, _JSON, b'{"bytes": "\xff\xfe\xfa"}')
        if name == "flaky":
            count, _, code = arg.partition(":")
            key = (req.path, req.prompt)
            with self._lock:
                seen = self._counts[key] = self._counts.get(key, 0) + 1
            if seen <= int(count or "1"):
                return self._error(conn, int(code or "503"), f"flaky failure {seen}")
            return self._ok(conn, req)
        return self._error(conn, 404, f"unknown fault mode {name!r}")

    def _hang(self, conn: socket.socket, until: threading.Event | None = None) -> bool:
        """Say nothing until the client gives up (EOF/RST) or the server stops (False), or
        until `until` is set (True)."""
        while not self._stop.wait(0.05):
            if until is not None and until.is_set():
                return True
            readable, _, _ = select.select([conn], [], [], 0)
            if readable and not conn.recv(1, socket.MSG_PEEK):
                return False
        return False

    # batch APIs ------------------------------------------------------------------------

    def batch_creates(self) -> list[Received]:
        """The requests that created a batch (OpenAI's or Anthropic's)."""
        return [r for r in self.received() if r.method == "POST" and r.path.endswith("/batches")]

    def _batch(self, conn: socket.socket, req: Received, arg: str) -> bool:
        end, _, polls = arg.partition(":")
        route, _, query = req.path.split("/", 3)[3].partition("?")  # past /fault/<mode>/
        parts = route.split("/")
        anthropic = route.startswith("v1/messages/batches")
        if req.method == "GET" and route in ("v1/batches", "v1/messages/batches"):
            return self._list(conn, dict(urllib.parse.parse_qsl(query)), anthropic=anthropic)
        if req.method == "POST" and route == "v1/files":
            return self._upload(conn, req)
        if req.method == "POST" and route in ("v1/batches", "v1/messages/batches"):
            if (anthropic and end == "fail") or end == "refuse":
                return self._error(conn, 400, "invalid request", {})
            with self._lock:
                fault = self.create_faults.pop(0) if self.create_faults else ""
            if fault.startswith("status:"):
                code = int(fault.removeprefix("status:"))
                asked = {"Retry-After": "7"} if code == 429 else {}
                return self._error(conn, code, "try later", asked)
            cut = fault == "cut"
            return self._create(conn, req, end, int(polls or "1"), anthropic=anthropic, cut=cut)
        if req.method == "GET" and route.startswith("v1/files/") and route.endswith("/content"):
            return self._content_of(conn, parts[2])
        batch_id = parts[-2] if parts[-1] in ("cancel", "results") else parts[-1]
        with self._lock:
            batch = self.batches.get(batch_id)
        if batch is None:
            return self._error(conn, 404, f"no batch {batch_id}")
        if parts[-1] == "cancel":
            batch["cancelled"] = True
            return self._send_json(conn, 200, self._batch_doc(batch, poll=False))
        if parts[-1] == "results":
            return self._results(conn, batch, batch_id)
        return self._send_json(conn, 200, self._batch_doc(batch, poll=True))

    def _upload(self, conn: socket.socket, req: Received) -> bool:
        boundary = req.headers.get("content-type", "").partition("boundary=")[2].strip('"')
        content = b""
        for part in req.body.split(b"--" + boundary.encode()):
            head, _, data = part.partition(b"\r\n\r\n")
            if b'name="file"' in head:
                content = data.removesuffix(b"\r\n")
        with self._lock:
            self._serial += 1
            file_id = f"file-fault-{self._serial}"
            self._files[file_id] = content
        return self._send_json(conn, 200, {"id": file_id, "object": "file", "purpose": "batch"})

    def _create(
        self,
        conn: socket.socket,
        req: Received,
        end: str,
        polls: int,
        *,
        anthropic: bool,
        cut: bool = False,
    ) -> bool:
        doc = json.loads(req.body)
        base = req.path.split("/v1/", 1)[0]
        if anthropic:
            lines = [
                (item["custom_id"], f"{base}/v1/messages", item["params"])
                for item in doc["requests"]
            ]
        else:
            with self._lock:
                content = self._files.get(doc.get("input_file_id"), b"")
            lines = []
            for raw in content.splitlines():
                item = json.loads(raw)
                lines.append((item["custom_id"], f"{base}{item['url']}", item["body"]))
        with self._lock:
            self._serial += 1
            batch_id = f"{'msgbatch' if anthropic else 'batch'}_fault_{self._serial}"
            batch = {
                "id": batch_id,
                "anthropic": anthropic,
                "end": end,
                "polls_left": polls,
                "lines": lines,
                "cancelled": False,
                "results": None,
                "created_at": self.now(),
                "metadata": None if anthropic else doc.get("metadata"),
            }
            self.batches[batch_id] = batch
        if self.on_create is not None:
            self.on_create(batch)
        if cut:  # made, and the answer never leaves
            return False
        return self._send_json(conn, 200, self._batch_doc(batch, poll=False))

    def _list(self, conn: socket.socket, query: dict[str, str], *, anthropic: bool) -> bool:
        """A page of the provider's batches, newest first, after the cursor the query names."""
        if self.list_status is not None:
            return self._error(conn, self.list_status, "the batch list is not available")
        with self._lock:
            made = [b for b in self.batches.values() if b["anthropic"] == anthropic]
        made.sort(key=lambda b: b["created_at"], reverse=True)
        ids = [b["id"] for b in made]
        after = query.get("after_id" if anthropic else "after")
        if after in ids and not self.list_stuck:
            made = made[ids.index(after) + 1 :]
        limit = min(int(query.get("limit", "20")), self.list_cap or 1_000_000)
        page = [self._batch_doc(b, poll=False) for b in made[:limit]]
        return self._send_json(
            conn,
            200,
            {
                "data": page,
                "has_more": len(made) > limit or self.list_stuck,
                "first_id": page[0]["id"] if page else None,
                "last_id": page[-1]["id"] if page else None,
            },
        )

    def _batch_doc(self, batch: dict[str, Any], *, poll: bool) -> dict[str, Any]:
        """The batch as its API shows it; a poll counts down to its end."""
        with self._lock:
            if poll and batch["polls_left"] > 0 and not batch["cancelled"]:
                batch["polls_left"] -= 1
                done = False
            else:
                done = batch["polls_left"] <= 0 or batch["cancelled"]
            if batch["end"] == "never" and not batch["cancelled"]:
                done = False
        if done and batch["results"] is None:
            batch["results"] = self._answer(batch)
        if batch["anthropic"]:
            n = len(batch["lines"])
            counts = {"processing": n, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
            if done:
                expired = n - 1 if batch["end"] == "expire" else 0
                counts.update(processing=0, succeeded=n - expired, expired=expired)
            created = datetime.fromtimestamp(batch["created_at"], UTC)
            return {
                "id": batch["id"],
                "type": "message_batch",
                "processing_status": "ended" if done else "in_progress",
                "request_counts": counts,
                "created_at": created.isoformat().replace("+00:00", "Z"),
                "cancel_initiated_at": "2026-12-01T00:00:00Z" if batch["cancelled"] else None,
            }
        status = "in_progress"
        if batch["cancelled"]:
            status = "cancelled"
        elif done:
            status = {"expire": "expired", "fail": "failed"}.get(batch["end"], "completed")
        doc: dict[str, Any] = {
            "id": batch["id"],
            "object": "batch",
            "status": status,
            "created_at": int(batch["created_at"]),
            "metadata": batch["metadata"],
        }
        if done and status == "failed":
            doc["errors"] = {"data": [{"code": "invalid_request", "message": "bad lines"}]}
        elif done:
            output, errors = batch["results"]
            doc["output_file_id"] = f"{batch['id']}-out" if output else None
            doc["error_file_id"] = f"{batch['id']}-err" if errors else None
        return doc

    def _answer(self, batch: dict[str, Any]) -> tuple[bytes, bytes]:
        """The results of a batch that ended: (output lines, error lines); Anthropic's are all
        in the first."""
        output: list[dict[str, Any]] = []
        errors: list[dict[str, Any]] = []
        for i, (custom_id, path, body) in enumerate(batch["lines"]):
            line = Received("POST", path, {}, json.dumps(body).encode())
            mode = self._line_mode(line)
            expired = batch["cancelled"] or (batch["end"] == "expire" and i > 0)
            if mode == "drop" or batch["end"] == "fail":
                continue
            if batch["anthropic"]:
                result = self._anthropic(line, mode, expired=expired)
                output.append({"custom_id": custom_id, "result": result})
                continue
            if expired:
                error = {"code": "batch_expired", "message": "the batch expired"}
                errors.append({"custom_id": custom_id, "response": None, "error": error})
            elif mode.startswith("status:"):
                code = int(mode.partition(":")[2])
                error = {"message": f"fault status {code}", "type": "fault", "code": code}
                answer = {"error": error}
                response = {"status_code": code, "request_id": "req-fault", "body": answer}
                errors.append({"custom_id": custom_id, "response": response, "error": None})
            else:
                response = {
                    "status_code": 200,
                    "request_id": "req-fault",
                    "body": json.loads(self._completion(line)),
                }
                output.append({"custom_id": custom_id, "response": response, "error": None})
        return _lines(output), _lines(errors)

    def _anthropic(self, line: Received, mode: str, *, expired: bool) -> dict[str, Any]:
        if expired:
            return {"type": "expired"}
        if mode.startswith("status:"):
            code = int(mode.partition(":")[2])
            kind = _ANTHROPIC_ERRORS.get(code, "api_error")
            error = {"type": "error", "error": {"type": kind, "message": f"fault {code}"}}
            return {"type": "errored", "error": error}
        return {"type": "succeeded", "message": json.loads(self._completion(line))}

    def _line_mode(self, line: Received) -> str:
        """A batched request's mode: its prompt's, `seq:` counted per prompt across batches."""
        mode = self.prompt_modes.get(line.prompt, "ok")
        if mode.startswith("seq:"):
            steps = mode.partition(":")[2].split("+")
            with self._lock:
                key = ("batch", line.prompt)
                seen = self._counts[key] = self._counts.get(key, 0) + 1
            mode = steps[min(seen, len(steps)) - 1]
        return mode

    def _results(self, conn: socket.socket, batch: dict[str, Any], key: str) -> bool:
        if batch["results"] is None:
            return self._error(conn, 400, "the batch has not ended")
        return self._jsonl(conn, batch, key, batch["results"][0])

    def _content_of(self, conn: socket.socket, file_id: str) -> bool:
        batch_id, _, which = file_id.rpartition("-")
        with self._lock:
            batch = self.batches.get(batch_id)
        if batch is None or batch["results"] is None or which not in ("out", "err"):
            return self._error(conn, 404, f"no file {file_id}")
        return self._jsonl(conn, batch, file_id, batch["results"][which == "err"])

    def _jsonl(self, conn: socket.socket, batch: dict[str, Any], key: str, data: bytes) -> bool:
        """A results file as the batch's end has it sent: whole, torn, or cut short once."""
        with self._lock:
            seen = self._downloads[key] = self._downloads.get(key, 0) + 1
        headers = {"Content-Type": "application/jsonl"}
        if batch["end"] == "cut" and b"\n" in data:
            data = data[: len(data) - 5]  # the last line loses its end
        if batch["end"] == "short" and seen == 1:
            self._send_head(conn, 200, headers, len(data) + 100)
            conn.sendall(data)
            conn.shutdown(socket.SHUT_WR)
            return False
        return self._send(conn, 200, headers, data)

    # bodies ----------------------------------------------------------------------------

    def _content(self, prompt: str) -> str | None:
        if prompt in self.replies:
            return self.replies[prompt]
        return self.default_reply(prompt)

    def _completion(
        self, req: Received, content: str | None = None, *, scripted: bool = True
    ) -> bytes:
        """The success body in the request's wire format; `scripted=False` uses `content`."""
        prompt = req.prompt
        text = self._content(prompt) if scripted else content
        requested = _requested(req)
        model = requested if self.gateway_header else self._served(req)
        with self._lock:
            self._serial += 1
            serial = self._serial
        words = len(prompt.split())
        usage_out = len(text.split()) if isinstance(text, str) else 0
        dialect = _dialect(req.path)
        if dialect == RESPONSES:
            parts = [] if text is None else [{"type": "output_text", "text": text}]
            doc: dict[str, Any] = {
                "id": f"resp_fault_{serial}",
                "object": "response",
                "model": model,
                "status": "completed",
                "output": [{"type": "message", "role": "assistant", "content": parts}],
                "usage": {"input_tokens": words, "output_tokens": usage_out},
            }
        elif dialect == GEMINI:
            content = {"role": "model", "parts": [] if text is None else [{"text": text}]}
            doc = {
                "candidates": [{"content": content, "finishReason": "STOP", "index": 0}],
                "modelVersion": model,
                "responseId": f"fault-{serial}",
                "usageMetadata": {"promptTokenCount": words, "candidatesTokenCount": usage_out},
            }
        elif dialect == ANTHROPIC:
            doc = {
                "id": f"msg_fault_{serial}",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [{"type": "text", "text": text}],
                "stop_reason": "end_turn",
                "usage": {"input_tokens": words, "output_tokens": usage_out},
            }
        elif dialect == CHAT:
            doc = {
                "id": f"chatcmpl-fault-{serial}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "system_fingerprint": self.fingerprint,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": text},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {
                    "prompt_tokens": words,
                    "completion_tokens": usage_out,
                    "total_tokens": words + usage_out,
                },
            }
        else:
            doc = {"answer": text, "model": model, "id": f"fault-{serial}"}
        return json.dumps(doc).encode()

    def _served(self, req: Received) -> str:
        """The model that answers: a prompt's own, else the requested one as mapped."""
        requested = _requested(req)
        found = self.prompt_models.get((requested, req.prompt))
        return found or self.model_map.get(requested, requested)

    def _ok(self, conn: socket.socket, req: Received) -> bool:
        gateway = {self.gateway_header: self._served(req)} if self.gateway_header else {}
        extra = {
            **gateway,
            **_JSON,
            "x-request-id": "req-fault",
            "openai-processing-ms": "1",
            "x-ratelimit-remaining-requests": "99",
            "set-cookie": "session=should-not-be-recorded",
            "x-internal-trace": "should-not-be-recorded",
        }
        return self._send(conn, 200, extra, self._completion(req))

    def _error(
        self, conn: socket.socket, code: int, message: str, extra: dict[str, str] | None = None
    ) -> bool:
        doc = {"error": {"message": message, "type": "fault", "code": code}}
        return self._send(conn, code, {**_JSON, **(extra or {})}, json.dumps(doc).encode())

    def _send_json(self, conn: socket.socket, code: int, doc: Any) -> bool:
        return self._send(conn, code, _JSON, json.dumps(doc).encode())

    def _send(self, conn: socket.socket, code: int, headers: dict[str, str], body: bytes) -> bool:
        conn.sendall(self._head(code, headers, len(body)) + body)
        return True

    def _send_head(
        self, conn: socket.socket, code: int, headers: dict[str, str], length: int
    ) -> None:
        conn.sendall(self._head(code, headers, length))

    def _head(self, code: int, headers: dict[str, str], length: int) -> bytes:
        lines = [f"HTTP/1.1 {code} {_REASONS.get(code, 'Fault')}"]
        merged = {"Date": format_datetime(datetime.now(UTC), usegmt=True), "Server": "fault"}
        merged.update(headers)
        merged["Content-Length"] = str(length)
        lines += [f"{k}: {v}" for k, v in merged.items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    # hostile replies --------------------------------------------------------------------

    def _nested(self, conn: socket.socket, req: Received, arg: str) -> bool:
        depth = int(arg or "100000")
        body = b'{"choices":' + b"[" * depth + b"]" * depth + b"}"
        return self._send(conn, 200, _JSON, body)

    def _nested_answer(self, conn: socket.socket, req: Received, arg: str) -> bool:
        depth = int(arg or "100000")
        content = '{"a":' * depth + "1" + "}" * depth
        return self._send(conn, 200, _JSON, self._completion(req, content, scripted=False))

    def _huge(self, conn: socket.socket, req: Received, arg: str) -> bool:
        size = int(arg or str(50 * 1024 * 1024))
        self._send_head(conn, 200, _JSON, size)
        chunk = b"x" * (1024 * 1024)
        sent = 0
        while sent < size and not self._stop.is_set():
            piece = chunk[: size - sent]
            conn.sendall(piece)
            sent += len(piece)
        return False

    def _bighead(self, conn: socket.socket, req: Received, arg: str) -> bool:
        size = int(arg or str(4 * 1024 * 1024))
        headers = {**_JSON, "X-Fault-Big": "h" * size}
        return self._send(conn, 200, headers, self._completion(req))

    def _manyheads(self, conn: socket.socket, req: Received, arg: str) -> bool:
        count = int(arg or "5000")
        headers = {**_JSON, **{f"X-Fault-{i}": "h" * 1024 for i in range(count)}}
        return self._send(conn, 200, headers, self._completion(req))

    def _nul(self, conn: socket.socket, req: Received, arg: str) -> bool:
        content = f"\x00{req.prompt}\x00 and a NUL\x00"
        return self._send(conn, 200, _JSON, self._completion(req, content, scripted=False))

    def _rawnul(self, conn: socket.socket, req: Received, arg: str) -> bool:
        body = b'{"choices": [{"message": {"content": "a\x00b\x00"}}]}'
        return self._send(conn, 200, _JSON, body)

    def _surrogate(self, conn: socket.socket, req: Received, arg: str) -> bool:
        """Valid JSON whose escapes decode to lone surrogates: no UTF-8 file can hold them."""
        doc = json.loads(self._completion(req))
        doc["model"] = "served-\ud800"
        doc["choices"][0]["message"]["content"] = f"{req.prompt} \udc00 then \ud83d\ude00"
        return self._send(conn, 200, _JSON, json.dumps(doc).encode("ascii"))

    def _manychoices(self, conn: socket.socket, req: Received, arg: str) -> bool:
        doc = json.loads(self._completion(req))
        doc["choices"] = doc["choices"] * int(arg or "10000")
        return self._send_json(conn, 200, doc)

    def _wrongtypes(self, conn: socket.socket, req: Received, arg: str) -> bool:
        doc = {
            "id": 12345,
            "model": 7,
            "system_fingerprint": ["fp"],
            "usage": "lots",
            "choices": [{"index": "0", "message": {"role": 1, "content": 42}}],
        }
        return self._send_json(conn, 200, doc)

    def _bad_args(self, conn: socket.socket, req: Received, arg: str) -> bool:
        dialect = _dialect(req.path)
        model = self._served(req)
        if dialect == GEMINI:
            part = {"functionCall": {"name": "get_weather", "args": [1, 2]}}
            candidate = {"content": {"role": "model", "parts": [part]}, "finishReason": "STOP"}
            doc: dict[str, Any] = {"candidates": [candidate], "modelVersion": model}
        elif dialect == RESPONSES:
            item = {"type": "function_call", "call_id": "c1", "name": "get_weather"}
            doc = {"model": model, "status": "completed", "output": [{**item, "arguments": "[1"}]}
        elif dialect == ANTHROPIC:
            use = {"type": "tool_use", "id": "t1", "name": "get_weather", "input": "[1"}
            doc = {"model": model, "content": [use], "stop_reason": "tool_use"}
        else:
            function = {"name": "get_weather", "arguments": "[1"}
            message = {"role": "assistant", "tool_calls": [{"id": "c1", "function": function}]}
            doc = {"model": model, "choices": [{"message": message, "finish_reason": "tool_calls"}]}
        return self._send_json(conn, 200, doc)

    def _reflect(self, conn: socket.socket, req: Received, arg: str) -> bool:
        echoed = f"{req.headers.get('authorization', '')} {req.headers.get('x-api-key', '')}"
        extra = {"X-Request-Id": echoed}
        bearer = req.headers.get("authorization", "").removeprefix("Bearer ")
        key = req.headers.get("x-api-key") or bearer
        if key:  # a header name that embeds the key, as a careless gateway's rate limits do
            extra[f"X-RateLimit-{key}"] = "1"
        return self._error(conn, int(arg or "401"), f"rejected credentials: {echoed}", extra)

    def _echo(self, conn: socket.socket, req: Received, arg: str) -> bool:
        sent = "; ".join(f"{name}: {value}" for name, value in sorted(req.headers.items()))
        text = f"headers: {sent} body: {req.body.decode('utf-8', 'replace')}"
        if arg == "sse":
            first, end = self._events(req, text)
            return self._send_stream(conn, [self._frame(e) for e in (*first, *end, *_done(req))])
        if arg:
            page = f"<html><body><h1>{arg} upstream error</h1><pre>{text}</pre></body></html>"
            return self._send(conn, int(arg), {"Content-Type": "text/html"}, page.encode())
        return self._send(conn, 200, _JSON, self._completion(req, text, scripted=False))

    def _bomb(self, conn: socket.socket, req: Received, arg: str) -> bool:
        headers = {**_JSON, "Content-Encoding": "gzip, gzip"}
        return self._send(conn, 200, headers, _gzip_bomb(int(arg or "256")))

    def _events(
        self, req: Received, text: str | None = None
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The scripted reply (or `text`) as the request's protocol streams it: (events up to
        and with the first piece of content, the events that finish it)."""
        text = text if text is not None else self._content(req.prompt) or ""
        model = self._served(req)
        dialect = _dialect(req.path)
        if dialect == RESPONSES:
            item = {"type": "message", "id": "msg_sse", "role": "assistant", "content": []}
            response = {"id": "resp_sse", "model": model, "status": "in_progress", "output": []}
            created = {"type": "response.created", "response": response}
            added = {"type": "response.output_item.added", "output_index": 0, "item": item}
            piece = {"type": "response.output_text.delta", "output_index": 0, "delta": text}
            said = {**item, "content": [{"type": "output_text", "text": text}]}
            done = {"type": "response.output_item.done", "output_index": 0, "item": said}
            usage = {"input_tokens": 1, "output_tokens": 1}
            whole = {**response, "status": "completed", "output": [said], "usage": usage}
            return [created, added, piece], [
                done,
                {"type": "response.completed", "response": whole},
            ]
        if dialect == GEMINI:

            def answer(finish: str | None) -> dict[str, Any]:
                parts = [] if finish else [{"text": text}]
                candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}}
                if finish:
                    candidate["finishReason"] = finish
                return {"candidates": [candidate], "modelVersion": model, "responseId": "sse"}

            return [answer(None)], [answer("STOP")]
        if dialect == ANTHROPIC:
            start = {"type": "message_start", "message": {"id": "msg_sse", "model": model}}
            block = {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            }
            piece = {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": text},
            }
            stop = {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn"},
                "usage": {"output_tokens": 1},
            }
            end = [{"type": "content_block_stop", "index": 0}, stop, {"type": "message_stop"}]
            return [start, block, piece], end

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            return {
                "id": "chatcmpl-sse",
                "object": "chat.completion.chunk",
                "model": model,
                "choices": [choice],
            }

        return [chunk({"role": "assistant", "content": text})], [chunk({}, "stop")]

    @staticmethod
    def _frame(event: dict[str, Any] | str) -> bytes:
        data = event if isinstance(event, str) else json.dumps(event)
        kind = event.get("type") if isinstance(event, dict) else None
        name = f"event: {kind}\n" if isinstance(kind, str) else ""
        return f"{name}data: {data}\n\n".encode()

    def _send_stream(self, conn: socket.socket, frames: list[bytes]) -> bool:
        body = b"".join(frames)
        return self._send(conn, 200, {"Content-Type": "text/event-stream"}, body)

    def _sse(self, conn: socket.socket, req: Received, arg: str) -> bool:
        first, end = self._events(req)
        return self._send_stream(conn, [self._frame(e) for e in (*first, *end, *_done(req))])

    def _sse_error(self, conn: socket.socket, req: Received, arg: str) -> bool:
        first, _ = self._events(req)
        kind = arg or "overloaded_error"
        error: dict[str, Any] = {"type": kind, "message": "fault in-band error"}
        dialect = _dialect(req.path)
        if dialect == ANTHROPIC:
            event: dict[str, Any] = {"type": "error", "error": error}
        elif dialect == RESPONSES:
            event = {"type": "error", "code": kind, "message": "fault in-band error"}
        elif dialect == GEMINI:
            event = {"error": {"code": 503, "message": "fault in-band error", "status": kind}}
        else:
            event = {"error": error}
        return self._send_stream(conn, [self._frame(e) for e in (*first, event)])

    def _sse_failed(self, conn: socket.socket, req: Received, arg: str) -> bool:
        """The Responses API's response.failed after a first piece."""
        first, _ = self._events(req)
        error = {"code": arg or "server_error", "message": "fault failed response"}
        response = {"id": "resp_sse", "status": "failed", "error": error, "output": []}
        event = {"type": "response.failed", "response": response}
        return self._send_stream(conn, [self._frame(e) for e in (*first, event)])

    def _sse_wait(self, conn: socket.socket, req: Received, arg: str) -> bool:
        seconds, _, end = arg.partition(":")
        first, finish = self._events(req)
        early: list[dict[str, Any] | str]
        done: list[dict[str, Any] | str] = []
        dialect = _dialect(req.path)
        if dialect == ANTHROPIC:
            early, tokens = [*first[:2], {"type": "ping"}], first[2:]
        elif dialect in (RESPONSES, GEMINI):  # created and the added item; Gemini has none
            early, tokens = first[:-1], first[-1:]
        else:
            (piece,) = first
            role = {**piece["choices"][0], "delta": {"role": "assistant"}}
            early, tokens, done = [{**piece, "choices": [role]}], first, ["[DONE]"]
        head = b"".join(self._frame(e) for e in early)
        said = b"".join(self._frame(e) for e in tokens)
        rest = b"".join(self._frame(e) for e in (*finish, *done))
        self._send_head(
            conn, 200, {"Content-Type": "text/event-stream"}, len(head) + len(said) + len(rest)
        )
        conn.sendall(head)
        if self._stop.wait(float(seconds or "1")):
            return False
        conn.sendall(said)
        if end == "cut":
            return False  # closed short of the Content-Length: the stream breaks off
        conn.sendall(rest)
        return True

    def _sse_drip(self, conn: socket.socket, req: Received, arg: str) -> bool:
        first, _ = self._events(req)
        self._send_head(conn, 200, {"Content-Type": "text/event-stream"}, 10**9)
        conn.sendall(b"".join(self._frame(e) for e in first))
        while not self._stop.wait(DRIP_INTERVAL):
            conn.sendall(b": still thinking\n")
        return False

    def _endless(self, conn: socket.socket, req: Received, arg: str) -> bool:
        head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        conn.sendall((head + "Transfer-Encoding: chunked\r\n\r\n").encode("latin-1"))
        chunk = b"%x\r\n%s\r\n" % (65536, b" " * 65536)
        while not self._stop.is_set():
            conn.sendall(chunk)
        return False


_HOSTILE: dict[str, Callable[[FaultServer, socket.socket, Received, str], bool]] = {
    "nested": FaultServer._nested,
    "nestedanswer": FaultServer._nested_answer,
    "huge": FaultServer._huge,
    "bighead": FaultServer._bighead,
    "manyheads": FaultServer._manyheads,
    "nul": FaultServer._nul,
    "rawnul": FaultServer._rawnul,
    "surrogate": FaultServer._surrogate,
    "manychoices": FaultServer._manychoices,
    "wrongtypes": FaultServer._wrongtypes,
    "badargs": FaultServer._bad_args,
    "endless": FaultServer._endless,
    "sse": FaultServer._sse,
    "sseerror": FaultServer._sse_error,
    "ssefailed": FaultServer._sse_failed,
    "ssedrip": FaultServer._sse_drip,
    "ssewait": FaultServer._sse_wait,
    "reflect": FaultServer._reflect,
    "echo": FaultServer._echo,
    "bomb": FaultServer._bomb,
}


def _done(req: Received) -> list[dict[str, Any] | str]:
    """What ends a stream after its finish: chat's `data: [DONE]`; the others send none."""
    return ["[DONE]"] if _dialect(req.path) == CHAT else []


@functools.cache
def _gzip_bomb(megabytes: int) -> bytes:  # cached: tests build it before a run
    """Zeros gzipped twice: each layer shrinks a run of zeros about a thousandfold."""
    inner = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = bytes(1 << 20)
    layer = b"".join([*(inner.compress(block) for _ in range(megabytes)), inner.flush()])
    return gzip.compress(layer, 9)


_JSON = {"Content-Type": "application/json"}


def _lines(rows: list[dict[str, Any]]) -> bytes:
    """JSONL as the batch APIs send it: one object a line, no newline after the last."""
    return "\n".join(json.dumps(row) for row in rows).encode()


# the error type Anthropic's API names for a status (its batch results carry the type only)
_ANTHROPIC_ERRORS = {
    400: "invalid_request_error",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


def refused_port() -> int:
    """A loopback port nothing listens on (bound, noted, closed): connect is refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


class BacklogFull:
    """A listener whose accept queue is full, so Linux drops further SYNs: connect timeout.

    `listen(0)` queues one connection; one filler connection fills it. `works` is False when
    the kernel completed the probe connect anyway (then a test should skip).
    """

    def __init__(self) -> None:
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(0)
        self.port: int = self._listener.getsockname()[1]
        self._fillers: list[socket.socket] = []
        self.works = False
        for _ in range(4):
            probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            probe.settimeout(0.2)
            self._fillers.append(probe)
            try:
                probe.connect(("127.0.0.1", self.port))
            except TimeoutError:
                self.works = True
                break

    def close(self) -> None:
        for sock in self._fillers:
            sock.close()
        self._listener.close()


@contextlib.contextmanager
def backlog_full() -> Iterator[BacklogFull]:
    full = BacklogFull()
    try:
        yield full
    finally:
        full.close()
