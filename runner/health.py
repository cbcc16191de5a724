"""`parallax health`: is the daemon this host started alive, by its heartbeat alone?

`parallax serve` rewrites its heartbeat (`<runs_dir>/.parallax-serve.json`) from the loop that
schedules, and at start it writes a pointer to that heartbeat in a well-known place per host
and user, `$TMPDIR/parallax-<uid>/serve.json` (`/tmp` when TMPDIR is unset). `health` without
`--config` follows the pointer, so a probe finds the daemon however it was started
(`serve --config /config/serve.toml`) and never reads a config: one broken after the daemon
started cannot fail the probe of a daemon that runs on.

No pointer means no daemon was ever started here (a one-shot `parallax run` container, whose
image's HEALTHCHECK still runs): that is healthy, with nothing to check. A daemon that started
and died leaves its pointer, so it reads unhealthy (state, age or pid). With several daemons
on one host the pointer names the last one started; name a daemon's config to check another.
"""

from __future__ import annotations

import json
import os
import socket
import stat
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from runner.config import MAX_HEARTBEAT_SECONDS
from runner.errors import UsageError
from runner.jsontext import loads

HEARTBEAT_NAME = ".parallax-serve.json"
POINTER_NAME = "serve.json"
POINTER_VERSION = 1


def heartbeat_path(runs_dir: Path) -> Path:
    return runs_dir / HEARTBEAT_NAME


def pointer_dir() -> Path:
    """This host's and user's place for the pointer; the same for `serve` and `health`, which
    share the environment (a container's, a probe's), so TMPDIR moves both."""
    tmp = os.environ.get("TMPDIR") or "/tmp"  # noqa: S108 - a private 0700 dir is made inside
    return Path(tmp) / f"parallax-{os.getuid()}"


def pointer_path() -> Path:
    return pointer_dir() / POINTER_NAME


def _private_problem(folder: Path) -> str | None:
    """Why `folder` cannot be trusted to hold this user's pointer, or None: another user could
    otherwise make it first and point `health` at a heartbeat of their choosing."""
    info = folder.lstat()
    if not stat.S_ISDIR(info.st_mode):
        return f"{folder} is not a directory"
    if info.st_uid != os.getuid():
        return f"{folder} belongs to uid {info.st_uid}, not to uid {os.getuid()}"
    if info.st_mode & 0o077:
        return f"{folder} is open to other users (mode {stat.S_IMODE(info.st_mode):o})"
    return None


def write_pointer(heartbeat: Path, config: Path) -> Path:
    """Tell `health` on this host where the daemon that starts now writes its heartbeat.

    Written once the daemon holds its runs dir's lock (a second daemon refused by it leaves the
    pointer alone). UsageError when it cannot be written: a daemon `health` cannot find would
    read as "nothing to check", healthy, however stuck it is.
    """
    folder, path = pointer_dir(), pointer_path()
    doc = {
        "version": POINTER_VERSION,
        "heartbeat": os.path.normpath(heartbeat.absolute()),
        "config": os.path.normpath(config.absolute()),
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    hint = "give the daemon a writable TMPDIR (on Kubernetes, an emptyDir on /tmp)"
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        if (problem := _private_problem(folder)) is not None:
            raise UsageError(f"{path}: cannot write the daemon pointer `health` reads: {problem}")
        tmp = folder / f"{POINTER_NAME}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(doc, sort_keys=True, allow_nan=False) + "\n", encoding="utf-8")
        tmp.replace(path)
    except OSError as exc:
        raise UsageError(
            f"{path}: cannot write the daemon pointer `health` reads: {exc.strerror}; {hint}"
        ) from None
    return path


def read_pointer() -> dict[str, Any] | None:
    """The pointer the last daemon started here wrote; None when none was ever written.

    ValueError for one that cannot be trusted or read: that is unhealthy, never "nothing to
    check" (a daemon that started must not hide behind a broken pointer).
    """
    folder, path = pointer_dir(), pointer_path()
    try:
        problem = _private_problem(folder)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ValueError(f"{folder}: {exc.strerror}") from None
    if problem is not None:
        raise ValueError(problem)
    try:
        doc = loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ValueError(f"{path}: {exc.strerror}") from None
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"{path}: not JSON: {exc}") from None
    heartbeat = doc.get("heartbeat") if isinstance(doc, dict) else None
    if not isinstance(heartbeat, str) or "\x00" in heartbeat or not Path(heartbeat).is_absolute():
        raise ValueError(f"{path}: no absolute heartbeat path")
    return dict(doc)


