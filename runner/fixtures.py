"""Golden cases: read every accepted fixture shape into `Case` values, each pinned by fixture_sha.

Fixture files are reviewed like code, so every rejection names `file:line` and the key at fault
(exit 65), and nothing here guesses: a row is either one of the documented shapes or an error.
The hash is taken over the row exactly as written, before any normalisation, so that seed 004's
pinned files keep their hashes and a shape change in this loader can never move a pin.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, overload

from runner import casekeys
from runner.casekeys import BadTools, ToolFiles, check_schema, json_kind
from runner.errors import DataError, FixtureError, ParallaxError, reason_of
from runner.files import Unreadable, read_regular
from runner.jsontext import (
    MAX_DEPTH,
    STRICT,
    DuplicateKeyError,
    copy_json,
    loads,
    long_integer_line,
    strict_loads,
    too_deep,
)
from runner.model import STRATA, Case
from runner.text import holds_surrogate, may_hold_surrogates, shared
from runner.toolgrade import tool_expect_problem
from runner.workers import available, line_spans, ordered

__all__ = ["fixture_sha", "load_cases", "pin_lines"]

_OPTIONAL_TEXT_KEYS = ("system", "grader", "owner", "completion")
_SEED000_KEYS = ("must_include", "must_not_include", "max_chars")
_CANONICAL_KEYS = frozenset(
    {
        "id",
        "prompt",
        "stratum",
        "expect",
        "tags",
        "fixture_sha",
        *_OPTIONAL_TEXT_KEYS,
        *casekeys.REQUEST_KEYS,
        casekeys.RECORDED_CALLS,
    }
)
_SEED004_KEYS = (_CANONICAL_KEYS - {"id"}) | {"case_id"}
_JSON_WS = " \t\r\n"
_BOM = b"\xef\xbb\xbf"

# A JSONL file this large is validated in worker processes (some 5,000 rows), CHUNK_LINES rows
# a task: below it, forking costs more than it saves.
PARALLEL_BYTES = 1 << 20
CHUNK_LINES = 1000


def fixture_sha(row: Mapping[str, Any]) -> str:
    """Pin a row by its content, ignoring any pin it already carries.

    The rule is seed 004's byte for byte (default `ensure_ascii`, compact separators), so files
    pinned by the seed's own script keep validating here.
    """
    body = {key: value for key, value in row.items() if key != "fixture_sha"}
    raw = json.dumps(body, sort_keys=True, separators=(",", ":")).encode("utf-8")
    return hashlib.sha256(raw).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class _Row:
    """A parsed row and where it sat, kept apart from `Case` so `pin` can print it untouched."""

    data: dict[str, Any]
    line: int
    start: int = 0  # where the row's text starts and ends in the decoded file
    end: int = 0


class CaseRef(NamedTuple):
    """A validated case by where its row sits in the fixture file, with what the gate needs.

    A tuple: `CaseRefs` builds one on every lookup, and a tuple is the cheapest to build.
    """

    id: str
    stratum: str | None
    fixture_sha: str
    line: int
    start: int  # byte offsets of the row in the file
    end: int
    digest: bytes  # of the row's bytes, to know it unchanged when read back


_STRATUM_OF: tuple[str | None, ...] = (None, *STRATA)  # a case's stratum by its code in CaseRefs


def _new_ref(fields: RefFields) -> CaseRef:
    return tuple.__new__(CaseRef, fields)  # skips NamedTuple's keyword-taking __new__


class CaseRefs(Sequence[CaseRef]):
    """Every validated case of a fixture file in file order, held in columns.

    As one `CaseRef` object each, with their ints, digests and an index entry, the cases were
    the largest thing a 20,000-case run holds that grows with the suite (some 370 bytes a
    case); in plain arrays the same is about half, and a `CaseRef` is built when asked for.
    """

    def __init__(self) -> None:
        self._ids: list[str] = []
        self._shas: list[str] = []
        self._strata = bytearray()
        self._lines = array("q")
        self._spans = array("q")  # start, end of each row: byte offsets in the file
        self._digests = bytearray()
        self._index: dict[str, int] = {}

    def add(self, fields: RefFields) -> int | None:
        """Add a case; or, when its id is taken, add nothing and return the first one's line."""
        case_id, stratum, sha, line, start, end, digest = fields
        first = self.first_line(case_id)
        if first is not None:
            return first
        self._index[case_id] = len(self._ids)
        self._ids.append(case_id)
        self._shas.append(sha)
        self._strata.append(_STRATUM_OF.index(stratum))
        self._lines.append(line)
        self._spans.extend((start, end))
        self._digests += digest
        return None

    def default_stratum(self, stratum: str) -> None:
        """Give the cases that name no stratum this one (a stratified suite's are medium)."""
        self._strata = self._strata.replace(b"\0", bytes([_STRATUM_OF.index(stratum)]))

    @property
    def ids(self) -> Sequence[str]:
        """The case ids in file order, without building a ref for each."""
        return self._ids

    def get(self, case_id: str) -> CaseRef | None:
        at = self._index.get(case_id)
        return None if at is None else self[at]

    def first_line(self, case_id: str) -> int | None:
        at = self._index.get(case_id)
        return None if at is None else self._lines[at]

    def __len__(self) -> int:
        return len(self._ids)

    @overload
    def __getitem__(self, at: int) -> CaseRef: ...

    @overload
    def __getitem__(self, at: slice) -> Sequence[CaseRef]: ...

    def __getitem__(self, at: int | slice) -> CaseRef | Sequence[CaseRef]:
        if isinstance(at, slice):
            return [self[i] for i in range(*at.indices(len(self)))]
        return _new_ref(
            (
                self._ids[at],
                _STRATUM_OF[self._strata[at]],
                self._shas[at],
                self._lines[at],
                self._spans[2 * at],
                self._spans[2 * at + 1],
                bytes(self._digests[_DIGEST_SIZE * at : _DIGEST_SIZE * (at + 1)]),
            )
        )

    def __iter__(self) -> Iterator[CaseRef]:
        return map(self.__getitem__, range(len(self)))


