"""Helpers shared by the reliability tests (crash, soak, hostile, fuzz, integrity, secrets).

`record(section, **figures)` adds to the session's reliability figures, which conftest.py
prints at the end of the run and writes to `$PARALLAX_RELIABILITY_JSON` (default
`<pytest basetemp>/reliability.json`): the figures in docs/operations/reliability.md come from it.
"""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

PARALLAX = [sys.executable, "-m", "runner"]
RUN_TIMEOUT = 240  # seconds for a whole run subprocess: a bound on a hung run, not a timing
# Every test secret starts with this, so the session-wide check (conftest.py) can find a leak.
SECRET_PREFIX = "sk-paralleak-"
# what the session-wide scan (conftest.py) looks for: this prefix and the older test keys, in
# any case, since an upstream may lower-case a key (a header name does)
SECRET = re.compile(rb"sk-(?:paralleak|test|live)-[A-Za-z0-9-]{4,}", re.IGNORECASE)
# the spellings a file may hold a key in that decode back to it: a JSON `\uXXXX` escape, an
# HTML character reference, a URL's percent-encoding (each turned back into the character)
_ESCAPED = re.compile(
    rb"\\u([0-9a-fA-F]{4})|&#[xX]([0-9a-fA-F]{1,6});|&#([0-9]{1,7});|%([0-9a-fA-F]{2})"
)


