"""request_sha across runs: what resume and retry check, and what moved against the snapshot.

Each endpoint's request_sha (`request.shape.Shape`) pins what its requests are shaped from:
its templates, params, stream flag, model alias, temperature and max_tokens. A run records it
in its manifest (`endpoints.<side>.request_sha`) and on every exchange and outcome row, and a
promote keeps it per case and side in the snapshot (an entry's `requests`).

A run's rows are shaped by one request per side: resume and retry refuse a config whose
request moved since the run started, as resume refuses edited fixtures, or one verdict would
stand on two prompts. Against the snapshot, a reference whose request moved is the frozen
path moving: `alert.reference_moved` with reason `request_changed`, and review is needed
whatever the case's gate class. A candidate whose request moved is the change under test:
reported in the summary, the reports and on stderr, never a gate class of its own.

An unknown request on either end is no change: a snapshot entry promoted before requests were
recorded, or a row a run wrote before it recorded them (a replay of an old run).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from runner import logs
from runner.model import SIDES

if TYPE_CHECKING:
    from runner.config import LoadedConfig
    from runner.gate import Verdict

REQUEST_CHANGED = "request_changed"  # the `reason` of alert.reference_moved for a request
REFERENCE = "reference"


def request_problem(loaded: LoadedConfig, suite: str, manifest: Mapping[str, Any]) -> str | None:
    """Why a run cannot be resumed or retried under today's config, or None: a side whose
    request_sha is not the one its manifest recorded (a manifest without one says nothing)."""
    cfg = loaded.config.suites[suite]
    endpoints = manifest.get("endpoints")
    for side in SIDES:
        recorded = endpoints.get(side) if isinstance(endpoints, dict) else None
        was = recorded.get("request_sha") if isinstance(recorded, dict) else None
        now = loaded.shape(getattr(cfg, side)).request_sha
        if isinstance(was, str) and was != now:
            return f"the {side}'s request changed since it started (request_sha {was} -> {now})"
    return None


def request_changes(
    results: Sequence[Verdict], snapshot: Mapping[str, Any]
) -> dict[str, list[dict[str, Any]]]:
    """Per side, the cases whose calls were shaped by another request than the one the
    snapshot accepted for them, grouped by (accepted, today's): summary.json's
    `request_changed`. Whatever the case's gate class, a fixture move or a failed call too:
    the request is the endpoint's, and it was sent."""
    groups: dict[str, dict[tuple[str, str], list[str]]] = {side: {} for side in SIDES}
    for verdict in results:
        entry = snapshot.get(verdict.case_id)
        accepted = entry.get("requests") if isinstance(entry, dict) else None
        if not isinstance(accepted, dict):
            continue
        for side in SIDES:
            was, now = accepted.get(side), getattr(verdict, side).request_sha
            if isinstance(was, str) and now is not None and now != was:
                groups[side].setdefault((was, now), []).append(verdict.case_id)
    return {
        side: [
            {"from": was, "to": now, "count": len(ids), "case_ids": ids}
            for (was, now), ids in sorted(found.items())
        ]
        for side, found in groups.items()
    }


def reference_changed(changes: Mapping[str, Sequence[Mapping[str, Any]]]) -> bool:
    """Whether the frozen path moved: the run needs review (exit bit 1) whatever its gates."""
    return bool(changes.get(REFERENCE))


def log_alerts(log: Any, changes: Mapping[str, Sequence[Mapping[str, Any]]]) -> None:
    """`alert.reference_moved` (reason `request_changed`) once per accepted -> today's pair."""
    for group in changes.get(REFERENCE, ()):
        log.warning(
            logs.ALERT_REFERENCE_MOVED,
            reason=REQUEST_CHANGED,
            side=REFERENCE,
            accepted=group["from"],
            request_sha=group["to"],
            count=group["count"],
            case_ids=group["case_ids"],
        )


def request_lines(summary: Mapping[str, Any], side: str | None = None) -> list[str]:
    """The request changes of a summary in words, one line per side and pair (plain text,
    unescaped), for stderr, report.md and report.html; only `side`'s when it is given.

    A summary may be hand-edited or from another version: what is not as written is left out.
    """
    changed = summary.get(REQUEST_CHANGED)
    lines = []
    for name in SIDES if side is None else (side,):
        found = changed.get(name) if isinstance(changed, dict) else None
        for group in found if isinstance(found, list) else ():
            if not isinstance(group, dict):
                continue
            what = (
                "the frozen path moved, review needed"
                if name == REFERENCE
                else "the change under test, not gated on by itself"
            )
            lines.append(
                f"request changed ({name}): request_sha {group.get('from')} -> "
                f"{group.get('to')} on {group.get('count')} case(s): {what}"
            )
    return lines
