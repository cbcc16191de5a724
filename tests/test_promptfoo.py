"""`parallax import promptfoo`: configs written as promptfoo's documentation writes them
(tests/data/importers/promptfoo/) become endpoints, suites and cases that validate and run
against a real server, sending the prompts promptfoo would render; each assertion maps to a
check that passes exactly when promptfoo's would, or is listed as not mapped."""

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

from runner.errors import DataError
from runner.fixtures.check import to_case
from runner.fixtures.parse import Row
from runner.grading.graders import GraderSet, grade
from runner.importers.promptfoo_asserts import map_assertions
from runner.importers.suite import CASES_FILE, Notes
from runner.importers.yamlfile import load_yaml
from runner.model import Reply
from runner.request.casekeys import ToolFiles

DATA = Path(__file__).resolve().parent / "data" / "importers" / "promptfoo"
PARALLAX = [sys.executable, "-m", "runner"]
KEYS = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL")


def parallax(*args: str | Path, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("PARALLAX_") and k not in KEYS}
    return subprocess.run(
        [*PARALLAX, *map(str, args)],
        cwd=cwd,
        env={**base, "NO_PROXY": "127.0.0.1", **env},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def rows(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (folder / "cases.jsonl").read_text().splitlines()]


def run_dirs(folder: Path, suite: str) -> list[Path]:
    return sorted(p for p in (folder / "runs" / suite).iterdir() if p.is_dir())


def test_the_guide_s_config_imports_as_a_prompt_by_provider_matrix(tmp_path: Path) -> None:
    """The guide's translation config (two prompt files, two providers) becomes one suite per
    prompt, the first provider the reference; each test a case (a var list one case per
    value), its assertions mapped to exact checks, and what has no parallax form (the
    defaultTest's llm-rubric, a javascript and a similar assertion) printed and listed."""
    proc = parallax(
        "import",
        "promptfoo",
        DATA / "translate" / "promptfooconfig.yaml",
        "--out",
        "t",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "t"
    assert [(r["id"], r["expect"]) for r in rows(out)] == [
        ("french-greeting", {"regex": ["Bonjour"]}),
        ("test-2", {"must_include": ["wie"], "regex": ["\\w+"]}),
        ("test-3", {"regex": ["\\ABuenos\\ días\\z"], "not_regex": ["Good\\ morning"]}),
        ("test-4-1", {"regex": ["(?i)(?:grazie|obrigado)"]}),
        ("test-4-2", {"regex": ["(?i)(?:grazie|obrigado)"]}),
        (
            "json-reply",
            {
                "json_schema": {
                    "required": ["city"],
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                }
            },
        ),
    ]
    assert rows(out)[0]["prompt"] == "Translate the following text into French: Hello world\n"
    assert rows(out)[3]["vars"] == {"language": "Italian", "input": "Thank you"}
    printed = [
        x.removeprefix("  not mapped: ") for x in proc.stdout.splitlines() if "not mapped:" in x
    ]
    assert [x.split(": ")[0] for x in printed] == [
        "defaultTest",
        "tests[0] ('French greeting')",
        "tests[4] ('JSON reply')",
    ]
    assert "`llm-rubric`" in printed[0] and printed[0].endswith("(in 6 cases)")
    assert "`javascript`" in printed[1] and "`similar`" in printed[2]
    notes = (out / "IMPORT-NOTES.md").read_text()
    assert all(line in notes for line in printed)
    assert "a reply that is not JSON is unscored in parallax" in notes

    from runner.config import load_config

    loaded = load_config(out / "parallax.toml")
    suites = {n: (s.reference, s.candidate) for n, s in loaded.config.suites.items()}
    assert suites == {
        "translate-prompt1": ("openai-gpt-4o-mini.prompt1", "openai-chat-gpt-4o.prompt1"),
        "translate-prompt2": ("openai-gpt-4o-mini.prompt2", "openai-chat-gpt-4o.prompt2"),
    }
    candidate = loaded.endpoint("openai-chat-gpt-4o.prompt1")
    assert (candidate.model, candidate.temperature, candidate.max_tokens) == ("gpt-4o", 0.0, 128)
    assert loaded.endpoint("openai-gpt-4o-mini.prompt2").max_tokens == 1024  # promptfoo's default
    assert parallax("validate", "--config", "t/parallax.toml", cwd=tmp_path).returncode == 0


@pytest.mark.slow
def test_the_imported_suites_send_what_promptfoo_would_render(
    tmp_path: Path, llmock: LlmockServer
) -> None:
    """Run against a local OpenAI-compatible server (OPENAI_BASE_URL, read as promptfoo reads
    it), each side sends its prompt rendered with the case's vars; a JSON case answered in
    prose is unscored (answer_not_json), as the notes say, and every other call is scored."""
    assert (
        parallax(
            "import",
            "promptfoo",
            DATA / "translate" / "promptfooconfig.yaml",
            "--out",
            "t",
            cwd=tmp_path,
        ).returncode
        == 0
    )
    env = {"OPENAI_BASE_URL": llmock.base_url(Protocol.OPENAI), "OPENAI_API_KEY": "sk-test-k1"}
    run = parallax(
        "run", "--config", "t/parallax.toml", "--suite", "translate-prompt2", cwd=tmp_path, **env
    )
    assert run.returncode == 2, run.stderr  # incomplete: the JSON case
    [run_dir] = run_dirs(tmp_path / "t", "translate-prompt2")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["admitted"], summary["unadmitted"]) == (5, 1)
    outcomes = [json.loads(x) for x in (run_dir / "outcomes.jsonl").read_text().splitlines()]
    assert {o["detail"] for o in outcomes if o["case_id"] == "json-reply"} == {"answer_not_json"}
    sent = {(r["body"]["model"], r["body"]["messages"][-1]["content"]) for r in llmock.requests()}
    greeting = (
        "You are a translator. Reply in French only, with the translation and nothing else."
        "\n\nHello world\n"
    )
    assert ("gpt-4o-mini", greeting) in sent and ("gpt-4o", greeting) in sent


@pytest.mark.slow
def test_a_chat_prompt_on_anthropic_imports_and_runs(tmp_path: Path, llmock: LlmockServer) -> None:
    """A chat prompt file's system turn becomes the endpoint's system template, defaultTest's
    vars fill it, a `$ref` to an assertion template is followed, `no` stays the word no (YAML
    1.2, as promptfoo reads it), a number is compared as the text promptfoo compares, and the
    suite runs on an Anthropic-shaped server with every call scored."""
    proc = parallax(
        "import",
        "promptfoo",
        DATA / "support" / "promptfooconfig.yaml",
        "--out",
        "s",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "s"
    assert [(r["id"], r["vars"]["escalate"], r["expect"]) for r in rows(out)] == [
        (
            "refund-window",
            "no",
            {
                "must_include": ["policy"],
                "must_not_include": ["as an AI"],
                "regex": ["(?:30\\ days|thirty\\ days)"],
            },
        ),
        ("order-status", "yes", {"regex": ["1842", "\\AOrder"]}),
    ]
    assert "`cost`" in proc.stdout
    env = {
        "ANTHROPIC_BASE_URL": llmock.base_url(Protocol.ANTHROPIC),
        "ANTHROPIC_API_KEY": "sk-test-k2",
    }
    run = parallax("run", "--config", "s/parallax.toml", cwd=tmp_path, **env)
    assert run.returncode == 0, run.stderr
    [run_dir] = run_dirs(out, "support")
    assert json.loads((run_dir / "summary.json").read_text())["unadmitted"] == 0
    systems = {r["body"]["system"] for r in llmock.requests()}
    assert systems == {
        "You are Acme's support agent. Escalate to a human: no.",
        "You are Acme's support agent. Escalate to a human: yes.",
    }


def expectation(tmp_path: Path, assertion: dict[str, Any]) -> Callable[[str], bool]:
    """The parallax check one promptfoo assertion maps to, as a function of the reply."""
    notes = Notes()
    found = map_assertions(
        [assertion],
        where="t",
        render=lambda s: s,
        resolve=lambda a: a,
        base_dir=tmp_path,
        notes=notes,
    )
    assert notes.not_mapped == [], notes.not_mapped
    row = {"id": "c", "prompt": "p", "expect": found.expect()}
    case = to_case(CASES_FILE, Row(row, 1), ToolFiles(tmp_path / CASES_FILE))

    def passes(reply: str) -> bool:
        misses = grade(case, Reply(reply), GraderSet.empty(tmp_path)).misses
        return not [m for m in misses if m.startswith(("regex_", "missing:", "forbidden:"))]

    return passes


def lower(s: str) -> str:
    return s.lower()


# promptfoo's own rules (src/assertions/contains.ts, startsWith.ts, equals.ts), in Python
RULES: dict[str, Callable[[str, list[str]], bool]] = {
    "contains": lambda out, v: v[0] in out,
    "icontains": lambda out, v: v[0].lower() in out.lower(),
    "contains-all": lambda out, v: all(x in out for x in v),
    "icontains-all": lambda out, v: all(x.lower() in out.lower() for x in v),
    "contains-any": lambda out, v: any(x in out for x in v),
    "icontains-any": lambda out, v: any(x.lower() in out.lower() for x in v),
    "starts-with": lambda out, v: out.startswith(v[0]),
    "equals": lambda out, v: out == v[0],
}
TEXT = st.text(alphabet=string.ascii_letters + " .,?!*+()[]$^|\\-", max_size=10)


@pytest.mark.parametrize("kind", sorted(RULES))
@pytest.mark.parametrize("inverse", [False, True], ids=["", "not"])
@given(
    values=st.lists(TEXT.filter(str.strip), min_size=1, max_size=3),
    around=TEXT,
    shout=st.booleans(),
)
def test_a_text_assertion_passes_exactly_when_promptfoo_s_would(
    tmp_path_factory: pytest.TempPathFactory,
    kind: str,
    inverse: bool,
    values: list[str],
    around: str,
    shout: bool,
) -> None:
    """contains, icontains, their -all and -any forms, starts-with and equals, and each one's
    `not-` (where parallax has one), on replies with and without the value, in another case:
    the mapped check passes exactly when promptfoo's assertion does."""
    if inverse and kind.endswith("-all"):
        return  # listed as not mapped (its own test)
    tmp_path = tmp_path_factory.mktemp("assert")
    value: Any = values if kind.endswith(("-all", "-any")) else values[0]
    passes = expectation(tmp_path, {"type": f"not-{kind}" if inverse else kind, "value": value})
    inner = values[0].upper() if shout else values[0]
    for reply in (inner, inner + around, around + inner, around, "".join(values) + around):
        assert passes(reply) == (RULES[kind](reply, values) != inverse), reply


@pytest.mark.parametrize(
    ("assertion", "reason"),
    [
        ({"type": "javascript", "value": "output.length < 9"}, "Python custom grader"),
        ({"type": "llm-rubric", "value": "is polite"}, "needs an LLM judge"),
        ({"type": "not-contains-all", "value": ["a", "b"]}, "has no parallax form"),
        ({"type": "not-is-json"}, "not JSON"),
        ({"type": "contains", "value": "x", "transform": "output.trim()"}, "`transform`"),
        ({"type": "regex", "value": "[^]"}, "cannot be searched by RE2"),
        ({"type": "latency", "threshold": 500}, "latency_regression"),
        ({"type": "levenshtein", "value": "hello", "threshold": 5}, "no parallax check"),
    ],
)
def test_an_assertion_without_a_parallax_form_is_listed(
    tmp_path: Path, assertion: dict[str, Any], reason: str
) -> None:
    """Each such assertion is one not-mapped line naming the test, its index and its type,
    saying why; nothing of it reaches the case."""
    notes = Notes()
    found = map_assertions(
        [assertion],
        where="tests[3]",
        render=lambda s: s,
        resolve=lambda a: a,
        base_dir=tmp_path,
        notes=notes,
    )
    assert found.expect() == {}
    [line] = notes.not_mapped
    assert line.startswith(f"tests[3]: assert[0]: `{assertion['type']}`") and reason in line, line


def test_yaml_is_read_as_promptfoo_reads_it(tmp_path: Path) -> None:
    """YAML 1.2's core schema, as js-yaml: yes, no, on and off are words, 012 is twelve, 1:20
    and a date are text; true and 0x1F are what they say."""
    path = tmp_path / "c.yaml"
    path.write_text(
        "a: yes\nb: no\nc: on\nd: off\ne: 012\nf: 1:20\ng: 2026-12-01\nh: true\ni: 0x1F\nj: 1.5\n"
    )
    assert load_yaml(path) == {
        "a": "yes",
        "b": "no",
        "c": "on",
        "d": "off",
        "e": 12,
        "f": "1:20",
        "g": "2026-12-01",
        "h": True,
        "i": 31,
        "j": 1.5,
    }


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (
            "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
            + "".join(
                f"{k}: &{k} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
                for p, k in zip("abcdefg", "bcdefgh", strict=True)
            ),
            "aliases are expanded",
        ),
        ("a: &a [*a]\n", "deeper than"),
        ("prompts: [\n", "invalid YAML"),
    ],
    ids=["billion-laughs", "alias-in-itself", "broken"],
)
def test_a_hostile_or_broken_yaml_file_is_one_error(tmp_path: Path, text: str, reason: str) -> None:
    """Aliases that expand past a million values, an alias inside itself and YAML that does
    not parse are each one DataError naming the file, never a hang or a traceback."""
    path = tmp_path / "promptfooconfig.yaml"
    path.write_text(text)
    with pytest.raises(DataError) as info:
        load_yaml(path)
    assert reason in info.value.reason and info.value.path == str(path)


