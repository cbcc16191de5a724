"""A tiny offline project for report, JUnit and history tests: real runs through the pipeline.

`Project` writes a config with two recorded endpoints, a fixture file and cassettes into a tmp
folder; `run()` goes through `runs.run_suite` exactly as `parallax run` does, and `promote()`
accepts a run as the snapshot, so later runs can produce every gate class.
"""

from __future__ import annotations

import base64
import json
import re
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

HOSTILE_SCRIPT = "<script>document.body.setAttribute('data-pwned','script')</script>"
HOSTILE_IMG = "<img src=x onerror=\"document.body.setAttribute('data-pwned','img')\">"
HOSTILE_TABLE = '</table></pre></div></article><b id="injected">escaped?</b><table><tr><td>'
HOSTILE_PIPES = "| col | col |\n|---|---|\n| a | b |"
HOSTILE_LONG = "L" * 9000

BASE_CASES = [
    {"id": "easy-a", "stratum": "easy", "prompt": "Say ok.", "expect": {"must_include": ["ok"]}},
    {"id": "easy-b", "stratum": "easy", "prompt": "Say ok.", "expect": {"must_include": ["ok"]}},
    {"id": "med-a", "stratum": "medium", "prompt": "Say ok.", "expect": {"must_include": ["ok"]}},
    {"id": "med-b", "stratum": "medium", "prompt": "Say ok.", "expect": {"must_include": ["ok"]}},
    {"id": "str-a", "stratum": "stretch", "prompt": "Say ok.", "expect": {"must_include": ["ok"]}},
    {"id": "str-b", "stratum": "stretch", "prompt": "Say ok.", "expect": {"must_include": ["ok"]}},
]


UNSTRATIFIED = [{k: v for k, v in c.items() if k != "stratum"} for c in BASE_CASES]


class Project:
    """A config, fixtures and two cassettes in `root`; the suite is called `s`."""

    def __init__(self, root: Path, cases: Sequence[Mapping[str, Any]] = BASE_CASES) -> None:
        self.root = root
        self.cases = [dict(c) for c in cases]
        (root / "snapshots").mkdir(parents=True, exist_ok=True)
        self._write_jsonl("cases.jsonl", self.cases)
        self.cassettes({}, {})
        (root / "parallax.toml").write_text(
            'runs_dir = "runs"\nsnapshots_dir = "snapshots"\n'
            "[thresholds]\nretire_after = 2\n"
            '[endpoints.ref]\nkind = "recorded"\nmodel = "ref-1"\ncassette = "ref.jsonl"\n'
            '[endpoints.cand]\nkind = "recorded"\nmodel = "cand-1"\ncassette = "cand.jsonl"\n'
            '[suites.s]\nfixtures = "cases.jsonl"\nreference = "ref"\ncandidate = "cand"\n',
            encoding="utf-8",
        )

    @property
    def config(self) -> Path:
        return self.root / "parallax.toml"

    def _write_jsonl(self, name: str, rows: Sequence[Mapping[str, Any]]) -> None:
        text = "".join(json.dumps(r) + "\n" for r in rows)
        (self.root / name).write_text(text, encoding="utf-8")

    def cassettes(
        self,
        reference: Mapping[str, Mapping[str, Any]],
        candidate: Mapping[str, Mapping[str, Any]],
    ) -> None:
        """Every case replies "ok" on both sides unless a row here says otherwise."""
        for name, overrides, model in (
            ("ref.jsonl", reference, "ref-1"),
            ("cand.jsonl", candidate, "cand-1"),
        ):
            rows = []
            for case in self.cases:
                row: dict[str, Any] = {"case_id": case["id"], "completion": "ok", "model": model}
                if case["id"] in overrides:
                    row = {"case_id": case["id"], **overrides[case["id"]]}
                rows.append(row)
            self._write_jsonl(name, rows)

    def run(self) -> tuple[Path, int, dict[str, Any]]:
        from runner.config import load_config
        from runner.runs.run import run_suite

        return run_suite(load_config(self.config), "s")

    def promote(self, run_dir: Path) -> None:
        from runner.snapshot import promote

        promote(run_dir, self.root / "snapshots", suite="s", allow_partial=True)


