"""Load and validate the TOML config.

Every error names the config file and the dotted key, so a broken nightly job says what to
fix in one line. `${VAR}` (or `${VAR:-default}`) in any string is read from the environment;
API keys are never written in the file, only the name of the variable that holds them.
A value read from the environment for what an endpoint sends (its base_url, headers,
templates, params, body_template) is a secret, masked wherever parallax writes; one that
would go into the request body, which is sent to a third party and stored with the run, is
refused unless the endpoint lists its variable in `body_env`.
Relative paths are resolved against the config file's folder, so a run works from any cwd.
Every file the config names as an input (fixtures, graders, cassettes, template files) must
lead into `input_root`, the config's folder unless the config names one above it: a config
or a file it names comes from a stranger's pull request, and a symlink to `/proc/self/environ`
named as a prompt would send the environment to the endpoint.

An endpoint's prompt templates are compiled here, once, when the config loads, and pinned with
its other request settings by a `request_sha` (`LoadedConfig.shape`): a template that cannot
compile fails `validate` and every command at load, never mid-run.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import re
import tomllib
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from runner.configerrors import located, near, salvaged
from runner.configtypes import (
    HEADER_NAME,
    HeaderName,
    HeaderValue,
    from_env,
    header_value,
    typed,
)
from runner.errors import ConfigError, Gathered, ParallaxError, did_you_mean, reason_of
from runner.files import (
    Outside,
    Unreadable,
    file_problem,
    inside,
    outside_reason,
    read_regular,
)
from runner.jsontext import MAX_DEPTH, long_integer_line
from runner.request.shape import Shape
from runner.request.templates import load_template, request_sha

ENDPOINT_KINDS = (
    *("recorded", "openai-chat", "openai-responses", "anthropic-messages", "gemini", "http-json"),
)
# the kinds whose provider has a batch API parallax speaks (`runner.batch`)
BATCH_KINDS = ("openai-chat", "openai-responses", "anthropic-messages")
MAX_CONFIG_BYTES = 1 << 20  # a config is a page of TOML; a bigger one is the wrong file
MAX_HEARTBEAT_SECONDS = 3600.0  # a daemon silent for longer than an hour is not watched at all
# The largest price per million tokens and budget a config may name, in US dollars: a dollar a
# token is past any model's price, and a billion dollars past any night's spend. Every cost
# parallax computes (from counts bounded by `runner.protocols.wire.MAX_TOKENS`) stays finite.
MAX_PRICE_PER_MTOK = 1_000_000.0
MAX_BUDGET_USD = 1_000_000_000.0
MAX_TOKENS_CAP = 2**31 - 1  # the largest max_tokens a provider parses (a 32-bit int)
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
# The body keys a chat protocol sets itself, and from what: a `params` entry would send a
# second value for one of them (which wins would depend on the protocol's code) or contradict
# the request_sha that pins the endpoint key it duplicates. A dotted key is one inside a table
# the protocol builds, which a params table of that name adds its other keys to.
PROTOCOL_KEYS: dict[str, str] = {
    "model": "the endpoint's model",
    "messages": "the case and the endpoint's templates",
    "input": "the case and the endpoint's templates",
    "contents": "the case and the endpoint's templates",
    "system": "the case and the endpoint's system template",
    "instructions": "the case and the endpoint's system template",
    "systemInstruction": "the case and the endpoint's system template",
    "temperature": "the endpoint's temperature",
    "generationConfig.temperature": "the endpoint's temperature",
    "max_tokens": "the endpoint's max_tokens",
    "max_output_tokens": "the endpoint's max_tokens",
    "generationConfig.maxOutputTokens": "the endpoint's max_tokens",
    "stream": "the endpoint's stream",
    "stream_options": "the endpoint's stream",
    "tools": "the case's tools",
    "tool_choice": "the case's tool_choice",
    "toolConfig": "the case's tool_choice",
    "response_format": "the case's response_format",
    "output_format": "the case's response_format",
    "text.format": "the case's response_format",
    "generationConfig.responseMimeType": "the case's response_format",
    "generationConfig.responseSchema": "the case's response_format",
}
# The endpoint keys whose `${VAR}` values are settings, shown as they are: what the endpoint
# is and how it is called (a model alias, a path, a number, a variable's name). Every other
# endpoint key (base_url, headers, the templates, params, body_template, and any added later)
# sends its value to the endpoint, so a value read from the environment there is a secret.
SHOWN_ENDPOINT_KEYS = frozenset(
    {
        *("kind", "model", "api_key_env", "cassette", "protocol", "temperature", "max_tokens"),
        *("concurrency", "rpm", "timeout", "deadline", "max_response_bytes", "retry"),
        *("answer_pointer", "anthropic_version", "served_model_header", "system_file"),
        *("user_template_file", "stream", "price", "body_env"),
        *("batch", "batch_poll_max_seconds", "batch_deadline"),
    }
)
# The endpoint keys whose text goes into the request body: a `${VAR}` there is refused unless
# the endpoint lists VAR in `body_env` (a prompt is sent to a third party and stored).
BODY_KEYS = ("system", "user_template", "params", "body_template")
# The `fail_on` entries that answer a question only a threshold asks, and that threshold.
GATE_THRESHOLDS = {
    "not_non_inferior": "non_inferiority_margin",
    "latency_regression": "latency_ratio_max",
    "cost_regression": "cost_ratio_max",
}
# The endpoint keys that shape a chat request besides the case; an http-json endpoint's body
# is its body_template, so none of them applies there.
SHAPE_KEYS = ("system", "system_file", "user_template", "user_template_file", "params", "stream")


# A string that must say something: a path, a name, a URL, a model. An empty one (often a
# `${VAR}` set to "") is refused at its own key, not later as a rule about its table.
Text = Annotated[str, Field(min_length=1)]


def _article(kind: str) -> str:
    """`an openai-chat`, `an http-json`, `a recorded`: every message names a kind this way."""
    return f"an {kind}" if kind.startswith(("a", "e", "i", "o", "u", "http")) else f"a {kind}"


def valid_name(name: object) -> bool:
    """A suite or endpoint name: safe as one path component (no '/', no leading '.')."""
    return isinstance(name, str) and bool(_NAME.match(name)) and "\x00" not in name


class _Strict(BaseModel):
    """Every config table: unknown keys refused, strict types, and no float infinite or NaN.

    Strict: a value is of its key's type as TOML writes it, never coerced (`stream = "yes"`
    or `stream = 1` is no boolean, `budget_usd = true` no amount), so a typo is refused
    instead of read as something the author did not write. A `${VAR}` is the one string read
    as a number or boolean, as if its value were written in the file: `budget_usd =
    "${BUDGET:-5}"` is 5. TOML spells `inf` and `nan` as numbers (so can a variable); a
    timeout, rate or threshold that is not finite passes every bound below and only fails
    mid-run, deep in a library, so every float field refuses them here, at load.
    """

    # attribute docstrings are each key's description: the docs' config reference is built
    # from them (`model_fields[name].description`), so a key cannot go undocumented
    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        allow_inf_nan=False,
        strict=True,
        use_attribute_docstrings=True,
    )

    @field_validator("*", mode="before")
    @classmethod
    def _typed(cls, value: Any, info: ValidationInfo) -> Any:
        if info.field_name is None:
            return value
        return typed(value, cls.model_fields[info.field_name].annotation)


class Timeouts(_Strict):
    """One timeout per phase; LLM replies outlast httpx's 5 s default, so defaults are long."""

    connect: float = Field(10.0, gt=0)
    """Seconds to open the connection (TCP and TLS)."""
    read: float = Field(120.0, gt=0)
    """Seconds the server may stay silent between two reads; a stream quiet for longer is a
    `timeout`."""
    write: float = Field(30.0, gt=0)
    """Seconds to send the request."""
    pool: float = Field(30.0, gt=0)
    """Seconds to wait for a free connection in the endpoint's pool."""


