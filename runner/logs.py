"""structlog, configured once. Event names are an API people alert on: they live here only.

Every line is one JSON object on stdout with `timestamp` (UTC ISO-8601), `level`, `event`,
and the bound `run_id` / `suite`. A scrubbing processor removes secrets before rendering, so
neither an API key nor an Authorization header can reach a log line by accident.

A stdout whose reader went away (`parallax run | head -n 1`) is no error here: a run's work and
verdict never depend on whether anyone reads its log lines. The first line that finds no reader
points the stream at /dev/null, so nothing later (the interpreter's last flush included) trips
on it; the lines after go to stderr where the command asks for it (`serve`), else nowhere, and
the command is told (`on_stdout_closed`).
"""

from __future__ import annotations

import base64
import contextlib
import enum
import functools
import os
import re
import sys
from collections.abc import Callable, Iterator, MutableMapping
from dataclasses import dataclass, field
from typing import Any, TextIO

from runner import jsontext
from runner.text import visible

# structlog imports rich, when it is installed, for a traceback renderer parallax never uses
# (no log line carries exc_info): 0.05-0.1 s of every command's start. Hidden for that one
# import, rich stays importable for the progress bar, which imports it on a terminal only.
_HIDE_RICH = "rich" not in sys.modules
if _HIDE_RICH:
    sys.modules["rich"] = None  # type: ignore[assignment]  # None makes `import rich` fail
try:
    import structlog
finally:
    if _HIDE_RICH:
        del sys.modules["rich"]


@dataclass(frozen=True, slots=True)
class EventDoc:
    """What one event means to whoever alerts on it: its level, its fields beyond the ones
    every line has, and when it is logged. The docs' log reference is built from these."""

    name: str
    level: str
    fields: str
    meaning: str


_DOCS: dict[str, EventDoc] = {}


def _event(name: str, level: str, fields: str, meaning: str) -> str:
    """Declare an event (its constant below is the name every caller logs) with its doc."""
    _DOCS[name] = EventDoc(name, level, fields, meaning)
    return name