def hostile_project(root: Path) -> tuple[Project, Path]:
    """A run with every gate class that needs a reply shown, the replies full of markup."""
    cases = [
        *BASE_CASES,
        {"id": "hostile-script", "prompt": "p", "expect": {"must_include": ["ok"]}},
        {"id": "hostile-img", "prompt": "p", "expect": {"must_include": ["ok"]}},
        {"id": "hostile-table", "prompt": "p", "expect": {"must_include": ["ok"]}},
        {"id": "hostile-pipes", "prompt": "p", "expect": {"must_include": ["ok"]}},
        {"id": "hostile-long", "prompt": "p", "expect": {"must_include": ["ok"]}},
        {"id": "alias", "prompt": "p", "expect": {"must_include": ["ok"]}},
        {"id": "schema", "prompt": "p", "expect": {"must_include": ["ok"]}},
        {"id": "timeout", "prompt": "p", "expect": {"must_include": ["ok"]}},
    ]
    project = Project(root, cases)
    first, _, _ = project.run()
    project.promote(first)
    project.cassettes(
        {"hostile-script": {"completion": f"ok {HOSTILE_SCRIPT}", "model": "ref-1"}},
        {
            "hostile-script": {"completion": HOSTILE_SCRIPT, "model": "cand-1"},
            "hostile-img": {"completion": HOSTILE_IMG, "model": "cand-1"},
            "hostile-table": {"completion": HOSTILE_TABLE, "model": "cand-1"},
            "hostile-pipes": {"completion": HOSTILE_PIPES, "model": "cand-1"},
            "hostile-long": {"completion": HOSTILE_LONG, "model": "cand-1"},
            "alias": {"completion": "ok", "model": "cand-2-<b>preview</b>"},
            "schema": {"status": 200, "body": f"<html>{HOSTILE_SCRIPT}{HOSTILE_IMG}</html>"},
            "timeout": {"fault": "timeout"},
        },
    )
    second, _, _ = project.run()
    return project, second


VOID = frozenset(
    [
        "area",
        "base",
        "br",
        "col",
        "embed",
        "hr",
        "img",
        "input",
        "link",
        "meta",
        "source",
        "track",
        "wbr",
    ]
)  # elements with no end tag


class Node:
    """One element of a parsed page: its tag, attributes, children and text."""

    def __init__(self, tag: str, attrs: dict[str, str | None]) -> None:
        self.tag = tag
        self.attrs = attrs
        self.children: list[Node | str] = []

    def get(self, name: str) -> str | None:
        return self.attrs.get(name)

    @property
    def classes(self) -> list[str]:
        return (self.attrs.get("class") or "").split()

    def text(self) -> str:
        """The text inside, as a reader sees it (entities decoded)."""
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def elements(self) -> list[Node]:
        """Every element under this one, in document order."""
        found: list[Node] = []
        for child in self.children:
            if isinstance(child, Node):
                found.append(child)
                found.extend(child.elements())
        return found

    def find(self, tag: str | None = None, **attrs: str) -> list[Node]:
        """The elements under this one with this tag (any when None) and attribute values
        (`class_` matches one class)."""
        want = {k.rstrip("_").replace("_", "-"): v for k, v in attrs.items()}
        return [
            e
            for e in self.elements()
            if (tag is None or e.tag == tag)
            and all((v in e.classes) if k == "class" else e.get(k) == v for k, v in want.items())
        ]

    def one(self, tag: str | None = None, **attrs: str) -> Node:
        [found] = self.find(tag, **attrs)
        return found


class _TreeBuilder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, dict(attrs))
        self.stack[-1].children.append(node)
        if tag not in VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].children.append(Node(tag, dict(attrs)))

    def handle_endtag(self, tag: str) -> None:
        for at in range(len(self.stack) - 1, 0, -1):
            if self.stack[at].tag == tag:
                del self.stack[at:]
                return

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)


def parse_page(text: str) -> Node:
    """A report page as a tree, parsed the way html.parser tokenizes it."""
    builder = _TreeBuilder()
    builder.feed(text)
    builder.close()
    return builder.root


# Each payload is a case's id, prompt, system prompt, candidate reply, called tool name, tool
# argument and served model name at once (hostile_inputs_project). A payload that ran would set
# window[PWNED]; one that broke out of its element would add an <img>, <script> or <a>.
PWNED = "parallaxPwned"
HOSTILE_INPUTS = {
    "script": f"<script>window.{PWNED}='script'</script>",
    "img": f"<img src=x onerror=\"window.{PWNED}='img'\">",
    "template": f"</template><img src=x onerror=\"window.{PWNED}='template'\">",
    "noscript": f"</noscript><img src=x onerror=\"window.{PWNED}='noscript'\">",
    "script-end": f"</script><script>window.{PWNED}='script-end'</script>",
    "link": f'<a id="injected" href="javascript:window.{PWNED}=\'link\'">click</a>',
    "url": f"javascript:window.{PWNED}='url'",
    "bidi": "invoice\u202egpj.exe \u2066isolated\u2069",
    "nul": "before\x00after",
    "zero-width": "ref\u200bund\u200c\u200d\u2060\ufeff",
}
# a case both sides keep passing, so the history page lists its id among the ceiling candidates
HOSTILE_QUIET = f"quiet </li></ul><img src=x onerror=\"window.{PWNED}='ceiling'\">\u202e"
HOSTILE_TOOL = {
    "type": "function",
    "function": {"name": "lookup", "parameters": {"type": "object"}},
}