class RetryPolicy(_Strict):
    """Explicit, bounded retries; only DESIGN's retryable stamps are ever retried."""

    attempts: int = Field(4, ge=1, le=20)
    """Attempts in all, the first included; only `timeout`, `connect_error`,
    `connection_lost`, `rate_limited`, 5xx and 408 are retried."""
    backoff_base: float = Field(0.5, ge=0)
    """Seconds of the first backoff: attempt n waits `min(backoff_max, backoff_base *
    2**(n-1))` when the server names no wait."""
    backoff_max: float = Field(30.0, ge=0)
    """The longest backoff, in seconds."""
    jitter: float = Field(0.5, ge=0, le=1)
    """The fraction of a wait drawn at random, so the calls one burst of 429s sent away do
    not all come back at once."""
    retry_after_cap: float = Field(60.0, ge=0)
    """Never wait longer than this many seconds for a server's `Retry-After`."""


class Price(_Strict):
    """What an endpoint's tokens cost, in US dollars per million; cached prompt tokens cost
    `input_per_mtok` unless `cached_input_per_mtok` says otherwise (`runner.cost.usage`)."""

    input_per_mtok: float = Field(ge=0, le=MAX_PRICE_PER_MTOK)
    """US dollars per million prompt tokens (at most 1,000,000: a dollar a token)."""
    output_per_mtok: float = Field(ge=0, le=MAX_PRICE_PER_MTOK)
    """US dollars per million completion tokens."""
    cached_input_per_mtok: float | None = Field(None, ge=0, le=MAX_PRICE_PER_MTOK)
    """US dollars per million cached prompt tokens; unset: `input_per_mtok`."""
    batch_discount: float = Field(0.5, gt=0, le=1)
    """The fraction of these rates a call costs when its endpoint runs as a batch
    (`batch = true`): providers charge half for batched tokens."""


