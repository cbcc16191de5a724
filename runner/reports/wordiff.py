"""A word-level diff of two replies, bounded so any reply renders in a moment.

`difflib.SequenceMatcher` compares the replies as lists of words (each keeping the whitespace
after it, so the text reads back exactly). Its time grows with the product of the two
lengths in the worst case, so only the first `MAX_WORDS` words of each side are compared
(more than a report shows of a reply); the rest is kept as it is, unmarked, and the diff says
it stopped. The whole replies are compared, not the parts a report shows, so a cut never
reads as a changed last word.
"""

from __future__ import annotations

import difflib
import itertools
import re

from runner.model import record

MAX_WORDS = 1500  # words of each side compared; a 6,000-character reply has about 1,000
_WORD = re.compile(r"\s+|\S+\s*")


@record
class Piece:
    """A run of text on one side, whether the other side lacks it, and the miss it shows
    (`runner.reports.marks`), if any."""

    text: str
    changed: bool
    miss: str | None = None


@record
class WordDiff:
    """Both sides as pieces: the reference's words the candidate lacks, and the candidate's
    words the reference lacks, are `changed`. `cut` says words past MAX_WORDS were not
    compared (they follow unmarked)."""

    reference: tuple[Piece, ...]
    candidate: tuple[Piece, ...]
    cut: bool

    def capped(self, limit: int) -> WordDiff:
        """Each side's first `limit` characters, as the reply shown is cut."""
        return WordDiff(capped(self.reference, limit), capped(self.candidate, limit), self.cut)


def words(text: str, limit: int = MAX_WORDS) -> tuple[list[str], str]:
    """The text's first `limit` words, each with the whitespace after it (leading whitespace
    on its own), and the rest of the text as it is: a long reply is never split whole."""
    found: list[str] = []
    end = 0
    for match in itertools.islice(_WORD.finditer(text), limit):
        found.append(match.group())
        end = match.end()
    return found, text[end:]


def shown_words(chars: int) -> int:
    """How many words to compare when only a reply's first `chars` characters are shown: a
    word keeps the whitespace after it, so `chars` characters hold at most chars // 2 + 2 of
    them, and every word shown (the one the cut falls in too) is compared whole."""
    return min(MAX_WORDS, chars // 2 + 2)


def word_diff(reference: str, candidate: str, limit: int = MAX_WORDS) -> WordDiff:
    """Which words differ between the two replies, compared word by word (whitespace apart),
    the first `limit` words of each. Two equal replies need no comparing: most cases of a
    large run are those, and a diff costs more than the rest of a case's detail."""
    if reference == candidate:
        whole = (Piece(reference, changed=False),) if reference else ()
        return WordDiff(whole, whole, cut=False)
    (a, a_rest), (b, b_rest) = words(reference, limit), words(candidate, limit)
    matcher = difflib.SequenceMatcher(None, [w.strip() for w in a], [w.strip() for w in b])
    ref: list[Piece] = []
    cand: list[Piece] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        same = tag == "equal"
        _add(ref, "".join(a[i1:i2]), changed=not same)
        _add(cand, "".join(b[j1:j2]), changed=not same)
    _add(ref, a_rest, changed=False)
    _add(cand, b_rest, changed=False)
    return WordDiff(tuple(ref), tuple(cand), bool(a_rest or b_rest))


def capped(pieces: tuple[Piece, ...], limit: int) -> tuple[Piece, ...]:
    """The pieces' first `limit` characters, as the reply shown is cut."""
    kept: list[Piece] = []
    left = limit
    for piece in pieces:
        if left <= 0:
            break
        kept.append(
            piece
            if len(piece.text) <= left
            else Piece(piece.text[:left], piece.changed, piece.miss)
        )
        left -= len(piece.text)
    return tuple(kept)


def _add(pieces: list[Piece], text: str, *, changed: bool) -> None:
    """Append a run, merged with the last one when both are marked alike."""
    if not text:
        return
    if pieces and pieces[-1].changed == changed:
        pieces[-1] = Piece(pieces[-1].text + text, changed)
    else:
        pieces.append(Piece(text, changed))