def hostile_inputs_project(root: Path) -> tuple[Project, Path, Path]:
    """Two runs of a suite whose inputs and outputs are all hostile text; the second run's dir
    and the suite's history page (`history --html`) after it.

    Every HOSTILE_INPUTS payload is one case's id, prompt and system prompt; in the second run
    the candidate replies with it and calls a tool named by it with it as the argument (the
    case's disagreement changed), and every other case's candidate serves a model named by it
    (alias_swap). The case HOSTILE_QUIET passes on both sides in both runs: a ceiling candidate.
    """
    cases = [
        {"id": text, "system": text, "prompt": text, "tools": [HOSTILE_TOOL],
         "expect": {"must_include": ["ok"]}}
        for text in HOSTILE_INPUTS.values()
    ]  # fmt: skip
    cases.append({"id": HOSTILE_QUIET, "prompt": HOSTILE_QUIET, "expect": {"must_include": ["ok"]}})
    project = Project(root, cases)
    first, _, _ = project.run()
    project.promote(first)
    candidate = {
        text: {
            "completion": text,
            "tool_calls": [{"name": text, "arguments": {"q": text}}],
            "model": f"cand-{text}" if n % 2 else "cand-1",
        }
        for n, text in enumerate(HOSTILE_INPUTS.values())
    }
    project.cassettes({}, candidate)
    second, _, _ = project.run()
    from runner.cli import main

    assert main(["history", "--html", "--config", str(project.config)]) == 0
    return project, second, root / "runs" / "s" / "index.html"


STRATIFIED = [
    {
        "id": f"{name[0]}{i}",
        "stratum": name,
        "prompt": "Say ok.",
        "expect": {"must_include": ["ok"]},
    }
    for name in ("easy", "medium", "stretch")
    for i in range(4)
]
# the candidate alone fails these: the paired test's discordant pairs against it
CANDIDATE_LOST = ("e0", "e1", "e2", "m0", "m1", "m2", "s0", "s1")


def reasons_project(root: Path) -> Path:
    """A second run with a reason of nearly every kind, each about some cases and not others.

    After a promote, both sides' requests change (their model aliases) on the 12 promoted
    cases, and two new cases join (their requests are in no snapshot), one timing out on the
    candidate. The candidate alone fails CANDIDATE_LOST, both fail m3, the reference alone s3:
    8 discordant pairs against the candidate and 1 for it, a significant regression.
    """
    project = Project(root, STRATIFIED)
    first, _, _ = project.run()
    project.promote(first)
    new = [
        {
            "id": f"new-{n}",
            "stratum": "easy",
            "prompt": "Say ok.",
            "expect": {"must_include": ["ok"]},
        }
        for n in ("a", "t")
    ]
    project.cases = [*STRATIFIED, *new]
    project._write_jsonl("cases.jsonl", project.cases)
    config = project.config.read_text(encoding="utf-8")
    config = config.replace('model = "ref-1"', 'model = "ref-2"')
    project.config.write_text(config.replace('model = "cand-1"', 'model = "cand-2"'), "utf-8")
    no = {"completion": "no"}
    project.cassettes(
        {case: {**no, "model": "ref-1"} for case in ("m3", "s3")},
        {
            **{case: {**no, "model": "cand-1"} for case in (*CANDIDATE_LOST, "m3")},
            "new-t": {"fault": "timeout"},
        },
    )
    second, _, _ = project.run()
    return second


# the cases both sides answered with a latency above zero: the latency gate's pairs
TIMED = tuple(case["id"] for case in STRATIFIED[:10])
# the cases both sides reported their tokens on, at a price: the cost gate's pairs
COSTED = tuple(case["id"] for case in STRATIFIED[2:])


def ratio_project(root: Path) -> Path:
    """A run whose latency and cost gates (limits x1.1) both fire: the candidate takes 300 ms
    where the reference takes 100 on the TIMED cases, and four times the tokens on the COSTED
    ones; the other cases report no time or no usage, so no pair."""
    project = Project(root, STRATIFIED)
    config = project.config.read_text(encoding="utf-8")
    limits = "retire_after = 2\nlatency_ratio_max = 1.1\ncost_ratio_max = 1.1\n"
    price = 'cassette = "\\1.jsonl"\nprice = { input_per_mtok = 1, output_per_mtok = 2 }\n'
    config = config.replace("retire_after = 2\n", limits)
    project.config.write_text(re.sub(r'cassette = "(\w+)\.jsonl"\n', price, config), "utf-8")
    sides = []
    for model, ms, tokens in (("ref-1", 100, 10), ("cand-1", 300, 40)):
        rows: dict[str, dict[str, Any]] = {}
        for case in STRATIFIED:
            row: dict[str, Any] = {"completion": "ok", "model": model}
            if case["id"] in TIMED:
                row["elapsed_ms"] = ms
            if case["id"] in COSTED:
                row["usage"] = {"prompt_tokens": 10 * tokens, "completion_tokens": tokens}
            rows[case["id"]] = row
        sides.append(rows)
    project.cassettes(*sides)
    run_dir, _, _ = project.run()
    return run_dir