class EndpointConfig(_Strict):
    """One endpoint: a live HTTP API or a recorded cassette, behind the same interface."""

    kind: Literal[
        "recorded", "openai-chat", "openai-responses", "anthropic-messages", "gemini", "http-json"
    ]
    """The protocol: `openai-chat` posts to `{base_url}/chat/completions`, `openai-responses`
    to `{base_url}/responses`, `anthropic-messages` to `{base_url}/v1/messages`, `gemini` to
    `{base_url}/models/{model}:generateContent` (`:streamGenerateContent?alt=sse` streamed),
    `http-json` its `body_template` to `base_url`; `recorded` replays a cassette offline."""
    base_url: Text | None = None
    """Where the API lives (http or https); required by every live kind. A value read from
    the environment is a secret."""
    model: Text | None = None
    """The model alias requested; required by the chat kinds."""
    api_key_env: Text | None = None
    """The name of the environment variable holding the API key (never the key), sent as
    `Authorization: Bearer` (`x-api-key` for Anthropic, `x-goog-api-key` for Gemini); read at
    call time."""
    cassette: Text | None = None
    """`recorded` only: the cassette (JSONL) to replay, inside the input root."""
    protocol: Literal["openai-chat", "openai-responses", "anthropic-messages", "gemini"] | None = (
        None
    )
    """`recorded` only: the wire format the cassette's replies are written in (default
    `openai-chat`); a live kind is its own protocol."""
    headers: dict[HeaderName, HeaderValue] = Field(default_factory=dict)
    """Extra request headers, sent on every request: `{ api-key = "${AZURE_KEY}" }` sends a
    key (a value read from the environment is a secret)."""
    temperature: float = Field(0.0, ge=0)
    """Sampling temperature sent with every chat request."""
    max_tokens: int = Field(512, ge=1, le=MAX_TOKENS_CAP)
    """The completion bound sent with every chat request, at most 2^31 - 1; a budget needs it
    set on every endpoint of the suite."""
    concurrency: int = Field(8, ge=1, le=4096)
    """Calls in flight at once; halved after a 429 and grown back by one after successes."""
    rpm: float | None = Field(None, gt=0)
    """Requests per minute, spaced evenly; unset: no pacing."""
    timeout: Timeouts = Field(default_factory=Timeouts)
    """One timeout per phase, in seconds."""
    deadline: float = Field(180.0, gt=0)
    """Seconds of wall clock one attempt may take, slow drips included."""
    max_response_bytes: int = Field(4_000_000, ge=1024)
    """A 2xx body larger than this (after its Content-Encoding is undone) is `too_large`."""
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    """Explicit, bounded retries; every attempt is recorded."""
    body_template: dict[str, Any] | None = None
    """`http-json` only: the request body, a table whose strings may hold `{{prompt}}`,
    `{{system}}` and `{{model}}`."""
    answer_pointer: str = "/answer"
    """`http-json` only: the JSON pointer to the answer in the reply (`""`: the whole
    body)."""
    anthropic_version: Annotated[Text, AfterValidator(header_value)] = "2023-06-01"
    """`anthropic-messages` only: the `anthropic-version` header."""
    served_model_header: str | None = None
    """The response header naming the model that served a call (a gateway's backend); unset:
    a known gateway's header (LiteLLM's `x-litellm-model-name`), else the body's `model`;
    `""`: the body's `model` only."""
    # What a chat request is shaped from besides the case (`LoadedConfig.shape`). A recorded
    # endpoint stands in for a live one: its keys say what its cassette answers, so validate
    # renders them and request_sha pins them.
    system: Text | None = None
    """A Jinja2 template of the system prompt, over the case's `prompt`, `system` and
    `vars`."""
    system_file: Text | None = None
    """The same template read from a file (UTF-8, byte for byte), inside the input root."""
    user_template: Text | None = None
    """A Jinja2 template of the user turn (a prompt case's), over the same names."""
    user_template_file: Text | None = None
    """The same template read from a file."""
    params: dict[str, Any] = Field(default_factory=dict)
    """Extra body keys sent as given (`top_p`, `seed`, `stop`, `reasoning_effort`, ...):
    JSON values only, never a key parallax sets itself. A table naming one parallax builds
    (the Responses API's `text`, Gemini's `generationConfig`) adds its keys to it."""
    stream: bool = False
    """Ask for the reply as an SSE stream."""
    price: Price | None = None
    """What the endpoint's tokens cost; unset: the side's cost is unknown."""
    body_env: list[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]] = Field(
        default_factory=list
    )
    """The only environment variables a `${VAR}` in the request body (`system`,
    `user_template`, `params`, `body_template`) may read; each value is masked wherever
    parallax writes."""
    batch: bool = False
    """Send this side's calls to the provider's batch API (openai-chat, openai-responses,
    anthropic-messages) instead of one by one: the batch price (`price.batch_discount`),
    results within hours, no latency figures; every batch id is kept in the run's
    `batches.jsonl` before it is polled, so `--resume` polls it again instead of paying
    twice."""
    batch_poll_max_seconds: float = Field(300.0, ge=1, le=86_400)
    """The longest wait between two polls of an open batch; polls back off from one second
    up to it."""
    batch_deadline: float = Field(86_400.0, gt=0)
    """Seconds from a batch's submission after which parallax stops waiting: the batch is
    cancelled and its unanswered calls are stamped `timeout` (detail `batch_expired`)."""

    @property
    def wire_kind(self) -> str:
        """The protocol its calls speak (`runner.protocols.Kind`): its `kind`, or for a
        recorded endpoint the `protocol` it stands in for."""
        return (self.protocol or "openai-chat") if self.kind == "recorded" else self.kind

    @property
    def charged_price(self) -> Price | None:
        """What this endpoint's tokens are charged at: its price, or for a batch endpoint its
        rates times `batch_discount` (which is then applied, so 1 in the copy)."""
        price = self.price
        if price is None or not self.batch:
            return price
        cut = price.batch_discount
        cached = price.cached_input_per_mtok
        return price.model_copy(
            update={
                "input_per_mtok": price.input_per_mtok * cut,
                "output_per_mtok": price.output_per_mtok * cut,
                "cached_input_per_mtok": None if cached is None else cached * cut,
                "batch_discount": 1.0,
            }
        )

    @field_validator("body_template")
    @classmethod
    def _finite_template(cls, template: dict[str, Any] | None) -> dict[str, Any] | None:
        """The one free-form table: its numbers are sent as JSON, which has no inf or NaN."""
        stack: list[tuple[Any, str]] = [(template, "")]
        while stack:
            value, where = stack.pop()
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"{where.lstrip('.')} must be a finite number, got {value}")
            if isinstance(value, Mapping):
                stack.extend((v, f"{where}.{k}") for k, v in value.items())
            elif isinstance(value, list):
                stack.extend((v, f"{where}[{i}]") for i, v in enumerate(value))
        return template

    @model_validator(mode="after")
    def _check_kind(self) -> EndpointConfig:
        if self.kind == "recorded":
            return self
        if self.protocol is not None:
            raise ValueError(f"protocol is for a recorded endpoint: {self.kind} is the protocol")
        if not self.base_url:
            raise ValueError(f"{_article(self.kind)} endpoint needs base_url")
        parts = urlsplit(self.base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"base_url must be an http(s) URL, got {self.base_url!r}")
        try:
            parts.port  # noqa: B018 - urlsplit checks the port's range only when it is read
        except ValueError:
            raise ValueError(f"base_url has an invalid port: {self.base_url!r}") from None
        if self.kind == "http-json" and self.body_template is None:
            raise ValueError("an http-json endpoint needs body_template")
        if self.kind != "http-json" and not self.model:
            raise ValueError(f"{_article(self.kind)} endpoint needs model")
        if not self.answer_pointer.startswith("/") and self.answer_pointer != "":
            raise ValueError("answer_pointer must be a JSON pointer such as /answer")
        return self

    @field_validator("served_model_header")
    @classmethod
    def _lower_header(cls, name: str | None) -> str | None:
        """A header name (RFC 9110's token), lower-cased as raw.jsonl keeps header names."""
        if name is None:
            return None
        if not HEADER_NAME.match(name):
            raise ValueError(f"{name!r} is no header name (letters, digits, '-', no spaces)")
        return name.lower()