def test_a_broken_config_is_one_line_and_exit_65(tmp_path: Path) -> None:
    """On the command line, YAML that does not parse names the file and line, exit 65."""
    (tmp_path / "promptfooconfig.yaml").write_text("prompts:\n  - 'a\ntests: [\n")
    proc = parallax("import", "promptfoo", "promptfooconfig.yaml", "--out", "o", cwd=tmp_path)
    assert proc.returncode == 65, proc.stderr
    [line] = proc.stderr.splitlines()
    assert line.startswith("parallax: promptfooconfig.yaml:") and "invalid YAML" in line, line
    assert not (tmp_path / "o").exists()


def test_prompts_and_providers_parallax_cannot_carry_are_listed(tmp_path: Path) -> None:
    """A prompt with a Nunjucks filter Jinja2 lacks and a provider of another API are listed;
    the prompt that carries over is kept, and with no provider left both sides call an
    OpenAI-compatible server, as the notes say."""
    (tmp_path / "promptfooconfig.yaml").write_text(
        "prompts:\n  - 'Summarise {{ article | dump }}'\n  - 'Summarise: {{ article }}'\n"
        "providers:\n  - vertex:gemini-2.0-flash\n"
        "tests:\n  - vars:\n      article: Rain today.\n    assert:\n"
        "      - type: icontains\n        value: rain\n"
    )
    proc = parallax("import", "promptfoo", "promptfooconfig.yaml", "--out", "o", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    printed = [x for x in proc.stdout.splitlines() if "not mapped:" in x]
    assert len(printed) == 2
    assert "prompt `prompt`: " in printed[0] and "dump" in printed[0]
    assert "providers[0]: `vertex:gemini-2.0-flash`" in printed[1]
    notes = (tmp_path / "o" / "IMPORT-NOTES.md").read_text()
    assert "no provider could be mapped" in notes
    assert parallax("validate", "--config", "o/parallax.toml", cwd=tmp_path).returncode == 0
    [row] = rows(tmp_path / "o")
    assert row["prompt"] == "Summarise: Rain today."


def test_a_config_never_reads_a_file_outside_its_folder(tmp_path: Path) -> None:
    """A config is a stranger's: a prompt, a var or a tests file it names outside its own
    folder (a parent, an absolute path, a symlink out) is listed, never read, so no secret
    can be copied into the cases and sent to a provider."""
    secret = tmp_path / "secret.txt"
    secret.write_text("private-marker-7f3a")  # not a key: the session's leak scan reads files
    config = tmp_path / "pr"
    config.mkdir()
    (config / "link.txt").symlink_to(secret)
    (config / "promptfooconfig.yaml").write_text(
        "prompts:\n  - file://../secret.txt\n  - 'Say {{ word }}'\n"
        "providers: [openai:gpt-4o-mini]\n"
        "tests:\n  - file://../tests.yaml\n"
        f"  - vars:\n      word: file://{secret}\n"
        "  - vars:\n      word: file://link.txt\n"
        "  - vars:\n      word: hello\n"
    )
    proc = parallax("import", "promptfoo", "pr/promptfooconfig.yaml", "--out", "o", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    printed = [x for x in proc.stdout.splitlines() if "not mapped:" in x]
    assert len(printed) == 4, printed
    assert "outside the config's folder" in printed[0] and "outside" in printed[1]
    written = "".join(p.read_text() for p in (tmp_path / "o").rglob("*") if p.is_file())
    assert "private-marker" not in written + proc.stdout + proc.stderr
    assert [row["vars"] for row in rows(tmp_path / "o")] == [{"word": "hello"}]
