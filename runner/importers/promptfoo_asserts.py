"""promptfoo's assertions as parallax expectations: exact where parallax has the same check,
said where it is close, listed where it has none.

promptfoo grades the output text (src/assertions/: contains.ts, regex.ts, equals.ts, json.ts):

- `contains`, `contains-all` -> `regex` of the escaped value(s): exact, case-sensitive;
- `icontains`, `icontains-all` -> `must_include`: exact but for casefold against toLowerCase;
- `contains-any` / `icontains-any` -> `regex` `(?:a|b)` / `(?i)(?:a|b)`: exact;
- `starts-with` -> `regex` `\\A<value>`; `equals` (text) -> `regex` `\\A<value>\\z`: exact;
- `regex` -> `regex`: JavaScript's syntax read as Python's (the note says where they differ);
- `equals` (an object), `is-json`, `contains-json` -> `json_schema`: a reply that is no JSON
  is unscored in parallax, not a failed case;
- `not-` of each -> `not_regex`, `must_not_include`, `{"not": ...}`, where one exists.

A value is rendered with the test's vars first, as promptfoo renders it (`{{expected}}`).
`javascript`, `python`, `llm-rubric` and the other model-graded or scripted types have no
parallax equivalent (parallax runs no JavaScript and has no LLM judge, on purpose): each is
listed as not mapped.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.errors import DataError
from runner.importers.suite import Notes, js_text, source_file

# Types that need a model, a script or a number parallax measures per run, not per reply.
_JUDGED = (
    "llm-rubric",
    "model-graded-closedqa",
    "model-graded-factuality",
    "factuality",
    "answer-relevance",
    "context-faithfulness",
    "context-recall",
    "context-relevance",
    "select-best",
    "similar",
    "g-eval",
    "classifier",
    "moderation",
)
_SCRIPTED = ("javascript", "python", "ruby", "webhook")
_MEASURED = ("cost", "latency")
_JS_REGEX = (
    "`regex`: promptfoo's JavaScript pattern is searched as a Python `re` pattern: the same "
    "for the usual syntax, but `$` also matches before a final newline and `\\d`, `\\w` match "
    "non-ASCII digits and letters"
)
_JSON_ANSWER = (
    "`{kind}` -> `json_schema`: a reply that is not JSON is unscored in parallax (the schema "
    "stamp's `answer_not_json`), not a failed case; parallax reads an object or array that is "
    "the whole reply or one fenced block{extra}"
)
_CASE_FOLD = (
    "`icontains`-type assertions -> `must_include` / `must_not_include`: parallax folds case "
    "with Unicode casefold, promptfoo with toLowerCase (they differ only on a few letters: ß)"
)


@dataclass
class Expectation:
    """The parallax `expect` an assertion list maps to, built up one assertion at a time."""

    regex: list[str] = field(default_factory=list)
    not_regex: list[str] = field(default_factory=list)
    must_include: list[str] = field(default_factory=list)
    must_not_include: list[str] = field(default_factory=list)
    schemas: list[Any] = field(default_factory=list)

    def expect(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            key: value
            for key, value in (
                ("must_include", self.must_include),
                ("must_not_include", self.must_not_include),
                ("regex", self.regex),
                ("not_regex", self.not_regex),
            )
            if value
        }
        if self.schemas:
            out["json_schema"] = (
                self.schemas[0] if len(self.schemas) == 1 else {"allOf": self.schemas}
            )
        return out


Render = Callable[[str], str]  # a value with the test's vars filled in; raises ValueError


def map_assertions(
    asserts: list[Any],
    *,
    where: str,
    render: Render,
    resolve: Callable[[Any], Any],
    base_dir: Path,
    notes: Notes,
    into: Expectation | None = None,
) -> Expectation:
    """Each assertion of a list into one `Expectation` (`into`, when given); those with no
    parallax form are listed in `notes` under `where` (the test), never dropped."""
    found = into if into is not None else Expectation()
    for index, raw in enumerate(asserts):
        at = f"{where}: assert[{index}]"
        entry = resolve(raw)
        if not isinstance(entry, Mapping) or not isinstance(entry.get("type"), str):
            notes.unmapped(f"{at}: not an assertion with a `type`")
            continue
        kind = entry["type"]
        why = _unmappable(kind, entry)
        if why is None:
            try:
                why = _map_one(kind, entry, found, render=render, base_dir=base_dir, notes=notes)
            except ValueError as exc:
                why = str(exc)
        if why is not None:
            value = entry.get("value")
            shown = f" {value!r:.80}" if isinstance(value, str) else ""
            notes.unmapped(f"{at}: `{kind}`{shown}: {why}")
            continue
        for key in ("weight", "metric"):
            if key in entry and not (key == "weight" and entry[key] == 1):
                notes.differs(
                    f"an assertion's `{key}` is not carried: parallax counts every check alike"
                )
    return found


def _unmappable(kind: str, entry: Mapping[str, Any]) -> str | None:
    base = kind.removeprefix("not-")
    if "transform" in entry:
        return "its `transform` rewrites the output first, in JavaScript: not mapped"
    if base in _JUDGED:
        return "needs an LLM judge or an embedding model; parallax has none, on purpose"
    if base in _SCRIPTED:
        return (
            f"runs {base} code on the output; write the same check as a Python custom grader "
            "(a function in the suite's `graders` file, named by the case's `grader`)"
        )
    if base in _MEASURED:
        return (
            f"a {base} bound per call; parallax gates {base} across the two sides instead "
            f'(`fail_on = ["{base}_regression"]`)'
        )
    return None


def _map_one(
    kind: str,
    entry: Mapping[str, Any],
    found: Expectation,
    *,
    render: Render,
    base_dir: Path,
    notes: Notes,
) -> str | None:
    """Add one assertion to `found`; why it has no parallax form, or None when it was mapped."""
    inverse = kind.startswith("not-")
    base = kind.removeprefix("not-")
    value = entry.get("value")
    if base in ("is-json", "contains-json"):
        if inverse:
            return "parallax has no check that a reply is not JSON"
        found.schemas.append(_schema(value, render, base_dir))
        extra = (
            ", and does not dig JSON out of prose as contains-json does"
            if base == "contains-json"
            else '; promptfoo\'s is-json also accepts a bare scalar (`"Paris"`, `3`)'
        )
        notes.mapping(f"`{base}` -> `json_schema` (its value, or `{{}}` for any JSON)")
        notes.differs(_JSON_ANSWER.format(kind=base, extra=extra))
        return None
    if base == "equals" and isinstance(value, Mapping | list):
        schema = {"const": value}
        found.schemas.append({"not": schema} if inverse else schema)
        notes.mapping(f'`{kind}` with an object -> `json_schema` `{{"const": value}}`')
        notes.differs(_JSON_ANSWER.format(kind="equals", extra=""))
        return None
    texts = _texts(base, value, render)
    if texts is None:
        several = " (or a list of them)" if base.endswith(("-all", "-any")) else ""
        return f"its value must be text or a number{several}"
    if isinstance(texts, str):
        return texts
    return _map_text(kind, texts, found, notes)


def _map_text(kind: str, texts: list[str], found: Expectation, notes: Notes) -> str | None:
    """A text assertion (its values rendered) into `found`, or why it has no parallax form."""
    inverse = kind.startswith("not-")
    base = kind.removeprefix("not-")
    escaped = [re.escape(t) for t in texts]
    either = escaped[0] if len(escaped) == 1 else f"(?:{'|'.join(escaped)})"
    patterns = found.not_regex if inverse else found.regex
    key = "not_regex" if inverse else "regex"
    if inverse and base in ("contains-all", "icontains-all"):
        return f"{kind} (some value missing) has no parallax form"
    if base in ("contains", "contains-all"):
        patterns.extend(escaped)
        notes.mapping(f"`{kind}` -> `{key}` of the escaped value: case-sensitive, as promptfoo")
    elif base in ("icontains", "icontains-all") or (base == "icontains-any" and inverse):
        (found.must_not_include if inverse else found.must_include).extend(texts)
        notes.mapping(f"`{kind}` -> `{'must_not_include' if inverse else 'must_include'}`")
        notes.differs(_CASE_FOLD)
    elif base == "contains-any":
        if inverse:  # none of them
            patterns.extend(escaped)
        else:
            patterns.append(either)
        notes.mapping(f"`{kind}` -> `{key}` of the escaped values")
    elif base == "icontains-any":
        patterns.append(f"(?i){either}")
        notes.mapping(f"`{kind}` -> `regex` `(?i)(?:a|b)`: any one of them, case-insensitive")
    elif base == "starts-with":
        patterns.append(f"\\A{either}")
        notes.mapping(f"`{kind}` -> `{key}` `\\A<value>`, the value escaped")
    elif base == "equals":
        patterns.append(f"\\A{either}\\z")
        notes.mapping(
            f"`{kind}` (text) -> `{key}` `\\A<value>\\z`, the value escaped: the whole reply, "
            "exactly, as promptfoo compares it"
        )
    elif base == "regex":
        if (problem := _pattern_problem(texts[0])) is not None:
            return problem
        patterns.append(texts[0])
        notes.mapping(f"`{kind}` -> `{key}`")
        notes.differs(_JS_REGEX)
    else:
        return "no parallax check of this kind"
    return None


def _texts(base: str, value: Any, render: Render) -> list[str] | str | None:
    """The assertion's value(s) as text, vars filled in; a str is why it cannot be mapped."""
    if isinstance(value, str) and value.startswith("file://"):
        return "a value read from a file: not mapped"
    if base.endswith(("-all", "-any")):
        if isinstance(value, str):  # promptfoo splits a comma-separated string
            items: list[Any] = [part.strip() for part in value.split(",")]
        elif isinstance(value, list):
            items = value
        else:
            return None
    else:
        items = [value]
    texts = [js_text(item) for item in items]
    if not texts or any(t is None for t in texts):
        return None
    return [render(t) for t in texts if t is not None]


def _schema(value: Any, render: Render, base_dir: Path) -> Any:
    """A JSON-answer assertion's schema: its value (an object, or YAML text), or any JSON."""
    if value is None or value == "":
        return {}
    if isinstance(value, str) and value.startswith("file://"):
        from runner.importers.yamlfile import load_yaml

        try:
            value = load_yaml(source_file(base_dir, value))
        except DataError as exc:
            raise ValueError(f"its schema file cannot be read: {exc}") from None
    elif isinstance(value, str):
        from runner.importers.yamlfile import parse_yaml

        try:
            value = parse_yaml(render(value), base_dir / "<assertion value>")
        except DataError:
            raise ValueError("its schema is not YAML") from None
    if not isinstance(value, Mapping):
        raise ValueError("its schema must be an object")  # noqa: TRY004 - the caller's reason
    return dict(value)


def _pattern_problem(pattern: str) -> str | None:
    from runner.grading.checks import pattern_problem  # RE2, the engine grading searches with

    why = pattern_problem(pattern)
    return None if why is None else f"the pattern cannot be searched by RE2 ({why})"