def _no_check(case: Case) -> None:
    """Every case passes: expectation keys are only checked against a suite's graders."""


class FixtureFile:
    """A fixture file validated once, whose cases are read back one at a time when used.

    Held as `Case` objects, a 20,000-case suite was most of a run's memory, which has to be
    bounded by concurrency rather than suite size. A run keeps one `CaseRef` per case and reads
    a case's row again to call or grade it; the cases in use stay in a small cache. The file
    stays open from the first read to `close`, so a file replaced by a rename is still read as
    validated; a row edited in place no longer matches its digest and is a DataError naming
    it, never a silently different case.
    """

    KEEP = 2048  # cases kept parsed: more than a run has in flight

    def __init__(self, path: Path) -> None:
        self.path = path
        self._recent: OrderedDict[str, Case] = OrderedDict()
        self._fd: int | None = None
        self._tools = ToolFiles(path)

    def validate(self, check: Callable[[Case], None] = _no_check) -> CaseRefs:
        """Validate every row into a case, pass each case to `check`, and return their refs.

        A large JSONL file is validated in forked worker processes, chunk by chunk, and `check`
        (the suite's expectation-key check) runs where the case was built. Duplicate ids and
        which error comes first are settled here, in file order, so the first error is the
        one a single process would report.
        """
        where = str(self.path)
        data = _read_file(where, self.path)
        text = _decode(where, data)
        rows = _document_rows(where, text)
        if rows is not None:
            piece = _Piece(data, 0, text)
            return _settle(where, [_scanned(where, rows, piece, check, self._tools)])
        last = text.rstrip(_JSON_WS).count("\n") + 1  # the last line that is not blank
        task = _JsonlTask(where, data, last, not text.endswith("\n"), check, self._tools)
        del text
        workers = available()
        if workers < 2 or len(data) < PARALLEL_BYTES:
            return _settle(where, [task((1, 0, len(data)))])
        spans = line_spans(data, CHUNK_LINES)
        with contextlib.closing(ordered(task, spans, workers)) as scans:
            return _settle(where, scans)  # an error found stops the workers here

    def load(self, ref: CaseRef) -> Case:
        case = self._recent.get(ref.id)
        if case is not None:
            self._recent.move_to_end(ref.id)
            return case
        # the row is the one validated: parse it plainly, check nothing again, keep its pin;
        # the suite settles strata (a stratified suite's unlabelled case is medium)
        data = self.row(ref)
        case = _case(
            str(self.path),
            ref.line,
            data,
            _expect_shape(data),
            sha=ref.fixture_sha,
            stratum=ref.stratum,
            tools=self._offered(ref, data),
        )
        self._recent[ref.id] = case
        if len(self._recent) > self.KEEP:
            self._recent.popitem(last=False)
        return case

    def _offered(self, ref: CaseRef, data: Mapping[str, Any]) -> tuple[Mapping[str, Any], ...]:
        """The tools of a validated row. A tools file is read once here too (validating in
        worker processes read it there) and must still pin the case as it did then."""
        if not isinstance(data.get("tools"), str):
            return tuple(data.get("tools", ()))
        where = str(self.path)
        changed = f"changed during the run: case {ref.id!r}"
        try:
            tools = self._tools.offered(data)
        except BadTools as exc:
            raise DataError(where, f"{changed}: {exc.reason}", ref.line) from None
        if fixture_sha(_pinned(data, tools)) != ref.fixture_sha:
            name = data["tools"]
            raise DataError(where, f"{changed}: 'tools' file {name} is not as validated", ref.line)
        return tools

    def row(self, ref: CaseRef) -> dict[str, Any]:
        """A validated case's row as written, read back by its byte span."""
        where = str(self.path)
        changed = f"changed during the run: case {ref.id!r} no longer reads as validated"
        try:
            if self._fd is None:
                self._fd = os.open(self.path, os.O_RDONLY)
            raw = os.pread(self._fd, ref.end - ref.start, ref.start)
        except OSError:
            raise DataError(where, changed, ref.line) from None
        if _digest(raw) != ref.digest:
            raise DataError(where, changed, ref.line)
        data: dict[str, Any] = loads(raw)
        return data

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


