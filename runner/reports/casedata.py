"""report.html's cases as data: every case's row and detail, compact JSON in compressed blocks.

Rendered as HTML (a table row and a `<template>` of its detail per case), a 20,000-case page
was 40 MB and took seconds to write and to open, since most of it was markup for cases nobody
opens. So each case is written once as data: a JSON record of its row (what the filters read)
and its `CaseView`, in which every text is an index into its block's string table, so what
many cases share (a system prompt, a tool list and its schemas, a template's params, a model
name, a miss code, an expectation) is stored once a block. BLOCK cases make a block; each is
deflated (zlib) and base64'd into a `<script type="application/octet-stream">` element, which
no browser runs. The page's script inflates the blocks with `DecompressionStream`, filters and
sorts the records, and builds the rows on screen and the case opened with DOM calls that only
ever set text (see report.js). Python's zlib and the browser's inflate need no dependency, and
a block is small enough to build and compress in a worker process of its own.

Every text goes through `text.visible` as it enters a string table, as `{{ ... }}` does in a
template, so a bidi control or a NUL reads as its escape with the script too. A block holds
no markup: the cases that must read without JavaScript (those that need review and the
unscored ones, `RunReport.cases`) are rendered from the same views by `case.html.j2`, here,
for the page's `<noscript>`.
"""

from __future__ import annotations

import base64
import itertools
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from markupsafe import Markup

from runner.ledger import map_entry
from runner.model import SIDES
from runner.reports.caseview import CaseView, RunCases, SampleView, SideDetail
from runner.reports.requestview import RequestView
from runner.reports.verdict import marks_of
from runner.text import visible
from runner.workers import available, ordered

BLOCK = 1000  # cases a block: one worker's task, and how far apart a shared text repeats
DISAGREEMENT = "disagreement.json"
LEVEL = 6  # zlib's level: 1 is twice as fast and a third larger, on this data

Json = Any
Intern = Callable[[object], "int | None"]  # a text's index in its block's table (`Strings.add`)
Detail = Callable[[CaseView], Markup]  # a view rendered as the page's HTML (case.html.j2)


class Strings(dict[object, "int | None"]):
    """One block's string table: each text once, shown as `visible` shows it.

    Interning is some 70 lookups a case, so a text already in the table is found by the
    dict's own lookup (`add` is `__getitem__`, None maps to None) and only a new text or a
    value that is not a str reaches Python (`__missing__`)."""

    __slots__ = ("table",)

    def __init__(self) -> None:
        super().__init__({None: None})
        self.table: list[str] = []

    @property
    def add(self) -> Intern:
        """The interning function (not kept on the table: a cycle would outlive its block)."""
        return self.__getitem__

    def __missing__(self, value: object) -> int:
        """The index of `value`'s text, added the first time. A value that is not a str is
        looked up by its text and never kept as a key: `True` would find the text of `1`."""
        if type(value) is not str:
            return self[str(value)]  # type: ignore[return-value]  # a str is never None
        found = self[value] = len(self.table)
        # printable ASCII has nothing to show as an escape: most texts skip the pattern
        self.table.append(value if value.isascii() and value.isprintable() else visible(value))
        return found


def _units(text: str) -> int:
    """Length in UTF-16 code units, as the page's script counts a string."""
    return len(text) if text.isascii() else len(text.encode("utf-16-le")) // 2


# A record is positional (JSON arrays, no keys: a 20,000-case page's data is half the size to
# inflate and parse), every text an index into the block's strings; report.js reads the same
# fields in the same order (`caseOf`, `detailOf`, `wordsOf`):
#
#   case     [n, id, gate, stratum, moved, [reference misses, candidate misses], delta,
#             detail, failed, passed, request, paired, view]
#   view     [stratum, disagreement | null, notes, expect, [side, side], accepted | null, brief]
#   expect   [known, path, line, [[key, value]...], note]
#   accepted [[[key, value]...] | null, note]
#   side     [side, endpoint, alias, served, request_sha, transport, schema, score, admitted,
#             detail, [[code, expected, got, moved]...], noise, request | null, reply, calls,
#             attempts, elapsed_ms, ttft_ms, queued_ms, backoff_ms, stream, usage, raw | null,
#             samples]
#   request  [source, method, url, system, [[role, text, [call...], answers]...],
#             [[name, description, parameters]...], [[key, value]...], cut]
#   reply    [kind, text, cut, status, finish_reason, why, marks | null]: marks are runs of
#             [length in UTF-16 units, changed, miss code] over the text shown
#   attempt  [n, transport, status, error, message, elapsed_ms, retry_after]
#   usage    [[prompt, completion, cached] | null, cost_usd, note]
#   raw      [text | null, cut, line, size, file]: no text for a brief case, only where it is;
#            file is raw.jsonl, or raw.jsonl.gz once retention compressed the run
#   sample   [sample, transport, schema, score, [miss...], elapsed_ms]