# run lifecycle
RUN_STARTED = _event(
    "run.started",
    "info",
    "mode, cases, partial, samples, already_done, parent, run_dir",
    "a run began; `run_dir` is absolute, as in every line that names one; `partial` is a "
    "partial run's selection (as in manifest.json; `cases` counts the cases it selected), "
    "null for a whole run",
)
RUN_RESUMED = _event(
    "run.resumed",
    "info",
    "mode, cases, partial, samples, already_done, parent, run_dir",
    "`--resume` (or `serve` at start) took up an interrupted run in place",
)
RUN_FINISHED = _event(
    "run.finished",
    "info",
    "exit_code, verdict, gate_counts, admitted, unadmitted, cost_usd, tokens, regressions",
    "the run's verdict; `cost_usd` and `tokens` per side (`cost_usd` null without a price), "
    "`regressions` the latency and cost findings (null when not asked)",
)
RUN_MERGED = _event(
    "run.merged",
    "info",
    "shards, unfinished, cases, samples, run_dir",
    "`parallax merge` made one run of a suite from its shards (`unfinished`: the indices of "
    "those merged with --allow-partial); its alerts and run.finished follow, as a run's",
)
RUN_STOPPING = _event(
    "run.stopping",
    "warning",
    "signal, grace_seconds",
    "SIGTERM or SIGINT came: no new call starts, the calls in flight may finish within the grace",
)
RUN_INTERRUPTED = _event(
    "run.interrupted",
    "warning",
    "signal, run_dir, resumable",
    "the last line of a run a signal stopped (exit 143/130): ledgers flushed, the run dir "
    "left to `--resume` (`run_dir` null when the signal came before one was made)",
)
RUN_FAILED = _event(
    "run.failed",
    "error",
    "command, exit_code, error, message, errors, traceback, run_dir",
    "`run`, `replay` or `serve` refused to start, ended on bad input (64, 65, 78) or stopped "
    "on a bug (70, with `traceback`, the bug's own trace, and the `run_dir` it left to "
    "finish); `error` is the "
    "class (`UsageError`, `DataError`, `FixtureError`, `ConfigError`, `SuiteLocked`, "
    "`InternalError`), `message` scrubbed (several errors joined by `; `, and each one's "
    "line in `errors`, as stderr shows them)",
)
REPORT_FAILED = _event(
    "report.failed",
    "error",
    "error, run_dir",
    "report.html, report.md or the history page could not be written; the run's verdict stands",
)
# retention (`parallax prune`, and `serve` after each run)
RUN_PRUNED = _event(
    "run.pruned",
    "info",
    "suite, run_id, run_dir, started_at, verdict, bytes, keep_nights",
    "retention deleted a run dir past `keep_nights` (`bytes` freed); `history` keeps a line of it",
)
RUN_COMPRESSED = _event(
    "run.compressed",
    "info",
    "suite, run_id, run_dir, bytes_before, bytes_after, compress_after_nights",
    "a finished run's ledgers are kept as `raw.jsonl.gz` and `outcomes.jsonl.gz` from now on",
)
# alerts (the paging contract)
ALERT_DISAGREEMENT_CHANGED = _event(
    "alert.disagreement_changed",
    "warning",
    "count, case_ids",
    "cases whose disagreement differs from the accepted snapshot",
)
ALERT_TRANSPORT = _event(
    "alert.transport",
    "warning",
    "count, case_ids, details",
    "every case a transport stamp kept out of the comparison, whatever its gate class (a new "
    "case that timed out too)",
)
ALERT_SCHEMA = _event(
    "alert.schema",
    "warning",
    "count, case_ids, details",
    "every case a schema stamp kept out of the comparison, whatever its gate class",
)
ALERT_ALIAS_DRIFT = _event(
    "alert.alias_drift",
    "warning",
    "side, accepted, served, count, case_ids",
    "per side, the cases whose served calls (some or all of their samples) named `served` "
    "where the snapshot accepted `accepted`, whatever the gate class",
)
ALERT_REFERENCE_MOVED = _event(
    "alert.reference_moved",
    "warning",
    "reason, count, case_ids (request_changed: also side, accepted, request_sha)",
    "the frozen path is not frozen: `misses_moved` (the scored reference's stable misses left "
    "the accepted ones, also when the case reads `unchanged`) or `request_changed` (its "
    "request_sha is not the accepted one, one line per pair; review needed)",
)
ALERT_STRATUM = _event(
    "alert.stratum",
    "warning",
    "side, alerts, rates",
    "the ceiling detector's alerts for one side",
)
ALERT_CEILING_CANDIDATES = _event(
    "alert.ceiling_candidates",
    "warning",
    "count, case_ids, new, retire_after",
    "the list of ceiling candidates grew compared with the run before",
)
ALERT_SIGNIFICANT_REGRESSION = _event(
    "alert.significant_regression",
    "warning",
    "text, p_value, diff, count, case_ids, gating",
    "the paired test finds the candidate significantly worse overall; `case_ids` are the cases "
    "it lost, `gating` whether `fail_on` makes it exit 1",
)
ALERT_NOT_NON_INFERIOR = _event(
    "alert.not_non_inferior",
    "warning",
    "text, claim, bound, margin, interval_level, gating",
    "the candidate may be worse than `non_inferiority_margin` (`claim` `not_non_inferior` or "
    "`undecided`)",
)
ALERT_BUDGET = _event(
    "alert.budget",
    "warning",
    "limit_usd, spent_usd, reserved_usd, estimate_usd, cancelled, count",
    "`budget_usd` would have been passed: the calls left were not made (stamped `cancelled`, "
    "detail `budget`); `reserved_usd` what admitted cases still held, `estimate_usd` the case "
    "or retry that did not fit (null in a replay); once a run",
)
ALERT_RESULTS_DB = _event(
    "alert.results_db",
    "warning",
    "error, results, run_dir",
    "the results database could not be written (`results` where, without a password): the "
    "run's files stay the record and its exit code stands; the next run, or `parallax index "
    "RUNS_DIR`, records what is missing",
)
ALERT_USAGE_OVER_ESTIMATE = _event(
    "alert.usage_over_estimate",
    "warning",
    "case_id, side, sample, endpoint, prompt_tokens, completion_tokens, max_tokens, cost_usd, "
    "estimate_usd",
    "under a budget, a reply's usage passed its request's bound (more completion tokens than "
    "`max_tokens`, or a cost above its estimate): the server does not keep the bound the "
    "budget stands on; per call",
)
ALERT_LATENCY = _event(
    "alert.latency",
    "warning",
    "text, finding, ratio, low, high, interval_level, limit, pairs, gating",
    "per case, the candidate is slower than `latency_ratio_max` allows, or too few cases "
    "paired to rule it out (`finding` `regression` or `undecided`)",
)
ALERT_COST = _event(
    "alert.cost",
    "warning",
    "text, finding, ratio, low, high, interval_level, limit, pairs, gating",
    "per case, the candidate is dearer than `cost_ratio_max` allows, or undecided",
)
# endpoint behaviour
ENDPOINT_BACKOFF = _event(
    "endpoint.backoff",
    "warning",
    "endpoint, old, new",
    "after a 429 the endpoint's concurrency was halved",
)
ENDPOINT_RECOVER = _event(
    "endpoint.recover",
    "info",
    "endpoint, old, new",
    "the endpoint's concurrency grew back by one after a run of successes",
)
BATCH_SUBMITTED = _event(
    "batch.submitted",
    "info",
    "endpoint, batch_id, requests, sides",
    "a batch endpoint's calls were sent as one batch (`batch = true`); its id is already in "
    "the run's `batches.jsonl`, so a `--resume` polls it instead of sending it again",
)
BATCH_ADOPTED = _event(
    "batch.adopted",
    "info",
    "endpoint, batch_id, nonce, requests",
    "a resume found at the provider the batch a killed run had created but not yet written to "
    "`batches.jsonl` (its intent's `nonce`), or a run the batch whose create's answer never "
    "came: it is journaled and polled, its requests not sent again",
)
BATCH_NOT_FOUND = _event(
    "batch.not_found",
    "warning",
    "endpoint, nonce, requests, reason, error, candidates",
    "a resume looked up a batch a killed run was about to create, or a run the batch whose "
    "create's answer never came, and did not adopt one "
    "(`reason` `none`: the provider shows none, or none of those that fit named the intent's "
    "nonce in its results; `ambiguous`: several fit and did not end before the intent's "
    "`batch_deadline`, named in `candidates`; `lookup_failed`: its batch list could not be "
    "read, `error` says why): "
    "on a resume `requests` of its requests are sent again, so with `ambiguous` or "
    "`lookup_failed` a batch may be paid twice; after a create whose answer never came they "
    "are not, and its calls keep that fault's stamp",
)
BATCH_FILE_ORPHANED = _event(
    "batch.file_orphaned",
    "info",
    "file_id, reason",
    "OpenAI refused a batch's create after its input file was uploaded: the file is left "
    "unused at the provider (it costs nothing; delete it at will)",
)
BATCH_ENDED = _event(
    "batch.ended",
    "info",
    "endpoint, batch_id, state, reason, requests, results",
    "a batch ended (`state` `completed`, `failed`, `expired`, `cancelled`) or `batch_deadline` "
    "passed and it was cancelled (`deadline`); `results` counts the result lines read",
)
# scheduler
SCHEDULER_STARTED = _event(
    "scheduler.started",
    "info",
    "pid, suites, run_now, grace_seconds, misfire_grace_seconds, heartbeat, pointer",
    "`serve` started; `pointer` is where `parallax health` finds it",
)
SCHEDULER_NEXT_FIRE = _event(
    "scheduler.next_fire",
    "info",
    "suite, next_fire, local, schedule, timezone, covered_by",
    "a suite's next fire time (UTC, and `local`); at start `covered_by` names the run dir "
    "that stood for fires missed while no daemon ran",
)
SCHEDULER_JOB_STARTED = _event(
    "scheduler.job_started",
    "info",
    "suite, mode, scheduled_for, coalesced, resume_dir",
    "a scheduled run (mode `run`) or a resume began; `coalesced` counts the fire times it "
    "stands for",
)
SCHEDULER_JOB_FINISHED = _event(
    "scheduler.job_finished",
    "info",
    "suite, run_id, run_dir, mode, exit_code, verdict, elapsed_s",
    "a scheduled run ended: `exit_code` 2 or 3 is incomplete, 1 or 3 needs review",
)
SCHEDULER_JOB_SKIPPED = _event(
    "scheduler.job_skipped",
    "info / warning",
    "suite, reason (running: missed, first, last; locked: holder)",
    "a fire time was skipped: the suite was still `running`, or another process held its "
    "lock (`locked`)",
)
SCHEDULER_MISFIRE = _event(
    "scheduler.misfire",
    "warning",
    "suite, scheduled_for, late_seconds, missed, misfire_grace_seconds",
    "fire times were found later than `serve_misfire_grace_seconds`: nothing ran",
)
SCHEDULER_JOB_CRASHED = _event(
    "scheduler.job_crashed",
    "error",
    "suite, mode, error, message, exit_code, elapsed_s, traceback",
    "a run failed inside the daemon (its own bug is exit code 70); the daemon goes on",
)
SCHEDULER_JOB_CANCELLED = _event(
    "scheduler.job_cancelled",
    "warning",
    "suite, run_dir, resumable, grace_seconds, elapsed_s",
    "at shutdown the grace ran out: the run in flight was cancelled, left resumable",
)
SCHEDULER_RESUME_SKIPPED = _event(
    "scheduler.resume_skipped",
    "warning",
    "suite, reason",
    "an interrupted run could not be resumed at start (fixtures or samples changed, the lock "
    "held, the manifest unreadable): the next fire starts a new run",
)
SCHEDULER_STOPPING = _event(
    "scheduler.stopping",
    "info",
    "reason, running, grace_seconds",
    "SIGTERM, SIGINT, SIGHUP or `stdout_closed`: no new run starts, the grace begins",
)
SCHEDULER_STOPPED = _event(
    "scheduler.stopped",
    "info",
    "reason, runs",
    "the daemon's last line on a clean stop (exit 0, or 74 for a closed stdout)",
)
SCHEDULER_CRASHED = _event(
    "scheduler.crashed",
    "error",
    "error, message, traceback",
    "the scheduler itself failed (exit 70); each run in flight has its "
    "`scheduler.job_cancelled` before it",
)
SCHEDULER_HEARTBEAT_FAILED = _event(
    "scheduler.heartbeat_failed",
    "warning",
    "path, message",
    "a heartbeat could not be written (a full disk): runs go on, `health` reads the heartbeat "
    "stale, and `scheduler.stopped` or `scheduler.crashed` still follows at the end",
)
SCHEDULER_PRUNE_FAILED = _event(
    "scheduler.prune_failed",
    "warning",
    "suite, error, message, exit_code, traceback",
    "the prune after a run stopped (a disk that refused a compression, 74; another prune at "
    "work, 64); the next run's prune tries again (`traceback` null for parallax's own errors)",
)

