"""The results database in one SQLite file (`runs/parallax.db`, the default), shared by the
processes of one machine: WAL, so readers never block the writer, and a busy timeout long
enough for the other writers' few milliseconds."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from runner.results.schema import Dialect
from runner.results.store import Store

BUSY_SECONDS = 60.0


class SQLiteStore(Store):
    dialect = Dialect.SQLITE

    @classmethod
    def open(cls, path: Path) -> SQLiteStore:
        path.parent.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(path, timeout=BUSY_SECONDS, isolation_level=None)
        try:
            connection.execute("PRAGMA journal_mode=WAL")
            store = cls(connection, str(path))
            store.create()
        except sqlite3.Error:
            connection.close()
            raise
        return store

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Cursor]:
        cursor = self.connection.cursor()
        cursor.execute("BEGIN IMMEDIATE")  # the write lock first: no upgrade to deadlock on
        try:
            yield cursor
        except BaseException:
            cursor.execute("ROLLBACK")
            raise
        cursor.execute("COMMIT")