class Thresholds(_Strict):
    """Ceiling-detector thresholds (seed 000's proposals); tune them from your own history."""

    easy_floor: float = Field(1.0, ge=0, le=1)
    """An easy pass rate below this is `easy_regression`."""
    medium_floor: float = Field(0.85, ge=0, le=1)
    """A medium pass rate below this is `medium_regression`."""
    stretch_high: float = Field(0.80, ge=0, le=1)
    """A stretch pass rate at or above this is `stretch_too_easy` (and, with easy and medium
    near 1, `ceiling`)."""
    retire_after: int = Field(7, ge=1)
    """Runs in a row a case must stay passed by both sides with an empty disagreement to be
    a ceiling candidate."""
    non_inferiority_margin: float | None = Field(None, ge=0, lt=1)
    """The release question "the candidate is not worse by more than this", a fraction (0.02
    is 2 points) the paired test's one-sided bound must stay above; unset: not asked."""
    latency_ratio_max: float | None = Field(None, gt=0)
    """The most candidate / reference latency may be per case (1.1 allows 10% slower); unset:
    not asked (`runner.cost.regressions`)."""
    cost_ratio_max: float | None = Field(None, gt=0)
    """The most candidate / reference cost may be per case; unset: not asked."""


class SuiteConfig(_Strict):
    """A suite: one fixture file graded on a reference and a candidate endpoint."""

    fixtures: Text
    """The fixture file of the suite's cases (JSONL, or a JSON document with `cases`)."""
    reference: Text
    """The name of the frozen reference endpoint."""
    candidate: Text
    """The name of the candidate endpoint under test."""
    graders: Text | None = None
    """Custom graders: a `.py` file (inside the input root) or an importable module name."""
    grader_timeout_seconds: float = Field(30.0, gt=0, le=86_400)
    """How long one call of a custom grader may run before its reply is unscored
    (`grader_error:timeout`): the one bound on grading that is the clock's."""
    samples: int = Field(1, ge=1, le=100)
    """Independent calls per case and side; only misses seen in most of them gate."""
    schedule: Text | None = None
    """A five-field cron expression (six: seconds first) for `parallax serve`; unset: not
    served."""
    timezone: Text = "UTC"
    """The IANA time zone the schedule is read in."""
    thresholds: Thresholds | None = None
    """The suite's own thresholds, replacing the top-level `[thresholds]` table whole."""
    noise_check: bool = False
    """Call the reference a second, independent time per case: its disagreement with itself
    is the noise floor."""
    fail_on: list[
        Literal[
            "significant_regression", "not_non_inferior", "latency_regression", "cost_regression"
        ]
    ] = Field(default_factory=list)
    """The findings that gate (exit 1) besides the gate classes; each but
    `significant_regression` needs its threshold set."""
    alpha: float = Field(0.05, gt=0, lt=1)
    """The significance level of the paired test, non-inferiority and the ratio gates."""
    budget_usd: float | None = Field(None, gt=0, le=MAX_BUDGET_USD)
    """The suite's own budget, replacing the top-level `budget_usd`."""


class Retention(_Strict):
    """What `parallax prune` (and `serve`, after each run) keeps of a runs dir as it ages: a
    night is 24 hours from a run's start (`runner.retention`)."""

    keep_nights: int = Field(60, ge=1)
    """Runs that started more than this many nights ago are deleted, save the latest finished
    run of each suite, the run the snapshot was promoted from, unfinished runs and `keep`."""
    compress_after_nights: int = Field(7, ge=0)
    """Finished runs older than this keep `raw.jsonl.gz` and `outcomes.jsonl.gz` instead of
    the plain ledgers (every command reads them as before)."""
    keep: list[Text] = Field(default_factory=list)
    """Run dirs never deleted, by name or short id."""

    @field_validator("keep")
    @classmethod
    def _run_names(cls, names: list[str]) -> list[str]:
        for name in names:
            if not valid_name(name):
                raise ValueError(f"{name!r} is no run dir name (letters, digits, '_', '.', '-')")
        return names


class Config(_Strict):
    """The whole file, after interpolation, with paths still as written."""

    runs_dir: Text = "runs"
    """Where run directories go (a volume in a container; never committed)."""
    snapshots_dir: Text = "snapshots"
    """Where accepted snapshots go (committed, reviewed like a lockfile)."""
    input_root: Text | None = None
    """The folder every input file the config names must lead into, symlinks followed,
    relative to the config's folder (`".."` for a config in `config/`); unset: that
    folder."""
    run_grace_seconds: float = Field(5.0, ge=0)
    """`parallax run`: how long calls in flight may finish after SIGTERM or SIGINT before
    they are cancelled (under `docker stop`'s 10 s, so the run still says so)."""
    serve_grace_seconds: float = Field(300.0, ge=0)
    """`parallax serve`: how long a run in flight may finish after SIGTERM before it is
    cancelled, left resumable."""
    serve_misfire_grace_seconds: float = Field(600.0, ge=1)
    """`parallax serve`: a fire time found later than this many seconds is skipped as a
    misfire (at least 1: the loop notices a fire some milliseconds late)."""
    serve_heartbeat_seconds: float = Field(15.0, ge=0.01, le=MAX_HEARTBEAT_SECONDS)
    """`parallax serve`: how often the heartbeat `parallax health` reads is rewritten."""
    thresholds: Thresholds = Field(default_factory=Thresholds)
    """The ceiling detector's and the ratio gates' thresholds, for every suite."""
    budget_usd: float | None = Field(None, gt=0, le=MAX_BUDGET_USD)
    """The most one run of a suite may spend, in US dollars, at most 1e9; every endpoint the
    suite calls then needs a `price` and a `max_tokens`. Unset: no cap."""
    retention: Retention = Field(default_factory=Retention)
    """What `parallax prune`, and `serve` after each run, keeps of the runs dir as it ages."""
    results_url: Text | None = None
    """Where each finished run and merge is recorded: `"postgresql://USER:PASSWORD@HOST/DB"`
    for a fleet's one PostgreSQL database (`${VAR}` keeps the password out of the file);
    unset: SQLite at `parallax.db` in the runs dir. The run's files stay the record."""
    endpoints: dict[str, EndpointConfig]
    """The endpoints, by name: `[endpoints.NAME]`."""
    suites: dict[str, SuiteConfig]
    """The suites, by name: `[suites.NAME]`."""

    @field_validator("results_url")
    @classmethod
    def _postgres(cls, url: str | None) -> str | None:
        if url is not None and not url.startswith(("postgresql://", "postgres://")):
            raise ValueError("must be a postgresql:// URL (unset: SQLite in the runs dir)")
        return url

    @model_validator(mode="after")
    def _check_refs(self) -> Config:
        if not self.suites:
            raise ValueError("no [suites.<name>] table")
        for name in (*self.suites, *self.endpoints):
            if not _NAME.match(name):
                raise ValueError(f"name {name!r} must be letters, digits, '_', '.' or '-'")
        return self


