"""Specification of the gate: folding samples, disagreement, and the seven gate classes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runner.fixtures.refs import CaseRef
from runner.gate import (
    ALIAS_SWAP,
    DISAGREEMENT_CHANGED,
    FIXTURE_MOVE,
    GATE_CLASSES,
    INCOMPLETE,
    NEW_CASE,
    RETIRED_CASE,
    REVIEW,
    SCHEMA_MISS,
    TRANSPORT_MISS,
    UNCHANGED,
    Folds,
    SideView,
    Verdict,
    classify,
    disagreement,
    drifted,
    fold,
)
from runner.model import Case, Outcome

SHA = "a" * 16


def outcome(
    *,
    side: str = "reference",
    sample: int = 0,
    transport: str = "ok",
    schema: str = "ok",
    task_score: float | None = 1.0,
    misses: Sequence[str] = (),
    response_model: str | None = "model-ref",
    fingerprint: str | None = None,
    detail: str = "ok",
    request_sha: str | None = None,
) -> Outcome:
    return Outcome(
        case_id="c1",
        side=side,
        sample=sample,
        fixture_sha=SHA,
        stratum="medium",
        model_alias="alias",
        response_model=response_model,
        response_id=None,
        system_fingerprint=fingerprint,
        transport=transport,
        schema=schema,
        task_score=task_score,
        misses=tuple(misses),
        detail=detail,
        http_status=200 if transport == "ok" else None,
        attempts=1,
        elapsed_ms=5,
        request_sha=request_sha,
    )


def ok_view(misses: Sequence[str] = (), model: str | None = "model-ref") -> SideView:
    score = 1.0 if not misses else 0.5
    return fold([outcome(misses=misses, task_score=score, response_model=model)])


def timeout_view() -> SideView:
    return fold([outcome(transport="timeout", schema="skipped", task_score=None, detail="timeout")])


def schema_fail_view() -> SideView:
    return fold(
        [outcome(schema="fail", task_score=None, detail="missing_choices", response_model=None)]
    )


def accepted(
    reference_misses: Sequence[str] = (),
    candidate_misses: Sequence[str] = (),
    *,
    fixture_sha: str = SHA,
    models: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "fixture_sha": fixture_sha,
        "disagreement": disagreement(reference_misses, candidate_misses),
        "reference_misses": list(reference_misses),
        "candidate_misses": list(candidate_misses),
        "models": models
        if models is not None
        else {"reference": "model-ref", "candidate": "model-cand"},
    }


def judge(
    reference: SideView,
    candidate: SideView,
    snapshot: dict[str, Any] | None,
    *,
    fixture_sha: str = SHA,
) -> Verdict:
    return classify(
        "c1",
        stratum="medium",
        fixture_sha=fixture_sha,
        reference=reference,
        candidate=candidate,
        accepted=snapshot,
    )


# --- disagreement --------------------------------------------------------------------------


def test_disagreement_is_the_sorted_symmetric_difference() -> None:
    """Misses on exactly one side make the delta, sorted; shared misses cancel out."""
    expected = ["a", "c"]
    actual = disagreement(["c", "b"], ["b", "a"])
    assert expected == actual


def test_disagreement_collapses_repeated_misses() -> None:
    """A miss listed twice on one side counts once."""
    expected = ["x"]
    actual = disagreement(["x", "x"], [])
    assert expected == actual


miss_lists = st.lists(st.sampled_from(["a", "b", "c", "missing:SKU-9", "empty_completion"]))


@given(miss_lists, miss_lists)
def test_disagreement_is_symmetric_sorted_and_empty_iff_sets_equal(
    reference: list[str], candidate: list[str]
) -> None:
    """disagreement(r, c) == disagreement(c, r), is sorted and unique, and is [] iff sets match."""
    forward = disagreement(reference, candidate)
    assert forward == disagreement(candidate, reference)
    assert sorted(set(forward)) == forward
    assert (forward == []) == (set(reference) == set(candidate))
    assert set(forward) == set(reference) ^ set(candidate)


# --- fold ----------------------------------------------------------------------------------


def test_fold_of_one_admitted_sample_keeps_its_misses_and_score() -> None:
    """A single admitted sample folds to an admitted side with its misses and score."""
    view = fold([outcome(misses=["missing:SKU-9"], task_score=0.5, fingerprint="fp1")])
    expected = SideView(
        transport="ok",
        schema="ok",
        admitted=True,
        misses=("missing:SKU-9",),
        noise=(),
        pass_fraction=0.0,
        passed=False,
        task_score=0.5,
        response_model="model-ref",
        system_fingerprint="fp1",
        samples=1,
        detail="missing:SKU-9",
        models=("model-ref",),
    )
    assert expected == view


def test_fold_keeps_misses_seen_in_more_than_half_the_samples() -> None:
    """With three samples a miss in two is stable, a miss in one is noise."""
    rows = [
        outcome(sample=0, misses=["stable", "noise"], task_score=0.0),
        outcome(sample=1, misses=["stable"], task_score=0.5),
        outcome(sample=2, misses=[], task_score=1.0),
    ]
    view = fold(rows)
    expected = ("stable",)
    assert expected == view.misses
    expected = 0.5
    assert expected == view.task_score
    expected = 3
    assert expected == view.samples


def test_fold_drops_a_miss_seen_in_exactly_half_the_samples() -> None:
    """Half is not more than half: one miss in two samples is not stable."""
    view = fold([outcome(sample=0, misses=["x"], task_score=0.5), outcome(sample=1)])
    expected = ()
    assert expected == view.misses
    expected = "ok"
    assert expected == view.detail


def test_fold_counts_a_miss_repeated_within_one_sample_once() -> None:
    """A sample listing the same miss twice still counts as one sample showing it."""
    view = fold([outcome(sample=0, misses=["x", "x"], task_score=0.0), outcome(sample=1)])
    expected = ()
    assert expected == view.misses


def test_fold_pass_is_a_strict_majority_over_samples() -> None:
    """passed is True only when more than half the samples passed."""
    two_of_three = [outcome(sample=0), outcome(sample=1), outcome(sample=2, misses=["m"])]
    one_of_two = [outcome(sample=0), outcome(sample=1, misses=["m"])]
    assert True is fold(two_of_three).passed
    assert False is fold(one_of_two).passed


def test_fold_is_unadmitted_when_any_sample_is() -> None:
    """One timed-out sample makes the whole side unadmitted, with no score and no misses."""
    rows = [
        outcome(sample=0, misses=["m"], task_score=0.5),
        outcome(sample=1, transport="timeout", schema="skipped", task_score=None, detail="t/o"),
    ]
    view = fold(rows)
    expected = (False, "timeout", "skipped", "t/o")
    assert expected == (
        view.admitted,
        view.transport,
        view.schema,
        view.detail,
    )
    expected = (None, None, ())
    assert expected == (view.task_score, view.passed, view.misses)
    expected = 2
    assert expected == view.samples


def test_fold_of_no_outcomes_is_unadmitted() -> None:
    """A side with no outcome at all is never admitted."""
    view = fold([])
    expected = (False, "cancelled", "skipped", "no outcome", 0)
    assert expected == (
        view.admitted,
        view.transport,
        view.schema,
        view.detail,
        view.samples,
    )


def test_fold_orders_samples_before_picking_the_model() -> None:
    """The served model of the lowest sample wins, whatever order rows arrive in."""
    rows = [outcome(sample=1, response_model="late"), outcome(sample=0, response_model="early")]
    expected = "early"
    assert expected == fold(rows).response_model


def test_fold_reports_a_transport_miss_in_any_sample_before_a_schema_miss() -> None:
    """A side with one schema-failed and one timed-out sample carries the transport stamp."""
    rows = [
        outcome(sample=0, schema="fail", task_score=None, detail="not_json"),
        outcome(sample=1, transport="timeout", schema="skipped", task_score=None),
    ]
    verdict = judge(ok_view(), fold(rows), accepted())
    expected = TRANSPORT_MISS
    assert expected == verdict.gate


# --- classify: each rule, and first-rule-wins ----------------------------------------------


CASE = Case(id="c1", prompt="p", expect={}, fixture_sha=SHA, path="cases.jsonl", line=1)


def test_folds_fold_a_side_once_all_its_samples_are_in_whatever_their_order() -> None:
    """Rows arrive in completion order; the fold is the same as folding them all at once."""
    rows = [
        outcome(sample=2, misses=["a"]),
        outcome(sample=0),
        outcome(sample=1, misses=["a", "b"], response_model="model-other"),
    ]
    folds = Folds(samples=3)
    for row in rows[:2]:
        folds.add(row, CASE)
    assert fold(rows[:2]) == folds.view("c1", "reference")  # not all in yet: what is there
    folds.add(rows[2], CASE)
    assert fold(rows) == folds.view("c1", "reference")
    assert folds.view("c1", "candidate") is None


def test_folds_count_only_todays_samples_and_one_row_per_key() -> None:
    """A replay with fewer samples ignores the extra rows; a repeated key counts once."""
    folds = Folds(samples=1)
    folds.add(outcome(sample=0, misses=["a"]), CASE)
    folds.add(outcome(sample=1), CASE)  # written by a run with samples = 2
    folds.add(outcome(sample=0), CASE)  # a second row for the same key
    assert fold([outcome(sample=0, misses=["a"])]) == folds.view("c1", "reference")


def test_gate_classes_are_listed_in_design_rule_order() -> None:
    """DESIGN's seven classes in order, flaky before unchanged, then retired_case."""
    expected = (
        "new_case",
        "fixture_move",
        "transport_miss",
        "schema_miss",
        "alias_swap",
        "disagreement_changed",
        "flaky",
        "unchanged",
        "retired_case",
    )
    assert expected == GATE_CLASSES
    expected = "retired_case"
    assert expected == RETIRED_CASE