_DIGEST_SIZE = 16


def _digest(raw: bytes) -> bytes:
    return hashlib.blake2b(raw, digest_size=_DIGEST_SIZE).digest()


def load_cases(path: Path, check: Callable[[Case], None] = _no_check) -> list[Case]:
    """Read a JSONL or JSON-document fixture file into validated, normalised cases.

    A row's own `fixture_sha` is ignored and recomputed: the pin is an output of the content,
    not a claim about it, so a stale pin can never make an edited case look unchanged.
    Unknown `expect` keys pass unless `check` refuses them: only the suite knows its custom
    graders (`runner.grading.check_case`).
    """
    fixtures = FixtureFile(path)
    try:
        return [fixtures.load(ref) for ref in fixtures.validate(check)]
    finally:
        fixtures.close()


def pin_lines(path: Path) -> Iterator[str]:
    """Yield each row with its computed `fixture_sha`, formatted like seed 004's `pin`.

    The whole file is validated before the first line is yielded, so a bad row never leaves
    half a pinned file behind.
    """
    fixtures = FixtureFile(path)
    try:
        for ref in fixtures.validate():
            pinned = fixtures.row(ref)
            pinned["fixture_sha"] = ref.fixture_sha
            yield json.dumps(pinned, sort_keys=True)
    finally:
        fixtures.close()


# What validating a run of rows gives back: each case's ref fields, then the first error and
# (when the error came from `check`) the id and line of the case it was about.
RefFields = tuple[str, str | None, str, int, int, int, bytes]
_Scan = tuple[list[RefFields], ParallaxError | None, tuple[str, int] | None]


@dataclass(frozen=True, slots=True)
class _Piece:
    """Whole rows of a fixture file: their bytes, where those start in the file, their text."""

    data: bytes
    offset: int
    text: str  # `data` decoded, without the file's BOM

    @classmethod
    def of(cls, data: bytes, offset: int) -> _Piece:
        # the whole file was decoded before it was cut, so this cannot fail
        return cls(data, offset, (data.removeprefix(_BOM) if offset == 0 else data).decode())