class LoadedConfig:
    """A validated config plus where it came from, with paths resolved."""

    def __init__(
        self, path: Path, config: Config, digest: str, shapes: Mapping[str, Shape]
    ) -> None:
        self.path = path
        self.config = config
        self.digest = digest
        self.base_dir = path.parent
        self.input_root = input_root(path, config)
        self._shapes = dict(shapes)

    def resolve(self, relative: str) -> Path:
        candidate = Path(relative)
        if candidate.is_absolute():
            return candidate
        return Path(os.path.normpath(self.base_dir / candidate))

    def input(self, relative: str, key: str) -> Path:
        """An input file the config names at `key`, every symlink followed: the path to open.
        One that leads out of `input_root` is a ConfigError naming the key, never read."""
        try:
            return inside(self.resolve(relative), self.input_root)
        except Outside as exc:
            raise ConfigError(self.path, key, outside_reason(relative, exc)) from None
        except Unreadable as exc:
            raise ConfigError(self.path, key, f"{exc.reason}: {relative}") from None

    @property
    def runs_dir(self) -> Path:
        return self.resolve(self.config.runs_dir)

    @property
    def snapshots_dir(self) -> Path:
        return self.resolve(self.config.snapshots_dir)

    def thresholds(self, suite: str) -> Thresholds:
        return self.config.suites[suite].thresholds or self.config.thresholds

    def budget_usd(self, suite: str) -> float | None:
        """The suite's own budget, else the top-level one; None: no cap."""
        own = self.config.suites[suite].budget_usd
        return own if own is not None else self.config.budget_usd

    def endpoint(self, name: str) -> EndpointConfig:
        return self.config.endpoints[name]

    def shape(self, name: str) -> Shape:
        """An endpoint's templates (compiled when the config loaded), params and request_sha."""
        return self._shapes[name]

    def suite_names(self, only: str | None = None) -> list[str]:
        if only is None:
            return list(self.config.suites)
        if only not in self.config.suites:
            known = ", ".join(self.config.suites)
            raise ConfigError(self.path, f"suites.{only}", f"no such suite (known: {known})")
        return [only]

    def missing_key(self, endpoint: str) -> ConfigError | None:
        """Why an endpoint whose key comes from `api_key_env` has none in the environment (its
        variable is unset or empty), as the error a run raises; None when the key is there or
        the endpoint takes none."""
        env = self.config.endpoints[endpoint].api_key_env
        if env is None or (value := os.environ.get(env)):
            return None
        state = "is not set" if value is None else "is empty"
        return ConfigError(
            self.path, f"endpoints.{endpoint}.api_key_env", f"environment variable {env} {state}"
        )

    def api_key(self, endpoint: str) -> str | None:
        """Read an endpoint's key from its env var at call time; it never enters the config."""
        env = self.config.endpoints[endpoint].api_key_env
        if env is None:
            return None
        if (missing := self.missing_key(endpoint)) is not None:
            raise missing
        value = os.environ[env]
        key = f"endpoints.{endpoint}.api_key_env"
        from runner import logs  # masked wherever parallax writes, from the moment it is read

        logs.register_secret(value)
        # a key file read with its newline (a mounted secret) fails as a header only mid-run;
        # the value itself is never part of the message
        if value != value.strip() or not (value.isascii() and value.isprintable()):
            raise ConfigError(
                self.path,
                key,
                f"environment variable {env} holds whitespace at an end, a control or a "
                "non-ASCII character: not a usable header value",
            )
        return value


def input_root(path: Path, config: Config) -> Path:
    """The folder `config`'s input files must lead into, its symlinks followed: `input_root`
    against the config's folder as named (a config that is itself a symlink, as a mounted
    ConfigMap's files are, is placed where it was named), else that folder."""
    base = path.parent
    if config.input_root is not None:
        base = Path(os.path.normpath(base / config.input_root))
    return Path(os.path.realpath(base))


def _refuse_too_deep(data: Mapping[str, Any], path: Path) -> None:
    """No config nests past MAX_DEPTH; checked with a stack, before anything recurses."""
    stack: list[tuple[Any, str, int]] = [(data, "", 0)]
    while stack:
        value, key, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ConfigError(path, key, f"nested deeper than {MAX_DEPTH} levels")
        if isinstance(value, Mapping):
            stack.extend((v, f"{key}.{k}" if key else str(k), depth + 1) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, key, depth + 1) for v in value)


