"""The heartbeat file `serve` rewrites while it runs (runs/.parallax-serve.json): its state,
each suite's next and last handled fire; `parallax health` reads it (runner.health), and the
next daemon's start reads where the last one left off (`catchup`)."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HEARTBEAT_VERSION = 1


def _task_count() -> int | None:
    """Live tasks in the daemon's event loop: a leak shows here first (None outside the loop)."""
    import asyncio

    try:
        return len(asyncio.all_tasks())
    except RuntimeError:
        return None


def iso(when: datetime | None) -> str | None:
    return when.astimezone(UTC).isoformat(timespec="seconds") if when is not None else None


def write_heartbeat(
    path: Path,
    *,
    state: str,
    started_at: datetime,
    heartbeat_seconds: float,
    suites: Mapping[str, Mapping[str, Any]],
) -> None:
    """Replace the heartbeat at `path` in one rename, so `health` never reads half of one."""
    doc = {
        "version": HEARTBEAT_VERSION,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "state": state,
        "started_at": iso(started_at),
        "updated_at": datetime.now(UTC).isoformat(timespec="milliseconds"),
        "heartbeat_seconds": heartbeat_seconds,
        "tasks": _task_count(),
        "suites": suites,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc, sort_keys=True, allow_nan=False) + "\n", encoding="utf-8")
    tmp.replace(path)
