"""How a run came to be: the `mode` its manifest records and summary.json repeats."""

from __future__ import annotations

import enum


class RunMode(enum.StrEnum):
    """A run's mode; a member is its word, so manifests read and write the strings they
    always held. A resume finishes a run dir in place, so no manifest records `resume`."""

    RUN = "run"  # calls every (case, side, sample)
    RESUME = "resume"  # finishes an interrupted run dir where it stopped
    RETRY = "retry"  # a new run dir from a parent's scored rows; re-calls the unscored ones
    REPLAY = "replay"  # a new run dir regrading a parent's raw.jsonl; calls nothing

    @classmethod
    def read(cls, value: object) -> RunMode | None:
        """The mode a manifest or summary records, or None (missing, or a hand-edited word)."""
        try:
            return cls(value) if isinstance(value, str) else None
        except ValueError:
            return None

    @property
    def calls(self) -> bool:
        """Whether the run calls endpoints (and so takes the suite's lock): all but a replay."""
        return self is not RunMode.REPLAY
