"""Specification of strata pass rates and the ceiling detector (seed 000)."""

from __future__ import annotations

import pytest

from runner.ceiling import detect, strata_rates
from runner.config import Thresholds

DEFAULT = Thresholds()


def results(easy: tuple[int, int], medium: tuple[int, int], stretch: tuple[int, int]) -> list:
    """(passed, failed) per stratum, as (stratum, passed) rows."""
    rows: list[tuple[str | None, bool | None]] = []
    for name, (passed, failed) in (("easy", easy), ("medium", medium), ("stretch", stretch)):
        rows += [(name, True)] * passed + [(name, False)] * failed
    return rows


def alerts(
    easy: tuple[int, int],
    medium: tuple[int, int],
    stretch: tuple[int, int],
    thresholds: Thresholds = DEFAULT,
) -> list[str]:
    return detect(strata_rates(results(easy, medium, stretch)), thresholds)


# --- strata_rates --------------------------------------------------------------------------


def test_rates_count_rows_and_passes_per_stratum() -> None:
    """Each stratum reports n, passed, unadmitted and the pass rate."""
    rates = strata_rates(results((2, 0), (3, 1), (0, 2)))
    expected = {
        "easy": {"n": 2, "passed": 2, "unadmitted": 0, "pass_rate": 1.0},
        "medium": {"n": 4, "passed": 3, "unadmitted": 0, "pass_rate": 0.75},
        "stretch": {"n": 2, "passed": 0, "unadmitted": 0, "pass_rate": 0.0},
    }
    assert expected == rates


def test_unadmitted_rows_are_counted_apart_and_never_lower_a_rate() -> None:
    """passed None is an unadmitted row: counted in `unadmitted`, not in n or the rate."""
    rates = strata_rates([("easy", True), ("easy", True), ("easy", None)])
    expected = {"n": 2, "passed": 2, "unadmitted": 1, "pass_rate": 1.0}
    assert expected == rates["easy"]


def test_a_case_without_a_stratum_counts_as_medium() -> None:
    """In a stratified suite a case naming no stratum is medium."""
    rates = strata_rates([(None, False)])
    expected = (1, 0.0)
    assert expected == (rates["medium"]["n"], rates["medium"]["pass_rate"])


def test_an_empty_stratum_has_no_rate() -> None:
    """A stratum with no admitted rows has pass_rate None, never 0."""
    rates = strata_rates([("easy", True)])
    expected = (0, None)
    assert expected == (rates["stretch"]["n"], rates["stretch"]["pass_rate"])


# --- detect --------------------------------------------------------------------------------


def test_a_healthy_suite_raises_no_alert() -> None:
    """Easy and medium all pass, stretch still fails mostly: green."""
    expected = []
    assert expected == alerts((2, 0), (2, 0), (1, 1))


def test_everything_passing_is_a_ceiling_and_stretch_too_easy() -> None:
    """All strata at 100% means the yardstick can no longer fail."""
    expected = ["ceiling", "stretch_too_easy"]
    assert expected == alerts((2, 0), (2, 0), (2, 0))


def test_ceiling_needs_medium_at_95_percent() -> None:
    """Medium at 90% is below the ceiling's 0.95, so only stretch_too_easy fires."""
    expected = ["stretch_too_easy"]
    assert expected == alerts((2, 0), (9, 1), (2, 0))


def test_ceiling_fires_with_medium_exactly_at_95_percent() -> None:
    """The ceiling's medium bound is inclusive."""
    expected = ["ceiling", "stretch_too_easy"]
    assert expected == alerts((2, 0), (19, 1), (2, 0))


def test_stretch_exactly_at_stretch_high_is_too_easy() -> None:
    """stretch_high is inclusive: 4 of 5 stretch passes at 0.80 is too easy."""
    expected = ["stretch_too_easy"]
    assert expected == alerts((2, 0), (9, 1), (4, 1))


def test_stretch_just_below_stretch_high_is_fine() -> None:
    """3 of 4 stretch passes (0.75) is below 0.80: no alert."""
    expected = []
    assert expected == alerts((2, 0), (9, 1), (3, 1))