def test_review_and_incomplete_sets_drive_exit_codes() -> None:
    """alias_swap and disagreement_changed need review; transport and schema misses are infra."""
    assert frozenset({"alias_swap", "disagreement_changed"}) == REVIEW
    assert frozenset({"transport_miss", "schema_miss"}) == INCOMPLETE


def test_a_case_missing_from_the_snapshot_is_new() -> None:
    """Rule 1: no snapshot entry means new_case."""
    verdict = judge(ok_view(), ok_view(model="model-cand"), None)
    expected = (NEW_CASE, "not in the snapshot")
    assert expected == (verdict.gate, verdict.detail)


def test_a_new_case_that_also_timed_out_is_still_new() -> None:
    """Rule 1 wins over rule 3: a new case with a timeout is new_case."""
    verdict = judge(ok_view(), timeout_view(), None)
    expected = NEW_CASE
    assert expected == verdict.gate
    assert verdict.disagreement is None


def test_a_changed_fixture_sha_is_a_fixture_move() -> None:
    """Rule 2: the snapshot's fixture_sha differs, and the detail shows old and new."""
    verdict = judge(ok_view(), ok_view(model="model-cand"), accepted(fixture_sha="b" * 16))
    expected = FIXTURE_MOVE
    assert expected == verdict.gate
    assert f"fixture_sha {'b' * 16} -> {SHA}" == verdict.detail


