"""Everything a reviewer opens a case for, built from a run directory one case at a time.

A `CaseView` holds one case of disagreement.json as people review it: what each side was
sent, what the case expected (each miss beside its expected value), both replies with a word
diff, tool calls, the three stamps, attempts, latency, tokens and cost, the snapshot entry it
was gated against and the raw exchange. `RunCases` opens a run once (raw.jsonl indexed by
byte offset in one pass, and outcomes.jsonl when the run took several samples; the fixture
file the manifest pins, the snapshot) and yields the views in disagreement.json's order, each
built when asked for, so a 20,000-case report never holds more than the case it is rendering.

Nothing here trusts the run dir: a missing or edited fixture file, an unreadable raw line or a
snapshot promoted since the run each become a note in the view, never an error.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from runner import protocols
from runner.cost.usage import cost_usd, tokens_of
from runner.gate import ALIAS_SWAP, DISAGREEMENT_CHANGED, SCHEMA_MISS, TRANSPORT_MISS
from runner.grading.tools import offered_tools
from runner.jsontext import loads
from runner.ledger import read_json_map
from runner.model import ROW_ERRORS, SIDES, Case, Exchange, Outcome, ToolCall, record
from runner.protocols.message import ANSWER_NOT_JSON
from runner.protocols.wire import Tokens
from runner.reports.accepted import Snapshot
from runner.reports.expected import Miss, call_text, explain, value_text
from runner.reports.ledgerindex import LedgerIndex, Spot
from runner.reports.marks import mark, needles
from runner.reports.requestview import RequestView, request_view
from runner.reports.runinputs import Expectation, Found, Given, RunInputs
from runner.reports.wordiff import Piece, WordDiff, shown_words, word_diff

RAW_FILE = "raw.jsonl"


@record
class Caps:
    """How much of a case its detail keeps: characters of reply, request value and raw line,
    and whether it is `brief`: its texts cut shorter, its raw exchange left to the raw.jsonl
    line it names, and neither its snapshot entry nor its other samples read (request,
    attempts, expectation and usage are there as in full)."""

    reply: int
    request: int
    raw: int
    brief: bool = False


FULL = Caps(reply=6000, request=4000, raw=4000)
BRIEF = Caps(reply=300, request=300, raw=0, brief=True)
# Past this many cases, a case that neither needs review nor went unscored is BRIEF: 20,000
# replies and requests in full are tens of megabytes even compressed, and nobody reads a
# quiet case's raw line without opening raw.jsonl.
FULL_UP_TO = 2000
BRIEF_NOTE = (
    "In brief, as a quiet case of a run of over 2,000 cases: its reply and request are cut at "
    "300 characters, its snapshot entry and other samples are left out, and its raw exchange "
    "is the raw.jsonl line named."
)
NEEDS_LOOK = frozenset({DISAGREEMENT_CHANGED, ALIAS_SWAP, TRANSPORT_MISS, SCHEMA_MISS})


def caps_for(gate: str, admitted: bool, cases: int) -> Caps:
    """FULL for a case that needs review or could not be scored, or in a run of at most
    FULL_UP_TO cases; BRIEF for the rest."""
    return FULL if gate in NEEDS_LOOK or not admitted or cases <= FULL_UP_TO else BRIEF


@record
class AttemptView:
    n: int
    transport: str
    status: int | None
    error: str | None
    message: str | None
    elapsed_ms: int | None
    retry_after: float | None


@record
class SideReply:
    """What a side got back. `kind`: "reply" (read by its protocol), "body" (the raw body: it
    did not read as a reply), "none" (nothing came back; `why` says what happened)."""

    kind: str
    text: str | None
    cut: bool
    status: int | None
    finish_reason: str | None
    why: str | None


@record
class RawView:
    """The exchange as raw.jsonl holds it: its line, cut at the cap (then see `file`:`line`)."""

    text: str
    cut: bool
    line: int
    size: int
    file: str = RAW_FILE


@record
class SampleView:
    """One sample's stamps and score (samples > 1: sample 0 is the one shown in full)."""

    sample: int
    transport: str
    schema: str
    task_score: float | None
    misses: tuple[str, ...]
    detail: str
    elapsed_ms: int | None


