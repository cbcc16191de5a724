"""The requests a batch is made of (upload, create, poll, download, cancel), one at a time.

Each goes to the endpoint's own host with its own headers (the secret lives in them, never in
a record), bounded by its timeouts and its per-request `deadline`, its body read within a cap
by the live client's reader. Whatever goes wrong is a `Failed` carrying the stamp
`client.stamp.classify` gives it, the status and the body's error code when the server sent
one: the batcher decides what a failure means for the calls in the batch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anyio
import httpx

from runner import logs
from runner.client.body import read_body
from runner.client.record import plain_headers
from runner.client.retry import retry_after_of
from runner.client.stamp import CAUGHT, CONFIG_ERRORS, classify
from runner.config import EndpointConfig
from runner.errors import ConfigError
from runner.jsontext import dumps, loads
from runner.model import Transport

MESSAGE_CHARS = 300


class Failed(Exception):
    """A request about a batch that did not get a 2xx answer in full."""

    def __init__(
        self,
        stamp: Transport,
        status: int | None,
        code: str | None,
        message: str | None,
        *,
        sure: bool | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message or stamp)
        self.stamp = stamp
        self.status = status
        self.code = code  # the error body's `code` or `type`, when the server named one
        self.message = message
        self.retry_after = retry_after  # the wait the server asked for (its Retry-After)
        self._sure = sure

    @property
    def reason(self) -> str:
        """What `batch_failed:<reason>` names: the server's error code, else the status or the
        stamp."""
        if self.code:
            return self.code
        return f"http_{self.status}" if self.status is not None else str(self.stamp)

    @property
    def certain(self) -> bool:
        """Whether the server surely did not act on the request: it answered with an error, or
        no connection was made. A timeout or a connection lost after sending may have created
        a batch nobody knows the id of, so such a create is never sent again."""
        if self._sure is not None:
            return self._sure
        return self.status is not None or self.stamp is Transport.CONNECT_ERROR

    @property
    def passing(self) -> bool:
        """Whether a failed read (a poll, a download, a lookup) is worth another try later:
        anything but a 4xx other than 408 and 429 (no such batch, no access to it)."""
        status = self.status
        return status is None or not 400 <= status < 500 or status in (408, 429)

    def unbilled(self) -> Failed:
        """The same failure of a step that creates nothing billable (an upload): sure."""
        return Failed(
            self.stamp,
            self.status,
            self.code,
            self.message,
            sure=True,
            retry_after=self.retry_after,
        )


def _code(body: bytes) -> str | None:
    """An error body's code: OpenAI's `error.code` (or `error.type`), Anthropic's
    `error.type`; None when the body says none."""
    try:
        doc = loads(body)
    except ValueError:
        return None
    error = doc.get("error") if isinstance(doc, dict) else None
    if not isinstance(error, dict):
        return None
    for key in ("code", "type"):
        value = error.get(key)
        if isinstance(value, str) and value:
            return value[:80]
    return None


class BatchHttp:
    """One endpoint's batch requests over one transport."""

    def __init__(
        self,
        name: str,
        cfg: EndpointConfig,
        headers: Mapping[str, str],
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._name = name
        self._cfg = cfg
        self._headers = {"Accept": "application/json", "User-Agent": "parallax", **headers}
        t = cfg.timeout
        self._extensions = {
            "timeout": httpx.Timeout(
                connect=t.connect, read=t.read, write=t.write, pool=t.pool
            ).as_dict()
        }
        if transport is None:
            from runner.client.transport import AiohttpTransport

            transport = AiohttpTransport(limit=4)
        self._transport = transport

    async def aclose(self) -> None:
        await self._transport.aclose()

    async def send(
        self,
        method: str,
        url: str,
        *,
        json: Any = None,
        content: bytes | None = None,
        files: Mapping[str, Any] | None = None,
        data: Mapping[str, str] | None = None,
        cap: int | None = None,
    ) -> bytes:
        """The 2xx body of one request (a JSON value, JSON text as `content`, or a multipart
        upload of `files` and `data`), at most `cap` bytes (max_response_bytes by default);
        anything else raises Failed."""
        headers = dict(self._headers)
        if json is not None:
            content = dumps(json)
        if files is not None or (content is None and method == "GET"):
            headers.pop("Content-Type", None)  # a multipart upload sets its own
        request = httpx.Request(
            method,
            url,
            headers=headers,
            content=content,
            files=files,
            data=data,
            extensions=self._extensions,
        )
        limit = cap if cap is not None else self._cfg.max_response_bytes
        buf = bytearray()
        status: int | None = None
        received: dict[str, str] = {}
        try:
            with anyio.fail_after(self._cfg.deadline):
                response = await self._transport.handle_async_request(request)
                try:
                    status = response.status_code
                    received = plain_headers(response.headers)
                    if await read_body(response, received, limit, buf):
                        raise Failed(
                            Transport.TOO_LARGE, status, None, f"body exceeds {limit} bytes"
                        )
                finally:
                    await response.aclose()
        except CONFIG_ERRORS as exc:
            raise ConfigError(
                f"endpoint {self._name!r}", None, f"{type(exc).__name__}: {exc}"
            ) from exc
        except CAUGHT as exc:
            message = str(exc) or f"request exceeded the {self._cfg.deadline:g}s deadline"
            raise Failed(classify(exc, None), status, None, _shown(message)) from None
        assert status is not None  # set once a response came, and none came without one
        if not 200 <= status < 300:
            body = bytes(buf)
            text = _shown(body.decode("utf-8", "replace"))
            wait = retry_after_of(received)
            raise Failed(classify(None, status), status, _code(body), text, retry_after=wait)
        return bytes(buf)


def _shown(text: str) -> str:
    """A message as a record keeps it: secrets masked, one bounded line."""
    text = " ".join(text.split())
    if len(text) > MESSAGE_CHARS:
        text = text[: MESSAGE_CHARS - 3] + "..."
    return logs.scrub_text(text)