# ------------------------------------------------------------------ report.html's case data

DATA_BLOCK = re.compile(
    r'<script type="application/octet-stream" class="case-data" data-cases="(\d+)">'
    r"([A-Za-z0-9+/=]*)</script>"
)


def page_blocks(text: str) -> list[dict[str, Any]]:
    """The case data blocks of a report.html, inflated as the page's script inflates them; a
    block that holds anything but base64 is not matched (and so fails the test reading it)."""
    return [
        json.loads(zlib.decompress(base64.b64decode(data))) | {"count": int(count)}
        for count, data in DATA_BLOCK.findall(text)
    ]


SIDE_FIELDS = (
    "side", "endpoint", "alias", "served", "sha", "transport", "schema", "score", "admitted",
    "detail", "misses", "noise", "request", "reply", "calls", "attempts", "ms", "ttft",
    "queued", "backoff", "stream", "usage", "raw", "samples",
)  # fmt: skip
REPLY_FIELDS = ("kind", "text", "cut", "status", "finish", "why", "marks")


@dataclass(frozen=True)
class PageCase:
    """One case as report.html's data holds it: its row's fields with their texts looked up
    in its block's string table, and its detail record (`view`, texts as indexes)."""

    n: int
    id: str
    gate: str
    stratum: str
    moved: str
    misses: dict[str, list[str]]
    delta: float | None
    detail: str
    marks: dict[str, list[str]]  # failed, passed, request, paired: the sides (or gates) named
    view: list[Any]  # casedata.py's view record, its texts as indexes into `strings`
    strings: list[str]

    def text(self, index: int | None) -> str | None:
        return None if index is None else self.strings[index]

    def side(self, n: int) -> dict[str, Any]:
        """Side `n` (0 the reference, 1 the candidate) of the detail, its fields named."""
        return dict(zip(SIDE_FIELDS, self.view[4][n], strict=True))

    def reply(self, n: int) -> dict[str, Any]:
        """That side's reply, its fields named."""
        return dict(zip(REPLY_FIELDS, self.side(n)["reply"], strict=True))

    @property
    def attrs(self) -> dict[str, str | None]:
        """The attributes report.js gives the case's row (`rowOf`)."""
        found: dict[str, str | None] = {
            "class": "case",
            "id": f"c-{self.n}",
            "data-id": self.id,
            "data-gate": self.gate,
            "data-stratum": self.stratum,
            "data-moved": self.moved,
        }
        for side, codes in self.misses.items():
            if codes:
                found[f"data-miss-{side}"] = "\n".join(codes)
        found["data-delta"] = "" if self.delta is None else f"{self.delta:.3f}"
        for key, sides in self.marks.items():
            if sides:
                found[f"data-{key}"] = " ".join(sides)
        return found


def page_cases(text: str) -> list[PageCase]:
    """Every case report.html embeds, in disagreement.json's order."""
    found = []
    for block in page_blocks(text):
        strings = block["strings"]
        for r in block["cases"]:
            n, case_id, gate, stratum, moved, miss, delta, detail, *sided, view = r
            found.append(
                PageCase(
                    n=n,
                    id=strings[case_id],
                    gate=strings[gate],
                    stratum=strings[stratum],
                    moved=moved,
                    misses={
                        side: [strings[i] for i in codes]
                        for side, codes in zip(("reference", "candidate"), miss, strict=True)
                    },
                    delta=delta,
                    detail=strings[detail],
                    marks=dict(zip(("failed", "passed", "request", "paired"), sided, strict=True)),
                    view=view,
                    strings=strings,
                )
            )
    return sorted(found, key=lambda c: c.n)


def page_with_rows(text: str) -> Node:
    """A report page parsed, its case table holding a row per case with the attributes
    report.js gives it (the page's own table is empty until its script runs)."""
    page = parse_page(text)
    [body] = page.one("table", id="cases").find("tbody")
    body.children = [Node("tr", case.attrs) for case in page_cases(text)]
    return page


def page_strings(text: str) -> list[str]:
    """Every text report.html's case data holds, as its script shows them."""
    return [s for block in page_blocks(text) for s in block["strings"]]