def daemon_health(config: Path | None, max_age: float | None = None) -> dict[str, Any]:
    """The report `parallax health` prints: `healthy` decides its exit code.

    Without a config, the daemon the pointer names, or nothing to check when no daemon was
    ever started here. With one, that config's daemon: the pointer's heartbeat when the pointer
    names this config (the file is not read, so an edit since the start cannot fail it), else
    the heartbeat in the config's runs dir.
    """
    pointer_report: dict[str, Any] = {"pointer": str(pointer_path())}
    try:
        pointer = read_pointer()
    except ValueError as exc:
        if config is None:
            return {"healthy": False, **pointer_report, "reason": f"unreadable pointer: {exc}"}
        pointer = None
    if config is None:
        if pointer is None:
            note = "no daemon was started here (no pointer); nothing to check"
            return {"healthy": True, "checked": False, **pointer_report, "note": note}
        heartbeat = Path(pointer["heartbeat"])
    elif pointer is not None and _same_file(pointer.get("config"), config):
        heartbeat = Path(pointer["heartbeat"])
    else:
        from runner.config import load_config

        heartbeat = heartbeat_path(load_config(config).runs_dir)
        pointer_report = {}
    report = check_health(heartbeat, max_age)
    if pointer_report and pointer is not None:
        report.update(pointer_report, config=pointer.get("config"))
    return report


def _same_file(named: object, config: Path) -> bool:
    try:
        return isinstance(named, str) and Path(named).samefile(config)
    except (OSError, ValueError):
        return False


def check_health(
    heartbeat: Path, max_age: float | None = None, *, now: datetime | None = None
) -> dict[str, Any]:
    """Healthy when the heartbeat is fresh, the state is running and its process is alive."""
    report: dict[str, Any] = {"healthy": False, "heartbeat": str(heartbeat)}
    try:
        doc, updated, interval, state, pid = _read_heartbeat(heartbeat)
    except FileNotFoundError:
        report["reason"] = "no heartbeat file: is `parallax serve` running with this config?"
        return report
    except (OSError, ValueError, KeyError, TypeError) as exc:
        report["reason"] = f"unreadable heartbeat: {exc}"
        return report
    limit = max_age if max_age is not None else 3 * interval + 5
    age = ((now or datetime.now(UTC)) - updated).total_seconds()
    report.update(state=state, pid=pid, age_seconds=round(age, 3), max_age_seconds=limit)
    if state != "running":
        report["reason"] = f"scheduler is {state}"
    elif age < -limit:  # clocks of two hosts sharing the volume may differ, not by this much
        report["reason"] = f"heartbeat from the future: updated_at is {-age:.1f}s ahead"
    elif age > limit:
        report["reason"] = f"stale heartbeat: {age:.1f}s old (limit {limit:g}s)"
    elif doc.get("host") == socket.gethostname() and not _alive(pid):
        report["reason"] = f"daemon process {pid} is gone"
    else:
        report["healthy"] = True
    return report


def _read_heartbeat(path: Path) -> tuple[dict[str, Any], datetime, float, str, int]:
    """The heartbeat and the fields health reads; ValueError for a value no daemon writes,
    which must read as unhealthy, never as fresh (NaN compares false with every age)."""
    doc = loads(path.read_bytes())
    updated = datetime.fromisoformat(doc["updated_at"])
    interval = float(doc.get("heartbeat_seconds", 15.0))
    pid = doc["pid"]
    if updated.tzinfo is None:
        raise ValueError("updated_at has no time zone")
    if not 0 < interval <= MAX_HEARTBEAT_SECONDS:  # 1e308 made the age limit infinite
        raise ValueError(f"heartbeat_seconds is {interval!r}")
    if type(pid) is not int or not 0 < pid < 2**31:  # os.kill(-1, 0) would say "alive"
        raise ValueError(f"pid is {pid!r}")
    return doc, updated, interval, str(doc["state"]), pid


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, as another user
    return True
