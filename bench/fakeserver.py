"""An OpenAI-compatible fake chat server for the benchmark: fixed latency, keep-alive, cheap.

One asyncio protocol per connection and no framework, so the server spends a few tens of
microseconds of CPU per request and is never what the benchmark measures. Every POST is
answered after `--latency` seconds (a timer, not a sleeping task) with a chat completion whose
content echoes the last user message, so the client's graders have real work to do.

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


def _completion(body: bytes, seq: int) -> bytes:
    try:
        doc = json.loads(body)
        prompt = doc["messages"][-1]["content"]
        model = doc.get("model", "fake")
    except (ValueError, KeyError, IndexError, TypeError):
        prompt, model = "", "fake"
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
        "usage": {"prompt_tokens": 12, "completion_tokens": 8, "total_tokens": 20},
    }
    return json.dumps(reply, separators=(",", ":")).encode()


class _Conn(asyncio.Protocol):
    """Reads HTTP/1.1 requests off one keep-alive socket and answers each after a delay."""

    seq = 0

    def __init__(self, latency: float, date: list[bytes]) -> None:
        self.latency = latency
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
            payload = _completion(body, _Conn.seq)
            loop.call_later(self.latency, self._respond, payload)

    def _respond(self, payload: bytes) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        head = (
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            b"Date: " + self.date[0] + b"\r\n"
            b"X-Request-Id: bench\r\nContent-Length: " + str(len(payload)).encode() + b"\r\n\r\n"
        )
        self.transport.write(head + payload)


async def _main(host: str, port: int, latency: float) -> None:
    loop = asyncio.get_running_loop()
    date = [formatdate(usegmt=True).encode()]

    def tick() -> None:
        date[0] = formatdate(usegmt=True).encode()
        loop.call_later(1.0, tick)

    tick()
    server = await loop.create_server(
        lambda: _Conn(latency, date), host, port, backlog=4096, reuse_address=True
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
    args = parser.parse_args(argv)
    if not args.host.startswith("127.") and args.host not in ("localhost", "::1"):
        print("fakeserver: loopback only", file=sys.stderr)
        return 64
    asyncio.run(_main(args.host, args.port, args.latency))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
