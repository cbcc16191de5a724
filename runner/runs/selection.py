"""Part of a suite: the cases a partial run calls, chosen by id pattern and by stratum.

A quick check before a nightly (`parallax run --case 'refund-*' --stratum easy`) calls only
the cases selected, and everything after it knows: its gate covers them alone (the others are
neither retired nor counted), manifest and summary record the selection as `partial`, history
does not count it as a night, and `promote` refuses it unless told `--allow-partial` (the
cases not selected then keep their accepted entries). A resume, a retry and a replay of a
partial run keep its selection, read back from its manifest.
"""

from __future__ import annotations

import fnmatch
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

from runner.errors import DataError
from runner.model import STRATA


@dataclass(frozen=True, slots=True)
class Selection:
    """Which cases a partial run calls: those whose id matches one of `cases` (fnmatch
    patterns, case-sensitive) and whose stratum is one of `strata`; an empty one selects by
    the other alone."""

    cases: tuple[str, ...] = ()
    strata: tuple[str, ...] = ()

    @classmethod
    def given(cls, cases: Sequence[str] | None, strata: Sequence[str] | None) -> Selection | None:
        """The selection `--case` and `--stratum` ask for, or None for the whole suite."""
        if not cases and not strata:
            return None
        return cls(tuple(dict.fromkeys(cases or ())), tuple(dict.fromkeys(strata or ())))

    @classmethod
    def of(cls, manifest: Mapping[str, Any], where: Path) -> Selection | None:
        """The selection a run's manifest records (`partial`), or None for a whole run."""
        found = manifest.get("partial")
        if found is None:
            return None
        cases = found.get("cases") if isinstance(found, dict) else None
        strata = found.get("strata") if isinstance(found, dict) else None
        if not _strings(cases) or not _strings(strata) or not set(strata) <= set(STRATA):
            raise DataError(where, "'partial' must hold the lists 'cases' and 'strata'")
        if not cases and not strata:
            raise DataError(where, "'partial' selects no case: its lists are both empty")
        return cls(tuple(cases), tuple(strata))

    def picks(self, case_id: str, stratum: str | None) -> bool:
        return (not self.cases or any(fnmatch.fnmatchcase(case_id, p) for p in self.cases)) and (
            not self.strata or stratum in self.strata
        )

    def words(self) -> str:
        """The selection as the command line asks for it: `--case 'refund-*' --stratum easy`."""
        flags = [f"--case {shlex.quote(p)}" for p in self.cases]
        return " ".join(flags + [f"--stratum {s}" for s in self.strata])

    def to_json(self, selected: int, of: int) -> dict[str, Any]:
        """What manifest.json and summary.json record as `partial`."""
        return {
            "cases": list(self.cases),
            "strata": list(self.strata),
            "selected": selected,
            "of": of,
        }


def partial_line(summary: Mapping[str, Any]) -> str | None:
    """`partial: 3 of 120 cases (--case 'refund-*')` for a partial run's summary, else None.
    Read tolerantly: a hand-edited summary prints what it holds."""
    found = summary.get("partial")
    if not isinstance(found, dict):
        return None
    cases, strata = found.get("cases"), found.get("strata")
    asked = Selection(tuple(cases), tuple(strata)) if _strings(cases) and _strings(strata) else None
    said = f" ({asked.words()})" if asked is not None else ""
    return f"partial: {found.get('selected', '?')} of {found.get('of', '?')} cases{said}"


def _strings(value: Any) -> TypeGuard[list[str]]:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)