@record
class UsageView:
    """Sample 0's tokens and cost; `cost_usd` None with `note` saying why."""

    tokens: Tokens | None
    cost_usd: float | None
    note: str | None


@record
class SideDetail:
    side: str
    endpoint: str | None
    model_alias: str | None
    response_model: str | None
    request_sha: str | None
    transport: str
    schema: str
    task_score: float | None
    admitted: bool
    detail: str
    misses: tuple[Miss, ...]
    noise: tuple[str, ...]
    request: RequestView | None
    reply: SideReply
    tool_calls: tuple[str, ...]
    attempts: tuple[AttemptView, ...]
    elapsed_ms: int | None
    ttft_ms: int | None
    queued_ms: int | None  # what the call waited before its attempts went out
    backoff_ms: int | None  # and slept between them (retry backoff)
    stream: bool
    usage: UsageView
    raw: RawView | None
    samples: tuple[SampleView, ...]
    # the reply shown, as runs of text with the diff's and the misses' marks
    pieces: tuple[Piece, ...] = ()


@record
class AcceptedView:
    """The snapshot entry the case is gated against, each key's value as JSON text."""

    keys: tuple[tuple[str, str], ...] | None  # None: the snapshot has no entry for it
    note: str | None

    @property
    def disagreement(self) -> str | None:
        """The accepted disagreement, as JSON text: the first thing a reviewer compares."""
        return dict(self.keys or ()).get("disagreement")


@record
class CaseView:
    id: str
    index: int  # position in disagreement.json: the page's `c-N` / `t-N`
    gate: str
    detail: str
    stratum: str | None
    fixture_sha: str | None
    admitted: bool
    disagreement: tuple[str, ...] | None
    expectation: Expectation
    reference: SideDetail
    candidate: SideDetail
    diff: WordDiff | None
    accepted: AcceptedView | None  # None: not read for a brief view
    notes: tuple[str, ...]
    brief: bool = False  # built with BRIEF caps: texts cut shorter, the raw line not embedded

    @property
    def sides(self) -> tuple[SideDetail, SideDetail]:
        return (self.reference, self.candidate)

    @property
    def brief_note(self) -> str:
        """What a brief detail leaves out, said under it."""
        return BRIEF_NOTE


def _body_text(exchange: Exchange) -> str | None:
    response = exchange.response
    if response is None:
        return None
    if response.encoding == "utf-8":
        return response.body
    try:
        return base64.b64decode(response.body, validate=True).decode("utf-8", "replace")
    except (ValueError, binascii.Error):
        return f"<{len(response.body)} bytes of base64 that do not decode>"


def _cap(text: str, limit: int) -> tuple[str, bool]:
    """At most `limit` characters, and whether any were cut (the detail says so)."""
    return (text, False) if len(text) <= limit else (text[:limit], True)


@record
class _Read:
    reply: SideReply
    calls: tuple[ToolCall, ...]
    answer: Any
    has_answer: bool
    whole: str | None = None  # the reply text uncut, for the diff
    usage: Mapping[str, Any] | None = None  # what the reply said it cost, as stamping reads it


def _read(exchange: Exchange, expects_json: bool, cap: int) -> _Read:
    """Sample 0's reply through the protocol that stamped it."""
    response = exchange.response
    finish = None
    if response is None:
        last = exchange.attempts[-1] if exchange.attempts else None
        why = exchange.transport
        if last is not None and (last.message or last.error):
            why = f"{exchange.transport}: {last.message or last.error}"
        return _Read(SideReply("none", None, False, None, None, why), (), None, False)
    if exchange.transport == "ok":
        read = protocols.read(
            exchange.adapter,
            response,
            expects_json=expects_json,
            answer_pointer=exchange.answer_pointer,
        )
        finish, usage = read.finish_reason, read.facts.usage
        if read.reply is not None:
            text, cut = _cap(read.reply.text, cap)
            view = SideReply("reply", text, cut, response.status, finish, None)
            calls, answer = read.reply.tool_calls, read.reply.answer
            return _Read(view, calls, answer, expects_json, read.reply.text, usage)
        why = f"schema {read.detail}"
    else:
        why, usage = exchange.transport, None
    text, cut = _cap(_body_text(exchange) or "", cap)
    body = SideReply("body", text, cut, response.status, finish, why)
    return _Read(body, (), None, False, usage=usage)