def _scanned(
    where: str,
    rows: Iterable[_Row],
    piece: _Piece,
    check: Callable[[Case], None],
    files: ToolFiles,
) -> _Scan:
    """Validate rows parsed from the piece's text and check each case; stop at the first error
    and say how far it got."""
    data, offset = piece.data, piece.offset
    bom = len(data) - len(data.removeprefix(_BOM)) if offset == 0 else 0
    byte_at = _byte_offsets(piece.text, bom)
    surrogates = may_hold_surrogates(piece.text)
    refs: list[RefFields] = []
    case: Case | None = None
    try:
        for row in rows:
            if surrogates and holds_surrogate(row.data):
                raise _fail(where, row.line, "lone surrogate escape (\\ud800-\\udfff) is not text")
            case = _to_case(where, row, files)
            check(case)
            start, end = byte_at(row.start), byte_at(row.end)
            pin = case.fixture_sha
            span = (offset + start, offset + end)
            refs.append((case.id, case.stratum, pin, row.line, *span, _digest(data[start:end])))
            case = None
    except ParallaxError as exc:  # a FixtureError, or a ConfigError naming a missing grader
        return refs, exc, (case.id, case.line) if case is not None else None
    return refs, None, None


@dataclass(frozen=True)
class _JsonlTask:
    """Validate one span of whole JSONL lines of `data`: (first line number, start, end).
    A forked worker inherits it whole, the file's bytes, `check` and the graders behind it
    included, and reads each tools file its rows name once itself."""

    where: str
    data: bytes
    last: int  # the file's last line that is not blank
    torn: bool  # the file does not end with a newline
    check: Callable[[Case], None]
    files: ToolFiles

    def __call__(self, span: tuple[int, int, int]) -> _Scan:
        first, start, end = span
        piece = _Piece.of(self.data[start:end], start)
        rows = _parse_jsonl(self.where, piece.text, first, self.last, self.torn)
        return _scanned(self.where, rows, piece, self.check, self.files)


def _settle(where: str, scans: Iterable[_Scan]) -> CaseRefs:
    """Refs in file order, refusing a duplicate id before any later error."""
    refs = CaseRefs()
    for found, error, failed in scans:
        for fields in found:
            first = refs.add(fields)
            if first is not None:
                raise _duplicate(where, fields[0], fields[3], first)
        if error is not None:
            if failed is not None and (first := refs.first_line(failed[0])) is not None:
                raise _duplicate(where, failed[0], failed[1], first)
            raise error
    return refs


def _duplicate(where: str, case_id: str, line: int, first: int) -> FixtureError:
    return _fail(where, line, f"duplicate id {case_id!r} (first on line {first})")


def _read_file(where: str, path: Path) -> bytes:
    try:
        return read_regular(path)
    except Unreadable as exc:
        raise DataError(where, exc.reason) from None


def _byte_offsets(text: str, shift: int) -> Callable[[int], int]:
    """Map increasing character offsets of `text` to offsets in the bytes it was decoded from,
    which begin with `shift` bytes of BOM."""
    if text.isascii():
        return lambda index: index + shift
    done = [0, shift]  # characters and bytes counted so far

    def at(index: int) -> int:
        done[1] += len(text[done[0] : index].encode("utf-8"))
        done[0] = index
        return done[1]

    return at


def _decode(where: str, data: bytes) -> str:
    """Decode once, but report a bad byte on its own line rather than as a file offset."""
    data = data.removeprefix(b"\xef\xbb\xbf")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise _fail(
            where, line, f"not UTF-8: byte 0x{data[exc.start]:02x} cannot be decoded"
        ) from None


