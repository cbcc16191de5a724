"""A run directory: made under its suite's folder, named by its start, described by its
manifest, which every later command (resume, retry, replay, report, promote) reads back."""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import secrets
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from runner import __version__, logs
from runner.config import LoadedConfig, load_config
from runner.errors import ConfigError, DataError, StorageError, UsageError
from runner.ledger import disk_refusal, read_json_object
from runner.model import SIDES
from runner.runs.mode import RunMode
from runner.runs.names import RUN_STAMP
from runner.suite import Suite

MANIFEST_VERSION = 1


def _public_url(url: str | None) -> str | None:
    """Drop any user:password@ and query from a URL before it is written anywhere, and mask
    what is left of a secret (a base_url read from the environment is one: `runner.config`)."""
    if not url:
        return url
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return logs.scrub_text(urlunsplit((parts.scheme, netloc, parts.path, "", "")))


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def new_run_dir(runs_dir: Path, suite: str) -> Path:
    stamp_ = datetime.now(UTC).strftime(RUN_STAMP)
    run_dir = runs_dir / suite / f"{stamp_}-{secrets.token_hex(3)}"
    try:
        with disk_refusal(run_dir):
            run_dir.mkdir(parents=True)
    except StorageError as exc:
        raise exc.advised("no run dir was made: start it again once there is space") from None
    except OSError as exc:
        raise UsageError(f"{runs_dir}: cannot create a run directory: {exc.strerror}") from None
    if not os.access(run_dir, os.W_OK):
        raise UsageError(f"{run_dir}: run directory is not writable")
    return run_dir


@functools.cache
def _versions() -> dict[str, str]:
    """The installed versions of the libraries a run's bytes pass through, read from their
    package metadata: anyio has no `__version__`, and a replay need not import httpx."""
    from importlib.metadata import version

    return {name: version(name) for name in ("httpx", "aiohttp", "anyio", "structlog", "orjson")}


def manifest_for(
    loaded: LoadedConfig,
    suite: Suite,
    run_dir: Path,
    *,
    mode: RunMode,
    parent: str | None,
    parent_finished: bool | None = None,
) -> dict[str, Any]:
    cfg = loaded.config.suites[suite.name]
    endpoints = {}
    for side in SIDES:
        name = getattr(cfg, side)
        ep = loaded.endpoint(name)
        endpoints[side] = {
            "name": name,
            "kind": ep.kind,
            "base_url": _public_url(ep.base_url),
            "model": ep.model,
            "request_sha": loaded.shape(name).request_sha,
            # what its tokens cost when the run was made: a report prices each case from it
            "price": ep.price.model_dump() if ep.price is not None else None,
        }
    return {
        "version": MANIFEST_VERSION,
        "run_id": run_dir.name,
        "suite": suite.name,
        "mode": mode,
        "parent": parent,
        "parent_finished": parent_finished,  # a parent killed mid-run never made some calls
        "config": {"path": str(loaded.path.resolve()), "digest": loaded.digest},
        "fixtures": {
            "path": str(suite.fixtures.path.resolve()),
            "digest": file_digest(suite.fixtures.path),
            "cases": len(suite.refs),
        },
        "samples": suite.samples,
        "endpoints": endpoints,
        "versions": {
            "parallax": __version__,
            "python": platform.python_version(),
            **_versions(),
        },
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "finished_at": None,
    }


def read_manifest(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "manifest.json"
    if not run_dir.is_dir():
        raise UsageError(f"{run_dir}: no such run directory")
    if not path.exists():  # a suite's folder, or any other: the argument is wrong, not data
        raise UsageError(f"{run_dir}: not a parallax run directory (no manifest.json)")
    manifest = read_json_object(path)
    if manifest.get("version") != MANIFEST_VERSION:
        raise DataError(path, "not a parallax manifest (missing or unknown version)")
    if not isinstance(manifest.get("suite"), str):
        raise DataError(path, "not a parallax manifest (no suite name)")
    return manifest


def config_for_run(run_dir: Path, config_path: Path | None) -> LoadedConfig:
    """The config a run was made with, unless the user names another one."""
    if config_path is not None:
        return load_config(config_path)
    manifest = read_manifest(run_dir)
    config = manifest.get("config")
    if not isinstance(config, dict) or not isinstance(config.get("path"), str):
        raise DataError(run_dir / "manifest.json", "no config path; pass --config")
    if "\x00" in config["path"]:
        raise DataError(run_dir / "manifest.json", "config path holds a NUL; pass --config")
    path = Path(config["path"])
    if not path.exists():  # a run copied from another machine names that machine's config
        raise ConfigError(
            path, None, f"no such config file (named by {run_dir / 'manifest.json'}; pass --config)"
        )
    return load_config(path)