def _request(q: RequestView | None, s: Intern) -> Json:
    if q is None:
        return None
    return [
        q.source.value,
        s(q.method),
        s(q.url),
        s(q.system),
        [[s(t.role), s(t.text), [s(c) for c in t.calls], s(t.answers)] for t in q.turns],
        [[s(t.name), s(t.description), s(t.parameters)] for t in q.tools],
        [[s(k), s(v)] for k, v in q.params],
        q.cut,
    ]


def _reply(side: SideDetail, s: Intern) -> Json:
    r = side.reply
    pieces = side.pieces
    marks = None
    if len(pieces) == 1 and not (pieces[0].changed or pieces[0].miss):
        text = s(pieces[0].text)
    else:
        shown = [(visible(p.text), p.changed, p.miss) for p in pieces]
        text = s("".join(t for t, _, _ in shown)) if r.text is not None else None
        if shown:
            marks = [[_units(t), int(changed), s(miss)] for t, changed, miss in shown]
    return [r.kind, text, r.cut, r.status, s(r.finish_reason), s(r.why), marks]


def _side(side: SideDetail, s: Intern) -> Json:
    usage, raw = side.usage, side.raw
    tokens = usage.tokens
    return [
        side.side,
        s(side.endpoint),
        s(side.model_alias),
        s(side.response_model),
        s(side.request_sha),
        s(side.transport),
        s(side.schema),
        side.task_score,
        side.admitted,
        s(side.detail),
        [[s(m.code), s(m.expected), s(m.got), m.moved] for m in side.misses],
        [s(n) for n in side.noise],
        _request(side.request, s),
        _reply(side, s),
        [s(c) for c in side.tool_calls],
        [
            [a.n, s(a.transport), a.status, s(a.error), s(a.message), a.elapsed_ms, a.retry_after]
            for a in side.attempts
        ],
        side.elapsed_ms,
        side.ttft_ms,
        side.queued_ms,
        side.backoff_ms,
        side.stream,
        [
            None if tokens is None else [tokens.prompt, tokens.completion, tokens.cached],
            usage.cost_usd,
            s(usage.note),
        ],
        None
        if raw is None
        else [s(raw.text) if raw.text else None, raw.cut, raw.line, raw.size, s(raw.file)],
        [_sample(o, s) for o in side.samples],
    ]


def _sample(o: SampleView, s: Intern) -> Json:
    misses = [s(m) for m in o.misses]
    return [o.sample, s(o.transport), s(o.schema), o.task_score, misses, o.elapsed_ms]


def view_record(view: CaseView, s: Intern) -> Json:
    """A case's detail as the page's script renders it (case.html.j2's, field for field)."""
    e, a = view.expectation, view.accepted
    return [
        s(view.stratum),
        None if view.disagreement is None else [s(m) for m in view.disagreement],
        [s(n) for n in view.notes],
        [e.known, s(e.path), e.line, [[s(k), s(v)] for k, v in e.keys], s(e.note)],
        [_side(view.reference, s), _side(view.candidate, s)],
        None
        if a is None
        else [None if a.keys is None else [[s(k), s(v)] for k, v in a.keys], s(a.note)],
        view.brief,
    ]


@dataclass(frozen=True)
class Row:
    """What the case table says of a case beyond its view: the sides whose request changed
    since the snapshot, and the ratio gates that paired it (both from the whole run)."""

    requested: Mapping[str, tuple[str, ...]]
    paired: Mapping[str, tuple[str, ...]]


