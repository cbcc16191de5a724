"""Which cases the latency and cost gates compared: the cases behind their reasons.

summary.json says how many cases a ratio gate paired, not which. The report rebuilds the
gate's own fold (`regressions.PairFold`) from outcomes.jsonl, fed the first row of each case,
side and sample as the run fed it (`gate.Folds.put`), at the prices the run recorded and with
each side's usage read by the protocol its calls spoke (raw.jsonl's `adapter`, as the gate
reads it by its side's endpoint's), so the table's `paired` filter shows exactly the cases a
gate's count is about. outcomes.jsonl is read
for it only when a gate's reason is shown: most runs ask neither question.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from runner.cost.regressions import Metric, PairFold
from runner.cost.usage import call_of
from runner.history import mapping_of
from runner.model import ROW_ERRORS, SIDES, Outcome
from runner.reports.caseview import RunCases


def fired(summary: Mapping[str, Any]) -> list[Metric]:
    """The ratio gates asked and not cleared: those the verdict gives a reason."""
    block = mapping_of(summary.get("regressions"))
    return [m for m in Metric if mapping_of(block.get(m.value)).get("fires") is True]


def paired_cases(
    summary: Mapping[str, Any], cases: RunCases, case_ids: Iterable[str]
) -> dict[str, tuple[str, ...]]:
    """Per case, the metrics (`latency`, `cost`) of the fired gates that paired it."""
    metrics = fired(summary)
    if not metrics:
        return {}
    samples = summary.get("samples")
    samples = samples if isinstance(samples, int) and samples > 0 else 1
    fold = PairFold(samples, {side: cases.inputs.price(side) for side in SIDES})
    kinds: dict[str, str] = {}
    for case_id in case_ids:
        for side in SIDES:
            kind = kinds[side] = kinds.get(side) or _kind(cases, case_id, side)
            seen: set[int] = set()
            for spot in cases.outcomes.spots(case_id, side):
                try:
                    outcome = Outcome.from_json(cases.outcomes.row(spot) or {})
                except ROW_ERRORS:
                    continue
                if 0 <= outcome.sample < samples and outcome.sample not in seen:
                    seen.add(outcome.sample)  # the first row of a sample is the one that counts
                    fold.add(case_id, side, call_of(outcome, kind))
    found: dict[str, tuple[str, ...]] = {}
    for metric in metrics:
        for case_id in fold.paired(metric):
            found[case_id] = (*found.get(case_id, ()), metric.value)
    return found


def _kind(cases: RunCases, case_id: str, side: str) -> str:
    """The protocol a side's calls spoke, as its first exchange of this case says (every call
    of a side goes to its one endpoint); "" when none is recorded, so no usage is read."""
    for spot in cases.raw.spots(case_id, side):
        adapter = (cases.raw.row(spot) or {}).get("adapter")
        if isinstance(adapter, str):
            return adapter
    return ""