def test_a_fixture_move_wins_over_a_transport_miss() -> None:
    """Rule 2 before rule 3: an edited case that also timed out is a fixture_move."""
    verdict = judge(timeout_view(), ok_view(), accepted(fixture_sha="b" * 16))
    expected = FIXTURE_MOVE
    assert expected == verdict.gate


@pytest.mark.parametrize("side", ["reference", "candidate"])
def test_a_timeout_on_either_side_is_a_transport_miss(side: str) -> None:
    """Rule 3: either side's transport not ok; the detail names the side."""
    ref = timeout_view() if side == "reference" else ok_view()
    cand = timeout_view() if side == "candidate" else ok_view(model="model-cand")
    verdict = judge(ref, cand, accepted())
    assert (TRANSPORT_MISS, f"{side}: timeout") == (verdict.gate, verdict.detail)
    assert verdict.admitted is False
    assert verdict.disagreement is None


def test_both_sides_down_names_both_sides() -> None:
    """With both endpoints down the detail (and so `alert.transport`) names both sides: the
    candidate's outage must not hide behind the reference's."""
    verdict = judge(timeout_view(), timeout_view(), accepted())
    expected = (TRANSPORT_MISS, "reference: timeout; candidate: timeout")
    assert expected == (verdict.gate, verdict.detail)


def test_a_transport_miss_wins_over_a_schema_miss() -> None:
    """Rule 3 before rule 4, whichever side each is on."""
    verdict = judge(schema_fail_view(), timeout_view(), accepted())
    expected = (TRANSPORT_MISS, "candidate: timeout")
    assert expected == (verdict.gate, verdict.detail)


