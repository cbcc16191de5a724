"""`parallax import promptfoo CONFIG`: a promptfoo config as parallax endpoints, suites, cases.

A promptfoo config (site/docs/configuration/guide.md and reference.md) names `prompts`,
`providers`, `tests` and a `defaultTest`. Its prompts become endpoint templates
(`promptfoo_prompts`), its providers endpoints and its prompt x provider matrix suites
(`promptfoo_providers`), and each test one case per combination of its vars (a list-valued
var runs each of its values, as in promptfoo), `defaultTest`'s vars under its own and its
assertions before the test's own, each the closest parallax expectation
(`promptfoo_asserts`). A case's `prompt` holds what the first prompt renders to for it, for a
reader: each endpoint's template is what is sent. Whatever has no parallax form is listed in
the notes, never dropped in silence.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.errors import DataError, FixtureError
from runner.files import Unreadable, read_regular
from runner.importers.promptfoo_asserts import map_assertions
from runner.importers.promptfoo_prompts import Prompt, read_prompts, render_value
from runner.importers.promptfoo_providers import matrix, read_providers
from runner.importers.suite import (
    Ids,
    Imported,
    Notes,
    js_text,
    row_problem,
    slug,
    source_file,
)
from runner.importers.yamlfile import load_yaml, parse_yaml

MAX_CASES = 100_000  # a test's var lists multiply; past this the config is not a golden set
_RUN_ONLY = (
    *("outputPath", "sharing", "writeLatestResults", "tags", "metadata"),
    *("commandLineOptions", "evaluateOptions"),
)


def import_config(path: Path) -> Imported:
    """Read a promptfoo config (and the prompt, test and provider files it names) into an
    `Imported`; a config that is no YAML mapping is a DataError naming it."""
    doc = load_yaml(path)
    if not isinstance(doc, dict):
        raise DataError(path, "a promptfoo config is a YAML mapping (prompts, providers, tests)")
    base = path.parent
    notes = Notes()
    resolve = _resolver(doc)
    _top_level(doc, notes)
    prompts = read_prompts(doc.get("prompts"), path, notes)
    if not prompts:
        raise DataError(path, "no prompt could be carried over (see above): nothing to import")
    providers = read_providers(doc.get("providers"), base, notes)
    default = _default_test(doc.get("defaultTest"), base, notes)
    reader = _Reader(default, prompts, path, resolve, notes, Ids())
    cases: list[dict[str, Any]] = []
    tests = list(_tests(doc.get("tests"), base, notes))
    for number, (where, test) in enumerate(tests, start=1):
        for row in reader.cases(where, resolve(test), number):
            cases.append(row)
            if len(cases) > MAX_CASES:
                raise DataError(path, f"more than {MAX_CASES} cases once var lists are expanded")
    endpoints, suites = matrix(prompts, providers, _suite_base(path, doc), notes)
    notes.differs(
        "every case also gets parallax's own checks: `empty_completion` and `max_chars` 1200 "
        "(set `expect.max_chars` to allow a longer reply)"
    )
    notes.differs(
        "tests name no stratum: the suite is unstratified and the ceiling detector is skipped "
        "until cases name easy, medium or stretch"
    )
    files = {name: text for prompt in prompts for name, text in prompt.files.items()}
    return Imported(
        tool="promptfoo",
        source=path,
        summary=f"{len(cases)} case(s) from {len(tests)} test(s), {len(suites)} suite(s)",
        endpoints=endpoints,
        suites=suites,
        cases=cases,
        notes=notes,
        files=files,
    )


def _resolver(doc: Mapping[str, Any]) -> Callable[[Any], Any]:
    """Follow promptfoo's local `$ref: '#/assertionTemplates/x'` references (JSON pointers
    into the config itself); anything else is returned as it is."""

    def resolve(value: Any) -> Any:
        for _ in range(32):  # a reference to a reference, but not without end
            if not (isinstance(value, Mapping) and isinstance(value.get("$ref"), str)):
                return value
            ref: str = value["$ref"]
            if not ref.startswith("#/"):
                return value
            target: Any = doc
            for escaped in ref[2:].split("/"):
                part = escaped.replace("~1", "/").replace("~0", "~")
                if not isinstance(target, Mapping) or part not in target:
                    return value
                target = target[part]
            value = target
        return value

    return resolve


def _top_level(doc: Mapping[str, Any], notes: Notes) -> None:
    for key in doc:
        if key in ("description", "prompts", "providers", "tests", "defaultTest"):
            continue
        if key == "assertionTemplates":
            notes.mapping("`assertionTemplates` are read where a `$ref` names them")
        elif key in _RUN_ONLY:
            notes.differs(
                f"`{key}` shapes promptfoo's own run or output, not what is sent or checked: "
                "not used (repeated samples are the suite's `samples`)"
            )
        else:
            notes.unmapped(f"`{key}`: not mapped")


# tests --------------------------------------------------------------------------------------


def _tests(value: Any, base: Path, notes: Notes) -> Iterator[tuple[str, Any]]:
    """(where, test) for each test, inline or in the YAML, JSON or JSONL files named."""
    entries = value if isinstance(value, list) else [] if value is None else [value]
    for index, entry in enumerate(entries):
        if not isinstance(entry, str):
            yield f"tests[{index}]", entry
            continue
        name = entry.removeprefix("file://")
        suffix = Path(name).suffix
        if any(c in name for c in "*?[") or suffix not in (".yaml", ".yml", ".json", ".jsonl"):
            notes.unmapped(
                f"tests[{index}]: `{entry}`: only YAML, JSON and JSONL test files are read"
            )
            continue
        try:
            path = source_file(base, name)
            loaded = _jsonl(path) if suffix == ".jsonl" else load_yaml(path)
        except DataError as exc:
            notes.unmapped(f"tests[{index}]: {exc}")
            continue
        for n, test in enumerate(loaded if isinstance(loaded, list) else [loaded]):
            yield f"{path.name}[{n}]", test


def _jsonl(path: Path) -> list[Any]:
    text = read_regular(path, limit=16 << 20).decode("utf-8")
    return [parse_yaml(line, path) for line in text.splitlines() if line.strip()]


def _default_test(value: Any, base: Path, notes: Notes) -> Mapping[str, Any]:
    if isinstance(value, str):
        try:
            value = load_yaml(source_file(base, value))
        except DataError as exc:
            notes.unmapped(f"defaultTest: {exc}")
            return {}
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        notes.unmapped("defaultTest: not a mapping")
        return {}
    return value


@dataclass(frozen=True)
class _Reader:
    """What every test of one config is read against."""

    default: Mapping[str, Any]  # defaultTest
    prompts: list[Prompt]
    config: Path
    resolve: Callable[[Any], Any]
    notes: Notes
    ids: Ids

    def cases(self, where: str, test: Any, number: int) -> Iterator[dict[str, Any]]:
        """The case rows of the config's `number`th test: one per combination of its vars."""
        notes = self.notes
        if not isinstance(test, Mapping):
            notes.unmapped(f"{where}: not a test (a mapping with vars and assert)")
            return
        description = test.get("description")
        named = f"{where} ({description!r})" if isinstance(description, str) else where
        if (why := _test_problem(test, self.default, notes)) is not None:
            notes.unmapped(f"{named}: {why}; the test is left out")
            return
        own = test.get("vars") or {}
        if isinstance(own, str):
            try:
                own = load_yaml(source_file(self.config.parent, own))
            except DataError as exc:
                notes.unmapped(f"{named}: its vars: {exc}")
                return
        defaults = self.default.get("vars") or {}
        if not isinstance(own, Mapping) or not isinstance(defaults, Mapping):
            notes.unmapped(f"{named}: its vars (or defaultTest's) are not a mapping")
            return
        merged = {**defaults, **own}
        combos = _combinations(merged, self.config.parent)
        if isinstance(combos, str):
            notes.unmapped(f"{named}: {combos}; the test is left out")
            return
        asserts = _list(test.get("assert"))
        base_id = slug(description) if isinstance(description, str) else ""
        base_id = base_id or f"test-{number}"
        for n, values in enumerate(combos):
            case_id = self.ids.take(base_id if len(combos) == 1 else f"{base_id}-{n + 1}")
            at = named if len(combos) == 1 else f"{named} vars #{n + 1}"
            row = self._row(case_id, at, values, asserts)
            if row is not None:
                yield row

    def _row(
        self, case_id: str, at: str, values: dict[str, str], asserts: list[Any]
    ) -> dict[str, Any] | None:
        config = self.config

        def render(text: str) -> str:
            return render_value(text, values, config, at)

        # defaultTest's first, as promptfoo runs them; named once for every case they are in
        expectation = map_assertions(
            _list(self.default.get("assert")),
            where="defaultTest",
            render=render,
            resolve=self.resolve,
            base_dir=config.parent,
            notes=self.notes,
        )
        map_assertions(
            asserts,
            where=at,
            render=render,
            resolve=self.resolve,
            base_dir=config.parent,
            notes=self.notes,
            into=expectation,
        )
        try:
            rendered = [prompt.render(case_id, values, config) for prompt in self.prompts]
        except FixtureError as exc:
            self.notes.unmapped(f"{at}: {exc.reason.removeprefix(f'case {case_id!r}: ')}")
            return None
        row: dict[str, Any] = {"id": case_id, "prompt": rendered[0]}
        if values:
            row["vars"] = values
        row["expect"] = expectation.expect()
        if (problem := row_problem(row, 1)) is not None:
            self.notes.unmapped(f"{at}: {problem}")
            return None
        return row


