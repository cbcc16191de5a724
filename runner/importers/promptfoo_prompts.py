"""promptfoo's prompts as parallax endpoint templates, their text kept as written.

A prompt (site/docs/configuration/prompts.md) is inline text, a `file://` text file (several
prompts apart by a line of `---`), a chat JSON or YAML of a system and a user turn, or an
object with `raw`/`id` and a `label`. Each becomes a `user_template_file` (and a
`system_file`) under `prompts/`. promptfoo renders it with Nunjucks over the test's vars by
name (`{{question}}`); a parallax template sees `vars`, `prompt` and `system`, so the file's
first line binds each name the prompt reads to the case's var of that name
(`{% with question = vars.question %}`) and the rest is the prompt as written. Nunjucks is
read as Jinja2, which it follows closely; a prompt Jinja2 cannot compile (a filter it lacks,
`dump`) is left out and listed. Globs and function prompts (`.js`, `.py`) are listed too.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.errors import ConfigError, DataError, FixtureError
from runner.files import Unreadable, read_regular
from runner.importers.suite import Ids, Notes, slug, source_file
from runner.importers.yamlfile import load_yaml
from runner.request.templates import PromptTemplate

_TEXT_FILES = (".txt", ".md", ".j2", ".prompt", "")


@dataclass(frozen=True)
class Prompt:
    """One prompt, compiled as parallax will render it, and the files that hold it."""

    name: str  # a slug, unique among the prompts
    label: str  # as promptfoo shows it
    user: PromptTemplate
    system: PromptTemplate | None
    files: dict[str, str]  # prompts/<name>.j2 (and <name>.system.j2): their text

    @property
    def user_file(self) -> str:
        return f"prompts/{self.name}.j2"

    @property
    def system_file(self) -> str | None:
        name = f"prompts/{self.name}.system.j2"
        return name if name in self.files else None

    def render(self, case_id: str, values: Mapping[str, str], config: Path) -> str:
        """The user turn this prompt sends for a case's vars (its system prompt is rendered
        too, so a name it lacks fails here); a FixtureError says why it cannot be."""
        if self.system is not None:
            self.system.render(case_id=case_id, prompt="", system=None, vars=values, path=config)
        return self.user.render(case_id=case_id, prompt="", system=None, vars=values, path=config)


def read_prompts(value: Any, config: Path, notes: Notes) -> list[Prompt]:
    """Each prompt promptfoo would run, carried over; promptfoo's `{{prompt}}` passthrough
    when the config names none."""
    entries = ["{{prompt}}"] if value is None else value if isinstance(value, list) else [value]
    found: list[tuple[str, str, str | None]] = []  # (label, user text, system text)
    for index, entry in enumerate(entries):
        where = f"prompts[{index}]"
        label = entry.get("label") if isinstance(entry, Mapping) else None
        text = entry.get("raw", entry.get("id")) if isinstance(entry, Mapping) else entry
        if not isinstance(text, str):
            notes.unmapped(f"{where}: not a prompt text, a file:// path or a raw/id object")
            continue
        for n, (user, system) in enumerate(_texts(text, config.parent, where, notes)):
            own = label if isinstance(label, str) and n == 0 else None
            found.append((own or _label(text, n), user, system))
    names = Ids()
    prompts = []
    for label, user, system in found:
        name = names.take(slug(label) or "prompt")
        prompt = _carry(name, label, user=user, system=system, config=config, notes=notes)
        if prompt is not None:
            prompts.append(prompt)
    return prompts


def render_value(text: str, values: Mapping[str, str], config: Path, at: str) -> str:
    """An assertion's value with the test's vars filled in, as promptfoo renders it; a
    ValueError says why it cannot be."""
    if "{{" not in text and "{%" not in text:
        return text
    try:
        template = PromptTemplate.compile(bind(text), config_path=config, key="assert")
        return template.render(case_id=at, prompt="", system=None, vars=values, path=config)
    except (ConfigError, FixtureError) as exc:
        raise ValueError(f"its value cannot be filled in: {exc.reason}") from None


def bind(text: str) -> str:
    """`text` with every name it reads from its context bound to `vars.<name>`."""
    from jinja2 import TemplateSyntaxError, meta
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment()  # parsing only: nothing is rendered with it
    try:
        names = meta.find_undeclared_variables(env.parse(text))
    except TemplateSyntaxError as exc:
        reason = f"not a template Jinja2 reads (line {exc.lineno}: {exc.message})"
        raise ValueError(reason) from None
    bound = sorted(n for n in names if n not in env.globals)
    if not bound:
        return text
    pairs = ", ".join(f"{n} = vars.{n}" for n in bound)
    return f"{{% with {pairs} %}}{text}{{% endwith %}}"


def _label(entry: str, n: int) -> str:
    if entry.startswith("file://"):
        stem = Path(entry.removeprefix("file://")).stem
        return stem if n == 0 else f"{stem}-{n + 1}"
    return "prompt"


def _texts(entry: str, base: Path, where: str, notes: Notes) -> Iterator[tuple[str, str | None]]:
    """(user text, system text) of each prompt an entry holds."""
    if not entry.startswith("file://"):
        yield from _chat_or_text(entry, where, notes)
        return
    name = entry.removeprefix("file://")
    if any(c in name for c in "*?[") or ":" in name:
        notes.unmapped(f"{where}: `{entry}`: a glob or a function prompt is not read")
        return
    try:
        path = source_file(base, name)
    except DataError as exc:
        notes.unmapped(f"{where}: `{entry}`: {exc.reason}")
        return
    if path.suffix in (".json", ".yaml", ".yml"):
        try:
            yield from _chat(load_yaml(path), where, notes)
        except DataError as exc:
            notes.unmapped(f"{where}: `{entry}`: {exc}")
        return
    if path.suffix.lower() not in _TEXT_FILES:
        notes.unmapped(f"{where}: `{entry}`: a {path.suffix} prompt is code or data: not read")
        return
    try:
        text = read_regular(path, limit=1 << 20).decode("utf-8")
    except Unreadable as exc:
        notes.unmapped(f"{where}: `{entry}`: {exc.reason}")
        return
    except UnicodeDecodeError:
        notes.unmapped(f"{where}: `{entry}`: not UTF-8")
        return
    for part in _split(text):
        yield part, None


def _split(text: str) -> list[str]:
    """A prompts file's prompts: promptfoo separates them with a line of `---`."""
    lines = text.split("\n")
    if "---" not in (line.strip() for line in lines):
        return [text]
    parts: list[list[str]] = [[]]
    for line in lines:
        if line.strip() == "---":
            parts.append([])
        else:
            parts[-1].append(line)
    return ["\n".join(part).strip("\n") for part in parts if "".join(part).strip()]