def test_a_schema_fail_is_a_schema_miss_with_its_detail() -> None:
    """Rule 4: either side's schema not ok; the detail carries the adapter's reason."""
    verdict = judge(ok_view(), schema_fail_view(), accepted())
    expected = (SCHEMA_MISS, "candidate: missing_choices")
    assert expected == (verdict.gate, verdict.detail)


def test_a_schema_miss_wins_over_an_alias_swap() -> None:
    """Rule 4 before rule 5: a failed body without a model is not an alias swap."""
    verdict = judge(schema_fail_view(), ok_view(model="model-cand"), accepted())
    expected = SCHEMA_MISS
    assert expected == verdict.gate


def test_a_side_without_a_task_score_is_a_schema_miss_not_a_crash() -> None:
    """Admission needs a numeric task_score; ok stamps without one are a schema miss."""
    unscored = fold([outcome(task_score=None, response_model="model-cand")])
    verdict = judge(ok_view(), unscored, accepted())
    expected = SCHEMA_MISS
    assert expected == verdict.gate


def test_a_different_served_model_is_an_alias_swap() -> None:
    """Rule 5: the served model differs from the snapshot's for that side; detail says which."""
    verdict = judge(ok_view(), ok_view(model="model-cand-v2"), accepted())
    expected = (ALIAS_SWAP, "candidate: accepted model-cand, served model-cand-v2")
    assert expected == (verdict.gate, verdict.detail)


def test_one_sample_served_by_a_fallback_model_is_an_alias_swap() -> None:
    """Rule 5 looks at every sample: the second one served by another model is a swap."""
    rows = [
        outcome(side="candidate", sample=0, response_model="model-cand"),
        outcome(side="candidate", sample=1, response_model="model-cand-fallback"),
    ]
    verdict = judge(ok_view(), fold(rows), accepted())
    expected = (
        ALIAS_SWAP,
        "candidate: accepted model-cand, served model-cand, model-cand-fallback",
    )
    assert expected == (verdict.gate, verdict.detail)


def test_drift_is_decided_per_served_call_whatever_the_gate_class() -> None:
    """A schema-failed reply from another model drifted; a timed-out call or a body that names
    no model says nothing about drift."""
    swapped = fold([outcome(schema="fail", task_score=None, response_model="model-cand-v2")])
    verdict = judge(ok_view(), swapped, accepted())
    expected = (SCHEMA_MISS, ("model-cand-v2",), (), (), ())
    assert expected == (
        verdict.gate,
        drifted(swapped, "model-cand"),
        drifted(timeout_view(), "model-cand"),
        drifted(schema_fail_view(), "model-cand"),  # a broken body names no model: no drift
        drifted(swapped, None),
    )


def test_an_alias_swap_wins_over_a_changed_disagreement() -> None:
    """Rule 5 before rule 6: a new model with new misses is reported as the swap."""
    verdict = judge(ok_view(), ok_view(["new-miss"], model="other"), accepted())
    expected = ALIAS_SWAP
    assert expected == verdict.gate


def test_no_alias_check_for_a_side_the_snapshot_has_no_model_for() -> None:
    """A snapshot without an accepted model for a side cannot report a swap there."""
    verdict = judge(ok_view(model="anything"), ok_view(model="else"), accepted(models={}))
    expected = UNCHANGED
    assert expected == verdict.gate


def test_a_candidate_move_is_a_disagreement_change_naming_the_candidate() -> None:
    """Rule 6: the delta changed because the candidate's misses moved."""
    verdict = judge(ok_view(), ok_view(["missing:SKU-9"], model="model-cand"), accepted())
    expected = DISAGREEMENT_CHANGED
    assert expected == verdict.gate
    expected = "candidate moved: accepted [], now ['missing:SKU-9']"
    assert expected == verdict.detail
    expected = ["missing:SKU-9"]
    assert expected == verdict.disagreement


def test_a_reference_move_is_a_disagreement_change_naming_the_reference() -> None:
    """Rule 6: the frozen path moved, and the detail says so."""
    snapshot = accepted(["forbidden:sorry"], [])
    verdict = judge(ok_view(), ok_view(model="model-cand"), snapshot)
    expected = DISAGREEMENT_CHANGED
    assert expected == verdict.gate
    assert verdict.detail.startswith("reference moved:")