def test_one_easy_failure_is_an_easy_regression() -> None:
    """easy_floor is 1.0: a single easy miss is an alert."""
    expected = ["easy_regression"]
    assert expected == alerts((3, 1), (2, 0), (0, 2))


def test_medium_below_its_floor_is_a_medium_regression() -> None:
    """Medium at 0.80 is below 0.85."""
    expected = ["medium_regression"]
    assert expected == alerts((2, 0), (4, 1), (0, 2))


def test_medium_exactly_at_its_floor_is_not_a_regression() -> None:
    """medium_floor is inclusive: 17 of 20 (0.85) passes."""
    expected = []
    assert expected == alerts((2, 0), (17, 3), (0, 2))


def test_a_stratum_with_one_case_is_thin_and_blocks_the_ceiling() -> None:
    """thin_stratum refuses green and suppresses ceiling/stretch checks it cannot support."""
    expected = ["thin_stratum"]
    assert expected == alerts((2, 0), (2, 0), (1, 0))


def test_a_thin_stratum_still_reports_regressions() -> None:
    """A thin stratum does not hide an easy regression."""
    expected = ["thin_stratum", "easy_regression"]
    assert expected == alerts((1, 1), (2, 0), (0, 1))


def test_an_empty_stratum_is_missing() -> None:
    """No stretch case at all is missing_stratum, and no ceiling is claimed."""
    expected = ["missing_stratum"]
    assert expected == alerts((2, 0), (2, 0), (0, 0))


def test_missing_and_thin_strata_are_both_reported() -> None:
    """Missing easy and a single stretch case give both alerts, missing first."""
    expected = ["missing_stratum", "thin_stratum"]
    assert expected == alerts((0, 0), (2, 0), (0, 1))


def test_a_stratum_whose_rows_all_failed_transport_is_no_suite_alert() -> None:
    """The stratum has cases; that none could be scored is the run's trouble (exit 2,
    unscored), not a reason to review the suite (exit 1 on top, so 3)."""
    rows = [*results((2, 0), (2, 0), (0, 0)), ("stretch", None), ("stretch", None)]
    assert detect(strata_rates(rows), DEFAULT) == []


def test_a_stratum_of_one_case_is_thin_even_when_unadmitted() -> None:
    """Thin and missing count the suite's cases, admitted or not."""
    rows = [*results((2, 0), (2, 0), (0, 0)), ("stretch", None)]
    assert detect(strata_rates(rows), DEFAULT) == ["thin_stratum"]


def test_no_ceiling_is_claimed_on_fewer_than_two_admitted_rows() -> None:
    """Three stretch cases of which two failed transport: the one admitted row cannot show a
    ceiling or a stretch set gone easy, and is no suite alert either."""
    rows = [*results((2, 0), (2, 0), (1, 0)), ("stretch", None), ("stretch", None)]
    assert detect(strata_rates(rows), DEFAULT) == []


@pytest.mark.parametrize(
    ("thresholds", "easy", "medium", "stretch", "expected"),
    [
        (Thresholds(stretch_high=0.5), (2, 0), (9, 1), (1, 1), ["stretch_too_easy"]),
        (Thresholds(stretch_high=0.6), (2, 0), (9, 1), (1, 1), []),
        (Thresholds(easy_floor=0.5), (1, 1), (2, 0), (0, 2), []),
        (Thresholds(easy_floor=0.6), (1, 1), (2, 0), (0, 2), ["easy_regression"]),
        (Thresholds(medium_floor=0.5), (2, 0), (1, 1), (0, 2), []),
        (Thresholds(medium_floor=0.6), (2, 0), (1, 1), (0, 2), ["medium_regression"]),
    ],
)
def test_thresholds_come_from_the_config(
    thresholds: Thresholds,
    easy: tuple[int, int],
    medium: tuple[int, int],
    stretch: tuple[int, int],
    expected: list[str],
) -> None:
    """easy_floor, medium_floor and stretch_high are read from Thresholds, not hard-coded."""
    assert expected == alerts(easy, medium, stretch, thresholds)