def _refuse_body_vars(data: Mapping[str, Any], path: Path, found: Gathered) -> None:
    """A `${VAR}` in what an endpoint puts into its request body (BODY_KEYS) would send the
    variable's value to a third party and store it with the run: refused, naming the key,
    unless the endpoint's `body_env` lists the variable. Checked before anything is read."""
    endpoints = data.get("endpoints")
    for name, table in endpoints.items() if isinstance(endpoints, Mapping) else ():
        if not isinstance(table, Mapping):
            continue
        allowed = table.get("body_env")
        meant = {v for v in allowed if isinstance(v, str)} if isinstance(allowed, list) else set()
        stack = [(table[k], f"endpoints.{name}.{k}") for k in reversed(BODY_KEYS) if k in table]
        while stack:  # depth first, each key's values in the file's order
            value, key = stack.pop()
            if isinstance(value, str):
                for match in _VAR.finditer(value):
                    if match.group(1) not in meant:
                        refused = ConfigError(
                            path,
                            key,
                            f"${{{match.group(1)}}} would send the variable's value in the "
                            "request body and store it with the run: list it in "
                            f"endpoints.{name}.body_env if that is meant (it is then masked as "
                            "*** wherever parallax writes)",
                        )
                        found.add(refused)
            elif isinstance(value, Mapping):
                stack.extend((v, f"{key}.{k}") for k, v in reversed(list(value.items())))
            elif isinstance(value, list):
                stack.extend((v, f"{key}[{i}]") for i, v in reversed(list(enumerate(value))))


def _is_secret(where: tuple[str, ...]) -> bool:
    """Whether a string at `where` (its place in the TOML tables) sends what it holds: an
    endpoint key that is not one of the settings shown as they are."""
    return len(where) >= 3 and where[0] == "endpoints" and where[2] not in SHOWN_ENDPOINT_KEYS


