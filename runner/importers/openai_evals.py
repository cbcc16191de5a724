"""`parallax import openai-evals FILE`: OpenAI Evals samples as parallax cases.

A samples file (`evals/registry/data/<eval>/samples.jsonl`, or a hosted eval's data file whose
rows are `{"item": {...}}`) holds one sample a line: `input`, a string or a list of chat
messages, and `ideal`, a string or a list of strings. The file does not say how it is graded;
the eval class in the registry's YAML does, so `--check` names it, and each maps to the
parallax expectation that means the same (openai/evals `evals/elsuite/basic/`, and the Evals
API's `string_check` grader):

- `match` (Match: the reply starts with an ideal) -> `regex` `\\A(?:ideal|...)`, each ideal
  escaped: case-sensitive, anchored at the start, as `str.startswith`;
- `includes` (Includes: an ideal occurs in the reply) -> `regex` of the escaped ideals;
  `includes-ignore-case` (its `ignore_case: true`) -> `must_include` for one ideal, else the
  same regex with `(?i)`;
- `fuzzy-match` (FuzzyMatch: after lower-casing and removing punctuation, articles and extra
  whitespace, either text contains the other) -> the custom grader `fuzzy_match`, written
  beside the suite, which normalises exactly as evals' `normalize` does: no built-in key can;
- `string-check-eq` / `-ne` / `-like` / `-ilike` (`string_check`'s operations on a string
  ideal) -> `regex` `\\Aideal\\z`, `not_regex` of the same, `regex` of the escaped ideal, and
  `must_include`.

What evals sends and parallax sends differently is said in the notes: a string `input` is the
user turn here (evals' chat functions sent it as a system message), and evals' few-shot turns
(system messages named `example_user` / `example_assistant`) become user and assistant turns.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from enum import Enum
from pathlib import Path
from typing import Any

from runner.errors import DataError
from runner.files import Unreadable, read_regular
from runner.importers.suite import Endpoint, Ids, Imported, Notes, SuiteSpec, row_problem, slug
from runner.scaffold import DEFAULTS, Provider

MAX_BYTES = 64 << 20  # a samples file is text; a larger one is the wrong file
GRADERS_FILE = "graders.py"
_FEW_SHOT = {"example_user": "user", "example_assistant": "assistant"}


class Check(Enum):
    """How the samples were graded in Evals: the eval class, or a string_check operation."""

    MATCH = "match"
    INCLUDES = "includes"
    INCLUDES_IGNORE_CASE = "includes-ignore-case"
    FUZZY_MATCH = "fuzzy-match"
    STRING_CHECK_EQ = "string-check-eq"
    STRING_CHECK_NE = "string-check-ne"
    STRING_CHECK_LIKE = "string-check-like"
    STRING_CHECK_ILIKE = "string-check-ilike"


_STRING_CHECKS = frozenset(
    (
        Check.STRING_CHECK_EQ,
        Check.STRING_CHECK_NE,
        Check.STRING_CHECK_LIKE,
        Check.STRING_CHECK_ILIKE,
    )
)
_MAPPED = {
    Check.MATCH: "Match (`a.startswith(b)` for any ideal b) -> `regex` `\\A(?:b|...)`, each "
    "ideal escaped: case-sensitive and anchored at the start of the reply, as in evals",
    Check.INCLUDES: "Includes (`b in a` for any ideal b) -> `regex` of the escaped ideals "
    "joined by `|`: case-sensitive, as in evals",
    Check.INCLUDES_IGNORE_CASE: "Includes with `ignore_case` -> `must_include` for one ideal, "
    "`regex` `(?i)(?:b|...)` for several (any one of them suffices, as in evals)",
    Check.FUZZY_MATCH: "FuzzyMatch -> the custom grader `fuzzy_match` in graders.py, which "
    "normalises both texts exactly as evals' `normalize` does (lower case, no punctuation, no "
    "articles, single spaces) and passes when either contains the other, for any ideal",
    Check.STRING_CHECK_EQ: "string_check `eq` -> `regex` `\\A<ideal>\\z` (the ideal escaped): "
    "the whole reply, case-sensitive",
    Check.STRING_CHECK_NE: "string_check `ne` -> `not_regex` `\\A<ideal>\\z`",
    Check.STRING_CHECK_LIKE: "string_check `like` -> `regex` of the escaped ideal: "
    "case-sensitive containment",
    Check.STRING_CHECK_ILIKE: "string_check `ilike` -> `must_include`: case-insensitive "
    "containment",
}
_CASE_FOLD = (
    "`must_include` folds case with Unicode casefold, evals with `lower()`: they differ only on "
    "a few letters (ß, ﬁ)"
)
_SENT = {
    Check.MATCH: "evals' Match sent temperature 0 and no max_tokens",
    Check.INCLUDES: "evals' Includes sent neither temperature nor max_tokens",
    Check.INCLUDES_IGNORE_CASE: "evals' Includes sent neither temperature nor max_tokens",
    Check.FUZZY_MATCH: "evals' FuzzyMatch sent temperature 0 and max_tokens 100",
}

_GRADERS = '''"""FuzzyMatch from openai/evals as a parallax custom grader (by `parallax import`).