def _chat_or_text(text: str, where: str, notes: Notes) -> Iterator[tuple[str, str | None]]:
    if text.lstrip().startswith("["):
        try:
            messages = json.loads(text)
        except json.JSONDecodeError:
            messages = None
        if isinstance(messages, list):
            yield from _chat(messages, where, notes)
            return
    yield text, None


def _chat(messages: Any, where: str, notes: Notes) -> Iterator[tuple[str, str | None]]:
    """A chat prompt of an optional system turn and one user turn; other shapes are listed."""
    turns = messages if isinstance(messages, list) else []
    roles = [t.get("role") if isinstance(t, Mapping) else None for t in turns]
    contents = [t.get("content") if isinstance(t, Mapping) else None for t in turns]
    texts = [c for c in contents if isinstance(c, str)]
    if roles in (["user"], ["system", "user"]) and len(texts) == len(turns):
        yield texts[-1], texts[0] if len(texts) == 2 else None
        return
    notes.unmapped(
        f"{where}: a chat prompt other than one system and one user turn (roles {roles}): "
        "parallax templates shape the system prompt and the user turn only"
    )


def _carry(
    name: str, label: str, *, user: str, system: str | None, config: Path, notes: Notes
) -> Prompt | None:
    """The prompt as parallax templates that see its var names, or None (listed)."""
    files: dict[str, str] = {}
    compiled: list[PromptTemplate] = []
    for text, file in ((user, f"prompts/{name}.j2"), (system, f"prompts/{name}.system.j2")):
        if text is None:
            continue
        try:
            bound = bind(text)
            compiled.append(PromptTemplate.compile(bound, config_path=config, key=file))
        except ValueError as exc:
            notes.unmapped(f"prompt `{label}`: {exc}; the prompt is left out")
            return None
        except ConfigError as exc:
            notes.unmapped(f"prompt `{label}`: {exc.reason}; the prompt is left out")
            return None
        files[file] = bound
    notes.mapping(
        "each prompt -> the endpoints' `user_template_file` (a chat prompt's system turn -> "
        "`system_file`) in prompts/, its text as written; its first line binds each name it "
        "uses to the case's var of that name"
    )
    return Prompt(
        name=name,
        label=label,
        user=compiled[0],
        system=compiled[1] if len(compiled) > 1 else None,
        files=files,
    )
