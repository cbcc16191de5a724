"""JUnit XML for CI systems: one testsuite per run, one testcase per case.

`disagreement_changed` and `alias_swap` are failures (quality: review needed); a case that could
not be scored is an error (unscored: a transport miss is infrastructure, a schema miss the
side's own format failure, and neither can be graded), whatever its gate class: a `new_case` or
`fixture_move` whose call timed out is as unscored as a `transport_miss`. Scored `new_case` and
`fixture_move` cases are skipped (a test edit, not a result). A stratum alert needs review too,
so a stratified suite adds one `strata` testcase per side that fails when that side has alerts.

The XML is built with ElementTree, which escapes text and attributes. Untrusted text goes through
`text.visible` first (a bidi control or a control character shows as its escape, so a case id
cannot disguise itself on a CI page); the few characters XML 1.0 cannot carry that are left
(U+FFFE, U+FFFF) are replaced.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from runner.errors import UsageError
from runner.gate import (
    ALIAS_SWAP,
    DISAGREEMENT_CHANGED,
    FIXTURE_MOVE,
    NEW_CASE,
    SCHEMA_MISS,
    TRANSPORT_MISS,
)
from runner.ledger import write_atomic
from runner.model import SIDES
from runner.reports.caseview import SideReply
from runner.reports.model import RunReport, build_report
from runner.text import visible

FAILURE = frozenset({DISAGREEMENT_CHANGED, ALIAS_SWAP})
ERROR = frozenset({TRANSPORT_MISS, SCHEMA_MISS})
SKIPPED = frozenset({NEW_CASE, FIXTURE_MOVE})
REPLY_CAP = 2000
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_safe(value: Any) -> str:
    """Text XML 1.0 can carry, hidden characters shown: what it still forbids becomes U+FFFD."""
    return _NOT_XML.sub("\ufffd", visible(value))


def _as_mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _unscored(case: Mapping[str, Any]) -> tuple[str, str] | None:
    """The stamp that kept a case out of the comparison, as (gate class, detail), or None.

    Read from disagreement.json as `gate.unscored_by` decides it in a run: transport first,
    then schema, naming every side with that stamp.
    """
    sides = [(side, _as_mapping(case.get(side))) for side in SIDES]
    for gate, bad in (
        (TRANSPORT_MISS, [(s, v) for s, v in sides if v.get("transport") not in (None, "ok")]),
        (SCHEMA_MISS, [(s, v) for s, v in sides if v.get("admitted") is False]),
    ):
        if bad:
            return gate, "; ".join(f"{side}: {view.get('detail')}" for side, view in bad)
    return None


def _body(replies: Sequence[SideReply], case: Mapping[str, Any]) -> str:
    lines = [f"gate: {case.get('gate')}", f"detail: {case.get('detail')}"]
    if isinstance(case.get("disagreement"), list):
        delta = ", ".join(map(str, case["disagreement"]))
        lines.append(f"disagreement: {delta or '(empty)'}")
    for side in SIDES:
        view = _as_mapping(case.get(side))
        misses = view["misses"] if isinstance(view.get("misses"), list) else []
        lines.append(
            f"{side}: model {view.get('response_model') or '-'} · transport "
            f"{view.get('transport')} · schema {view.get('schema')} · misses "
            f"{', '.join(map(str, misses)) or '(none)'}"
        )
    for side, reply in zip(SIDES, replies, strict=True):
        if reply.text is not None:
            text = reply.text[:REPLY_CAP] + ("…" if len(reply.text) > REPLY_CAP else "")
            label = "reply" if reply.kind == "reply" else f"raw body (HTTP {reply.status})"
            lines += [f"--- {side} {label} ---", text]
    return xml_safe("\n".join(lines))


def testsuite(rep: RunReport) -> ET.Element:
    """One run as a <testsuite>."""
    summary = rep.summary
    suite = ET.Element("testsuite")
    suite.set("name", xml_safe(f"parallax.{rep.suite}"))
    suite.set("timestamp", xml_safe(summary.get("started_at") or ""))
    props = ET.SubElement(suite, "properties")
    for name, value in (
        ("run_id", summary.get("run_id")),
        ("run_dir", str(rep.run_dir)),
        ("verdict", summary.get("verdict")),
        ("exit_code", summary.get("exit_code")),
    ):
        prop = ET.SubElement(props, "property")
        prop.set("name", name)
        prop.set("value", xml_safe(value))
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    cases = rep.details()  # every failing case's replies, read as it is written
    for case_id, case in rep.every_case():
        gate, detail, stratum = (
            str(case.get("gate")),
            str(case.get("detail")),
            case.get("stratum"),
        )
        group = stratum if isinstance(stratum, str) and stratum else "case"
        tc = ET.SubElement(suite, "testcase")
        tc.set("classname", xml_safe(f"parallax.{rep.suite}.{group}"))
        tc.set("name", xml_safe(case_id))
        counts["tests"] += 1
        # a new or edited case that could not be scored is an error, typed by its stamp
        unscored = None if gate in ERROR else _unscored(case)
        kind = gate if unscored is None else unscored[0]
        why = "" if unscored is None else f"; unscored: {unscored[1]}"
        message = xml_safe(f"{gate}: {detail}{why}")
        if gate in FAILURE:
            child = ET.SubElement(tc, "failure", message=message, type=gate)
            child.text = _body(cases.replies(case_id, case, REPLY_CAP + 1), case)
            counts["failures"] += 1
        elif kind in ERROR:
            child = ET.SubElement(tc, "error", message=message, type=kind)
            child.text = _body(cases.replies(case_id, case, REPLY_CAP + 1), case)
            counts["errors"] += 1
        elif gate in SKIPPED:
            ET.SubElement(tc, "skipped", message=message)
            counts["skipped"] += 1
    if summary.get("stratified"):
        alerts = _as_mapping(summary.get("stratum_alerts"))
        for side in SIDES:
            tc = ET.SubElement(suite, "testcase")
            tc.set("classname", xml_safe(f"parallax.{rep.suite}.strata"))
            tc.set("name", f"strata ({side})")
            counts["tests"] += 1
            side_alerts = alerts.get(side) or []
            if side_alerts:
                text = xml_safe(", ".join(map(str, side_alerts)))
                child = ET.SubElement(tc, "failure", message=text, type="stratum_alert")
                rates = _as_mapping(summary.get("strata")).get(side)
                child.text = xml_safe(json.dumps(rates, sort_keys=True, allow_nan=False))
                counts["failures"] += 1
    for key, value in counts.items():
        suite.set(key, str(value))
    return suite


def junit_xml(reports: Sequence[RunReport]) -> bytes:
    """A <testsuites> document over one or more runs."""
    root = ET.Element("testsuites", name="parallax")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for rep in reports:
        suite = testsuite(rep)
        root.append(suite)
        for key in totals:
            totals[key] += int(suite.get(key, "0"))
    for key, value in totals.items():
        root.set(key, str(value))
    ET.indent(root)
    body: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    return body + b"\n"


def write_junit(run_dirs: Sequence[Path], path: Path) -> Path:
    """Write the JUnit XML of `run_dirs` to `path` (atomically); return the path.

    Missing folders are made, as CI report paths (`reports/parallax.xml`) usually name one
    that no step has created yet.
    """
    reports = [build_report(d, tallied=False) for d in run_dirs]
    try:
        data = junit_xml(reports)
    finally:
        for rep in reports:
            rep.close()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, [data])
    except (FileExistsError, NotADirectoryError):  # mkdir or open met a file on the way
        raise UsageError(
            f"{path}: cannot write JUnit XML: a folder on its path is a file"
        ) from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot write JUnit XML: {exc.strerror}") from None
    return path
