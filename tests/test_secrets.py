"""Secrets stay out of everything parallax writes or says, even when an upstream echoes them.

The session-wide half of this check is in conftest.py: at the end of the test session every
file under pytest's temporary directories (except the configs tests wrote as input), every
captured output and every ParallaxError message is searched for the test secrets.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from faultserver import FaultServer
from hypothesis import given
from hypothesis import strategies as st
from relkit import (
    PARALLAX,
    RUN_TIMEOUT,
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
def test_a_gemini_or_responses_key_echoed_back_never_reaches_a_file_or_a_log(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """Gemini takes its key in x-goog-api-key, never in the URL, and the Responses API as a
    bearer token: an upstream that echoes every request header into its reply, whole or
    streamed, leaks neither key to runs/."""
    write_cases(tmp_path, 3)
    endpoints = ""
    for side, kind, mode, suffix in (
        ("ref", "gemini", "echo", ""),
        ("cand", "openai-responses", "echo:sse", "/v1"),
    ):
        table = endpoint_toml(side, fault_server.url(mode, side, suffix=suffix), key_env="PK")
        endpoints += table.replace('kind = "openai-chat"', f'kind = "{kind}"')
        endpoints = endpoints.replace("max_response_bytes = 2048", "max_response_bytes = 65536")
    endpoints += "stream = true\n"
    config = write_config(tmp_path, endpoints, suite_toml("s"))
    done = subprocess.run(
        [*PARALLAX, "run", "--config", str(config)],
        capture_output=True,
        text=True,
        env={**os.environ, "PK": KEY},
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr
    received = fault_server.received()
    gemini = [r for r in received if ":generateContent" in r.path]
    assert gemini and {r.headers["x-goog-api-key"] for r in gemini} == {KEY}
    assert all(KEY not in r.path for r in received)
    responses = [r for r in received if r.path.endswith("/responses")]
    assert responses and {r.headers["authorization"] for r in responses} == {f"Bearer {KEY}"}
    run_dir = next((tmp_path / "runs" / "s").glob("2*"))
    raw = (run_dir / "raw.jsonl").read_text()
    assert "x-goog-api-key: ***" in raw and "authorization: Bearer ***" in raw
    files = [p for p in (tmp_path / "runs").rglob("*") if p.is_file()]
    assert not [p for p in files if KEY.encode() in p.read_bytes()]
    assert KEY not in done.stdout + done.stderr
    record("secrets", files_checked=len(files))


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


def _parallax(
    config: Path, *args: str | Path, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PARALLAX, *map(str, args), "--config", str(config)],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        cwd=config.parent,
        timeout=RUN_TIMEOUT,
        check=False,
    )


def _written(root: Path) -> list[Path]:
    """Every file parallax wrote under `root` (the configs the test wrote are its input)."""
    return [p for p in root.rglob("*") if p.is_file() and p.suffix != ".toml"]


@pytest.mark.slow
def test_a_header_secret_echoed_in_a_body_is_masked_in_every_file(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """A key sent as `headers = { x-custom-auth = "${VAR}" }` (how a non-Bearer key such as
    Azure's `api-key` travels) is a secret: an upstream that echoes it back in a 200 body, an
    SSE body or a 500 page leaves `***` in raw.jsonl, and the key in no file parallax writes
    (run dir, reports, JUnit, history page) and in nothing it prints."""
    secret = f"{SECRET_PREFIX}header-51c0de"
    prompts = write_cases(tmp_path, 4)
    fault_server.prompt_modes[prompts[0]] = "echo:500"
    header = 'headers = { x-custom-auth = "${PARALLEAK_HDR}" }\n'
    endpoints = endpoint_toml("ref", fault_server.url("echo", "ref")) + header
    endpoints += endpoint_toml("cand", fault_server.url("echo:sse", "cand"))
    endpoints += header + "stream = true\n"
    config = write_config(tmp_path, endpoints, suite_toml("s"))
    env = {"PARALLEAK_HDR": secret}

    done = _parallax(config, "run", "--junit", tmp_path / "runs" / "j.xml", env=env)
    run_dir = next((tmp_path / "runs" / "s").glob("2*"))
    shown = [
        _parallax(config, "report", run_dir, env=env),
        _parallax(config, "history", "--html", env=env),
        _parallax(config, "replay", run_dir, env=env),
    ]

    assert done.returncode in (0, 2, 3), done.stderr
    assert all(p.returncode in (0, 2, 3) for p in shown), [p.stderr for p in shown]
    sent = {r.headers.get("x-custom-auth") for r in fault_server.received()}
    assert sent == {secret}  # the header went out as configured
    bodies = [
        json.loads(line)["response"]["body"]
        for line in (run_dir / "raw.jsonl").read_text().splitlines()
    ]
    assert all("x-custom-auth: ***" in body for body in bodies), bodies[:2]
    assert any(body.startswith("<html>") for body in bodies)  # the 500 page
    assert any(body.startswith("data: ") for body in bodies)  # the stream
    files = _written(tmp_path)
    assert {"report.html", "report.md", "j.xml", "index.html"} <= {p.name for p in files}
    assert not [p for p in files if secret.encode() in p.read_bytes()]
    said = done.stdout + done.stderr + "".join(p.stdout + p.stderr for p in shown)
    assert secret not in said
    record("secrets", header_echo_files_checked=len(files))


@pytest.mark.slow
def test_a_secret_a_template_sends_is_masked_and_replays_byte_for_byte(
    tmp_path: Path, fault_server: FaultServer
) -> None:
    """A `${VAR}` the endpoint lists in body_env is sent in the prompt as written, and stored
    as `***` in the request and in the reply that echoes it; the live run grades what is
    stored, so a replay rewrites outcomes.jsonl and disagreement.json byte for byte."""
    secret = f"{SECRET_PREFIX}tenant-0b5e55"
    write_cases(tmp_path, 3)
    template = 'user_template = "{{ prompt }} tenant=${PARALLEAK_TENANT}"\n'
    endpoints = endpoint_toml("ref", fault_server.url("ok", "ref"))
    endpoints += endpoint_toml("cand", fault_server.url("ok", "cand"))
    endpoints += template + 'body_env = ["PARALLEAK_TENANT"]\n'
    config = write_config(tmp_path, endpoints, suite_toml("s"))
    env = {"PARALLEAK_TENANT": secret}

    done = _parallax(config, "run", env=env)
    run_dir = next((tmp_path / "runs" / "s").glob("2*"))
    replay = _parallax(config, "replay", run_dir, env=env)
    report = _parallax(config, "report", run_dir, env=env)

    assert done.returncode == 0, done.stderr
    assert replay.returncode == 0, replay.stderr
    assert report.returncode == 0, report.stderr
    prompts = {r.prompt for r in fault_server.received("ok") if "/cand/" in r.path}
    assert all(p.endswith(f" tenant={secret}") for p in prompts) and len(prompts) == 3
    rows = [json.loads(line) for line in (run_dir / "raw.jsonl").read_text().splitlines()]
    cand = [r for r in rows if r["side"] == "candidate"]
    assert all(
        r["request"]["body"]["messages"][-1]["content"].endswith(" tenant=***") for r in cand
    )
    assert all(" tenant=***" in r["response"]["body"] for r in cand)
    replayed = next(d for d in (tmp_path / "runs" / "s").glob("2*") if d != run_dir)
    for name in ("outcomes.jsonl", "disagreement.json"):
        assert (replayed / name).read_bytes() == (run_dir / name).read_bytes()
    files = _written(tmp_path)
    assert not [p for p in files if secret.encode() in p.read_bytes()]
    assert secret not in done.stdout + done.stderr + replay.stdout + report.stdout


def test_a_template_that_reads_the_environment_unasked_is_refused(tmp_path: Path) -> None:
    """`${API_KEY}` in an inline template would send the key to a third party as the prompt
    and store it with the run: refused at load, naming the key and how to mean it (exit 78),
    the value in no line."""
    secret = f"{SECRET_PREFIX}unasked-77aa"
    write_cases(tmp_path, 1)
    endpoints = endpoint_toml("ref", "http://127.0.0.1:9/v1") + endpoint_toml(
        "cand", "http://127.0.0.1:9/v1"
    )
    endpoints += 'system = "Key: ${PARALLEAK_UNASKED}"\n'
    config = write_config(tmp_path, endpoints, suite_toml("s"))

    done = _parallax(config, "validate", env={"PARALLEAK_UNASKED": secret})

    assert done.returncode == 78, done.stderr
    line = done.stderr.strip()
    assert "\n" not in line
    assert "endpoints.cand.system: ${PARALLEAK_UNASKED}" in line
    assert "endpoints.cand.body_env" in line
    assert secret not in done.stdout + done.stderr


def _load_endpoint(tmp_path: Path, table: str) -> Any:
    """Load a config whose one endpoint `e` is `table` (and a suite that calls it)."""
    from runner.config import load_config

    (tmp_path / "cases.jsonl").write_text('{"id": "a", "prompt": "p"}\n')
    path = tmp_path / "p.toml"
    suite = '[suites.s]\nfixtures = "cases.jsonl"\nreference = "e"\ncandidate = "e"\n'
    path.write_text(f"[endpoints.e]\n{table}{suite}")
    return load_config(path)


_CHAT = 'kind = "openai-chat"\nbase_url = "http://h/v1"\nmodel = "m"\n'


@pytest.mark.parametrize(
    ("table", "key"),
    [
        (_CHAT + 'user_template = "{{ prompt }} ${V}"\n', "user_template"),
        (_CHAT + 'system = "${V}"\n', "system"),
        (_CHAT + 'params = { user = { id = "${V:-x}" } }\n', "params.user.id"),
        (
            'kind = "http-json"\nbase_url = "http://h/v1"\nbody_template = { a = ["${V}"] }\n',
            "body_template.a[0]",
        ),
    ],
    ids=["user_template", "system", "params", "body_template"],
)
def test_a_body_key_reads_the_environment_only_when_body_env_lists_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, table: str, key: str
) -> None:
    """A `${VAR}` in what goes into the request body is refused at load, naming the key,
    whether or not VAR is set; listed in body_env it is read, and its value is a secret."""
    from runner import logs
    from runner.errors import ConfigError

    value = f"{SECRET_PREFIX}body-e4c0"
    monkeypatch.setenv("V", value)
    with mock.patch.object(logs, "_known_secrets", set()), pytest.raises(ConfigError) as caught:
        _load_endpoint(tmp_path, table)
    assert caught.value.key == f"endpoints.e.{key}"
    assert "${V}" in caught.value.reason and "body_env" in caught.value.reason
    with mock.patch.object(logs, "_known_secrets", set()):
        _load_endpoint(tmp_path, table + 'body_env = ["V"]\n')
        assert logs.scrub_text(f"sent {value}") == "sent ***"


def test_what_an_endpoint_sends_from_the_environment_is_a_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A value read for base_url or a header is masked from the moment the config loads; one
    read for a setting shown as it is (the model alias, a path) is not."""
    from runner import logs

    monkeypatch.setenv("PARALLEAK_H", f"{SECRET_PREFIX}hdr-1f2e")
    monkeypatch.setenv("PARALLEAK_U", "http://gateway.internal:8080/v1")
    monkeypatch.setenv("PARALLEAK_M", "model-from-env")
    table = (
        'kind = "openai-chat"\nbase_url = "${PARALLEAK_U}"\nmodel = "${PARALLEAK_M}"\n'
        'headers = { api-key = "${PARALLEAK_H}" }\n'
    )
    with mock.patch.object(logs, "_known_secrets", set()):
        _load_endpoint(tmp_path, table)
        shown = logs.scrub_text(
            f"{os.environ['PARALLEAK_H']} {os.environ['PARALLEAK_U']} model-from-env"
        )
    assert shown == "*** *** model-from-env"


def test_the_endpoint_keys_whose_env_values_are_secret() -> None:
    """Every endpoint key is a setting shown as it is or a secret when read from `${VAR}`: a
    key added later is a secret until it is listed as shown (this test then says so)."""
    from runner.config import SHOWN_ENDPOINT_KEYS, EndpointConfig

    assert set(EndpointConfig.model_fields) >= SHOWN_ENDPOINT_KEYS
    secret = set(EndpointConfig.model_fields) - SHOWN_ENDPOINT_KEYS
    assert secret == {"base_url", "headers", "system", "user_template", "params", "body_template"}


def test_an_error_about_a_secret_key_shows_it_masked(tmp_path: Path) -> None:
    """A base_url read from the environment that is no URL is refused naming the key, and
    the line shows the value as `***` (it was registered as it was read)."""
    write_cases(tmp_path, 1)
    endpoints = endpoint_toml("ref", "${PARALLEAK_URL}") + endpoint_toml("cand", "http://h/v1")
    config = write_config(tmp_path, endpoints, suite_toml("s"))
    secret = f"{SECRET_PREFIX}notaurl-9d"

    done = _parallax(config, "validate", env={"PARALLEAK_URL": secret})

    assert done.returncode == 78, done.stderr
    assert "endpoints.ref: base_url must be an http(s) URL, got '***'" in done.stderr
    assert secret not in done.stdout + done.stderr


@pytest.mark.parametrize("spelling", [str.lower, str.upper, str.swapcase])
def test_the_session_scan_finds_a_test_key_in_any_case(spelling: Callable[[str], str]) -> None:
    """The end-of-session scan (conftest.py) matches a test key however its case was changed:
    an upstream or a header name may lower-case it."""
    assert SECRET.search(spelling(KEY).encode()) is not None


@pytest.mark.parametrize(
    "spell",
    [
        lambda key: json.dumps(key).replace("-", "\\u002d"),
        lambda key: key.replace("s", "&#115;").replace("k", "&#x6B;"),
        lambda key: key.replace("-", "%2D"),
        lambda key: base64.b64encode(f"user:{key}".encode()).decode(),
        lambda key: base64.urlsafe_b64encode(f"u{key}".encode()).decode(),
    ],
    ids=["json-escape", "html-reference", "percent", "base64", "base64-urlsafe"],
)
def test_the_session_scan_finds_a_test_key_however_it_is_spelled(
    spell: Callable[[str], str],
) -> None:
    """The end-of-session scan (conftest.py) also finds a key in a spelling that decodes back
    to it: a JSON escape in raw.jsonl, an HTML character reference in report.html, a URL's
    percent-encoding, base64 at any alignment; an ordinary escape is no hit."""
    from relkit import holds_test_secret

    spelled = spell(KEY).encode()
    assert SECRET.search(spelled) is None  # the plain pattern alone would miss it
    assert holds_test_secret(spelled)
    assert not holds_test_secret(b'{"a": "\\u00e9 &#233; %C3%A9 sk-other-1234"}')


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