def _document_rows(where: str, text: str) -> list[_Row] | None:
    """The rows of a JSON document with a `cases` list, or None when the file is JSONL.

    The first line of JSONL also opens with `{`, so the first character decides nothing: the
    file is a document only when the whole text parses as one object. A one-line object
    without `cases` is an ordinary single-row JSONL file.
    """
    stripped = text.strip(_JSON_WS)
    if not stripped.startswith("{"):
        return None
    outer: list[str] = []

    def keys_kept(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        outer[:] = [key for key, _ in pairs]  # the outermost object is built last
        return dict(pairs)

    try:
        whole = json.loads(text, object_pairs_hook=keys_kept)
    except RecursionError:  # only text far past MAX_DEPTH gets here
        _refuse_too_deep(where, text, 1)
        raise _fail(where, 1, f"nested deeper than {MAX_DEPTH} levels") from None
    except json.JSONDecodeError as exc:
        if _broken_document(text, exc.lineno):
            reason = f"invalid JSON: {exc.msg} (column {exc.colno})"
            raise _fail(where, exc.lineno, reason) from None
        return None
    except ValueError as exc:  # an integer past the digit limit: the parser names no place
        line = long_integer_line(text)
        if line is not None and _broken_document(text, line):
            raise _fail(where, line, f"invalid JSON: {reason_of(exc)}") from None
        return None
    if not isinstance(whole, dict) or ("cases" not in whole and "\n" not in stripped):
        return None
    start = len(text) - len(text.lstrip(_JSON_WS))
    twice = next((key for i, key in enumerate(outer) if key in outer[:i]), None)
    if twice is not None:  # a second `cases` would silently replace the first
        raise _fail(where, _line_at(text, start), f"duplicate key {twice!r} in the document")
    if not isinstance(whole.get("cases"), list):
        raise _fail(where, _line_at(text, start), "JSON document without a 'cases' list")
    _refuse_too_deep(where, text, 1)
    return _parse_document(where, text)


def _refuse_too_deep(where: str, text: str, first_line: int) -> None:
    """Rows are refused past MAX_DEPTH before they are parsed: see `runner.jsontext`."""
    at = too_deep(text)
    if at is not None:
        line = first_line + text.count("\n", 0, at)
        raise _fail(where, line, f"nested deeper than {MAX_DEPTH} levels")


def _broken_document(text: str, failed_on: int) -> bool:
    """A pretty-printed document with a typo should be reported where the typo is.

    Read as JSONL it would fail on its opening `{` line, which points nowhere useful. When the
    first non-blank line is not JSON by itself but the whole-text parse failed past it (on line
    `failed_on`), the file was meant to be one document.
    """
    first_number, first_line = next(
        (n, line) for n, line in enumerate(text.split("\n"), 1) if line.strip(_JSON_WS)
    )
    try:
        json.loads(first_line)
    except ValueError:
        return failed_on > first_number
    return False


def _parse_jsonl(where: str, text: str, first: int, last: int, torn: bool) -> Iterator[_Row]:
    """The rows of whole JSONL lines numbered from `first`; the file's last line that is not
    blank is `last`, torn when the file does not end with a newline."""
    start = 0
    for number in range(first, first + text.rstrip(_JSON_WS).count("\n") + 1):
        end = text.find("\n", start)
        raw = text[start:] if end < 0 else text[start:end]
        span = (start, len(text) if end < 0 else end)
        start = end + 1
        if not raw.strip(_JSON_WS):
            continue
        _refuse_too_deep(where, raw, number)
        try:
            value = strict_loads(raw)
        except DuplicateKeyError as exc:
            raise _fail(where, number, f"duplicate key {exc.key!r} in one row") from None
        except json.JSONDecodeError as exc:
            reason = f"invalid JSON: {exc.msg} (column {exc.colno})"
            if torn and number == last:
                reason = f"truncated last line (no newline at end; {reason})"
            raise _fail(where, number, reason) from None
        except ValueError as exc:
            raise _fail(where, number, f"invalid JSON: {reason_of(exc)}") from None
        if not isinstance(value, dict):
            kind = json_kind(value)
            raise _fail(where, number, f"row is not a JSON object (got {kind})")
        yield _Row(value, number, *span)


def _parse_document(where: str, text: str) -> list[_Row]:
    """Decode each case where it starts, so its errors and its `Case.line` point at it."""
    rows: list[_Row] = []
    for index, start in enumerate(_case_offsets(text)):
        line = _line_at(text, start)
        try:
            value, end = STRICT.raw_decode(text, start)
        except DuplicateKeyError as exc:
            raise _fail(where, line, f"duplicate key {exc.key!r} in one case") from None
        except ValueError as exc:
            raise _fail(where, line, f"invalid JSON: {reason_of(exc)}") from None
        if not isinstance(value, dict):
            kind = json_kind(value)
            raise _fail(where, line, f"case {index} is not a JSON object (got {kind})")
        rows.append(_Row(value, line, start, end))
    return rows


def _case_offsets(text: str) -> list[int]:
    """Find where each element of the top-level `cases` array starts, by walking the document.

    Searching for `"id"` text would be fooled by a prompt that quotes JSON; walking with
    `raw_decode` follows the real structure (a document with `cases` twice is refused before).
    """
    decoder = json.JSONDecoder()
    pos = _skip_ws(text, 0) + 1  # past the opening brace
    found: list[int] = []
    while True:
        pos = _skip_ws(text, pos)
        if pos >= len(text) or text[pos] == "}":
            return found
        if text[pos] == ",":
            pos += 1
            continue
        key, pos = decoder.raw_decode(text, pos)
        pos = _skip_ws(text, pos) + 1  # past the colon
        pos = _skip_ws(text, pos)
        if key == "cases" and text.startswith("[", pos):
            found = []
            pos += 1
            while True:
                pos = _skip_ws(text, pos)
                if text[pos] == "]":
                    pos += 1
                    break
                if text[pos] == ",":
                    pos += 1
                    continue
                found.append(pos)
                _, pos = decoder.raw_decode(text, pos)
        else:
            _, pos = decoder.raw_decode(text, pos)


def _fail(where: str, line: int, reason: str) -> FixtureError:
    """Build the one-line `path:line: reason` error that exits 65."""
    return FixtureError(where, reason, line=line)


def _to_case(where: str, row: _Row, files: ToolFiles) -> Case:
    """Validate one raw row and normalise it; the hash is taken before anything is rewritten."""
    data = row.data
    line = row.line

    def fail(reason: str) -> FixtureError:
        return _fail(where, line, reason)

    if "case_id" in data and "id" in data:
        raise fail("row has both 'id' and 'case_id'; use one")
    seed004 = "case_id" in data
    id_key = "case_id" if seed004 else "id"
    allowed = _SEED004_KEYS if seed004 else _CANONICAL_KEYS | set(_SEED000_KEYS)
    unknown = [key for key in data if key not in allowed]
    if unknown:
        raise fail(f"unknown key {unknown[0]!r}")

    case_id = data.get(id_key)
    if case_id is None:
        raise fail(f"missing {id_key!r}")
    if not isinstance(case_id, str) or not case_id.strip():
        raise fail(f"{id_key!r} must be a non-empty string")
    if "prompt" in data and "messages" in data:
        raise fail("row has both 'prompt' and 'messages'; use one")
    if "prompt" not in data and "messages" not in data:
        raise fail("missing 'prompt' (or 'messages', for a conversation)")
    if "prompt" in data and not isinstance(data["prompt"], str):
        raise fail(f"'prompt' must be a string, got {json_kind(data['prompt'])}")

    stratum = data.get("stratum")
    if stratum is not None and stratum not in STRATA:
        raise fail(f"unknown stratum {stratum!r} (allowed: {', '.join(STRATA)})")
    for key in _OPTIONAL_TEXT_KEYS:
        value = data.get(key)
        if value is not None and not isinstance(value, str):
            raise fail(f"{key!r} must be a string, got {json_kind(value)}")
    if data.get("grader") is not None and not data["grader"].strip():
        raise fail("'grader' must not be empty")
    if not _is_str_list(data.get("tags", [])):
        raise fail("'tags' must be a list of strings")

    try:
        tools = files.offered(data)
    except BadTools as exc:
        raise fail(exc.reason) from None
    problem = casekeys.request_problem(data, tools)
    if problem is None and casekeys.RECORDED_CALLS in data:
        problem = casekeys.recorded_problem(data[casekeys.RECORDED_CALLS])
    if problem is not None:
        raise fail(problem)

    expect = copy_json(_expect_of(data, seed004, fail))
    problem = tool_expect_problem(expect, tools)
    if problem is not None:
        raise fail(f"expect.{problem}")
    problem = casekeys.choice_problem(expect, data.get("tool_choice"))
    if problem is not None:
        raise fail(problem)
    sha = fixture_sha(_pinned(data, tools))
    return _case(where, line, data, expect, sha=sha, stratum=stratum, tools=tools)


def _pinned(data: Mapping[str, Any], tools: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """The row `fixture_sha` hashes: a tools file's tools in place of its path, so editing the
    file moves the pin as editing tools written in the row does (any other row as written)."""
    return {**data, "tools": list(tools)} if isinstance(data.get("tools"), str) else data


def _case(
    where: str,
    line: int,
    data: Mapping[str, Any],
    expect: Mapping[str, Any],
    *,
    sha: str,
    stratum: str | None,
    tools: tuple[Mapping[str, Any], ...],
) -> Case:
    """The Case of a row known to be valid, offering `tools` (read from its file, if named).

    Every case is held for the whole run: the strings many rows repeat (expectation keys, a
    shared system prompt, stratum, grader, owner, tags) are kept once, not once a row, and a
    tools file's tools once for every row that names the file.
    """
    messages = data.get("messages")
    recorded = data.get(casekeys.RECORDED_CALLS)
    return Case(
        id=data["case_id"] if "case_id" in data else data["id"],
        prompt=data.get("prompt"),
        expect={shared(key): value for key, value in expect.items()},
        fixture_sha=sha,
        path=where,
        line=line,
        stratum=shared(stratum),
        system=shared(data.get("system")),
        grader=shared(data.get("grader")),
        completion=data.get("completion"),
        owner=shared(data.get("owner")),
        tags=tuple(map(shared, data.get("tags", ()))),
        messages=tuple(messages) if messages is not None else None,
        vars=data.get("vars", {}),
        tools=tools,
        tool_choice=data.get("tool_choice"),
        response_format=data.get("response_format"),
        completion_calls=casekeys.recorded_calls(recorded) if recorded is not None else (),
    )


def _expect_shape(data: Mapping[str, Any]) -> dict[str, Any]:
    """Bring all three shapes to one `expect` mapping (of a row known to be valid)."""
    if "case_id" in data:
        return {"json_fields": data["expect"]}
    top = {key: data[key] for key in _SEED000_KEYS if key in data}
    return top or data.get("expect", {})


def _expect_of(
    data: Mapping[str, Any], seed004: bool, fail: Callable[[str], FixtureError]
) -> dict[str, Any]:
    """`_expect_shape`, refusing a malformed shape and checking the built-in keys' types."""
    if seed004:
        if "expect" not in data:
            raise fail("missing 'expect' (a case_id row expects JSON fields)")
        if not isinstance(data["expect"], dict):
            raise fail(f"'expect' must be an object, got {json_kind(data['expect'])}")
    top = [key for key in _SEED000_KEYS if key in data]
    if top and "expect" in data and not seed004:
        raise fail(f"{top[0]!r} at top level and an 'expect' object; put it in 'expect'")
    if not seed004 and not top and not isinstance(data.get("expect", {}), dict):
        raise fail(f"'expect' must be an object, got {json_kind(data['expect'])}")
    expect = _expect_shape(data)
    prefix = "" if top else "expect."
    for key, check in _BUILTIN_CHECKS.items():
        if key in expect:
            problem = check(expect[key])
            if problem:
                raise fail(f"{prefix}{key!r} {problem}")
    return expect


def _check_str_list(value: Any) -> str | None:
    return None if _is_str_list(value) else "must be a list of strings"


def _check_positive_int(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return f"must be a positive integer, got {json.dumps(value)}"
    return None


def _check_patterns(value: Any) -> str | None:
    patterns = [value] if isinstance(value, str) else value
    if not _is_str_list(patterns):
        return "must be a string or a list of strings"
    import regex  # the engine `runner.grading` searches with; only suites with patterns pay

    for pattern in patterns:
        try:
            regex.compile(pattern)
        except regex.error as exc:
            return f"has an invalid pattern {pattern!r}: {exc}"
    return None


def _check_object(value: Any) -> str | None:
    return None if isinstance(value, dict) else f"must be an object, got {json_kind(value)}"


# Types of the built-in expectation keys (see `runner.grading.BUILTIN_KEYS`). Checked at load
# time so a typo in a fixture fails `validate`, not a grader in the middle of a nightly run.
_BUILTIN_CHECKS: dict[str, Callable[[Any], str | None]] = {
    "must_include": _check_str_list,
    "must_not_include": _check_str_list,
    "max_chars": _check_positive_int,
    "max_sentences": _check_positive_int,
    "regex": _check_patterns,
    "not_regex": _check_patterns,
    "json_fields": _check_object,
    "json_schema": check_schema,
}


def _is_str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _skip_ws(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in _JSON_WS:
        pos += 1
    return pos


def _line_at(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1