def _base64_prefixes() -> tuple[bytes, ...]:
    """SECRET_PREFIX base64-encoded at each of the three byte alignments, in both alphabets:
    what the prefix alone decides of an encoded key (a `Basic` header echoed, a token)."""
    import base64

    raw = SECRET_PREFIX.encode("ascii")
    found = []
    for offset in range(3):
        encoded = base64.b64encode(bytes(offset) + raw)[: (offset + len(raw)) // 3 * 4]
        core = encoded[4 if offset else 0 :]
        found += [core, core.translate(bytes.maketrans(b"+/", b"-_"))]
    return tuple(found)


_BASE64_PREFIXES = _base64_prefixes()


def _unescaped(data: bytes) -> bytes:
    def char(match: re.Match[bytes]) -> bytes:
        json_hex, html_hex, html_dec, pct = match.groups()
        if pct is not None:
            return bytes([int(pct, 16)])
        code = int(json_hex or html_hex, 16) if html_dec is None else int(html_dec)
        return chr(code).encode("utf-8", "replace") if code < 0x110000 else match.group(0)

    return _ESCAPED.sub(char, data)


def holds_test_secret(data: bytes) -> bool:
    """Whether `data` holds a test key (SECRET) as itself, escaped (JSON, HTML, a URL) or
    base64-encoded: the session-wide scan's test (conftest.py)."""
    if SECRET.search(data) or any(core in data for core in _BASE64_PREFIXES):
        return True
    return bool(_ESCAPED.search(data)) and SECRET.search(_unescaped(data)) is not None


FIGURES: dict[str, Counter[str]] = {}


def run_parallax(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`parallax ...` in `cwd` as a user runs it: none of the session's PARALLAX_ variables,
    and loopback kept off any proxy, as the servers it calls are local."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARALLAX_")}
    env["NO_PROXY"] = "127.0.0.1"
    return subprocess.run(
        [*PARALLAX, *map(str, args)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )


def start_serve(config: Path, *flags: str) -> subprocess.Popen[str]:
    """`parallax serve` as a child whose log lines arrive unbuffered on a text stdout."""
    return subprocess.Popen(
        [*PARALLAX, "serve", "--config", str(config), *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


class Lines:
    """stdout of a child, line by line, read on a thread so every wait can be bounded (the
    bounds only stop a hung test: a busy machine may take its time)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.seen: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        assert proc.stdout is not None
        stream = proc.stdout
        threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream: Any) -> None:
        for line in stream:
            self._queue.put(line)
        self._queue.put(None)

    def until_event(self, event: str, timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            line = self._queue.get(timeout=max(0.01, deadline - time.monotonic()))
            assert line is not None, f"stdout closed before {event}: {self.seen[-3:]}"
            self.seen.append(line)
            doc: dict[str, Any] = json.loads(line)
            if doc["event"] == event:
                return doc

    def rest(self, timeout: float = 30.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while (line := self._queue.get(timeout=max(0.01, deadline - time.monotonic()))) is not None:
            self.seen.append(line)
        return [json.loads(line) for line in self.seen]


def wait_for(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    """Poll `condition` until it holds; fail after `timeout` seconds (a bound that only stops
    a hung test, not a pace)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def record(section: str, **figures: int) -> None:
    """Add counts to one section of the session's reliability figures."""
    FIGURES.setdefault(section, Counter()).update(figures)


def write_cases(root: Path, n: int, *, name: str = "cases.jsonl") -> list[str]:
    """n unstratified cases whose expected word the fault server echoes; returns the prompts."""
    rows = [
        {
            "id": f"case-{i:03d}",
            "prompt": f"prompt {i:03d} word{i}",
            "expect": {"must_include": [f"word{i}"]},
        }
        for i in range(n)
    ]
    (root / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return [str(r["prompt"]) for r in rows]


def endpoint_toml(
    name: str,
    url: str,
    *,
    concurrency: int = 4,
    deadline: float = 1.2,
    read: float = 0.8,
    attempts: int = 2,
    backoff: float = 0.01,
    max_bytes: int = 2048,
    key_env: str | None = None,
) -> str:
    """One openai-chat endpoint table with short, explicit timeouts and fast retries."""
    key = f'api_key_env = "{key_env}"\n' if key_env else ""
    return (
        f"[endpoints.{name}]\n"
        f'kind = "openai-chat"\nbase_url = "{url}"\nmodel = "{name}-model"\n'
        f"concurrency = {concurrency}\ndeadline = {deadline}\nmax_response_bytes = {max_bytes}\n"
        f"timeout = {{ connect = 1.0, read = {read}, write = 1.0, pool = 2.0 }}\n"
        f"retry = {{ attempts = {attempts}, backoff_base = {backoff}, backoff_max = {backoff * 2}, "
        f"jitter = 0.5, retry_after_cap = 0.05 }}\n{key}"
    )


def write_config(root: Path, endpoints: str, suites: str, *, top: str = "") -> Path:
    path = root / "parallax.toml"
    path.write_text(f'runs_dir = "runs"\nsnapshots_dir = "snapshots"\n{top}\n{endpoints}\n{suites}')
    return path


def suite_toml(name: str, fixtures: str = "cases.jsonl", *, extra: str = "") -> str:
    return (
        f'[suites.{name}]\nfixtures = "{fixtures}"\nreference = "ref"\ncandidate = "cand"\n{extra}'
    )


def jsonl(path: Path) -> list[Any]:
    """Every line of a ledger, each of which must be whole, valid JSON (no torn tail allowed)."""
    data = path.read_bytes()
    assert not data or data.endswith(b"\n"), f"{path}: torn last line"
    return [json.loads(line) for line in data.decode("utf-8").splitlines() if line.strip()]


def key_rows(run_dir: Path) -> list[tuple[Any, ...]]:
    """Outcome rows by key with their stamps and misses (no timings, attempts or ids)."""
    return sorted(
        (
            o["case_id"],
            o["side"],
            o["sample"],
            o["transport"],
            o["schema"],
            o["task_score"],
            tuple(o["misses"]),
        )
        for o in jsonl(run_dir / "outcomes.jsonl")
    )


def check_complete(run_dir: Path, expected_keys: int) -> dict[str, int]:
    """A finished run dir: whole ledgers, one raw and one outcome row per key, none lost.

    Returns the figures: rows checked, and lost / duplicated / scored-while-unadmitted counts
    (the assertions make each of those 0).
    """
    raw = jsonl(run_dir / "raw.jsonl")
    out = jsonl(run_dir / "outcomes.jsonl")
    raw_keys = [(e["case_id"], e["side"], e["sample"]) for e in raw]
    out_keys = [(o["case_id"], o["side"], o["sample"]) for o in out]
    assert len(raw_keys) == len(set(raw_keys)), "duplicated raw rows"
    assert len(out_keys) == len(set(out_keys)), "duplicated outcome rows"
    assert set(raw_keys) == set(out_keys)
    assert len(out_keys) == expected_keys, f"{len(out_keys)} rows, expected {expected_keys}"
    unadmitted = [o for o in out if not (o["transport"] == "ok" and o["schema"] == "ok")]
    scored = [o for o in unadmitted if o["task_score"] is not None or o["misses"]]
    assert not scored, f"unadmitted rows were scored: {scored[:2]}"
    verdicts = json.loads((run_dir / "disagreement.json").read_text())["cases"]
    bad = {o["case_id"] for o in unadmitted}
    assert all(verdicts[c]["disagreement"] is None and not verdicts[c]["admitted"] for c in bad)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["unadmitted"] == len(bad)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["finished_at"] is not None
    return {
        "rows_checked": len(out_keys) + len(raw_keys),
        "unadmitted_rows": len(unadmitted),
        "lost_rows": expected_keys - len(set(out_keys)),
        "duplicated_rows": (len(out_keys) - len(set(out_keys)))
        + (len(raw_keys) - len(set(raw_keys))),
        "unadmitted_scored": len(scored),
    }


def env_without_secrets() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not v.startswith(SECRET_PREFIX)}
