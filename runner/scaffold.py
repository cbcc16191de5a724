"""`parallax init`: a starter suite that validates, runs and promotes as it was written.

A newcomer's first ten minutes decide whether they keep the tool, so what `init` writes is a
suite that already passes `validate` with no key set, whose strata each hold two cases (the
ceiling detector refuses a thin one), and that shows each kind of check once: text keys, a
tool call, a structured answer and a custom grader. It then prints the next three commands,
each one working as printed from where the user stands (`runner.invocation`).

`init` never overwrites: each file is created only where nothing is (`O_EXCL`), so running it
again, or over a folder that holds a suite of its own, leaves every existing file as it is and
says so. Only the standard library is imported here: `parallax --help` names the providers
without this module (`runner.arguments` keeps them equal to `Provider`).
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from runner.errors import UsageError
from runner.invocation import command, shown_path

CONFIG_NAME = "parallax.toml"
SUITE = "starter"


class Provider(Enum):
    """Where the starter's two endpoints live."""

    OPENAI = "openai"
    ANTHROPIC = "anthropic"
    OPENAI_COMPATIBLE = "openai-compatible"  # a local server: vLLM, llama.cpp, Ollama, LiteLLM


@dataclass(frozen=True)
class ProviderDefaults:
    """One provider's endpoint settings (the importers start from them too), and what a user
    must do before the first run."""

    kind: str
    base_url: str
    reference_model: str
    candidate_model: str
    api_key_env: str | None  # None: a local server wants no key
    before_run: str


DEFAULTS = {
    Provider.OPENAI: ProviderDefaults(
        kind="openai-chat",
        base_url="https://api.openai.com/v1",
        reference_model="gpt-4o-2024-08-06",
        candidate_model="gpt-4.1-mini-2025-04-14",
        api_key_env="OPENAI_API_KEY",
        before_run="export OPENAI_API_KEY before `run` (validate needs no key)",
    ),
    Provider.ANTHROPIC: ProviderDefaults(
        kind="anthropic-messages",
        base_url="https://api.anthropic.com",
        reference_model="claude-3-5-haiku-20241022",
        candidate_model="claude-sonnet-4-20250514",
        api_key_env="ANTHROPIC_API_KEY",
        before_run="export ANTHROPIC_API_KEY before `run` (validate needs no key)",
    ),
    Provider.OPENAI_COMPATIBLE: ProviderDefaults(
        kind="openai-chat",
        # a local server by default; OPENAI_BASE_URL, as the OpenAI SDK reads it, moves both
        base_url="${OPENAI_BASE_URL:-http://127.0.0.1:8000/v1}",
        reference_model="${REF_MODEL:-reference}",
        candidate_model="${CAND_MODEL:-candidate}",
        api_key_env=None,
        before_run=(
            "start an OpenAI-compatible server at http://127.0.0.1:8000/v1 (or export "
            "OPENAI_BASE_URL; REF_MODEL and CAND_MODEL name the models it serves)"
        ),
    ),
}


def _key_line(defaults: ProviderDefaults) -> str:
    """The api_key_env line of an endpoint, or a commented one for a server that wants none."""
    if defaults.api_key_env is None:
        return '# api_key_env = "OPENAI_API_KEY"  # a server that wants a key: name its variable'
    return f'api_key_env = "{defaults.api_key_env}"  # the variable holding the key, never the key'


def _config(provider: Provider) -> str:
    ep = DEFAULTS[provider]

    def endpoint(name: str, model: str, why: str) -> str:
        return (
            f"[endpoints.{name}]\n# {why}\n"
            f'kind = "{ep.kind}"\nbase_url = "{ep.base_url}"\nmodel = "{model}"\n{_key_line(ep)}\n'
            "max_tokens = 256\n"
            "# price = { input_per_mtok = 2.5, output_per_mtok = 10 }  # USD per million tokens\n"
        )

    return (
        f"# A starter parallax config (`parallax init --provider {provider.value}`):\n"
        "# two endpoints graded on one suite. Safe to commit: API keys come from the\n"
        "# environment variables named by api_key_env. Paths are relative to this folder.\n"
        'runs_dir = "runs"            # run directories (.gitignore keeps them out of git)\n'
        'snapshots_dir = "snapshots"  # accepted snapshots: review and commit them\n\n'
        + endpoint(
            "reference",
            ep.reference_model,
            "The frozen reference: what you ship today (pin a dated model, not an alias).",
        )
        + "\n"
        + endpoint(
            "candidate",
            ep.candidate_model,
            "The candidate under test: the model (or prompt) you want to ship.",
        )
        + f"\n[suites.{SUITE}]\n"
        'fixtures = "cases.jsonl"\ngraders = "graders.py"  # custom graders, named by a case\'s '
        '"grader"\nreference = "reference"\ncandidate = "candidate"\n'
        '# schedule = "0 3 * * *"  # for `parallax serve`: every night at 03:00 UTC\n'
    )


_WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "The city's name"}},
            "required": ["city"],
        },
    },
}
_ORDER_SCHEMA = {
    "type": "object",
    "properties": {
        "customer": {"type": "string"},
        "item": {"type": "string"},
        "quantity": {"type": "integer"},
        "city": {"type": "string"},
    },
    "required": ["customer", "item", "quantity", "city"],
    "additionalProperties": False,
}
_SUPPORT = "You are Acme's support agent. Refunds: within 30 days of purchase, with a receipt."
_CASES: tuple[dict[str, object], ...] = (
    {
        "id": "easy-capital",
        "stratum": "easy",
        "prompt": "What is the capital of France? Answer in one word.",
        "expect": {"must_include": ["Paris"], "max_chars": 40},
    },
    {
        "id": "easy-sum",
        "stratum": "easy",
        "prompt": "What is 12 + 30? Reply with the number only.",
        "expect": {"regex": "\\b42\\b", "max_chars": 20},
    },
    {
        "id": "medium-refund-window",
        "stratum": "medium",
        "system": _SUPPORT,
        "prompt": "I bought a kettle 40 days ago. Can I still get a refund?",
        "expect": {"must_include": ["30 days"], "max_sentences": 3},
    },
    {
        "id": "medium-weather-tool",
        "stratum": "medium",
        "prompt": "What's the weather in Lyon right now?",
        "tools": [_WEATHER_TOOL],
        "expect": {
            "tool_calls": [{"name": "get_weather", "arguments": {"city": "Lyon"}}],
            "tool_args_schema": True,
        },
    },
    {
        "id": "medium-order-json",
        "stratum": "medium",
        "prompt": "Extract the order as JSON: 'Ana wants two blue mugs shipped to Porto.'",
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "order", "schema": _ORDER_SCHEMA, "strict": True},
        },
        "expect": {"json_schema": _ORDER_SCHEMA, "json_fields": {"quantity": 2, "city": "Porto"}},
    },
    {
        "id": "stretch-seven-words",
        "stratum": "stretch",
        "prompt": "Describe the sea in exactly seven words.",
        "grader": "exact_words",
        "expect": {"words": 7, "max_chars": 120},
    },
    {
        "id": "stretch-backwards",
        "stratum": "stretch",
        "prompt": "Spell the word 'parallax' backwards. Reply with the letters only.",
        "expect": {"must_include": ["xallarap"], "max_chars": 40},
    },
)

_GRADERS = '''"""Custom graders for the starter suite: plain functions (text, expect) -> misses.

A case names one with "grader": "<function>"; parallax runs it after the built-in checks, and
each miss it returns fails one check. Keys of a case's `expect` that parallax does not know
(here `words`) are the grader's to read. Keep graders literal and deterministic: the same reply
must get the same misses in a run and in a replay.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_WORD = re.compile(r"[^\\W_]+(?:['\\u2019-][^\\W_]+)*")  # "sea-blue" and "it's" are one word


def exact_words(text: str, expect: Mapping[str, Any]) -> list[str]:
    """The reply has exactly `expect["words"]` words, punctuation aside."""
    want = expect["words"]
    found = len(_WORD.findall(text))
    return [] if found == want else [f"word_count:{found}!={want}"]
'''

_GITIGNORE = "# parallax run directories: ledgers and reports (snapshots/ is committed)\nruns/\n"


def starter_files(provider: Provider) -> dict[str, str]:
    """What `init` writes, by path relative to its folder, in the order it writes them."""
    cases = "".join(json.dumps(case, ensure_ascii=False) + "\n" for case in _CASES)
    return {
        CONFIG_NAME: _config(provider),
        "cases.jsonl": cases,
        "graders.py": _GRADERS,
        "snapshots/.gitkeep": "",
        ".gitignore": _GITIGNORE,
    }


@dataclass
class InitResult:
    """What one `init` did: files written, and files that existed and were left as they are."""

    directory: Path
    provider: Provider
    written: list[Path] = field(default_factory=list)
    left_alone: list[tuple[Path, str]] = field(default_factory=list)  # (path, how it differs)

    def lines(self) -> list[str]:
        """What `init` prints: each file it wrote or left alone, then the next commands."""
        out = [f"wrote {shown_path(path)}" for path in self.written]
        out += [f"left alone {shown_path(path)} ({why})" for path, why in self.left_alone]
        if not self.written:
            out.append("nothing to write: every file of the starter is there already")
        config = self.directory / CONFIG_NAME
        runs = shlex.quote(shown_path(self.directory / "runs" / SUITE))
        latest = f'"$(ls -d {runs}/*/ | tail -n 1)"'  # a run dir's name begins with its start
        out += [
            "",
            f"next: {DEFAULTS[self.provider].before_run}:",
            f"  {command('validate', '--config', config)}",
            f"  {command('run', '--config', config)}",
            f"  {command('promote')} {latest}",
        ]
        return out


def init(directory: Path, provider: Provider) -> InitResult:
    """Write the starter suite into `directory` (made if missing), leaving alone every file
    that is already there. A path that cannot be written is a UsageError: what was written
    before it stays, and a second `init` completes the rest."""
    result = InitResult(directory=directory, provider=provider)
    for relative, text in starter_files(provider).items():
        path = directory / relative
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            created = _create(path, text)
        except OSError as exc:
            raise UsageError(f"{path}: cannot write: {exc.strerror or exc}") from None
        if created:
            result.written.append(path)
        else:
            result.left_alone.append((path, _how_it_differs(path, relative, text)))
    return result


def _create(path: Path, text: str) -> bool:
    """Write `text` to a new file at `path`; False, touching nothing, when something is there
    (a file, a directory, a dangling symlink). A write that fails removes its partial file."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return True


def _how_it_differs(path: Path, relative: str, text: str) -> str:
    """Why an existing file was kept, as the user needs to hear it."""
    try:
        same = path.is_file() and path.read_text(encoding="utf-8") == text
    except (OSError, UnicodeDecodeError):
        same = False
    if same:
        return "already as init writes it"
    if relative == ".gitignore" and not _ignores_runs(path):
        return "it differs and does not ignore runs/: add a line `runs/`"
    return "it exists and differs from the starter's; remove it to get that one"


def _ignores_runs(path: Path) -> bool:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return False
    return any(line.strip() in ("runs", "runs/", "/runs", "/runs/") for line in lines)