def test_both_sides_moving_names_both() -> None:
    """Rule 6: when both miss lists differ from the snapshot the detail names both sides."""
    snapshot = accepted(["a"], [])
    verdict = judge(ok_view(["b"]), ok_view(["c"], model="model-cand"), snapshot)
    expected = DISAGREEMENT_CHANGED
    assert expected == verdict.gate
    assert verdict.detail.startswith("reference and candidate moved:")


def test_the_same_delta_from_moved_misses_is_unchanged() -> None:
    """Only the delta is gated: both sides gaining the same miss leaves it unchanged."""
    snapshot = accepted([], [])
    verdict = judge(ok_view(["shared"]), ok_view(["shared"], model="model-cand"), snapshot)
    expected = (UNCHANGED, "as accepted", [])
    assert expected == (
        verdict.gate,
        verdict.detail,
        verdict.disagreement,
    )


def test_the_sides_whose_misses_moved_are_recorded_whatever_the_gate() -> None:
    """disagreement.json names the sides that left the accepted misses: both on an unchanged
    delta, none for a new or an edited case, none for a side that was not scored."""
    both = judge(ok_view(["shared"]), ok_view(["shared"], model="model-cand"), accepted([], []))
    new = judge(ok_view(["a"]), ok_view(), None)
    edited = judge(ok_view(["a"]), ok_view(), accepted(fixture_sha="other"))
    down = judge(ok_view(["a"]), timeout_view(), accepted([], ["b"]))
    expected = (["reference", "candidate"], [], [], ["reference"])
    actual = tuple(v.to_json()["moved"] for v in (both, new, edited, down))
    assert expected == actual


def test_an_accepted_delta_that_persists_is_unchanged() -> None:
    """Rule 7: a non-empty delta equal to the snapshot's is unchanged."""
    snapshot = accepted([], ["missing:SKU-9"])
    verdict = judge(ok_view(), ok_view(["missing:SKU-9"], model="model-cand"), snapshot)
    expected = UNCHANGED
    assert expected == verdict.gate
    assert verdict.admitted is True


def test_verdict_to_json_carries_gate_delta_and_both_sides() -> None:
    """disagreement.json rows hold the gate, the delta and each side's view."""
    verdict = judge(ok_view(), ok_view(["m"], model="model-cand"), None)
    data = verdict.to_json()
    expected = ("new_case", ["m"], True, SHA)
    assert expected == (
        data["gate"],
        data["disagreement"],
        data["admitted"],
        data["fixture_sha"],
    )
    expected = ["m"]
    assert expected == data["candidate"]["misses"]
    expected = "model-ref"
    assert expected == data["reference"]["response_model"]


# --- samples: stable misses and noise --------------------------------------------------------


def sampled(misses_per_sample: Sequence[Sequence[str]], side: str = "reference") -> SideView:
    return fold(
        [
            outcome(
                side=side,
                sample=i,
                misses=m,
                task_score=0.5 if m else 1.0,
                response_model="model-ref" if side == "reference" else "model-cand",
            )
            for i, m in enumerate(misses_per_sample)
        ]
    )


def test_a_miss_in_most_samples_is_stable_and_one_in_few_is_noise() -> None:
    """Three samples: a miss in two is stable, a miss in one is noise, majority pass decides."""
    view = sampled([["a", "b"], ["a"], []])
    assert (view.misses, view.noise, view.passed) == (("a",), ("b",), False)


def test_a_miss_in_exactly_half_the_samples_is_noise() -> None:
    """Two of four samples is not more than half: noise; two passes of four is no majority."""
    view = sampled([["a"], ["a"], [], []])
    assert (view.misses, view.noise) == ((), ("a",))
    assert view.passed is False


def test_new_noise_with_the_same_stable_misses_is_flaky() -> None:
    """Stable misses as accepted but a new noisy miss: flaky, not disagreement_changed."""
    cand = sampled([["a"], ["a", "flip"], ["a"]], side="candidate")
    ref = sampled([[], [], []])
    verdict = classify(
        "c1",
        stratum=None,
        fixture_sha=SHA,
        reference=ref,
        candidate=cand,
        accepted=accepted([], ["a"]),
    )
    assert (verdict.gate, verdict.disagreement) == ("flaky", ["a"])
    assert "candidate: flip" in verdict.detail


