"""An OpenAI-compatible fake chat server for the benchmark: fixed latency, keep-alive, cheap.

One asyncio protocol per connection and no framework, so the server spends a few tens of
microseconds of CPU per request and is never what the benchmark measures. Every POST is
answered after `--latency` seconds (a timer, not a sleeping task) with a chat completion whose
content echoes the last user message, so the client's graders have real work to do.

A request whose body says `"stream": true` is answered as OpenAI streams: Server-Sent Events
in a chunked body, a role chunk, the content a word per chunk, a finish chunk, a usage chunk
(as `stream_options.include_usage` asks) and `data: [DONE]`. The head, the role chunk and the
first word go out after half the latency (the first token), the rest in `--stream-writes - 1`
more writes evenly spaced until the full latency, so a client reads a stream in pieces as it
would off a model.

    python bench/fakeserver.py --port 0 --latency 0.05
    # prints "PORT <n>" on stdout once listening; SIGTERM or SIGINT stops it

Only what the benchmark sends is supported: HTTP/1.1, Content-Length bodies, keep-alive.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from email.utils import formatdate

_HEAD_END = b"\r\n\r\n"


def _request(body: bytes) -> tuple[str, str, bool]:
    """(the last message's content, the model asked for, whether it asked for a stream)."""
    try:
        doc = json.loads(body)
        return (
            str(doc["messages"][-1]["content"]),
            str(doc.get("model", "fake")),
            bool(doc.get("stream")),
        )
    except (ValueError, KeyError, IndexError, TypeError):
        return "", "fake", False


_USAGE = {"prompt_tokens": 12, "completion_tokens": 8, "total_tokens": 20}


def _completion(prompt: str, model: str, seq: int) -> bytes:
    reply = {
        "id": f"chatcmpl-bench-{seq}",
        "object": "chat.completion",
        "created": 1700000000,
        "model": model,
        "system_fingerprint": "fp_bench",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": f"echo: {prompt}"},
                "finish_reason": "stop",
            }
        ],
        "usage": _USAGE,
    }
    return json.dumps(reply, separators=(",", ":")).encode()


def _event(doc: object) -> bytes:
    return b"data: " + json.dumps(doc, separators=(",", ":")).encode() + b"\n\n"


def _chunked(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def _stream(prompt: str, model: str, seq: int, writes: int) -> list[bytes]:
    """A streamed completion as `writes` pieces of a chunked body (the last one ends it)."""
    base = {
        "id": f"chatcmpl-bench-{seq}",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": model,
        "system_fingerprint": "fp_bench",
    }

    def delta(piece: dict[str, str], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": piece, "finish_reason": finish}
        return _event({**base, "choices": [choice]})

    words = f"echo: {prompt}".split(" ")
    tokens = [word + " " for word in words[:-1]] + words[-1:]
    events = [delta({"role": "assistant", "content": ""}), delta({"content": tokens[0]})]
    rest = [delta({"content": token}) for token in tokens[1:]]
    rest += [delta({}, "stop"), _event({**base, "choices": [], "usage": _USAGE})]
    rest.append(b"data: [DONE]\n\n")
    pieces = [b"".join(events)]
    per = -(-len(rest) // max(1, writes - 1))
    pieces += [b"".join(rest[i : i + per]) for i in range(0, len(rest), per)]
    out = [_chunked(piece) for piece in pieces]
    out[-1] += b"0\r\n\r\n"
    return out


class _Conn(asyncio.Protocol):
    """Reads HTTP/1.1 requests off one keep-alive socket and answers each after a delay."""

    seq = 0

    def __init__(self, latency: float, date: list[bytes], writes: int) -> None:
        self.latency = latency
        self.writes = writes
        self.date = date
        self.buf = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None

    def data_received(self, data: bytes) -> None:
        self.buf += data
        loop = asyncio.get_running_loop()
        while True:
            end = self.buf.find(_HEAD_END)
            if end < 0:
                return
            head = self.buf[:end]
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            start = end + 4
            if len(self.buf) < start + length:
                return
            body = self.buf[start : start + length]
            self.buf = self.buf[start + length :]
            _Conn.seq += 1
            prompt, model, stream = _request(body)
            if not stream:
                payload = _completion(prompt, model, _Conn.seq)
                loop.call_later(self.latency, self._respond, payload)
                continue
            pieces = _stream(prompt, model, _Conn.seq, self.writes)
            head = (
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Date: " + self.date[0] + b"\r\n"
                b"X-Request-Id: bench\r\nTransfer-Encoding: chunked\r\n\r\n"
            )
            first = self.latency / 2
            step = (self.latency - first) / max(1, len(pieces) - 1)
            loop.call_later(first, self._send, head + pieces[0])
            for i, piece in enumerate(pieces[1:], 1):
                loop.call_later(first + i * step, self._send, piece)

    def _send(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def _respond(self, payload: bytes) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        head = (
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            b"Date: " + self.date[0] + b"\r\n"
            b"X-Request-Id: bench\r\nContent-Length: " + str(len(payload)).encode() + b"\r\n\r\n"
        )
        self.transport.write(head + payload)


async def _main(host: str, port: int, latency: float, writes: int) -> None:
    loop = asyncio.get_running_loop()
    date = [formatdate(usegmt=True).encode()]

    def tick() -> None:
        date[0] = formatdate(usegmt=True).encode()
        loop.call_later(1.0, tick)

    tick()
    server = await loop.create_server(
        lambda: _Conn(latency, date, writes), host, port, backlog=4096, reuse_address=True
    )
    bound = server.sockets[0].getsockname()[1]
    print(f"PORT {bound}", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency", type=float, default=0.05, help="seconds per reply")
    parser.add_argument(
        "--stream-writes", type=int, default=4, help="writes per streamed reply (at least 2)"
    )
    args = parser.parse_args(argv)
    if not args.host.startswith("127.") and args.host not in ("localhost", "::1"):
        print("fakeserver: loopback only", file=sys.stderr)
        return 64
    asyncio.run(_main(args.host, args.port, args.latency, max(2, args.stream_writes)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
