"""JUnit XML: one testcase per case, the gate class decides failure, error or skipped."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from reportkit import HOSTILE_SCRIPT, Project, hostile_project

from runner.cli import main
from runner.junit import junit_xml, write_junit, xml_safe
from runner.reports.model import build_report


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    _, run_dir = hostile_project(tmp_path_factory.mktemp("junit"))
    return run_dir


def _outcomes(root: ET.Element) -> dict[str, str]:
    result = {}
    for tc in root.iter("testcase"):
        child = next(iter(tc), None)
        result[str(tc.get("name"))] = child.tag if child is not None else "passed"
    return result


def test_gate_classes_map_to_junit_outcomes(hostile: Path) -> None:
    """disagreement_changed and alias_swap fail, transport and schema misses error out."""
    root = ET.fromstring(junit_xml([build_report(hostile)]))
    outcomes = _outcomes(root)
    expected = {
        "hostile-script": "failure",
        "alias": "failure",
        "timeout": "error",
        "schema": "error",
        "easy-a": "passed",
    }
    actual = {k: outcomes[k] for k in expected}
    assert expected == actual


def test_counts_on_the_testsuite_match_its_children(hostile: Path) -> None:
    """tests/failures/errors/skipped agree with the testcases (strata testcases included)."""
    suite = ET.fromstring(junit_xml([build_report(hostile)])).find("testsuite")
    assert suite is not None
    children = list(_outcomes(ET.fromstring(ET.tostring(suite))).values())
    expected = (
        suite.get("tests"),
        suite.get("failures"),
        suite.get("errors"),
        suite.get("skipped"),
    )
    actual = (
        str(len(children)),
        str(children.count("failure")),
        str(children.count("error")),
        str(children.count("skipped")),
    )
    assert expected == actual


def test_new_cases_are_skipped(tmp_path: Path) -> None:
    """A first run against an empty snapshot reports every case as skipped (new_case)."""
    run_dir, _, _ = Project(tmp_path).run()
    outcomes = _outcomes(ET.fromstring(junit_xml([build_report(run_dir)])))
    expected = {"skipped"}
    actual = {v for k, v in outcomes.items() if not k.startswith("strata")}
    assert expected == actual


def test_an_unscored_case_is_an_error_whatever_its_gate_class(tmp_path: Path) -> None:
    """A new case whose candidate timed out and one whose reply did not parse are errors,
    typed by their stamp and counted in `errors`, not skipped: nothing about them was scored."""
    project = Project(tmp_path)
    project.cassettes(
        {}, {"easy-a": {"fault": "timeout"}, "med-a": {"status": 200, "body": "<html>"}}
    )
    run_dir, _, _ = project.run()
    root = ET.fromstring(junit_xml([build_report(run_dir)]))
    cases = {tc.get("name"): tc for tc in root.iter("testcase")}
    expected = {"easy-a": "error", "med-a": "error", "easy-b": "skipped", "str-a": "skipped"}
    assert expected == {k: _outcomes(root)[k] for k in expected}
    timeout = cases["easy-a"].find("error")
    schema = cases["med-a"].find("error")
    assert timeout is not None and schema is not None
    assert (timeout.get("type"), schema.get("type")) == ("transport_miss", "schema_miss")
    assert str(timeout.get("message")).startswith("new_case: not in the snapshot; unscored: ")
    assert "candidate: timeout" in str(timeout.get("message"))
    assert "--- candidate" not in (timeout.text or "")  # no body: a timeout has none
    assert "raw body (HTTP 200)" in (schema.text or "")
    suite = root.find("testsuite")
    assert suite is not None
    assert (suite.get("errors"), suite.get("skipped")) == ("2", "4")
    assert (root.get("errors"), root.get("skipped")) == ("2", "4")


def test_hostile_reply_is_text_in_the_failure(hostile: Path) -> None:
    """The reply inside a failure parses back as text, markup and all."""
    root = ET.fromstring(junit_xml([build_report(hostile)]))
    failure = next(
        tc.find("failure") for tc in root.iter("testcase") if tc.get("name") == "hostile-script"
    )
    assert failure is not None
    expected = True
    actual = HOSTILE_SCRIPT in (failure.text or "")
    assert expected == actual


def test_control_characters_cannot_break_the_xml() -> None:
    """Control characters are shown as escapes and the few XML 1.0 forbids that are not
    controls (U+FFFE, U+FFFF) are replaced, so the document always parses."""
    expected = "a\\x00b\\x1bc\td\ufffd"
    actual = xml_safe("a\x00b\x1bc\td\ufffe")
    assert expected == actual


def test_a_bidi_control_in_a_case_id_or_reply_is_shown_as_its_escape(tmp_path: Path) -> None:
    """A CI page shows the case `invoice\\u202egpj.exe`, not one that reads `invoiceexe.jpg`,
    and the reply's override and NUL as escapes."""
    case_id = "invoice\u202egpj.exe"
    project = Project(
        tmp_path, [{"id": case_id, "prompt": "p", "expect": {"must_include": ["ok"]}}]
    )
    project.promote(project.run()[0])
    project.cassettes({}, {case_id: {"completion": "\u202ekcatta\x00", "model": "cand-1"}})
    run_dir, _, _ = project.run()
    xml = junit_xml([build_report(run_dir)]).decode("utf-8")
    assert "\u202e" not in xml and "\x00" not in xml
    [case] = [tc for tc in ET.fromstring(xml).iter("testcase") if tc.get("name") != "strata"]
    assert case.get("name") == "invoice\\u202egpj.exe"
    failure = case.find("failure")
    assert failure is not None and "\\u202ekcatta\\x00" in (failure.text or "")


def test_run_with_junit_flag_writes_a_parseable_file(tmp_path: Path) -> None:
    """`parallax run --junit PATH` leaves a JUnit document with one testsuite per suite."""
    project = Project(tmp_path)
    out = tmp_path / "junit.xml"
    main(["run", "--config", str(project.config), "--junit", str(out)])
    root = ET.parse(out).getroot()
    expected = ("testsuites", ["parallax.s"])
    actual = (root.tag, [s.get("name") for s in root.iter("testsuite")])
    assert expected == actual


def test_write_junit_makes_missing_folders(hostile: Path, tmp_path: Path) -> None:
    """A CI report path whose folders do not exist yet is made, as pytest's --junitxml does."""
    out = write_junit([hostile], tmp_path / "reports" / "nightly" / "parallax.xml")
    assert ET.parse(out).getroot().tag == "testsuites"


def test_write_junit_to_an_unwritable_path_is_a_usage_error(hostile: Path, tmp_path: Path) -> None:
    """An --junit path under a regular file is one UsageError (exit 64) naming the path."""
    from runner.errors import UsageError

    (tmp_path / "file").write_text("not a folder", encoding="utf-8")
    target = tmp_path / "file" / "j.xml"
    with pytest.raises(UsageError, match="cannot write JUnit XML") as caught:
        write_junit([hostile], target)
    assert str(target) in str(caught.value)
    assert str(caught.value).endswith("a folder on its path is a file")  # not "File exists"
