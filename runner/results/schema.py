"""The results database's tables, each column with what it holds (the docs' reference is
generated from them), and the one way the two engines' SQL differs: the parameter marker.

Everything else is SQL both SQLite and PostgreSQL speak: `CREATE TABLE IF NOT EXISTS`,
`INSERT ... ON CONFLICT DO NOTHING` (what makes recording a run twice change nothing),
TEXT, BIGINT and DOUBLE PRECISION columns. Times are ISO-8601 text plus Unix seconds
(`started_epoch`), which Grafana reads as time on both engines.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from runner.gate import GATE_CLASSES

SIDE_COLUMNS = {"reference": "ref", "candidate": "cand"}  # a per-side column's prefix


class Dialect(enum.Enum):
    """An engine, by its DB-API parameter marker."""

    SQLITE = "?"
    POSTGRES = "%s"


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    doc: str


@dataclass(frozen=True)
class Table:
    name: str
    doc: str
    key: tuple[str, ...]
    columns: tuple[Column, ...]

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]

    def create(self) -> str:
        cols = [f"{c.name} {c.type}" for c in self.columns]
        return (
            f"CREATE TABLE IF NOT EXISTS {self.name} "
            f"({', '.join(cols)}, PRIMARY KEY ({', '.join(self.key)}))"
        )

    def insert(self, dialect: Dialect) -> str:
        marks = ", ".join(dialect.value for _ in self.columns)
        return (
            f"INSERT INTO {self.name} ({', '.join(self.names)}) VALUES ({marks}) "
            "ON CONFLICT DO NOTHING"
        )


def _side(name: str, type_: str, doc: str) -> list[Column]:
    return [
        Column(f"{prefix}_{name}", type_, f"{side}: {doc}") for side, prefix in SIDE_COLUMNS.items()
    ]


RUNS = Table(
    "runs",
    "one row per finished run (a shard's, a merge's, a replay's too)",
    ("run_id",),
    (
        Column("run_id", "TEXT NOT NULL", "the run dir's name, unique across suites"),
        Column("suite", "TEXT NOT NULL", "the suite"),
        Column("shard_index", "INTEGER", "a shard's index (0-based), null for a whole run"),
        Column("shard_count", "INTEGER", "a shard's N, null for a whole run"),
        Column("started_at", "TEXT", "UTC ISO-8601"),
        Column("finished_at", "TEXT", "UTC ISO-8601"),
        Column("started_epoch", "BIGINT", "`started_at` in Unix seconds (Grafana's time)"),
        Column("mode", "TEXT", "`run`, `resume`, `retry` or `replay`"),
        Column("partial", "INTEGER", "1 for a partial run (`--case`, `--stratum`), else 0"),
        Column("merged", "INTEGER", "1 for the run `parallax merge` made, else 0"),
        Column("verdict", "TEXT", "`clean`, `review`, `incomplete` or `review+incomplete`"),
        Column("exit_code", "INTEGER", "the verdict's exit code, 0 to 3"),
        Column("cases", "INTEGER", "cases gated"),
        Column("admitted", "INTEGER", "cases both sides' stamps admitted"),
        *(Column(f"gate_{g}", "INTEGER", f"cases of gate class `{g}`") for g in GATE_CLASSES),
        *_side("pass_rate", "DOUBLE PRECISION", "passed cases over scored ones (null: none)"),
        Column("noise_floor", "DOUBLE PRECISION", "the reference's self-disagreement rate"),
        *_side("cost_usd", "DOUBLE PRECISION", "what its calls cost (null without a price)"),
        *_side("tokens", "BIGINT", "total tokens of its calls"),
        *_side("models", "TEXT", "the models served, comma-separated"),
        Column("run_dir", "TEXT", "the run dir's absolute path when it was recorded"),
        Column("config_digest", "TEXT", "the config's digest (manifest)"),
        Column("fixtures_digest", "TEXT", "the fixture file's digest (manifest)"),
        Column("snapshot_digest", "TEXT", "the snapshot's digest gated against (manifest)"),
    ),
)
CASES = Table(
    "cases",
    "one row per case of a recorded run, its gate class and each side's stamps",
    ("run_id", "case_id"),
    (
        Column("run_id", "TEXT NOT NULL", "the run (`runs.run_id`)"),
        Column("case_id", "TEXT NOT NULL", "the case's `id`"),
        Column("stratum", "TEXT", "`easy`, `medium`, `stretch` or null"),
        Column("gate", "TEXT", "its gate class"),
        *_side("transport", "TEXT", "the transport stamp"),
        *_side("schema", "TEXT", "the schema stamp"),
        *_side("admitted", "INTEGER", "1 when admitted"),
        *_side("passed", "INTEGER", "1 passed, 0 failed, null unscored"),
        *_side("task_score", "DOUBLE PRECISION", "the task score"),
        *_side("misses", "TEXT", "its misses, comma-separated"),
    ),
)
MERGES = Table(
    "merges",
    "one row per shard a `parallax merge` run was made of",
    ("run_id", "shard_index"),
    (
        Column("run_id", "TEXT NOT NULL", "the merged run (`runs.run_id`)"),
        Column("shard_index", "INTEGER NOT NULL", "the shard's index"),
        Column("shard_count", "INTEGER", "N"),
        Column("shard_run_id", "TEXT", "the shard's run dir name"),
        Column("finished", "INTEGER", "0 when merged unfinished (`--allow-partial`)"),
    ),
)
TABLES: Sequence[Table] = (RUNS, CASES, MERGES)
