"""The live HTTP endpoint: one case in, one Exchange out, every attempt recorded.

Transport trouble is data here, never an exception: `stamp.classify` is the only place a stamp
is decided, from the exception class or the status code (never the body, which is stored as
the bytes arrived and judged later by `protocols.read`). Retries are explicit: `decide_retry`
returns a frozen `RetryDecision` and the loop in `HttpEndpoint.call` just obeys it; httpx's
own retries stay off, so the attempt list in raw.jsonl is the whole truth about a call.

A 2xx `text/event-stream` body is read like any other (kept as received, size-capped, bounded
by the deadline; a stall is the read timeout), then its protocol folds it once to say how it
ended, the one place the body decides a transport stamp: a stream that ends without its
finish event is `connection_lost` (error `stream_truncated`), one that carries an error event
is `http_error` (error `stream_error:<type>`), retried as a 5xx is. Both are facts of the
connection, not of the reply's content, and are recorded per attempt, so a replay reads the
stamp back. `ttft_ms` is the time from sending the request to the arrival of the stream's
first event that carries a token (`protocols.first_token`), kept however the stream then
ended; `elapsed_ms` is an attempt's time from sending to its last byte, never the waits
before or between attempts (`queued_ms`, `backoff_ms`).

One module per stage of an attempt:

- `endpoint`: `HttpEndpoint`, an attempt from its pacing, budget and concurrency slot to its
  `Attempt` row, the retry loop, AIMD; and `request_problem` for `parallax validate`;
- `body`: a reply's bytes read within `max_response_bytes`, Content-Encoding undone, each
  piece dated for a stream;
- `stamp`: `classify`, the exception or status code of an attempt as its transport stamp;
- `retry`: `decide_retry` and the Retry-After headers it goes by;
- `record`: what of a reply is kept in runs/ (allow-listed headers, the body as text).
"""
