"""The stage records are immutable where that is checked, by the type checker in CI, and
slotted, since a run holds thousands of them."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

from runner import gate, model

# every `record`, by the module it lives in
RECORDS = {
    **dict.fromkeys(
        ("Case", "Attempt", "Response", "Exchange", "Outcome", "Grade", "Reply"), model
    ),
    "Verdict": gate,
}


def _first_field(name: str) -> str:
    return next(iter(getattr(RECORDS[name], name).__dataclass_fields__))


def test_type_checker_refuses_assigning_a_field(tmp_path: Path) -> None:
    snippet = tmp_path / "assign.py"
    lines = [f"from {module.__name__} import {name}" for name, module in RECORDS.items()]
    lines.append("")
    for name in RECORDS:
        field = _first_field(name)
        lines += [f"def set_{name.lower()}(value: {name}) -> None:"]
        lines += [f"    value.{field} = value.{field}", ""]
    snippet.write_text("\n".join(lines), encoding="utf-8")
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--strict", str(snippet)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 1, checked.stdout
    for name in RECORDS:
        message = f'Property "{_first_field(name)}" defined in "{name}" is read-only'
        assert message in checked.stdout, (name, checked.stdout)
    assert f"Found {len(RECORDS)} errors" in checked.stdout


def test_records_are_slotted() -> None:
    for name, module in RECORDS.items():
        cls = getattr(module, name)
        required = [f for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING]
        assert not hasattr(cls(*[None] * len(required)), "__dict__"), name


def test_records_hash_by_their_fields_as_frozen_ones_do() -> None:
    """The type checker takes a record for frozen, so hashable: at run time it is too."""
    first = model.Attempt(n=1, transport="ok", elapsed_ms=5)
    assert hash(first) == hash(model.Attempt(n=1, transport="ok", elapsed_ms=5))
    assert {first, model.Attempt(n=1, transport="ok", elapsed_ms=5)} == {first}
    assert len({first, model.Attempt(n=2, transport="ok", elapsed_ms=5)}) == 2
