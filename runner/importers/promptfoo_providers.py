"""promptfoo's providers as parallax endpoints, and its prompt x provider matrix as suites.

A provider (site/docs/providers/openai.md, anthropic.md) is an id such as `openai:gpt-4o-mini`,
`openai:chat:<model>` or `anthropic:messages:<model>`, an object with `id`, `label` and
`config`, the map form `{id: options}`, or a `file://` YAML of one. OpenAI's chat completions
become an `openai-chat` endpoint and Anthropic's messages an `anthropic-messages` one, at the
config's `apiBaseUrl` (or OpenAI's `apiHost`) or else the base URL promptfoo itself reads
from the environment (OPENAI_BASE_URL, ANTHROPIC_BASE_URL), the key from `apiKeyEnvar` or
the variable promptfoo reads. `temperature` and `max_tokens` are kept as the config sets
them, else promptfoo's defaults (0, which is parallax's too, and 1024). Any other provider
(another API, a script, an HTTP hook) is listed as not mapped.

promptfoo runs every prompt on every provider; parallax compares two sides, so the matrix is
read as the comparisons it holds: with two or more providers the first is the reference and
each other one a candidate, one suite per prompt; with one provider and several prompts the
first prompt is the reference and each other one a candidate; one of each make one suite
whose two sides are one endpoint until you point the candidate elsewhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.errors import DataError
from runner.importers.promptfoo_prompts import Prompt
from runner.importers.suite import Endpoint, Ids, Notes, SuiteSpec, slug, source_file, tomlable
from runner.importers.yamlfile import load_yaml
from runner.scaffold import DEFAULTS, Provider

DEFAULT_MAX_TOKENS = 1024  # promptfoo's OPENAI_MAX_TOKENS / ANTHROPIC_MAX_TOKENS default
_PARAMS = {
    "openai-chat": ("top_p", "frequency_penalty", "presence_penalty", "seed", "stop"),
    "anthropic-messages": ("top_p", "top_k"),
}
_CONNECTION = ("temperature", "max_tokens", "apiBaseUrl", "apiHost", "apiKeyEnvar")
_OTHER_OPENAI_APIS = (
    *("completion", "embedding", "embeddings", "assistant", "responses", "realtime"),
    *("image", "moderation", "transcription", "agents", "chatkit"),
)


@dataclass(frozen=True)
class ProviderSpec:
    """One provider as a parallax endpoint would call it."""

    name: str
    source: str  # promptfoo's id
    kind: str
    base_url: str
    model: str
    api_key_env: str | None
    temperature: float | None
    max_tokens: int
    params: dict[str, Any] = field(default_factory=dict)


def read_providers(value: Any, base: Path, notes: Notes) -> list[ProviderSpec]:
    """Each provider that maps to an endpoint, in the config's order; the others are listed."""
    entries: list[Any] = value if isinstance(value, list) else [] if value is None else [value]
    if isinstance(value, Mapping):  # promptfoo's map form: {id: options}
        entries = [{"id": k, **(v if isinstance(v, Mapping) else {})} for k, v in value.items()]
    names = Ids()
    found = []
    for index, entry in enumerate(entries):
        provider = _provider(entry, f"providers[{index}]", base, names, notes)
        if provider is not None:
            found.append(provider)
    return found


def _provider(entry: Any, where: str, base: Path, names: Ids, notes: Notes) -> ProviderSpec | None:
    if isinstance(entry, str) and entry.startswith("file://"):
        try:
            entry = load_yaml(source_file(base, entry))
        except DataError as exc:
            notes.unmapped(f"{where}: {exc}")
            return None
    options: Mapping[str, Any] = entry if isinstance(entry, Mapping) else {"id": entry}
    pid = options.get("id")
    raw_config = options.get("config")
    config: Mapping[str, Any] = raw_config if isinstance(raw_config, Mapping) else {}
    if not isinstance(pid, str):
        notes.unmapped(f"{where}: a provider without an `id` text")
        return None
    parts = pid.split(":")
    named = len(parts) > 1 and parts[1] in ("chat", "messages", *_OTHER_OPENAI_APIS)
    api = parts[1] if named else None
    model = ":".join(parts[2:] if named else parts[1:])
    connection = _connection(parts[0], api, config)
    if connection is None:
        notes.unmapped(
            f"{where}: `{pid}`: parallax speaks OpenAI's chat completions and Anthropic's "
            "messages APIs; this provider is not mapped"
        )
        return None
    kind, base_url, key = connection
    if not model:
        notes.unmapped(f"{where}: `{pid}` names no model (promptfoo picks its default): name one")
        return None
    given = [config[k] for k in ("apiBaseUrl", "apiHost", "apiKeyEnvar") if k in config]
    if not all(isinstance(v, str) and "${" not in v for v in (*given, model)):
        # parallax reads `${VAR}` in a config string from the environment
        notes.unmapped(f"{where}: `{pid}`: its base URL, key variable or model is not plain text")
        return None
    params = {k: config[k] for k in _PARAMS[kind] if k in config and tomlable(config[k])}
    for k in config:
        if k in _PARAMS[kind] and k not in params:
            notes.unmapped(f"{where}: `{pid}` config `{k}`: not a value a request can carry")
        elif k == "apiKey":
            notes.differs(f"an `apiKey` in a provider's config is not copied: set ${key}")
        elif k not in _CONNECTION and k not in params:
            notes.unmapped(f"{where}: `{pid}` config `{k}`: not mapped")
    for k in options:
        if k not in ("id", "config", "label"):
            notes.unmapped(f"{where}: `{pid}` `{k}`: not mapped")
    notes.mapping(
        "`openai:<model>` -> an `openai-chat` endpoint, `anthropic:messages:<model>` -> "
        "`anthropic-messages`; `temperature`, `max_tokens` (promptfoo's default 1024 where "
        f"unset) and {', '.join(sorted({p for ps in _PARAMS.values() for p in ps}))} as the "
        "provider's config sets them"
    )
    label = options.get("label")
    temperature, max_tokens = config.get("temperature"), config.get("max_tokens")
    if not (
        temperature is None or (isinstance(temperature, int | float) and tomlable(temperature))
    ):
        notes.unmapped(f"{where}: `{pid}` config `temperature`: not a finite number")
        temperature = None
    return ProviderSpec(
        name=names.take(slug(label if isinstance(label, str) else pid) or "provider"),
        source=pid,
        kind=kind,
        base_url=base_url,
        model=model,
        api_key_env=key,
        temperature=float(temperature) if isinstance(temperature, int | float) else None,
        max_tokens=max_tokens
        if isinstance(max_tokens, int) and max_tokens >= 1
        else DEFAULT_MAX_TOKENS,
        params=params,
    )


