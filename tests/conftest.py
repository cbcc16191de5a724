"""Shared fixtures: the anyio backend and the loopback fault server (tests/faultserver.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from faultserver import BacklogFull, FaultServer, backlog_full, refused_port


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def fault_server() -> Iterator[FaultServer]:
    """A fresh server per test, so recorded requests and flaky counters never leak across."""
    with FaultServer() as server:
        yield server


@pytest.fixture
def closed_port() -> int:
    """A loopback port with no listener: connecting is refused."""
    return refused_port()


@pytest.fixture
def full_backlog() -> Iterator[BacklogFull]:
    """A listener that drops SYNs (full accept queue): connecting times out."""
    with backlog_full() as full:
        if not full.works:
            pytest.skip("kernel completed connects to a full backlog; no connect timeout here")
        yield full