def _test_problem(test: Mapping[str, Any], default: Mapping[str, Any], notes: Notes) -> str | None:
    """Why a test cannot be carried over at all, or None; lesser keys are noted."""
    for source in (default, test):
        options = source.get("options")
        if isinstance(options, Mapping):
            if "transform" in options:
                return "`options.transform` rewrites the output before every check, in JavaScript"
            for key in ("prefix", "suffix"):
                if key in options:
                    return f"`options.{key}` changes the prompt; put it in the prompt itself"
            for key in options:
                if key not in ("provider", "rubricPrompt"):
                    notes.differs(f"a test's `options.{key}` is not used")
            if "provider" in options or "rubricPrompt" in options:
                notes.differs(
                    "`options.provider` / `rubricPrompt` set the grading model for judged "
                    "assertions, which are not mapped: not used"
                )
    if "provider" in test or "providerOutput" in test:
        return "a test of its own provider (or recorded output) is not mapped"
    for key in test:
        if key in ("description", "vars", "assert", "options"):
            continue
        if key == "threshold":
            notes.differs(
                "a test's `threshold` (pass on a partial score) is not carried: a parallax "
                "case passes when every check passes"
            )
        else:
            notes.differs(f"a test's `{key}` is not used")
    return None


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [] if value is None else [value]