def _connection(
    vendor: str, api: str | None, config: Mapping[str, Any]
) -> tuple[str, Any, Any] | None:
    """(kind, base URL, key variable) of a provider parallax can call, or None."""
    if vendor == "openai" and api not in _OTHER_OPENAI_APIS:
        host = config.get("apiHost")
        base_url = config.get("apiBaseUrl") or (
            f"https://{host}/v1" if isinstance(host, str) else None
        )
        return (
            "openai-chat",
            base_url or "${OPENAI_BASE_URL:-https://api.openai.com/v1}",
            config.get("apiKeyEnvar") or "OPENAI_API_KEY",
        )
    if vendor == "anthropic" and api in (None, "messages"):
        return (
            "anthropic-messages",
            config.get("apiBaseUrl") or "${ANTHROPIC_BASE_URL:-https://api.anthropic.com}",
            config.get("apiKeyEnvar") or "ANTHROPIC_API_KEY",
        )
    return None


def matrix(
    prompts: list[Prompt], providers: list[ProviderSpec], stem: str, notes: Notes
) -> tuple[list[Endpoint], list[SuiteSpec]]:
    """The endpoints and suites that hold promptfoo's prompt x provider comparisons."""
    if not providers:
        local = DEFAULTS[Provider.OPENAI_COMPATIBLE]
        notes.differs(
            "no provider could be mapped: both sides call an OpenAI-compatible server at "
            f"{local.base_url}; edit the endpoints to the models you compare"
        )
        providers = [
            ProviderSpec(
                name="local",
                source="(none mapped)",
                kind=local.kind,
                base_url=local.base_url,
                model=local.reference_model,
                api_key_env=None,
                temperature=None,
                max_tokens=DEFAULT_MAX_TOKENS,
            )
        ]
    pairs: list[tuple[tuple[ProviderSpec, Prompt], tuple[ProviderSpec, Prompt], str]] = []
    first, others = providers[0], providers[1:]
    if others:
        for prompt in prompts:
            for other in others:
                name = stem + (f"-{prompt.name}" if len(prompts) > 1 else "")
                name += f"-{other.name}" if len(others) > 1 else ""
                pairs.append(((first, prompt), (other, prompt), name))
        notes.mapping(
            f"providers -> sides: `{first.source}` is every suite's reference, each other "
            "provider a candidate (one suite per prompt and candidate)"
        )
    elif len(prompts) > 1:
        for prompt in prompts[1:]:
            pairs.append(((first, prompts[0]), (first, prompt), f"{stem}-{prompt.name}"))
        notes.mapping(
            f"prompts -> sides: prompt `{prompts[0].label}` is every suite's reference, each "
            "other prompt a candidate on the same provider"
        )
    else:
        pairs.append(((first, prompts[0]), (first, prompts[0]), stem))
        notes.differs(
            "one provider and one prompt: the suite's two sides are one endpoint; point "
            "`candidate` at the model or prompt you want to compare"
        )
    made: dict[str, Endpoint] = {}
    suites = []
    for reference, candidate, name in pairs:
        sides = [
            _endpoint(p, pr, several=len(prompts) > 1, made=made)
            for p, pr in (reference, candidate)
        ]
        suites.append(SuiteSpec(name=name, reference=sides[0], candidate=sides[1]))
    return list(made.values()), suites


def _endpoint(
    provider: ProviderSpec, prompt: Prompt, *, several: bool, made: dict[str, Endpoint]
) -> str:
    name = f"{provider.name}.{prompt.name}" if several else provider.name
    if name not in made:
        made[name] = Endpoint(
            name=name,
            kind=provider.kind,
            base_url=provider.base_url,
            model=provider.model,
            api_key_env=provider.api_key_env,
            comment=f"promptfoo provider `{provider.source}`, prompt `{prompt.label}`",
            temperature=provider.temperature,
            max_tokens=provider.max_tokens,
            params=dict(provider.params),
            user_template_file=prompt.user_file,
            system_file=prompt.system_file,
        )
    return name
