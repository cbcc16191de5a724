"""The results database on PostgreSQL (`results_url = "postgresql://..."`), where a fleet of
daemons and shards on many machines report to one place. Its tables are made under an
advisory lock: two first writers at once would otherwise race in `CREATE TABLE IF NOT
EXISTS`, which PostgreSQL does not make atomic."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

from runner.results.schema import TABLES, Dialect
from runner.results.store import Store

CONNECT_SECONDS = 10  # an unreachable server costs a run this much, once, at its end
_SCHEMA_LOCK = 0x70617261  # pg_advisory_xact_lock's key for creating the tables


def shown(url: str) -> str:
    """The URL without its user and password: what a message or a log line may say."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    return f"{parts.scheme}://{host}{f':{parts.port}' if parts.port else ''}{parts.path}"


class PostgresStore(Store):
    dialect = Dialect.POSTGRES

    @classmethod
    def open(cls, url: str) -> PostgresStore:
        import psycopg

        connection = psycopg.connect(url, connect_timeout=CONNECT_SECONDS, autocommit=True)
        try:
            store = cls(connection, shown(url))
            store.create()
        except psycopg.Error:
            connection.close()
            raise
        return store

    def create(self) -> None:
        with self.transaction() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
            for table in TABLES:
                cursor.execute(table.create())

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Any]:
        with self.connection.transaction(), self.connection.cursor() as cursor:
            yield cursor