def case_record(case: Mapping[str, Any], view: CaseView, row: Row, s: Intern) -> Json:
    """One case: its place in disagreement.json (`n`), what its row shows and its filters
    read (report.js's `matches`), and its detail."""
    marks = marks_of(case)
    return [
        view.index,
        s(view.id),
        s(view.gate),
        s(str(case.get("stratum") or "")),  # a hand-edited one may be a list: no key
        marks.moved,
        [[s(code) for code in marks.of(side)] for side in SIDES],
        marks.delta,
        s(view.detail),
        list(marks.failed),
        list(marks.passed),
        list(row.requested.get(view.id, ())),
        list(row.paired.get(view.id, ())),
        view_record(view, s),
    ]


@dataclass(frozen=True)
class Built:
    """One block: its cases compressed and base64'd, how many, and the `<noscript>` HTML of
    the cases in it that are shown without the script, by id."""

    data: str
    count: int
    details: dict[str, Markup]


class Encoder:
    """One block written as its cases are made: `{"cases": [...], "strings": [...]}`, each
    record encoded and deflated as it comes (a block's records as objects are several times
    the size of their text), the string table last, base64'd when done."""

    FLUSH = 1 << 16  # bytes of records handed to zlib at a time

    def __init__(self) -> None:
        self.strings = Strings()
        self.count = 0
        self._zlib = zlib.compressobj(LEVEL)
        self._out: list[bytes] = []
        self._pending: list[bytes] = [b'{"cases":[']
        self._size = 0

    def add(self, record: Json) -> None:
        data = orjson.dumps(record)
        if self.count:
            self._pending.append(b",")
        self._pending.append(data)
        self.count += 1
        self._size += len(data)
        if self._size >= self.FLUSH:
            self._flush()

    def _flush(self) -> None:
        self._out.append(self._zlib.compress(b"".join(self._pending)))
        self._pending, self._size = [], 0

    def done(self) -> str:
        self._pending.append(b'],"strings":' + orjson.dumps(self.strings.table) + b"}")
        self._flush()
        self._out.append(self._zlib.flush())
        return base64.b64encode(b"".join(self._out)).decode("ascii")


# a case: its place in disagreement.json, its line there and its entry unparsed (a worker
# parses it: sent parsed, 20,000 entries were most of the parent's share of the page)
Entry = tuple[int, int, bytes]


@dataclass(frozen=True)
class Blocks:
    """What every block is built from; a forked worker inherits it whole (`runner.workers`),
    the run's ledgers and inputs opened once in the parent."""

    cases: RunCases
    row: Row
    shown: frozenset[str]  # the cases whose `<noscript>` HTML is wanted
    detail: Detail

    def __call__(self, entries: Sequence[Entry]) -> Built:
        """A block of cases: their records, and the HTML of those in `shown`."""
        block = Encoder()
        html: dict[str, Markup] = {}
        s = block.strings.add
        path = self.cases.run_dir / DISAGREEMENT
        for index, line_no, entry in entries:
            case_id, case = map_entry(path, "cases", line_no, entry)
            if not isinstance(case, dict):
                continue  # a hand-edited entry: no case (as `RunReport.every_case` skips it)
            view = self.cases.view(index, case_id, case)
            block.add(case_record(case, view, self.row, s))
            if case_id in self.shown:
                html[case_id] = self.detail(view)
        return Built(block.done(), block.count, html)


def build_blocks(job: Blocks, entries: Iterable[Entry]) -> list[Built]:
    """Every case in blocks of BLOCK, in order: built in worker processes, on every core this
    process may use, when there are two blocks or more (`runner.workers`)."""
    chunks = _chunks(entries)
    workers = available()
    if workers < 2 or job.cases.count <= BLOCK:
        return [job(chunk) for chunk in chunks]
    job.cases.inputs.validate()  # once, here: a worker would validate the file again
    return list(ordered(job, chunks, workers))


def _chunks(entries: Iterable[Entry]) -> Iterator[list[Entry]]:
    it = iter(entries)
    while chunk := list(itertools.islice(it, BLOCK)):
        yield chunk
