"""Secrets stay out of everything parallax writes or says, even when an upstream echoes them.

The session-wide half of this check is in conftest.py: at the end of the test session every
file under pytest's temporary directories (except the configs tests wrote as input), every
captured output and every ParallaxError message is searched for the test secrets.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import pytest
from faultserver import FaultServer
from hypothesis import given
from hypothesis import strategies as st
from relkit import (
    PARALLAX,
    SECRET,
    SECRET_PREFIX,
    endpoint_toml,
    record,
    suite_toml,
    write_cases,
    write_config,
)

KEY = f"{SECRET_PREFIX}reflected-7f3a9c21"


@pytest.mark.slow
def test_a_key_echoed_back_by_the_server_never_reaches_a_file_or_a_log(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """An upstream that reflects Authorization into its body and headers leaks nothing to runs/."""
    prompts = write_cases(tmp_path, 4)
    fault_server.prompt_modes[prompts[0]] = "reflect"
    fault_server.prompt_modes[prompts[1]] = "reflect:503"
    fault_server.prompt_modes[prompts[2]] = "reflect:200"
    endpoints = "".join(
        endpoint_toml(side, fault_server.url("ok", side), key_env="PARALLEAK_KEY")
        for side in ("ref", "cand")
    )
    config = write_config(tmp_path, endpoints, suite_toml("s"))
    env = {**os.environ, "PARALLEAK_KEY": KEY}

    done = subprocess.run(
        [*PARALLAX, "run", "--config", str(config), "--junit", str(tmp_path / "runs" / "j.xml")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    run_dir = next((tmp_path / "runs" / "s").glob("2*"))
    report = subprocess.run(
        [*PARALLAX, "report", str(run_dir)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )

    assert done.returncode == 2, done.stderr
    assert {r.headers["authorization"] for r in fault_server.received()} == {f"Bearer {KEY}"}
    assert "rejected credentials" in (run_dir / "raw.jsonl").read_text()
    files = [p for p in (tmp_path / "runs").rglob("*") if p.is_file()]
    assert len(files) >= 6
    leaks = [p for p in files if KEY.encode() in p.read_bytes()]
    assert not leaks
    assert KEY not in done.stdout + done.stderr + report.stdout + report.stderr
    record("secrets", files_checked=len(files), leaks=0)


@pytest.mark.slow
def test_a_key_put_into_a_header_name_is_masked_whatever_its_case(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """An upstream that names a rate-limit header after the key (`X-RateLimit-<key>`) gets
    the name stored masked: HTTP lower-cases names, so the key is matched in any case."""
    key = f"{SECRET_PREFIX}Header-9QzXk"  # upper-case letters: lower-cased in the name
    write_cases(tmp_path, 2)
    endpoints = "".join(
        endpoint_toml(side, fault_server.url("reflect:200", side), key_env="PARALLEAK_KEY")
        for side in ("ref", "cand")
    )
    config = write_config(tmp_path, endpoints, suite_toml("s"))
    done = subprocess.run(
        [*PARALLAX, "run", "--config", str(config)],
        capture_output=True,
        text=True,
        env={**os.environ, "PARALLEAK_KEY": key},
        cwd=tmp_path,
        timeout=60,
        check=False,
    )

    assert done.returncode == 2, done.stderr
    run_dir = next((tmp_path / "runs" / "s").glob("2*"))
    rows = [json.loads(line) for line in (run_dir / "raw.jsonl").read_text().splitlines()]
    names = {name for row in rows for name in row["response"]["headers"]}
    assert "x-ratelimit-***" in names, names
    files = [p for p in (tmp_path / "runs").rglob("*") if p.is_file()]
    assert not [p for p in files if key.lower().encode() in p.read_bytes().lower()]
    assert key.lower() not in (done.stdout + done.stderr).lower()
    assert SECRET.search(key.lower().encode()), "the session-wide scan catches it lower-cased"
    record("secrets", header_name_files_checked=len(files))


@pytest.mark.parametrize("spelling", [str.lower, str.upper, str.swapcase])
def test_the_session_scan_finds_a_test_key_in_any_case(spelling: Callable[[str], str]) -> None:
    """The end-of-session scan (conftest.py) matches a test key however its case was changed:
    an upstream or a header name may lower-case it."""
    assert SECRET.search(spelling(KEY).encode()) is not None


def _json_string(text: str, escaped: list[bool]) -> str:
    """`text` as the body of a JSON string, each character escaped or not as `escaped` says,
    the ways an encoder may write it (lower- or upper-case hex, short forms, surrogate pairs)."""
    out = []
    for char, escape in zip(text, escaped, strict=True):
        if char in '"\\':
            out.append("\\" + char)
        elif not escape:
            out.append(char)
        elif char == "/":
            out.append("\\/")
        elif ord(char) > 0xFFFF:
            out.append(json.dumps(char, ensure_ascii=True)[1:-1])  # a surrogate pair, lower-case
        else:
            out.append(("\\u%04X" if ord(char) % 2 else "\\u%04x") % ord(char))
    return "".join(out)


_KEY_CHARS = st.characters(blacklist_categories=("Cs", "Cc"))


@given(
    secret=st.text(_KEY_CHARS, min_size=4, max_size=40),
    data=st.data(),
    before=st.text(_KEY_CHARS, max_size=20),
)
def test_an_escaped_echo_of_the_key_is_masked(
    secret: str, data: st.DataObject, before: str
) -> None:
    """However a JSON body spells the key, what is stored never decodes back to it."""
    from runner import logs

    escaped = data.draw(st.lists(st.booleans(), min_size=len(secret), max_size=len(secret)))
    shown = f"{_json_string(before, [False] * len(before))} {_json_string(secret, escaped)}"
    body = f'{{"content": "{shown}"}}'
    assert json.loads(body)["content"].endswith(secret)  # the upstream really sent the key
    with mock.patch.object(logs, "_known_secrets", {secret}):
        stored = logs.scrub_bytes(body.encode("utf-8"))
    assert secret not in json.loads(stored)["content"]


def test_fields_named_as_credentials_are_masked_but_case_ids_are_data() -> None:
    """A credential field is masked by its name at any depth; a case id or suite name that
    merely contains such a word (`password-reset`) is data, and its alert detail is kept."""
    from runner import logs

    event = {
        "event": "alert.transport",
        "api_key": "k1",
        "details": {
            "password-reset": "reference: connect_error",
            "refresh-token-expiry": "candidate: timeout",
            "api-key-rotation": "reference: timeout",
        },
        "runs": {"auth-token": 1},
        "request": {"headers": {"Authorization": "Basic abc", "X-Api-Key": "k2", "Accept": "*"}},
    }
    scrubbed = logs._scrub_processor(None, "warning", dict(event))
    assert scrubbed["api_key"] == "***"
    assert scrubbed["details"] == event["details"]
    assert scrubbed["runs"] == {"auth-token": 1}
    headers = scrubbed["request"]["headers"]
    assert headers == {"Authorization": "***", "X-Api-Key": "***", "Accept": "*"}


@pytest.mark.parametrize("prefix", ["", "u:", "us:"], ids=["aligned", "offset-1", "offset-2"])
@pytest.mark.parametrize("alphabet", ["standard", "urlsafe"])
def test_a_base64_echo_of_the_key_is_masked(prefix: str, alphabet: str) -> None:
    """An upstream may echo the key base64-encoded (`Basic` credentials, an encoded token) at
    any byte alignment: what is stored or logged no longer decodes back to it."""
    import base64

    from runner import logs

    encode = base64.b64encode if alphabet == "standard" else base64.urlsafe_b64encode
    decode = base64.b64decode if alphabet == "standard" else base64.urlsafe_b64decode
    key = KEY + "/+?~>"  # characters whose base64 differs between the two alphabets
    echoed = encode(f"{prefix}{key}".encode()).decode("ascii")
    with mock.patch.object(logs, "_known_secrets", set()):
        logs.register_secret(key)
        stored = logs.scrub_bytes(f'{{"echo": "{echoed}"}}'.encode()).decode()
        logged = logs.scrub_text(f"upstream said {echoed}")
    for text in (json.loads(stored)["echo"], logged.removeprefix("upstream said ")):
        assert "***" in text
        decoded = decode(text.replace("***", "") + "===")
        assert KEY.encode() not in decoded