EVENTS: tuple[str, ...] = tuple(_DOCS)


def event_docs() -> tuple[EventDoc, ...]:
    """Every declared event, in the order declared (the docs' log reference)."""
    return tuple(_DOCS.values())


# Field names whose value is a credential whatever it holds (a header mapping logged whole),
# matched whole: case ids and suite names are mapping keys too, and a case `password-reset`
# or a suite `auth-token` must keep its alert detail.
_SECRET_FIELDS = frozenset(
    {
        *("authorization", "proxy-authorization", "x-api-key", "api-key", "apikey"),
        *("token", "access-token", "refresh-token", "secret", "client-secret", "password"),
        *("cookie", "set-cookie"),
    }
)
_BEARER = re.compile(r"(Bearer\s+)[A-Za-z0-9._~+/=-]+", re.I)
_known_secrets: set[str] = set()
_known_folded: set[str] = set()  # the keys lower-cased, for text HTTP lower-cases


def register_secret(value: str | None) -> None:
    """Remember a secret's value so any log line or stored body that contains it, as itself
    or base64-encoded, gets it masked.

    Every value the config reads from the environment for what an endpoint sends is one (its
    `api_key_env` key; a `${VAR}` in its base_url, headers, templates, params or body_template:
    `runner.config`). The mask is the same `***` on every run, so what is stored, graded and
    replayed is one text. A value under 4 characters is not masked: it would mask words."""
    if value and len(value) >= 4:
        _known_secrets.add(value)
        _known_secrets.update(_base64_cores(value))
        _known_folded.add(value.lower())


