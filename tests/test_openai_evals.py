"""`parallax import openai-evals`: Evals samples, in the shapes openai/evals documents
(tests/data/importers/README.md), become cases whose checks pass exactly when the eval class
or string_check operation they came from would pass; what has no parallax form is listed."""

from __future__ import annotations

import json
import os
import string
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from llmockkit import LlmockServer, Protocol

from runner.arguments import EVALS_CHECKS
from runner.fixtures.check import to_case
from runner.fixtures.parse import Row
from runner.grading.graders import GraderSet, grade, load_graders
from runner.importers.openai_evals import Check, import_samples
from runner.importers.suite import CASES_FILE
from runner.model import Reply
from runner.request.casekeys import ToolFiles
from runner.scaffold import Provider

DATA = Path(__file__).resolve().parent / "data" / "importers"
PARALLAX = [sys.executable, "-m", "runner"]
# the misses the imported check itself produces (not parallax's own empty/max_chars checks)
CHECK_MISSES = ("regex_", "missing:", "forbidden:", "fuzzy_miss:")


def parallax(*args: str | Path, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("PARALLAX_")}
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "REF_MODEL", "CAND_MODEL"):
        base.pop(name, None)
    return subprocess.run(
        [*PARALLAX, *map(str, args)],
        cwd=cwd,
        env={**base, "NO_PROXY": "127.0.0.1", **env},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def imported_check(tmp_path: Path, ideal: Any, check: Check) -> Callable[[str], bool]:
    """The parallax check one sample with `ideal` imports to, as a function of the reply:
    True when the imported expectation passes (parallax's own length checks aside)."""
    samples = tmp_path / "samples.jsonl"
    samples.write_text(json.dumps({"input": "q", "ideal": ideal}) + "\n")
    imported = import_samples(samples, check, Provider.OPENAI)
    [row] = imported.cases
    case = to_case(CASES_FILE, Row(row, 1), ToolFiles(tmp_path / CASES_FILE))
    graders = GraderSet.empty(tmp_path)
    if imported.files:
        for name, text in imported.files.items():
            (tmp_path / name).write_text(text)
        graders = load_graders("graders.py", tmp_path, config_path="c", key="graders")

    def passes(reply: str) -> bool:
        misses = grade(case, Reply(reply), graders).misses
        return not [m for m in misses if m.startswith(CHECK_MISSES)]

    return passes


def test_the_checks_in_help_are_the_importer_checks() -> None:
    """`import openai-evals --help` names the checks without importing the importer."""
    assert tuple(c.value for c in Check) == EVALS_CHECKS


WORDS = st.text(alphabet=string.ascii_letters + string.digits + " .,!?'-()", max_size=12)


@pytest.mark.parametrize(
    ("check", "rule"),
    [
        (Check.MATCH, lambda reply, ideals: any(reply.startswith(i) for i in ideals)),
        (Check.INCLUDES, lambda reply, ideals: any(i in reply for i in ideals)),
        (
            Check.INCLUDES_IGNORE_CASE,
            lambda reply, ideals: any(i.lower() in reply.lower() for i in ideals),
        ),
    ],
    ids=lambda value: value.value if isinstance(value, Check) else "",
)
@given(
    ideals=st.lists(WORDS.filter(str.strip), min_size=1, max_size=3),
    before=WORDS,
    after=WORDS,
    pick=st.integers(min_value=0, max_value=2),
    shout=st.booleans(),
)
def test_an_imported_basic_eval_passes_exactly_when_evals_would(
    tmp_path_factory: pytest.TempPathFactory,
    check: Check,
    rule: Callable[[str, list[str]], bool],
    ideals: list[str],
    before: str,
    after: str,
    pick: int,
    shout: bool,
) -> None:
    """Match (`a.startswith(b)`), Includes (`b in a`) and Includes with `ignore_case`, for any
    of the ideals (evals/elsuite/basic/): the imported case passes a reply exactly when the
    eval class would, replies built around an ideal or not, in its case or another."""
    tmp_path = tmp_path_factory.mktemp("check")
    passes = imported_check(tmp_path, ideals if len(ideals) > 1 else ideals[0], check)
    ideal = ideals[pick % len(ideals)]
    reply = before + (ideal.upper() if shout else ideal) + after
    for text in (reply, before + after, ideal + after):
        assert passes(text) == rule(text, ideals), text


@pytest.mark.parametrize(
    ("check", "ideal", "reply", "expected"),
    [
        (Check.STRING_CHECK_EQ, "negative", "negative", True),
        (Check.STRING_CHECK_EQ, "negative", "negative\n", False),  # eq is the whole text
        (Check.STRING_CHECK_EQ, "negative", "Negative", False),
        (Check.STRING_CHECK_NE, "negative", "positive", True),
        (Check.STRING_CHECK_NE, "negative", "negative", False),
        (Check.STRING_CHECK_LIKE, "neg", "It is negative.", True),
        (Check.STRING_CHECK_LIKE, "neg", "It is NEGATIVE.", False),
        (Check.STRING_CHECK_ILIKE, "neg", "It is NEGATIVE.", True),
        (Check.STRING_CHECK_ILIKE, "neg", "It is positive.", False),
        (Check.FUZZY_MATCH, ["Mary Shelley"], "It was mary shelley.", True),
        (Check.FUZZY_MATCH, ["The Season 11"], "season 11", True),  # the other way round
        (Check.FUZZY_MATCH, ["Season 11", "11"], "Eleven", False),
        (Check.FUZZY_MATCH, ["Mars"], "a", False),  # "a" normalises to "": matches only ""
        (Check.MATCH, "1+1", "1+1=2", True),  # a pattern character is an ordinary one
        (Check.MATCH, "1+1", "11=2", False),
    ],
)
def test_string_check_and_fuzzy_match_grade_as_their_sources(
    tmp_path: Path, check: Check, ideal: Any, reply: str, expected: bool
) -> None:
    """string_check's eq, ne, like and ilike compare the whole reply or look for the ideal,
    with and without case; FuzzyMatch normalises as evals' `normalize` and matches either
    way round; an ideal's regex characters stand for themselves."""
    assert imported_check(tmp_path, ideal, check)(reply) is expected


def test_samples_in_the_shapes_evals_documents_import_validate_and_run(
    tmp_path: Path, llmock: LlmockServer
) -> None:
    """The README's FuzzyMatch samples (few-shot turns as named system messages, list ideals)
    import as conversations with a fuzzy_match grader beside them, validate, and run against
    a local OpenAI-compatible server with every call scored; the few-shot turns are sent as
    user and assistant turns, as the notes say."""
    proc = parallax(
        *("import", "openai-evals", DATA / "evals_fuzzy.jsonl", "--check", "fuzzy-match"),
        *("--provider", "openai-compatible", "--out", "fuzzy"),
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "fuzzy"
    assert sorted(p.name for p in out.iterdir()) == [
        "IMPORT-NOTES.md",
        "cases.jsonl",
        "graders.py",
        "parallax.toml",
    ]
    assert "3 case(s) from 3 sample(s), graded as fuzzy-match; everything mapped" in proc.stdout
    notes = (out / "IMPORT-NOTES.md").read_text()
    assert "few-shot turns (system messages named example_user / example_assistant)" in notes
    rows = [json.loads(line) for line in (out / "cases.jsonl").read_text().splitlines()]
    assert [r["expect"] for r in rows] == [
        {"ideal": ["Mary Shelley"]},
        {"ideal": ["Season 11", "11"]},
        {"ideal": ["Mars"]},
    ]
    assert {r["grader"] for r in rows} == {"fuzzy_match"}

    env = {"OPENAI_BASE_URL": llmock.base_url(Protocol.OPENAI)}
    assert (
        parallax("validate", "--config", "fuzzy/parallax.toml", cwd=tmp_path, **env).returncode == 0
    )
    run = parallax("run", "--config", "fuzzy/parallax.toml", cwd=tmp_path, **env)
    assert run.returncode == 0, run.stderr  # unstratified and new: nothing gates yet
    [run_dir] = [p for p in (out / "runs" / "evals-fuzzy").iterdir() if p.is_dir()]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["admitted"], summary["unadmitted"]) == (3, 0)
    # The cases run concurrently, so the server sees them in any order; both sides send this one.
    sent = {
        tuple(m["role"] for m in r["body"]["messages"])
        for r in llmock.requests()
        if r["body"]["messages"][-1]["content"] == "Who wrote the novel Frankenstein?"
    }
    assert sent == {("system", "user", "assistant", "user", "assistant", "user")}


def test_a_hosted_evals_data_file_imports_its_items(tmp_path: Path) -> None:
    """A hosted eval's rows (`{"item": {...}}`) are read as their items; a string `input` is
    the user turn, and the notes say a hosted run sent what its template made of it."""
    proc = parallax(
        *("import", "openai-evals", DATA / "evals_hosted.jsonl", "--check", "string-check-eq"),
        *("--out", "hosted"),
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(x) for x in (tmp_path / "hosted" / "cases.jsonl").read_text().splitlines()]
    assert [(r["prompt"][:30], r["expect"]) for r in rows] == [
        ("Is this review positive or neg", {"regex": "\\Anegative\\z"}),
        ("Is this review positive or neg", {"regex": "\\Apositive\\z"}),
    ]
    assert "`input_messages` template" in (tmp_path / "hosted" / "IMPORT-NOTES.md").read_text()
    assert parallax("validate", "--config", "hosted/parallax.toml", cwd=tmp_path).returncode == 0


def test_samples_without_a_parallax_form_are_listed_not_dropped(tmp_path: Path) -> None:
    """A sample whose ideal is no text, whose conversation ends with the assistant, or that a
    string_check cannot compare is left out, printed and listed in IMPORT-NOTES.md; the rest
    are imported."""
    samples = tmp_path / "mixed.jsonl"
    lines = [
        {"input": "2+2?", "ideal": 4},
        {
            "input": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
            "ideal": "yo",
        },
        {"input": "Colour of the sky?", "ideal": ["blue", "azure"]},
        {"input": "Capital of Peru?", "ideal": "Lima"},
    ]
    samples.write_text("".join(json.dumps(x) + "\n" for x in lines))
    proc = parallax(
        "import",
        "openai-evals",
        samples,
        "--check",
        "string-check-like",
        "--out",
        "o",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    printed = [x for x in proc.stdout.splitlines() if x.startswith("  not mapped: ")]
    assert printed == [
        "  not mapped: line 1: `ideal` must be a string or a non-empty list of strings",
        "  not mapped: line 2: 'messages' must end with a user or tool turn (the one the "
        "model answers), not assistant",
        "  not mapped: line 3: a string_check compares one reference: `ideal` is a list",
    ]
    notes = (tmp_path / "o" / "IMPORT-NOTES.md").read_text()
    for line in printed:
        assert line.removeprefix("  not mapped: ") in notes
    rows = (tmp_path / "o" / "cases.jsonl").read_text().splitlines()
    assert [json.loads(r)["id"] for r in rows] == ["sample-4"]


def test_a_line_that_is_no_json_is_one_line_and_exit_65(tmp_path: Path) -> None:
    """A broken samples file names its file and line, exit 65, and nothing is written."""
    samples = tmp_path / "broken.jsonl"
    samples.write_text('{"input": "a", "ideal": "b"}\n{"input": \n')
    proc = parallax("import", "openai-evals", samples, "--out", "o", cwd=tmp_path)
    assert proc.returncode == 65, proc.stderr
    [line] = proc.stderr.splitlines()
    assert line.startswith(f"parallax: {samples}:2: invalid JSON"), line
    assert not (tmp_path / "o").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["broken.jsonl"]


def test_an_output_folder_that_holds_anything_is_never_written_into(tmp_path: Path) -> None:
    """--out must be new or empty: one that holds a file is refused with exit 64 and left as
    it was, with no staging folder left beside it; an empty one is filled."""
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "parallax.toml").write_text("mine\n")
    args = ("import", "openai-evals", DATA / "evals_match.jsonl", "--out")
    proc = parallax(*args, "taken", cwd=tmp_path)
    assert proc.returncode == 64, proc.stderr
    assert proc.stderr.strip() == "parallax: taken: exists and is not empty; nothing written"
    assert [p.name for p in (tmp_path / "taken").iterdir()] == ["parallax.toml"]
    assert (tmp_path / "taken" / "parallax.toml").read_text() == "mine\n"
    (tmp_path / "empty").mkdir()
    assert parallax(*args, "empty", cwd=tmp_path).returncode == 0
    assert (tmp_path / "empty" / "cases.jsonl").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "taken"]
