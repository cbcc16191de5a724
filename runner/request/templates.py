"""Endpoint templates: what one side sends, shaped from the case by its own prompt template.

"Reference = model + prompt v1, candidate = the same model + prompt v2" is one config: each
endpoint may carry a `system` / `system_file` and a `user_template` / `user_template_file`,
Jinja2 templates over the case's `prompt`, `system` and `vars`. A template is compiled once,
when the config loads, and rendered once per case and side.

Rendering must be a pure function of the case, as grading is, or `validate` would vouch for a
prompt the run never sends and a replay could not be trusted. So the environment is Jinja2's
immutable sandbox with StrictUndefined, minus the two things in it that draw at random
(`lipsum`, the `random` filter); besides the three names a template sees only Jinja2's own
`range`, `dict`, `namespace`, `cycler` and `joiner`. A template may print only plain values:
text, numbers, and lists or objects of them. A function, a generator or a Jinja2 helper object
prints with its memory address, which differs from run to run, and a null as the word "None",
which no prompt means: both are errors, as an undefined name is, by whatever path a value is
turned into text. A render is bounded by its work, never by the clock (`runner.request.sandbox`: its
size, what it builds, its loops). A case without a system
prompt (or, for a `messages` case, without a prompt) sees that name as null: false in
`{% if system %}`, replaced by `system or "..."` and `system | default("...")`, an error when
printed. There is no loader: a template cannot include, import or extend another, so what the
config names is the whole of what is sent.

Autoescape is off (the output is a prompt, not HTML) and a final newline is kept: the text
sent is the text written, its line breaks as `\n` whichever a template file uses (a case's own
text is inserted untouched). Errors are one line: a template that does not compile is the
config's (ConfigError, exit 78, naming the key and the template's line); one that fails for a
case is the case's (FixtureError, exit 65, naming the case and, for an undefined name, the
name), since only the fixture row can say why `vars.customer` is missing.

`request_sha` pins what a side's request is shaped from, as `fixture_sha` pins a case.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from runner.errors import ConfigError, FixtureError
from runner.files import Outside, Unreadable, outside_reason, read_regular

if TYPE_CHECKING:  # jinja2 is imported when a template is compiled: `--help` does not pay
    import jinja2

__all__ = ["PromptTemplate", "load_template", "request_sha"]


class _Vars(dict[str, str]):
    """A case's `vars` as the template sees them: a plain dict, marked so that a name missing
    from it is reported as `vars.<name>` (Jinja2 would say "'dict object' has no attribute")."""

    __slots__ = ()


_Vars.__name__ = _Vars.__qualname__ = "vars"  # so a sandbox refusal says "of 'vars' object"


@dataclass(frozen=True, slots=True)
class PromptTemplate:
    """One compiled endpoint template and where it came from, for the errors it raises.

    `source` is the template's text (a `*_file`'s contents, not its name): it is what
    `request_sha` digests. `key` is the config key as written (`endpoints.candidate.system` or
    `endpoints.candidate.system_file`) and `origin` the template file as the config names it.
    """

    source: str
    key: str
    _compiled: jinja2.Template = field(repr=False, compare=False)
    origin: str | None = None

    @classmethod
    def compile(
        cls, source: str, *, config_path: str | Path, key: str, origin: str | None = None
    ) -> PromptTemplate:
        """Compile `source` once; a template that cannot render any case is a ConfigError.

        That covers a syntax error, an unknown filter or test (`random` is one, even where
        Jinja2 would wait for a test to run before failing) and a tag that includes another
        template, each named with its line: `<file>:<line>: ...` for a template file,
        `template line <n>: ...` inline.
        """
        from jinja2 import TemplateSyntaxError, nodes

        where = f"{origin}:" if origin is not None else "template line "

        def refuse(line: int | None, reason: str) -> NoReturn:
            at = f"{where}{line}: " if line is not None else ""
            raise ConfigError(config_path, key, f"{at}{reason}")

        from runner.request.sandbox import Bounded

        env = _jinja().env
        try:
            tree = env.parse(source)
            # there is no loader: a tag that reaches for another template could only fail
            for tag in tree.find_all(
                (nodes.Extends, nodes.Include, nodes.Import, nodes.FromImport)
            ):
                refuse(tag.lineno, "a template cannot include, import or extend another")
            # Jinja2 leaves an unknown filter or test under `{% if %}` to fail when it runs
            for use in tree.find_all((nodes.Filter, nodes.Test)):
                known, kind = (
                    (env.filters, "filter")
                    if isinstance(use, nodes.Filter)
                    else (env.tests, "test")
                )
                if use.name not in known:
                    refuse(use.lineno, f"No {kind} named {use.name!r}.")
            compiled = env.from_string(Bounded().visit(tree))
        except TemplateSyntaxError as exc:
            refuse(exc.lineno, exc.message or type(exc).__name__)
        except (RecursionError, SyntaxError):  # SyntaxError: Python's own cap on nesting
            refuse(None, "nested too deeply to compile")
        return cls(source=source, key=key, origin=origin, _compiled=compiled)

    def render(
        self,
        *,
        case_id: str,
        prompt: str | None,
        system: str | None,
        vars: Mapping[str, str] | None,
        path: str | Path,
        line: int | None = None,
    ) -> str:
        """This template over one case: its prompt (None for a `messages` case), its own
        system prompt (None when it has none) and its vars (none is `{}`).

        Every failure is a FixtureError naming the case, the file:line passed and this
        template's key: an undefined name (`undefined name 'vars.customer'`), a sandbox refusal
        (`'str' object`'s `__class__`), a value that cannot print, or an error the template
        raised itself (`1 / 0`); never a traceback.
        """
        from jinja2 import TemplateError
        from jinja2.exceptions import SecurityError

        absent = _jinja().absent
        context = {
            "prompt": absent("prompt") if prompt is None else prompt,
            "system": absent("system") if system is None else system,
            "vars": _Vars(vars or {}),
        }
        from runner.request.sandbox import Refused, render

        try:
            return render(self._compiled, context)
        except SecurityError as exc:
            reason = f"refused by the sandbox: {exc}"
        except (TemplateError, Refused) as exc:  # an undefined name, a value no data, a bound
            reason = str(exc) or type(exc).__name__
        except Exception as exc:  # the template's own arithmetic, recursion, a bad call
            reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        raise FixtureError(path, f"case {case_id!r}: {reason} (in {self.key})", line=line)


def load_template(
    config_path: str | Path,
    base_dir: Path,
    key: str,
    *,
    inline: str | None,
    file: str | None,
    root: Path | None = None,
) -> PromptTemplate | None:
    """The template an endpoint sets with `<key>` or `<key>_file` (relative to base_dir, the
    config file's directory, and leading into `root`, its input root), compiled; None when it
    sets neither.

    Setting both is refused rather than preferring one: either choice would silently ignore a
    prompt the author wrote. The file is read as UTF-8, its bytes kept exactly (a final newline
    too), so inline text and a file with the same text are the same template and digest alike.
    A file that leads out of `root` (`../`, a symlink to `/proc/self/environ`) is refused
    naming the key before it is opened: what it holds would be sent as the prompt.
    """
    file_key = f"{key}_file"
    if inline is not None and file is not None:
        raise ConfigError(config_path, file_key, f"set {key} or {file_key}, not both")
    if file is None:
        if inline is None:
            return None
        return PromptTemplate.compile(inline, config_path=config_path, key=key)
    try:  # a regular file only: a FIFO would block, /dev/zero fill memory
        data = read_regular(Path(os.path.normpath(base_dir / file)), root=root or base_dir)
    except Outside as exc:
        raise ConfigError(config_path, file_key, outside_reason(file, exc)) from None
    except Unreadable as exc:
        if exc.reason == "no such file":
            raise ConfigError(config_path, file_key, f"no such file: {file}") from None
        reason = exc.reason.removeprefix("cannot read: ")
        raise ConfigError(config_path, file_key, f"cannot read {file}: {reason}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(config_path, file_key, f"{file}: not UTF-8 at byte {exc.start}") from None
    return PromptTemplate.compile(text, config_path=config_path, key=file_key, origin=file)


def request_sha(
    *,
    protocol: str,
    model_alias: str | None,
    system: str | None,
    user_template: str | None,
    params: Mapping[str, Any],
    stream: bool,
    temperature: float,
    max_tokens: int,
    body_template: Mapping[str, Any] | None = None,
) -> str:
    """Pin how one side shapes its requests: fixture_sha's rule (canonical JSON, sha256, the
    first 16 hex digits) over every endpoint setting that changes the body sent for a case.

    A reference whose digest moved is the frozen path moving, so everything that changes what
    the model is asked is in: the wire format (`protocol`: the same prompt in another API's
    body is another request), the model alias, the system and user template sources (None:
    the case's own text is sent; a file's contents, not its name, so moving a template into a
    file moves nothing), `params` passed through, the stream flag, `temperature` and
    `max_tokens` (shorthands for two params, so they shape the request as much), and an
    http-json endpoint's `body_template`. What only changes where or how it is sent is out:
    base URL, headers (they may carry secrets), timeouts, retries, concurrency and rate. The
    case itself (prompt, messages, tools, response_format) is under fixture_sha, not here.

    `params` and `body_template` hold JSON values only (the config refuses a TOML date or a
    NaN, which no JSON body can carry). An input that is None is left out of the digest, not
    written as null: an input added the same way later keeps every digest recorded before it.
    """
    shape = {
        "protocol": protocol,
        "model": model_alias,
        "system": system,
        "user_template": user_template,
        "params": dict(params),
        "stream": stream,
        "temperature": temperature,
        "max_tokens": max_tokens,
        "body_template": body_template,
    }
    body = {name: value for name, value in shape.items() if value is not None}
    raw = json.dumps(body, sort_keys=True, separators=(",", ":")).encode("utf-8")
    return hashlib.sha256(raw).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class _Jinja:
    """The one environment every endpoint template compiles in (it holds no template state),
    and what a case's missing prompt or system prompt is inside it."""

    env: jinja2.Environment
    absent: Callable[[str], jinja2.Undefined]


@functools.cache
def _jinja() -> _Jinja:
    from jinja2 import StrictUndefined
    from jinja2.utils import missing

    from runner.request.sandbox import BoundedSandbox, Refused, printable

    class Undefined(StrictUndefined):
        """StrictUndefined, naming what is missing as the template wrote it."""

        __slots__ = ()

        @property
        def _undefined_message(self) -> str:
            name, obj = self._undefined_name, self._undefined_obj
            if self._undefined_hint is None and obj is missing:
                return f"undefined name {name!r}"
            if self._undefined_hint is None and isinstance(obj, _Vars):
                dotted = f"vars.{name}" if isinstance(name, str) else f"vars[{name!r}]"
                return f"undefined name {dotted!r}"
            return str(super()._undefined_message)  # a sandbox refusal, or `prompt.nope`

    class Absent(Undefined):
        """A null `prompt` or `system`: false in a test, replaced by `or` and `default`, and
        an error naming itself when printed (Python's None would print as "None")."""

        __slots__ = ()

        def __bool__(self) -> bool:  # type: ignore[override]  # StrictUndefined's raises
            return False

    def absent(name: str) -> jinja2.Undefined:
        return Absent(f"{name!r} is null for this case (test it with {{% if {name} %}})", name=name)

    def finalize(value: Any) -> Any:
        if isinstance(value, StrictUndefined) or printable(value):
            return value  # an undefined value raises its own error when it is printed
        if value is None:
            raise Refused("prints null")
        if callable(value):
            raise Refused("prints a function, not what it returns (call it with `()`)")
        kind = type(value).__name__
        raise Refused(f"prints a {kind}, whose text is not the same on every run")

    env = BoundedSandbox(
        undefined=Undefined,
        autoescape=False,
        keep_trailing_newline=True,
        finalize=finalize,
    )
    del env.globals["lipsum"]  # random words
    del env.filters["random"]  # a random item
    return _Jinja(env=env, absent=absent)