def _base64_cores(secret: str) -> set[str]:
    """What the secret alone decides of its base64, at each of the three byte alignments, in
    the standard and the URL-safe alphabet: an upstream that echoes `Basic` credentials or an
    encoded key stores one of them, and without it the key cannot be decoded back."""
    raw = secret.encode("utf-8")
    cores = set()
    for offset in range(3):
        length = offset + len(raw)
        encoded = base64.b64encode(bytes(offset) + raw)[: length // 3 * 4]
        core = encoded[4 if offset else 0 :]  # a first group mixing in what came before: out
        if len(core) >= 12:  # shorter runs of base64 would mask unrelated text
            cores.add(core.decode("ascii"))
            cores.add(core.translate(_URLSAFE).decode("ascii"))
    return cores


_URLSAFE = bytes.maketrans(b"+/", b"-_")


def scrub_text(text: str) -> str:
    """`text` with every known secret and any bearer token masked. Most text (a reply's
    headers, five for every call) names no bearer at all: the case-blind regular expression
    runs only on text that does (no character but ASCII lower-cases into `bearer`)."""
    for secret in _known_secrets:
        text = text.replace(secret, "***")
    return _BEARER.sub(r"\1***", text) if "bearer" in text.lower() else text


def knows_secrets() -> bool:
    """Whether any secret is registered: without one a body needs no JSON text to be scrubbed
    (a report renders a stand-in body for each side of every case)."""
    return bool(_known_secrets)


def scrub_body(body: Any, sent: bytes) -> Any:
    """A request body to store: `body` itself when `sent`, its JSON text, spells no known
    secret (nearly every one: one scan of the bytes), else `scrub_value(body)`."""
    if any(_may_spell(sent, secret) for secret in _known_secrets):
        return scrub_value(body)
    return body


def scrub_value(value: Any) -> Any:
    """A JSON value (a request body as sent) with every known secret masked in its strings,
    object keys too."""
    if isinstance(value, str):
        return scrub_text(value)
    if isinstance(value, dict):
        return {
            scrub_text(k) if isinstance(k, str) else k: scrub_value(v) for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [scrub_value(v) for v in value]
    return value


def scrub_name(name: str) -> str:
    """A response header's name, lower-cased as HTTP has it, with any secret masked in any
    case: an upstream that names a header after the key (`x-ratelimit-<key>`) gets it
    lower-cased, which the value's exact match would miss."""
    name = name.lower()
    for secret in _known_folded:
        if secret in name:
            name = name.replace(secret, "***")
    return name


def scrub_bytes(data: bytes) -> bytes:
    """Mask known secrets in a raw body before it is stored (an upstream may echo the key).

    A JSON body may carry the key with any of its characters escaped (`\\u0073k-...`), which
    decodes back to the key the moment a report shows the reply: those spellings are masked
    too.
    """
    for secret in _known_secrets:
        if b"\\" not in data:
            data = data.replace(secret.encode("utf-8"), b"***")
        elif _may_spell(data, secret):  # escapes are read whole: no match starts inside one
            data = _escaped_pattern(secret).sub(_mask, data)
    return data


def _may_spell(data: bytes, secret: str) -> bool:
    """Whether `data`, which holds escapes, may spell `secret` at all: a cheap test first.

    Replies escape newlines and quotes all the time, but the characters of a plain key
    (printable ASCII without a quote, backslash or slash) can only be escaped as `\\u00XX`
    below 0x80: without such an escape in the body the key can only appear as itself.
    """
    if _PLAIN_KEY.fullmatch(secret) and not _ASCII_ESCAPE.search(data):
        return secret.encode("ascii") in data
    return _spelled(secret).search(data) is not None


def _mask(match: re.Match[bytes]) -> bytes:
    return b"***" if match.group("secret") is not None else match.group(0)


_PLAIN_KEY = re.compile(r"[ !#-.0-\[\]-~]+")
_ASCII_ESCAPE = re.compile(rb"\\u00[0-7]")
# a JSON encoder's short escapes: a quote, a backslash, a slash, and the five controls
_SHORT_ESCAPES = {
    char: rb"|\\" + re.escape(short.encode("ascii"))
    for char, short in zip('"\\/\b\f\n\r\t', '"\\/bfnrt', strict=True)
}


@functools.cache
def _spellings(secret: str) -> bytes:
    """The secret with each character as itself or as a JSON escape (`\\uXXXX`, any hex case;
    the short forms of a quote, a backslash and a slash; a surrogate pair outside the BMP)."""
    parts = []
    for char in secret:
        code = ord(char)
        if code > 0xFFFF:
            high, low = 0xD800 + ((code - 0x10000) >> 10), 0xDC00 + ((code - 0x10000) & 0x3FF)
            escape = rb"\\u(?i:%04x)\\u(?i:%04x)" % (high, low)
        else:
            escape = rb"\\u(?i:%04x)" % code
        literal = re.escape(char.encode("utf-8"))
        short = _SHORT_ESCAPES.get(char, b"")  # escapes first: `\\` is one char
        parts.append(b"(?:" + escape + short + b"|" + literal + b")")
    return b"".join(parts)


@functools.cache
def _spelled(secret: str) -> re.Pattern[bytes]:
    return re.compile(_spellings(secret), re.S)


@functools.cache
def _escaped_pattern(secret: str) -> re.Pattern[bytes]:
    """A spelling of the secret, or an escape read whole (so no spelling starts inside one)."""
    return re.compile(b"(?P<secret>" + _spellings(secret) + rb")|\\(?:u[0-9a-fA-F]{4}|.)", re.S)


def _is_secret_key(key: object) -> bool:
    return isinstance(key, str) and key.lower().replace("_", "-") in _SECRET_FIELDS


def _scrub(value: Any) -> Any:
    if isinstance(value, str):
        return scrub_text(value)
    if isinstance(value, dict):
        return {k: "***" if _is_secret_key(k) else _scrub(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_scrub(v) for v in value]
    return value


def _visible_processor(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """On a console a person reads the line: a bidi control or a control character in a plain
    string value (a case id, a served model's name) is shown as its escape, as on every other
    surface (`runner.text.visible`). The console shows any other value through repr(), which
    escapes them already, and a JSON line escapes them itself."""
    return {k: visible(v) if isinstance(v, str) else v for k, v in event_dict.items()}


def _scrub_processor(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    return {
        k: v if k == "event" else "***" if _is_secret_key(k) else _scrub(v)
        for k, v in event_dict.items()
    }


class AfterStdout(enum.Enum):
    """Where log lines go once stdout's reader went away."""

    DROP = "drop"  # nowhere: a run's record is its run dir
    STDERR = "stderr"  # the daemon's last lines say why it stopped


@dataclass
class _Sink:
    """Where rendered lines go: `stream` (stdout at first), then what `after` says."""

    stream: TextIO | None
    stdout: TextIO | None
    after: AfterStdout = AfterStdout.DROP
    listeners: list[Callable[[], None]] = field(default_factory=list)


_sink = _Sink(sys.stdout, sys.stdout)


def _emit(message: str) -> None:
    """One line to the sink's stream; a reader gone away moves the sink on, never raises."""
    while (stream := _sink.stream) is not None:
        try:
            print(message, file=stream, flush=True)
        except BrokenPipeError:
            drop_stream(stream)
        else:
            return
        if stream is not _sink.stdout:
            _sink.stream = None  # stderr went too
            return
        _sink.stream = sys.stderr if _sink.after is AfterStdout.STDERR else None
        for listener in list(_sink.listeners):
            listener()


class _LineLogger:
    """structlog's logger: each rendered event as one line, through `_emit`."""

    def msg(self, message: str) -> None:
        _emit(message)

    log = debug = info = warn = warning = msg
    fatal = failure = err = error = critical = exception = msg


def drop_stream(stream: TextIO) -> None:
    """Point a stream whose reader went away at /dev/null, as the Python docs' SIGPIPE note
    advises: what it still buffers, and the interpreter's flush at exit, then go nowhere
    instead of raising BrokenPipeError again (a traceback, and exit 120)."""
    try:
        fd = stream.fileno()
    except (OSError, ValueError):  # not a file (a test's capture): nothing to flush at exit
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def say(text: str) -> None:
    """A human line on stderr (a summary, an error); a reader gone away drops it quietly."""
    try:
        print(text, file=sys.stderr, flush=True)
    except BrokenPipeError:
        drop_stream(sys.stderr)


@contextlib.contextmanager
def on_stdout_closed(listener: Callable[[], None]) -> Iterator[None]:
    """Call `listener` (once, inside the log call that found no reader) while the block runs."""
    _sink.listeners.append(listener)
    try:
        yield
    finally:
        _sink.listeners.remove(listener)


def configure(*, json: bool | None = None, after_stdout: AfterStdout = AfterStdout.DROP) -> None:
    """JSON lines when stdout is not a TTY (containers, CI); a readable console otherwise."""
    if json is None:
        json = not sys.stdout.isatty()
    rendering: list[Any] = (
        [structlog.processors.JSONRenderer(serializer=jsontext.text)]
        if json
        else [_visible_processor, structlog.dev.ConsoleRenderer(colors=sys.stdout.isatty())]
    )
    _sink.stream = _sink.stdout = sys.stdout
    _sink.after = after_stdout
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            _scrub_processor,
            *rendering,
        ],
        logger_factory=lambda *_args: _LineLogger(),
        cache_logger_on_first_use=False,
    )


def configured() -> bool:
    return structlog.is_configured()


def get_logger() -> Any:
    return structlog.get_logger("parallax")