def _pieces(
    side: Mapping[str, Any], other: Mapping[str, Any], diff: WordDiff | None
) -> tuple[Piece, ...]:
    """A side's reply (SideDetail's fields) as pieces: the diff's, or the text whole, and
    where a reply (not a raw body) shows a miss, marked."""
    reply: SideReply = side["reply"]
    if diff is not None:
        pieces = diff.reference if side["side"] == SIDES[0] else diff.candidate
    else:
        pieces = (Piece(reply.text, changed=False),) if reply.text else ()
    if reply.kind != "reply":
        return pieces
    own: tuple[Miss, ...] = side["misses"]
    theirs: tuple[Miss, ...] = other["misses"]
    return mark(pieces, needles((m.code for m in own), (m.code for m in theirs)))


def _attempts(exchange: Exchange) -> tuple[AttemptView, ...]:
    return tuple(
        AttemptView(a.n, a.transport, a.status, a.error, a.message, a.elapsed_ms, a.retry_after)
        for a in exchange.attempts
    )


def _strings(value: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in value) if isinstance(value, list) else ()


class RunCases:
    """A run directory opened for its case details; iterate for every case's view, in
    disagreement.json's order. Use as a context manager (it holds the ledgers open)."""

    def __init__(
        self,
        run_dir: Path,
        summary: Mapping[str, Any] | None = None,
        given: Given | None = None,
        *,
        accepted: bool = True,
    ) -> None:
        """`accepted` False: the snapshot is not read, for what shows replies alone (a
        20,000-case snapshot took a fifth of JUnit's time to index)."""
        self.run_dir = run_dir
        self.inputs = RunInputs(run_dir, summary, given)
        self.raw = LedgerIndex(run_dir / RAW_FILE)
        self._outcomes: LedgerIndex | None = None
        self.snapshot: Snapshot | None = self.inputs.snapshot() if accepted else None
        self.count = self._number("cases", 0)
        # one sample a side: the reply read from raw.jsonl says all (its usage too), and
        # outcomes.jsonl is not read at all unless a latency or cost gate's pairs are shown
        self.samples = self._number("samples", 1)
        self.notes: list[str] = [*self.inputs.notes, *self.raw.problems]
        if self.samples > 1:
            self.notes.extend(self.outcomes.problems)
        if self.snapshot is not None and self.snapshot.problem:
            self.notes.append(self.snapshot.problem)

    def _number(self, key: str, default: int) -> int:
        summary = self.inputs.summary
        found = summary.get(key) if isinstance(summary, Mapping) else None
        return found if type(found) is int and found >= 0 else default

    @property
    def outcomes(self) -> LedgerIndex:
        """outcomes.jsonl indexed, the first time a view or a gate's pairs need it."""
        if self._outcomes is None:
            self._outcomes = LedgerIndex(self.run_dir / "outcomes.jsonl")
        return self._outcomes

    def __enter__(self) -> RunCases:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self.raw.close()
        if self._outcomes is not None:
            self._outcomes.close()
        self.inputs.close()
        if self.snapshot is not None:
            self.snapshot.close()

    def __iter__(self) -> Iterator[CaseView]:
        for index, (case_id, verdict) in enumerate(
            read_json_map(self.run_dir / "disagreement.json", "cases")
        ):
            yield self.view(index, case_id, verdict if isinstance(verdict, Mapping) else {})

    def view(self, index: int, case_id: str, verdict: Mapping[str, Any]) -> CaseView:
        """One case's view from its disagreement.json entry and the run's files."""
        gate = str(verdict.get("gate"))
        admitted = verdict.get("admitted") is True
        caps = caps_for(gate, admitted, self.count)
        sha = verdict.get("fixture_sha")
        fixture_sha = sha if isinstance(sha, str) else None
        found = self.inputs.case(case_id, fixture_sha)
        notes = [found.note] if found.note else []
        delta = verdict.get("disagreement")
        moved = set(_strings(delta))
        sides: dict[str, dict[str, Any]] = {}
        reads: dict[str, _Read] = {}
        for side in SIDES:
            block = verdict.get(side)
            detail, read, side_notes = self._side(
                case_id,
                side,
                block=block if isinstance(block, Mapping) else {},
                found=found,
                moved=moved,
                caps=caps,
            )
            sides[side], reads[side] = detail, read
            notes.extend(side_notes)
        diff = None
        ref, cand = (reads[s].whole for s in SIDES)
        if ref is not None and cand is not None:  # two replies: a raw body is not diffed
            diff = word_diff(ref, cand, shown_words(caps.reply)).capped(caps.reply)
        ref_side, cand_side = (
            SideDetail(**sides[side], pieces=_pieces(sides[side], sides[other], diff))
            for side, other in (SIDES, SIDES[::-1])
        )
        stratum = verdict.get("stratum")
        return CaseView(
            id=case_id,
            index=index,
            gate=gate,
            detail=str(verdict.get("detail", "")),
            stratum=stratum if isinstance(stratum, str) else None,
            fixture_sha=fixture_sha,
            admitted=admitted,
            disagreement=_strings(delta) if isinstance(delta, list) else None,
            expectation=found.expectation(caps.request),
            reference=ref_side,
            candidate=cand_side,
            diff=diff,
            accepted=None if caps.brief else self._accepted(case_id, caps.request),
            notes=tuple(notes),
            brief=caps.brief,
        )

    def replies(self, case_id: str, verdict: Mapping[str, Any], cap: int) -> list[SideReply]:
        """Each side's reply alone, as the run stamped it, for what shows nothing else (JUnit's
        failures): no fixture row is read, so a JSON case is known by its `answer_not_json`
        stamp (another case reads the same whether it expects JSON or not)."""
        found = []
        for side in SIDES:
            block = verdict.get(side)
            stamp = str(block.get("detail", "")) if isinstance(block, Mapping) else ""
            spots = self.raw.spots(case_id, side)
            exchange = None
            if spots:
                key, line = (case_id, side, spots[0].sample), self.raw.read(spots[0])
                exchange = self._exchange(key, spots[0], line)[0]
            if exchange is None:
                found.append(SideReply("none", None, False, None, None, stamp or None))
            else:
                found.append(_read(exchange, stamp.startswith(ANSWER_NOT_JSON), cap).reply)
        return found

    def _accepted(self, case_id: str, cap: int) -> AcceptedView:
        if self.snapshot is None:
            return AcceptedView(None, "the snapshot is not known: the run's config is not found")
        entry = self.snapshot.entry(case_id)
        note = self.inputs.snapshot_note(self.snapshot)
        if entry is None:
            return AcceptedView(None, note or "not in the snapshot")
        keys = tuple((str(k), value_text(v, cap)) for k, v in sorted(entry.items()))
        return AcceptedView(keys, note)

    def _exchange(
        self, key: tuple[str, str, int], spot: Spot, line: bytes
    ) -> tuple[Exchange | None, str | None]:
        """The exchange on `line`, which the index found `key`'s, or why it is none."""
        try:
            row = loads(line)
        except ValueError:  # the file changed since it was indexed
            return None, f"{RAW_FILE}:{spot.line}: no longer reads as an exchange"
        try:
            exchange = Exchange.from_json(row)
        except ROW_ERRORS:
            return None, f"{RAW_FILE}:{spot.line}: not an exchange"
        if exchange.key != key:  # the index read its key without parsing it: laid out anew
            return None, f"{RAW_FILE}:{spot.line}: no longer holds this exchange"
        return exchange, None

    def _samples(self, case_id: str, side: str) -> list[Outcome]:
        """A side's outcomes by sample, when the run took more than one (with one, the
        reply read from raw.jsonl is all the detail shows)."""
        if self.samples <= 1:
            return []
        rows = []
        for spot in self.outcomes.spots(case_id, side):
            row = self.outcomes.row(spot)
            try:
                rows.append(Outcome.from_json(row or {}))
            except ROW_ERRORS:
                continue
        return rows

    def _side(
        self,
        case_id: str,
        side: str,
        *,
        block: Mapping[str, Any],
        found: Found,
        moved: set[str],
        caps: Caps,
    ) -> tuple[dict[str, Any], _Read, list[str]]:
        """A side's detail as SideDetail's fields (all but `pieces`, which need both sides),
        its reply as read, and the notes it adds to the case."""
        notes: list[str] = []
        spots = self.raw.spots(case_id, side)
        exchange: Exchange | None = None
        raw: RawView | None = None
        if spots:
            first = spots[0]
            line = self.raw.read(first)
            exchange, problem = self._exchange((case_id, side, first.sample), first, line)
            if problem:
                notes.append(problem)
            text, cut = _cap(line[: caps.raw * 4].decode("utf-8", "replace"), caps.raw)
            raw = RawView(  # `file` is raw.jsonl.gz once retention compressed the run
                text, cut or len(line) > caps.raw * 4, first.line, first.size, self.raw.path.name
            )
        outcomes = [] if caps.brief else self._samples(case_id, side)
        case = found.case
        if exchange is None:
            why = str(block.get("detail") or "no call was recorded")
            if not self.raw.opened:
                why = f"{RAW_FILE} is not in the run dir ({why})"
            elif spots:
                why = f"{RAW_FILE}:{spots[0].line} does not read as an exchange"
            read = _Read(SideReply("none", None, False, None, None, why), (), None, False)
            request = None
            if case is not None:
                request = self.inputs.stand_in(side, case, caps.request)
        else:
            read = _read(exchange, case.expects_json if case else False, caps.reply)
            request = self._request(exchange, side, case, caps.request)
        offered = tuple(offered_tools(case.tools)) if case is not None else ()
        expect = case.expect if case is not None else None
        misses = tuple(
            explain(
                code,
                expect,
                **({"answer": read.answer} if read.has_answer else {}),
                calls=read.calls,
                offered=offered,
                moved=code in moved,
            )
            for code in _strings(block.get("misses"))
        )
        score = block.get("task_score")
        model = block.get("response_model")
        return (
            {
                "side": side,
                "endpoint": exchange.endpoint if exchange else self.inputs.endpoint_name(side),
                "model_alias": exchange.model_alias if exchange else None,
                "response_model": model if isinstance(model, str) else None,
                "request_sha": exchange.request_sha if exchange else None,
                "transport": str(block.get("transport", "cancelled")),
                "schema": str(block.get("schema", "skipped")),
                "task_score": float(score) if isinstance(score, int | float) else None,
                "admitted": block.get("admitted") is True,
                "detail": str(block.get("detail", "")),
                "misses": misses,
                "noise": _strings(block.get("noise")),
                "request": request,
                "reply": read.reply,
                "tool_calls": tuple(call_text(c, caps.request) for c in read.calls),
                "attempts": _attempts(exchange) if exchange else (),
                "elapsed_ms": exchange.elapsed_ms if exchange else None,
                "ttft_ms": exchange.ttft_ms if exchange else None,
                "queued_ms": exchange.queued_ms if exchange else None,
                "backoff_ms": exchange.backoff_ms if exchange else None,
                "stream": exchange.stream if exchange else False,
                "usage": self._usage(side, exchange, read.usage),
                "raw": raw,
                "samples": tuple(
                    SampleView(
                        o.sample,
                        o.transport,
                        o.schema,
                        o.task_score,
                        o.misses,
                        o.detail,
                        o.elapsed_ms,
                    )
                    for o in outcomes
                ),
            },
            read,
            notes,
        )

    def _request(
        self, exchange: Exchange, side: str, case: Case | None, cap: int
    ) -> RequestView | None:
        if exchange.request.get("body") is not None:
            return request_view(exchange.adapter, exchange.request, cap=cap)
        return self.inputs.stand_in(side, case, cap) if case is not None else None

    def _usage(
        self, side: str, exchange: Exchange | None, usage: Mapping[str, Any] | None
    ) -> UsageView:
        """The call's usage, read by the protocol its exchange says it spoke, and its cost."""
        if exchange is None:
            return UsageView(None, None, "no call was recorded")
        tokens = tokens_of(exchange.adapter, usage)
        price = self.inputs.price(side)
        if tokens is None:
            return UsageView(None, None, "unknown: the reply reported no usage")
        if price is None:
            return UsageView(tokens, None, "unknown: the endpoint has no price")
        cost = cost_usd(tokens.prompt, tokens.completion, tokens.cached, price)
        return UsageView(tokens, cost, None)


def case_views(run_dir: Path) -> Iterator[CaseView]:
    """Every case's view of a run, in disagreement.json's order, one at a time."""
    with RunCases(run_dir) as cases:
        yield from cases