def test_accepted_noise_is_not_flaky_again() -> None:
    """Noise the snapshot already accepted keeps the case unchanged."""
    cand = sampled([["a"], ["a", "flip"], ["a"]], side="candidate")
    ref = sampled([[], [], []])
    entry = accepted([], ["a"]) | {"candidate_noise": ["flip"]}
    verdict = classify(
        "c1", stratum=None, fixture_sha=SHA, reference=ref, candidate=cand, accepted=entry
    )
    assert verdict.gate == "unchanged"


def test_a_changed_stable_miss_is_still_disagreement_changed() -> None:
    """When the stable misses move, the case is disagreement_changed whatever the noise does."""
    cand = sampled([["b"], ["b", "flip"], ["b"]], side="candidate")
    ref = sampled([[], [], []])
    verdict = classify(
        "c1",
        stratum=None,
        fixture_sha=SHA,
        reference=ref,
        candidate=cand,
        accepted=accepted([], ["a"]),
    )
    assert verdict.gate == "disagreement_changed"


@given(
    transport=st.sampled_from(["ok", "timeout", "connection_lost"]),
    schema=st.sampled_from(["ok", "fail", "skipped"]),
    task_score=st.none() | st.floats(0, 1) | st.integers(0, 1),
    misses=st.lists(st.sampled_from(["a", "b", "missing:x"]), max_size=4),
    model=st.none() | st.sampled_from(["", "m-1"]),
    fingerprint=st.none() | st.sampled_from(["", "fp"]),
    request_sha=st.none() | st.sampled_from(["r" * 16]),
)
def test_the_one_sample_fold_agrees_with_the_general_one(
    transport: str,
    schema: str,
    task_score: float | None,
    misses: list[str],
    model: str | None,
    fingerprint: str | None,
    request_sha: str | None,
) -> None:
    """The fast path for one sample is the general fold of a one-row list, field for field."""
    from runner.gate import _fold_many, _fold_one

    row = outcome(
        transport=transport,
        schema=schema,
        task_score=task_score,
        misses=misses,
        response_model=model,
        fingerprint=fingerprint,
        detail="some detail",
        request_sha=request_sha,
    )
    assert _fold_many([row]) == _fold_one(row)


row_fields = st.fixed_dictionaries(
    {
        "transport": st.sampled_from(["ok", "timeout"]),
        "schema": st.sampled_from(["ok", "fail"]),
        "task_score": st.none() | st.sampled_from([0.0, 0.5, 1.0, 1]),
        "misses": st.lists(st.sampled_from(["a", "b"]), max_size=2),
        "response_model": st.none() | st.sampled_from(["m-1", "m-2"]),
        "fingerprint": st.none() | st.sampled_from(["fp"]),
        "detail": st.sampled_from(["ok", "a", "timeout: 30s"]),
        "request_sha": st.none() | st.sampled_from(["r1" * 8, "r2" * 8]),
    }
)


@given(st.lists(row_fields, max_size=30))
def test_folds_of_one_sample_give_each_side_its_own_fold(rows: list[dict[str, Any]]) -> None:
    """Folds remembers one-row folds by the fields they read: never one row's view for another."""
    folds = Folds(1)
    expected = {}
    for i, fields in enumerate(rows):
        row = replace(outcome(**fields), case_id=f"c{i}")
        folds.add(row, CaseRef(f"c{i}", None, SHA, i + 1, 0, 0, b""))
        expected[f"c{i}"] = fold((row,))
    assert {case_id: folds.view(case_id, "reference") for case_id in expected} == expected


def test_a_side_keeps_the_request_sha_its_calls_were_shaped_by() -> None:
    """Scored or not, one sample or several, a side's fold names its rows' request_sha, and
    disagreement.json carries it for promote to accept; rows without one give None."""
    sha = "5" * 16
    for rows in (
        [outcome(request_sha=sha)],
        [outcome(transport="timeout", task_score=None, request_sha=sha)],
        [outcome(sample=0, request_sha=sha), outcome(sample=1, request_sha=sha)],
    ):
        view = fold(rows)
        assert (view.request_sha, view.to_json()["request_sha"]) == (sha, sha)
    assert fold([outcome()]).request_sha is None