def _combinations(merged: Mapping[str, Any], base: Path) -> list[dict[str, str]] | str:
    """Every combination of the vars' values (a list runs each of its values), as text; a
    str says why the vars have no parallax form."""
    choices: list[list[str]] = []
    for name, value in merged.items():
        items = value if isinstance(value, list) else [value]
        texts = []
        for item in items:
            text = _var_text(item, base)
            if text is None:
                return (
                    f"var `{name}` holds {json.dumps(item)[:60]}: parallax vars are text (a "
                    "file:// var is read when it is a .txt or .md file in the config's folder)"
                )
            if "{{" in text or "{%" in text:
                return f"var `{name}` is itself a template, which promptfoo renders"
            texts.append(text)
        if not texts:
            return f"var `{name}` is an empty list: promptfoo would run no combination"
        choices.append(texts)
    total = 1
    for texts in choices:
        total *= len(texts)
        if total > MAX_CASES:
            return f"its var lists make more than {MAX_CASES} combinations"
    return [dict(zip(merged, combo, strict=True)) for combo in itertools.product(*choices)]


def _var_text(value: Any, base: Path) -> str | None:
    if isinstance(value, str) and value.startswith("file://"):
        try:
            path = source_file(base, value)
            if path.suffix.lower() not in (".txt", ".md"):
                return None
            return read_regular(path, limit=1 << 20).decode("utf-8")
        except (DataError, Unreadable, UnicodeDecodeError):
            return None
    return js_text(value)


def _suite_base(path: Path, doc: Mapping[str, Any]) -> str:
    """A suite name: the config's own name, or its folder's for `promptfooconfig.yaml`."""
    stem = path.parent.resolve().name if path.stem == "promptfooconfig" else path.stem
    return slug(stem) or slug(str(doc.get("description", ""))) or "promptfoo"