evals/elsuite/utils.py: both texts are normalised (lower case, punctuation removed, the articles
a, an and the removed, whitespace collapsed) and the reply passes when, for any ideal answer,
either normalised text contains the other; two empty texts match, one empty text matches nothing.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from typing import Any

_PUNCTUATION = frozenset(string.punctuation)


def normalize(text: str) -> str:
    text = "".join(char for char in text.lower() if char not in _PUNCTUATION)
    return " ".join(re.sub(r"\\b(a|an|the)\\b", " ", text).split())


def _matches(reply: str, ideal: str) -> bool:
    left, right = normalize(reply), normalize(ideal)
    if not left or not right:
        return left == right
    return left in right or right in left


def fuzzy_match(text: str, expect: Mapping[str, Any]) -> list[str]:
    """One miss when no ideal answer fuzzily matches the reply."""
    ideals = expect["ideal"]
    return [] if any(_matches(text, ideal) for ideal in ideals) else [f"fuzzy_miss:{ideals[0]}"]
'''


def import_samples(path: Path, check: Check, provider: Provider) -> Imported:
    """Read an Evals samples file into cases graded as `check` says, on two endpoints of
    `provider`. A line that is no JSON object is a DataError naming it; a sample whose input
    or ideal has no parallax form is left out and listed."""
    try:
        data = read_regular(path, limit=MAX_BYTES)
        text = data.decode("utf-8-sig")
    except Unreadable as exc:
        raise DataError(path, exc.reason) from None
    except UnicodeDecodeError as exc:
        raise DataError(path, f"not UTF-8 at byte {exc.start}") from None
    notes = Notes()
    notes.mapping(_MAPPED[check])
    ids = Ids()
    cases: list[dict[str, Any]] = []
    samples = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        samples += 1
        try:
            sample = json.loads(raw)
        except (json.JSONDecodeError, RecursionError, ValueError) as exc:
            reason = exc.msg if isinstance(exc, json.JSONDecodeError) else "not readable"
            raise DataError(path, f"invalid JSON: {reason}", line=number) from None
        if isinstance(sample, dict) and set(sample) <= {"item", "sample"} and "item" in sample:
            sample = sample["item"]  # a hosted eval's data file: the sample is its `item`
        if not isinstance(sample, dict):
            raise DataError(path, "a sample must be a JSON object", line=number)
        row = _case(sample, number, check, notes, ids)
        if row is None:
            continue
        if (problem := row_problem(row, number)) is not None:
            notes.unmapped(f"line {number}: {problem}")
            continue
        cases.append(row)
    if check in _SENT:
        notes.differs(
            f"parallax sends temperature 0 and max_tokens 512 (its defaults); {_SENT[check]}"
        )
    if check in (Check.INCLUDES_IGNORE_CASE, Check.STRING_CHECK_ILIKE):
        notes.differs(_CASE_FOLD)
    notes.differs(
        "every case also gets parallax's own checks: `empty_completion` and `max_chars` 1200 "
        "(set `expect.max_chars` to allow a longer reply)"
    )
    notes.differs(
        "the samples name no stratum: the suite is unstratified and the ceiling detector is "
        "skipped until cases name easy, medium or stretch"
    )
    name = slug(path.parent.name if path.stem == "samples" else path.stem) or "imported"
    return Imported(
        tool="OpenAI Evals",
        source=path,
        summary=f"{len(cases)} case(s) from {samples} sample(s), graded as {check.value}",
        endpoints=_endpoints(provider),
        suites=[
            SuiteSpec(
                name=name,
                reference="reference",
                candidate="candidate",
                graders=GRADERS_FILE if check is Check.FUZZY_MATCH else None,
            )
        ],
        cases=cases,
        notes=notes,
        files={GRADERS_FILE: _GRADERS} if check is Check.FUZZY_MATCH else {},
    )


def _endpoints(provider: Provider) -> list[Endpoint]:
    defaults = DEFAULTS[provider]
    return [
        Endpoint(
            name=side,
            kind=defaults.kind,
            base_url=defaults.base_url,
            model=model,
            api_key_env=defaults.api_key_env,
            comment=f"The {side}: {why} (edit the model to yours).",
        )
        for side, model, why in (
            ("reference", defaults.reference_model, "the model the samples were graded on"),
            ("candidate", defaults.candidate_model, "the model under test"),
        )
    ]


def _case(
    sample: Mapping[str, Any], line: int, check: Check, notes: Notes, ids: Ids
) -> dict[str, Any] | None:
    """One sample as a case row, or None (listed in the notes) when it has no parallax form."""
    where = f"line {line}"
    for key in sample:
        if key not in ("input", "ideal"):
            notes.differs(
                f"the sample key `{key}` is not used (evals' basic evals read only input and ideal)"
            )
    request = _request(sample.get("input"), where, notes, hosted=check in _STRING_CHECKS)
    ideal = sample.get("ideal")
    ideals = [ideal] if isinstance(ideal, str) else ideal
    if not isinstance(ideals, list) or not ideals or not all(isinstance(i, str) for i in ideals):
        notes.unmapped(f"{where}: `ideal` must be a string or a non-empty list of strings")
        return None
    if request is None:
        return None
    expect = _expect(ideals, check)
    if expect is None:
        notes.unmapped(f"{where}: a string_check compares one reference: `ideal` is a list")
        return None
    row: dict[str, Any] = {"id": ids.take(f"sample-{line}"), **request, "expect": expect}
    if check is Check.FUZZY_MATCH:
        row["grader"] = "fuzzy_match"
    return row


def _request(value: Any, where: str, notes: Notes, *, hosted: bool) -> dict[str, Any] | None:
    """`input` as the row's `prompt` (with its `system`) or `messages`."""
    if isinstance(value, str):
        notes.differs(
            "a string `input` is sent as the user turn; "
            + (
                "a hosted eval sent what its run's `input_messages` template made of it"
                if hosted
                else "evals' chat completion functions sent it as a system message"
            )
        )
        return {"prompt": value}
    if not isinstance(value, list) or not value:
        notes.unmapped(f"{where}: `input` must be a string or a list of chat messages")
        return None
    turns: list[dict[str, Any]] = []
    for index, message in enumerate(value):
        if not isinstance(message, dict) or not isinstance(message.get("content"), str):
            notes.unmapped(f"{where}: input[{index}] is not a message with text content")
            return None
        role, name = message.get("role"), message.get("name")
        if role == "system" and name in _FEW_SHOT:
            notes.differs(
                "evals' few-shot turns (system messages named example_user / example_assistant) "
                "are sent as user and assistant turns"
            )
            role = _FEW_SHOT[name]
        elif name is not None:
            notes.differs(f"a message's `name` ({name!r}) is not sent")
        turns.append({"role": role, "content": message["content"]})
    if len(turns) == 1 and turns[0]["role"] == "system":
        notes.differs(
            "an `input` of one system message is sent as the user turn (a request needs one)"
        )
        return {"prompt": turns[0]["content"]}
    if (
        len(turns) <= 2
        and turns[-1]["role"] == "user"
        and all(t["role"] == "system" for t in turns[:-1])
    ):
        system = {"system": turns[0]["content"]} if len(turns) == 2 else {}
        return {**system, "prompt": turns[-1]["content"]}
    return {"messages": turns}


def _expect(ideals: list[str], check: Check) -> dict[str, Any] | None:
    either = "|".join(re.escape(i) for i in ideals)
    group = either if len(ideals) == 1 else f"(?:{either})"
    if check is Check.MATCH:
        return {"regex": f"\\A{group}"}
    if check is Check.INCLUDES:
        return {"regex": group}
    if check is Check.INCLUDES_IGNORE_CASE:
        return {"must_include": ideals} if len(ideals) == 1 else {"regex": f"(?i){group}"}
    if check is Check.FUZZY_MATCH:
        return {"ideal": ideals}
    if len(ideals) != 1:
        return None
    exact = f"\\A{group}\\z"
    if check is Check.STRING_CHECK_EQ:
        return {"regex": exact}
    if check is Check.STRING_CHECK_NE:
        return {"not_regex": exact}
    if check is Check.STRING_CHECK_LIKE:
        return {"regex": group}
    return {"must_include": ideals}