def _interpolate(
    value: Any,
    path: Path,
    key: str,
    *,
    empties: dict[str, str],
    found: Gathered,
    where: tuple[str, ...] = (),
) -> Any:
    """`value` with every `${VAR}` read; `empties` gets each key whose variable was set to ""
    (without a default), so an error there can name the variable, and `found` each unset
    variable (read as "", so the rest of the file is still checked). A value read where the
    endpoint sends it (`_is_secret`) is registered as a secret as it is read, so even an error
    about that key shows it masked."""
    if isinstance(value, str):
        unset: list[str] = []

        def repl(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            found = os.environ.get(name)
            if found is not None and (found or default is None):
                if not found:
                    empties.setdefault(key, name)
                elif _is_secret(where):
                    from runner import logs  # only a config with such a value pays for it

                    logs.register_secret(found)
                return found
            if default is not None:  # POSIX `:-`: unset or empty takes the default
                return default
            unset.append(name)
            return ""

        text = _VAR.sub(repl, value)
        for name in dict.fromkeys(unset):
            found.add(ConfigError(path, key, f"environment variable {name} is not set"))
        if "\x00" in text:  # no path, URL or header can hold one; `open` would raise
            found.add(ConfigError(path, key, "contains a NUL character"))
        return text
    if isinstance(value, Mapping):
        return {
            k: _interpolate(
                v,
                path,
                f"{key}.{k}" if key else str(k),
                empties=empties,
                found=found,
                where=(*where, str(k)),
            )
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [
            _interpolate(v, path, f"{key}[{i}]", empties=empties, found=found, where=where)
            for i, v in enumerate(value)
        ]
    return value


def load_config(path: Path) -> LoadedConfig:
    """Parse, interpolate and validate `path`; raise every error found (one ConfigError, or
    several as `Errors`), each naming file and key."""
    import hashlib

    raw_bytes, data = _read_toml(path)
    _refuse_too_deep(data, path)
    found = Gathered()  # every error of the file, each at its key
    _refuse_body_vars(data, path, found)
    empties: dict[str, str] = {}
    reading = Gathered()  # an unset variable at a key refused for reading one is no news
    data = from_env(data, _interpolate(data, path, "", empties=empties, found=reading), _VAR)
    refused = found.keys()
    found.errors.extend(e for e in reading.errors if not _near(e, refused))
    config: Config | None = None
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:  # every one of them, but at a key already refused
        found.errors.extend(located(path, exc, Config, empties, told=found.keys()))
        config = salvaged(Config, data, exc)  # the rest is still checked
    if config is None:  # nothing left to check: what was found is all there is
        found.raise_found()
    assert config is not None  # raise_found raised: a refused config has its errors
    endpoints = data.get("endpoints")
    later = Gathered()  # the rules between tables, the files and the templates
    shapes = _checked(path, config, set(endpoints) if isinstance(endpoints, Mapping) else (), later)
    refused |= found.keys()
    for problem in later.errors:  # not what follows from a key refused (a price set aside)
        found.errors.extend(e for e in problem.each if not _near(e, refused))
    found.raise_found()
    digest = hashlib.sha256(raw_bytes).hexdigest()[:16]
    return LoadedConfig(path, config, digest, shapes)


def _read_toml(path: Path) -> tuple[bytes, dict[str, Any]]:
    """The config's bytes and its tables, or the one error that keeps them from being read."""
    try:
        raw_bytes = read_regular(path, limit=MAX_CONFIG_BYTES)
    except Unreadable as exc:
        reason = "no such config file" if exc.reason == "no such file" else exc.reason
        raise ConfigError(path, None, reason) from None
    try:
        text = raw_bytes.decode("utf-8-sig")  # an editor's BOM is no error
        return raw_bytes, tomllib.loads(text)
    except UnicodeDecodeError as exc:
        raise ConfigError(path, None, f"not UTF-8 at byte {exc.start}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(path, None, f"invalid TOML: {exc}") from None
    except RecursionError:
        raise ConfigError(path, None, "invalid TOML: nested too deeply to read") from None
    except ValueError as exc:  # what tomllib leaves to int(): a number past the digit limit
        line = long_integer_line(text)
        at = f" (line {line})" if line is not None else ""
        raise ConfigError(path, None, f"invalid TOML: {reason_of(exc)}{at}") from None


def _checked(
    path: Path, config: Config, written: Collection[str], found: Gathered
) -> dict[str, Shape]:
    """What the tables ask of each other (`written`: the endpoint names the file has, refused
    or not), the input files and each endpoint's compiled templates; each error to `found`."""
    for name in config.suites:
        for problem in _suite_problems(path, config, name, written):
            found.add(problem)
    for problem in _batch_problems(path, config):
        found.add(problem)
    root = input_root(path, config)
    with found.checking():
        _check_inputs(path, config, root)
    shapes = {}
    for name, ep in config.endpoints.items():
        with found.checking():
            shapes[name] = _shape(path, name, ep, root)
    return shapes


def _near(error: ParallaxError, keys: set[str]) -> bool:
    """Whether `error` is about one of `keys`, a key inside one or a table holding one."""
    key = error.key if isinstance(error, ConfigError) else None
    return key is not None and any(near(key, k) for k in keys)


def _suite_problems(
    path: Path, config: Config, suite_name: str, written: Collection[str]
) -> Iterator[ConfigError]:
    """What a suite's tables ask of the rest of the file: each endpoint it names (`written`:
    the endpoints the file has, refused or not), a threshold for each gate it asks, a price on
    each side a cost gate or a budget counts."""
    suite = config.suites[suite_name]
    sides = ("reference", "candidate")
    for side in sides:
        endpoint = getattr(suite, side)
        if endpoint not in written:
            key = f"suites.{suite_name}.{side}"
            hint = did_you_mean(endpoint, sorted(written))
            yield ConfigError(path, key, f"no endpoint named {endpoint!r}{hint}")
    # a gate on a question nobody asked would always fire: its threshold must be set
    thresholds = suite.thresholds or config.thresholds
    for gate, threshold in GATE_THRESHOLDS.items():
        if gate in suite.fail_on and getattr(thresholds, threshold) is None:
            yield ConfigError(
                path,
                f"suites.{suite_name}.fail_on",
                f'"{gate}" needs thresholds.{threshold} '
                "(in the suite's own [thresholds] table when it has one)",
            )
    named = [side for side in sides if getattr(suite, side) in config.endpoints]
    if "cost_regression" in suite.fail_on:  # an unpriced side's cost is unknown
        for side in named:
            endpoint = getattr(suite, side)
            if config.endpoints[endpoint].price is None:
                yield ConfigError(
                    path,
                    f"endpoints.{endpoint}.price",
                    f'is needed: suites.{suite_name}.fail_on has "cost_regression", '
                    f"which compares both sides' cost (this is the {side})",
                )
    yield from _latency_gate_problems(path, config, suite_name, named)
    yield from _budget_problems(path, config, suite_name, named)


def named_inputs(config: Config) -> list[tuple[str, str]]:
    """(dotted key, path as written) of every input file the config names but templates,
    which are read as it loads; a graders module name (no `.py`, no slash) is no file."""
    named = [(f"suites.{name}.fixtures", s.fixtures) for name, s in config.suites.items()]
    named += [
        (f"suites.{name}.graders", s.graders.strip())
        for name, s in config.suites.items()
        if s.graders is not None and is_grader_file(s.graders.strip())
    ]
    named += [
        (f"endpoints.{name}.cassette", e.cassette)
        for name, e in config.endpoints.items()
        if e.cassette is not None
    ]
    return named


def is_grader_file(spec: str) -> bool:
    """Whether a graders spec names a file (else an importable module)."""
    return spec.endswith(".py") or "/" in spec or "\\" in spec


def _check_inputs(path: Path, config: Config, root: Path) -> None:
    """The input root is a folder, and every input file named leads into it: refused at load,
    naming each key, before any of them is opened."""
    if config.input_root is not None and not root.is_dir():
        state = "not a directory" if root.exists() else "no such directory"
        raise ConfigError(path, "input_root", f"{state}: {config.input_root}")
    found = Gathered()
    for key, file in named_inputs(config):
        candidate = Path(file)
        if not candidate.is_absolute():
            candidate = Path(os.path.normpath(path.parent / candidate))
        try:
            inside(candidate, root)
        except Outside as exc:
            found.add(ConfigError(path, key, outside_reason(file, exc)))
        except Unreadable as exc:
            found.add(ConfigError(path, key, f"{exc.reason}: {file}"))
    found.raise_found()


def _batch_problems(path: Path, config: Config) -> Iterator[ConfigError]:
    """`batch = true` only where the provider has a batch API parallax speaks, and never with
    `stream`: a batch answers each request whole."""
    for name, endpoint in config.endpoints.items():
        if not endpoint.batch:
            continue
        if endpoint.kind not in BATCH_KINDS:
            yield ConfigError(
                path,
                f"endpoints.{name}.batch",
                f"{_article(endpoint.kind)} endpoint has no batch API "
                f"(batch mode is for {', '.join(BATCH_KINDS)})",
            )
        if endpoint.stream:
            yield ConfigError(
                path,
                f"endpoints.{name}.stream",
                "a batch endpoint cannot stream: a batch answers each request whole",
            )


def _latency_gate_problems(
    path: Path, config: Config, suite_name: str, sides: list[str]
) -> Iterator[ConfigError]:
    """A latency gate needs both sides' latencies, and a batch side has none: a batch's
    turnaround is the provider's queue, not the model's time."""
    suite = config.suites[suite_name]
    if "latency_regression" not in suite.fail_on:
        return
    for side in sides:
        endpoint = getattr(suite, side)
        if config.endpoints[endpoint].batch:
            yield ConfigError(
                path,
                f"suites.{suite_name}.fail_on",
                f'"latency_regression" cannot be decided: the {side} endpoint {endpoint!r} '
                "runs as a batch (batch = true), which has no latency figures",
            )


def _budget_problems(
    path: Path, config: Config, suite_name: str, sides: list[str]
) -> Iterator[ConfigError]:
    """A budget needs every call's cost bounded before it is made: a price on each endpoint
    the suite calls, and a reply bounded by a `max_tokens` the endpoint sets itself (an
    http-json body_template sends none; the default of 512 is no bound anyone chose). Without
    them the cap could not be kept honestly, so it is refused, never run unlimited."""
    suite = config.suites[suite_name]
    if (suite.budget_usd if suite.budget_usd is not None else config.budget_usd) is None:
        return
    where = f"suites.{suite_name}.budget_usd" if suite.budget_usd is not None else "budget_usd"
    for side in sides:
        name = getattr(suite, side)
        endpoint = config.endpoints[name]
        if endpoint.price is None:
            yield ConfigError(
                path,
                f"endpoints.{name}.price",
                f"required by {where}: a budget cannot count the cost of a call without a price",
            )
        if endpoint.kind == "http-json":
            yield ConfigError(
                path,
                f"endpoints.{name}.kind",
                f"an http-json endpoint cannot run under {where}: its body_template sends no "
                "max_tokens, so no call's cost is bounded before it is made",
            )
        elif "max_tokens" not in endpoint.model_fields_set:
            yield ConfigError(
                path,
                f"endpoints.{name}.max_tokens",
                f"required by {where}: a call's estimate bounds its reply by max_tokens, so "
                "set the most tokens a reply may cost (it is sent with every request)",
            )


def _shape(path: Path, name: str, ep: EndpointConfig, root: Path) -> Shape:
    """One endpoint's Shape: its templates compiled (a template file read relative to
    the config's folder, inside `root`), its params checked, each refusal named by its key."""
    key = f"endpoints.{name}"
    found = Gathered()
    if ep.kind == "http-json":
        for field in SHAPE_KEYS:
            if field in ep.model_fields_set:
                found.add(
                    ConfigError(
                        path,
                        f"{key}.{field}",
                        "does not apply to an http-json endpoint: its body_template is its "
                        "body ({{prompt}} and {{system}} are filled in there)",
                    )
                )
    for problem in _params_problems(path, f"{key}.params", ep.params):
        found.add(problem)
    base_dir = path.parent
    system = user = None
    with found.checking():
        system = load_template(
            path, base_dir, f"{key}.system", inline=ep.system, file=ep.system_file, root=root
        )
    with found.checking():
        user = load_template(
            path,
            base_dir,
            f"{key}.user_template",
            inline=ep.user_template,
            file=ep.user_template_file,
            root=root,
        )
    found.raise_found()
    # a recorded endpoint stands in for a live one of its protocol: swapping one for the other
    # (the same model, templates and params) is the same request
    sha = request_sha(
        protocol=ep.wire_kind,
        model_alias=ep.model,
        system=system.source if system is not None else None,
        user_template=user.source if user is not None else None,
        params=ep.params,
        stream=ep.stream,
        temperature=ep.temperature,
        max_tokens=ep.max_tokens,
        body_template=ep.body_template,
    )
    return Shape(
        system=system, user_template=user, params=ep.params, stream=ep.stream, request_sha=sha
    )


def _params_problems(path: Path, key: str, params: Mapping[str, Any]) -> Iterator[ConfigError]:
    """`params` are sent as JSON, as given: no body key the protocol sets itself, and only
    values JSON can carry (a TOML date or time is none; nor is an infinite or NaN number)."""
    for name, value in params.items():
        inner = [f"{name}.{sub}" for sub in value] if isinstance(value, Mapping) else []
        for set_key in (name, *inner):
            if (source := PROTOCOL_KEYS.get(set_key)) is not None:
                yield ConfigError(
                    path, f"{key}.{set_key}", f"is set by parallax from {source}, not by params"
                )
    stack: list[tuple[Any, str]] = [(v, f"{key}.{k}") for k, v in reversed(list(params.items()))]
    while stack:  # depth first in the file's order: each bad value named where it is
        value, where = stack.pop()
        if isinstance(value, dt.date | dt.time):  # datetime is a date
            yield ConfigError(
                path, where, "a TOML date or time is no JSON value: write it as a string"
            )
        if isinstance(value, float) and not math.isfinite(value):
            yield ConfigError(path, where, f"must be a finite number, got {value}")
        if isinstance(value, Mapping):
            stack.extend((v, f"{where}.{k}") for k, v in reversed(list(value.items())))
        elif isinstance(value, list):
            stack.extend((v, f"{where}[{i}]") for i, v in reversed(list(enumerate(value))))


def check_keys(loaded: LoadedConfig, suites: list[str]) -> None:
    """Every key a run will need must be in the environment before the first call is made."""
    found = Gathered()
    for name in suites:
        suite = loaded.config.suites[name]
        for endpoint in (suite.reference, suite.candidate):
            with found.checking():
                loaded.api_key(endpoint)
    found.raise_found()


def missing_keys(loaded: LoadedConfig, suites: list[str]) -> list[ConfigError]:
    """For `validate`, which calls nothing: each key a run of `suites` would need that is not
    in the environment, once per variable. A key that is there but unusable (a newline read
    from a secret file) is refused here as a run would refuse it: the config says where it
    comes from, and that source is wrong."""
    missing: dict[str | None, ConfigError] = {}  # by variable: two endpoints may share one
    for endpoint in dict.fromkeys(
        name
        for suite in suites
        for name in (loaded.config.suites[suite].reference, loaded.config.suites[suite].candidate)
    ):
        if (problem := loaded.missing_key(endpoint)) is not None:
            missing.setdefault(loaded.config.endpoints[endpoint].api_key_env, problem)
        else:
            loaded.api_key(endpoint)
    return list(missing.values())


def check_files(loaded: LoadedConfig) -> None:
    """Every file the config names must be a regular file; found by `validate` and before any
    run (a FIFO or a device named as fixtures would block or never end)."""
    found = Gathered()
    for key, file in named_inputs(loaded.config):
        with found.checking():
            if (problem := file_problem(loaded.input(file, key))) is not None:
                found.add(ConfigError(loaded.path, key, f"{problem}: {file}"))
    found.raise_found()
