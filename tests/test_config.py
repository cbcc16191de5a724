"""Specification of the TOML config: interpolation, one-line errors naming file and key."""

from __future__ import annotations

import re
import textwrap
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from runner.config import (
    PROTOCOL_KEYS,
    SHAPE_KEYS,
    Config,
    EndpointConfig,
    Price,
    RetryPolicy,
    SuiteConfig,
    Thresholds,
    Timeouts,
    _Strict,
    check_files,
    load_config,
)
from runner.errors import ConfigError

MINIMAL = """\
[endpoints.ref]
kind = "recorded"
model = "ref-model"
cassette = "ref.jsonl"

[endpoints.cand]
kind = "openai-chat"
base_url = "https://api.example.com/v1"
model = "cand-model"
api_key_env = "PARALLAX_TEST_KEY"

[suites.cities]
fixtures = "cities.jsonl"
reference = "ref"
candidate = "cand"
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "parallax.toml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def load_error(tmp_path: Path, text: str) -> ConfigError:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    expected = 78
    assert expected == info.value.exit_code
    return info.value


def test_a_minimal_config_loads_with_defaults(tmp_path: Path) -> None:
    """Defaults fill what the file leaves out; the digest is 16 hex digits."""
    loaded = load_config(write(tmp_path, MINIMAL))
    cand = loaded.endpoint("cand")
    expected = (0.0, 512, 120.0, 4)
    assert expected == (
        cand.temperature,
        cand.max_tokens,
        cand.timeout.read,
        cand.retry.attempts,
    )
    assert Thresholds() == loaded.thresholds("cities")
    expected = 16
    assert expected == len(loaded.digest)
    assert set(loaded.digest) <= set("0123456789abcdef")
    expected = ["cities"]
    assert expected == loaded.suite_names()


def test_relative_paths_resolve_against_the_config_folder(tmp_path: Path) -> None:
    """runs/, snapshots/ and fixtures are found from the config's folder, not the cwd."""
    loaded = load_config(write(tmp_path, 'runs_dir = "../out"\n' + MINIMAL))
    assert tmp_path.parent / "out" == loaded.runs_dir
    assert tmp_path / "snapshots" == loaded.snapshots_dir
    assert Path("/abs/x") == loaded.resolve("/abs/x")


def test_a_suite_threshold_table_overrides_the_top_level_one(tmp_path: Path) -> None:
    """[suites.x.thresholds] wins over [thresholds] for that suite."""
    text = "[thresholds]\nstretch_high = 0.7\n" + MINIMAL + "[suites.cities.thresholds]\n"
    text += "stretch_high = 0.6\n"
    loaded = load_config(write(tmp_path, text))
    expected = 0.6
    assert expected == loaded.thresholds("cities").stretch_high
    expected = 0.7
    assert expected == loaded.config.thresholds.stretch_high


def test_the_non_inferiority_margin_is_a_threshold_a_suite_may_override(tmp_path: Path) -> None:
    """non_inferiority_margin is unset by default, read from [thresholds], and a suite's own
    [thresholds] table replaces it like the other thresholds."""
    assert Thresholds().non_inferiority_margin is None
    text = "[thresholds]\nnon_inferiority_margin = 0.02\n" + MINIMAL
    text += 'fail_on = ["not_non_inferior"]\n'
    loaded = load_config(write(tmp_path, text))
    expected = 0.02
    assert expected == loaded.thresholds("cities").non_inferiority_margin
    expected_gate = ["not_non_inferior"]
    assert expected_gate == loaded.config.suites["cities"].fail_on
    text += "[suites.cities.thresholds]\nnon_inferiority_margin = 0\n"
    overridden = load_config(write(tmp_path, text)).thresholds("cities")
    expected = 0.0
    assert expected == overridden.non_inferiority_margin


@pytest.mark.parametrize("value", ["-0.01", "1", "1.5", '"2 points"'])
def test_a_non_inferiority_margin_outside_0_to_1_is_refused(tmp_path: Path, value: str) -> None:
    """The margin is a fraction in [0, 1): a negative one, 1 or more, or a word is exit 78."""
    err = load_error(tmp_path, f"[thresholds]\nnon_inferiority_margin = {value}\n" + MINIMAL)
    expected = "thresholds.non_inferiority_margin"
    assert expected == err.key
    assert "unknown key" not in err.reason


def test_gating_on_non_inferiority_without_a_margin_is_refused(tmp_path: Path) -> None:
    """fail_on = ["not_non_inferior"] asks a question only a margin poses: without one (here a
    suite [thresholds] table that leaves it out hides the top-level one) it is exit 78."""
    text = "[thresholds]\nnon_inferiority_margin = 0.02\n" + MINIMAL
    text += 'fail_on = ["not_non_inferior"]\n[suites.cities.thresholds]\nstretch_high = 0.7\n'
    err = load_error(tmp_path, text)
    expected_error = ("suites.cities.fail_on", True)
    assert expected_error == (err.key, "non_inferiority_margin" in err.reason)


# --- interpolation -------------------------------------------------------------------------


def test_env_vars_are_interpolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """${VAR} in any string is read from the environment."""
    monkeypatch.setenv("PARALLAX_TEST_MODEL", "gpt-test")
    text = MINIMAL.replace('model = "cand-model"', 'model = "prefix-${PARALLAX_TEST_MODEL}"')
    expected = "prefix-gpt-test"
    assert expected == load_config(write(tmp_path, text)).endpoint("cand").model


def test_a_default_is_used_when_the_var_is_unset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """${VAR:-default} falls back to the default."""
    monkeypatch.delenv("PARALLAX_TEST_MODEL", raising=False)
    text = MINIMAL.replace('model = "cand-model"', 'model = "${PARALLAX_TEST_MODEL:-fallback}"')
    expected = "fallback"
    assert expected == load_config(write(tmp_path, text)).endpoint("cand").model


def test_a_set_var_wins_over_the_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """${VAR:-default} reads VAR when it is set."""
    monkeypatch.setenv("PARALLAX_TEST_MODEL", "from-env")
    text = MINIMAL.replace('model = "cand-model"', 'model = "${PARALLAX_TEST_MODEL:-fallback}"')
    expected = "from-env"
    assert expected == load_config(write(tmp_path, text)).endpoint("cand").model


def test_a_default_is_used_when_the_var_is_empty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """${VAR:-default} falls back to the default when VAR is set but empty, as in a shell."""
    monkeypatch.setenv("PARALLAX_TEST_MODEL", "")
    text = MINIMAL.replace('model = "cand-model"', 'model = "${PARALLAX_TEST_MODEL:-fallback}"')
    expected = "fallback"
    assert expected == load_config(write(tmp_path, text)).endpoint("cand").model


def test_a_missing_env_var_names_the_key_and_the_var(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unset ${VAR} without default is a ConfigError naming file, dotted key and variable."""
    monkeypatch.delenv("PARALLAX_TEST_URL", raising=False)
    path = write(
        tmp_path,
        MINIMAL.replace('"https://api.example.com/v1"', '"${PARALLAX_TEST_URL}/v1"'),
    )
    with pytest.raises(ConfigError) as info:
        load_config(path)
    expected = f"{path}: endpoints.cand.base_url: environment variable PARALLAX_TEST_URL is not set"
    assert expected == str(info.value)
    expected = "endpoints.cand.base_url"
    assert expected == info.value.key


def test_interpolation_reaches_into_lists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A missing var inside an array names the index in the key."""
    monkeypatch.delenv("PARALLAX_TEST_NOPE", raising=False)
    text = MINIMAL.replace(
        'api_key_env = "PARALLAX_TEST_KEY"',
        'api_key_env = "PARALLAX_TEST_KEY"\n'
        'body_template = {tags = ["a", "${PARALLAX_TEST_NOPE}"]}',
    )
    err = load_error(tmp_path, text)
    expected = "endpoints.cand.body_template.tags[1]"
    assert expected == err.key


# --- errors --------------------------------------------------------------------------------


def test_an_unknown_key_is_named(tmp_path: Path) -> None:
    """A typo'd key is `unknown key` at its dotted path."""
    err = load_error(tmp_path, MINIMAL.replace("fixtures =", "fixture =") + 'fixtures = "x"\n')
    expected = ("suites.cities.fixture", "unknown key")
    assert expected == (err.key, err.reason)


def test_an_api_key_in_the_file_points_at_api_key_env(tmp_path: Path) -> None:
    """A secret written in the file is refused with a hint, and never echoed back."""
    text = MINIMAL.replace('api_key_env = "PARALLAX_TEST_KEY"', 'api_key = "sk-live-SECRET123"')
    err = load_error(tmp_path, text)
    expected = "endpoints.cand.api_key"
    assert expected == err.key
    assert "api_key_env" in err.reason
    assert "environment variable" in err.reason
    assert "sk-live-SECRET123" not in str(err)


def test_invalid_toml_is_reported(tmp_path: Path) -> None:
    """A TOML syntax error names the file and says invalid TOML."""
    err = load_error(tmp_path, MINIMAL + "[suites.broken\n")
    assert err.key is None
    assert err.reason.startswith("invalid TOML: ")
    assert str(err).startswith(f"{tmp_path / 'parallax.toml'}: invalid TOML")


def test_a_config_that_is_not_utf8_is_reported(tmp_path: Path) -> None:
    """Undecodable bytes are a ConfigError, not a traceback."""
    path = tmp_path / "parallax.toml"
    path.write_bytes(b'runs_dir = "\xff"\n')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    expected = "not UTF-8 at byte 12"
    assert expected == info.value.reason


def test_a_missing_config_file_is_reported(tmp_path: Path) -> None:
    """No file: `path: no such config file`."""
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "absent.toml")
    assert f"{tmp_path / 'absent.toml'}: no such config file" == str(info.value)


@pytest.mark.parametrize(
    ("old", "new", "key"),
    [
        ('reference = "ref"', 'reference = "ref"\nsamples = "three"', "suites.cities.samples"),
        ('reference = "ref"', 'reference = "ref"\nsamples = 0', "suites.cities.samples"),
        ('model = "cand-model"', "model = 7", "endpoints.cand.model"),
        ('kind = "recorded"', 'kind = "grpc"', "endpoints.ref.kind"),
    ],
)
def test_a_wrong_value_type_names_the_key(tmp_path: Path, old: str, new: str, key: str) -> None:
    """A value of the wrong type or range is reported at its dotted key."""
    err = load_error(tmp_path, MINIMAL.replace(old, new, 1))
    assert key == err.key
    assert err.reason


def test_a_missing_required_key_is_named(tmp_path: Path) -> None:
    """A suite without a candidate says the key is required."""
    err = load_error(tmp_path, MINIMAL.replace('candidate = "cand"\n', ""))
    expected = ("suites.cities.candidate", "required key is missing")
    assert expected == (err.key, err.reason)


def test_a_suite_naming_a_missing_endpoint_is_refused(tmp_path: Path) -> None:
    """A suite's side must name a configured endpoint; the key and the name are given."""
    err = load_error(tmp_path, MINIMAL.replace('candidate = "cand"', 'candidate = "nope"'))
    expected = ("suites.cities.candidate", "no endpoint named 'nope'")
    assert expected == (err.key, err.reason)


@pytest.mark.parametrize(
    ("old", "new", "reason"),
    [
        ('base_url = "https://api.example.com/v1"\n', "", "an openai-chat endpoint needs base_url"),
        (
            '"https://api.example.com/v1"',
            '"ftp://api.example.com"',
            "base_url must be an http(s) URL, got 'ftp://api.example.com'",
        ),
        ('model = "cand-model"\n', "", "an openai-chat endpoint needs model"),
    ],
)
def test_a_live_endpoint_needs_a_url_and_a_model(
    tmp_path: Path, old: str, new: str, reason: str
) -> None:
    """openai-chat endpoints need an http(s) base_url and a model."""
    err = load_error(tmp_path, MINIMAL.replace(old, new, 1))
    assert ("endpoints.cand", reason) == (err.key, err.reason)


def test_a_config_without_suites_is_refused(tmp_path: Path) -> None:
    """At least one suite is needed."""
    text = MINIMAL[: MINIMAL.index("[suites.cities]")] + "[suites]\n"
    err = load_error(tmp_path, text)
    expected = "no [suites.<name>] table"
    assert expected == err.reason


def test_an_unknown_suite_name_is_a_config_error(tmp_path: Path) -> None:
    """--suite with a name the config lacks lists the known suites."""
    loaded = load_config(write(tmp_path, MINIMAL))
    with pytest.raises(ConfigError) as info:
        loaded.suite_names("towns")
    expected = ("suites.towns", "no such suite (known: cities)")
    assert expected == (
        info.value.key,
        info.value.reason,
    )


# --- check_files and api_key ---------------------------------------------------------------


def test_check_files_names_a_missing_fixture_file(tmp_path: Path) -> None:
    """A fixture path that does not exist is reported at its key."""
    loaded = load_config(write(tmp_path, MINIMAL))
    with pytest.raises(ConfigError) as info:
        check_files(loaded)
    expected = ("suites.cities.fixtures", "no such file: cities.jsonl")
    assert expected == (
        info.value.key,
        info.value.reason,
    )


def test_check_files_names_a_missing_cassette(tmp_path: Path) -> None:
    """With fixtures present, a missing cassette is reported at its key."""
    (tmp_path / "cities.jsonl").write_text("", encoding="utf-8")
    loaded = load_config(write(tmp_path, MINIMAL))
    with pytest.raises(ConfigError) as info:
        check_files(loaded)
    expected = ("endpoints.ref.cassette", "no such file: ref.jsonl")
    assert expected == (
        info.value.key,
        info.value.reason,
    )


def test_check_files_passes_when_every_file_exists(tmp_path: Path) -> None:
    """Files are looked up relative to the config, whatever the cwd."""
    (tmp_path / "cities.jsonl").write_text("", encoding="utf-8")
    (tmp_path / "ref.jsonl").write_text("", encoding="utf-8")
    loaded = load_config(write(tmp_path, MINIMAL))
    check_files(loaded)
    assert tmp_path / "ref.jsonl" == loaded.resolve("ref.jsonl")


def test_api_key_is_read_from_the_named_env_var(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key lives only in the environment and is read at call time."""
    loaded = load_config(write(tmp_path, MINIMAL))
    monkeypatch.setenv("PARALLAX_TEST_KEY", "sk-1")
    expected = "sk-1"
    assert expected == loaded.api_key("cand")
    monkeypatch.setenv("PARALLAX_TEST_KEY", "sk-2")
    expected = "sk-2"
    assert expected == loaded.api_key("cand")


def test_a_config_saved_with_a_bom_loads_as_without(tmp_path: Path) -> None:
    """Editors on some systems start UTF-8 files with a BOM; fixtures accept one, so does the
    config, with the same result as the file without it."""
    plain = load_config(write(tmp_path, MINIMAL)).config
    path = tmp_path / "bom.toml"
    path.write_bytes(b"\xef\xbb\xbf" + textwrap.dedent(MINIMAL).encode("utf-8"))
    assert load_config(path).config == plain


@pytest.mark.parametrize("key", ["runs_dir", "snapshots_dir"])
def test_a_nul_in_a_config_string_names_its_key(tmp_path: Path, key: str) -> None:
    """No path, URL or header can hold a NUL; found at load, not when a run opens the path."""
    error = load_error(tmp_path, f'{key} = "runs\\u0000x"\n' + MINIMAL)
    assert (error.key, error.reason) == (key, "contains a NUL character")


def test_an_endpoint_without_api_key_env_has_no_key(tmp_path: Path) -> None:
    """No api_key_env means no key at all."""
    assert load_config(write(tmp_path, MINIMAL)).api_key("ref") is None


@pytest.mark.parametrize(("value", "state"), [(None, "is not set"), ("", "is empty")])
def test_an_unset_or_empty_key_var_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str | None, state: str
) -> None:
    """A named but unset key variable is reported at api_key_env as "not set"; one that is
    set but holds nothing as "empty" (the fix is the secret's content, not the environment)."""
    if value is None:
        monkeypatch.delenv("PARALLAX_TEST_KEY", raising=False)
    else:
        monkeypatch.setenv("PARALLAX_TEST_KEY", value)
    loaded = load_config(write(tmp_path, MINIMAL))
    with pytest.raises(ConfigError) as info:
        loaded.api_key("cand")
    expected = ("endpoints.cand.api_key_env", f"environment variable PARALLAX_TEST_KEY {state}")
    assert expected == (info.value.key, info.value.reason)


@pytest.mark.parametrize(
    "value", ["sk-secret-1234\n", " sk-secret-1234", "sk-secr\x07t-1234", "sk-secret-1234\u00e9"]
)
def test_a_key_no_header_can_carry_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    """A key read from a file with its newline, or holding a control or non-ASCII character,
    is refused at api_key_env before the first call, and the message never shows the key."""
    monkeypatch.setenv("PARALLAX_TEST_KEY", value)
    loaded = load_config(write(tmp_path, MINIMAL))
    with pytest.raises(ConfigError) as info:
        loaded.api_key("cand")
    assert info.value.key == "endpoints.cand.api_key_env"
    assert "PARALLAX_TEST_KEY" in info.value.reason
    assert "not a usable header value" in info.value.reason
    assert "secr" not in str(info.value)


def test_a_base_url_with_an_impossible_port_is_a_config_error(tmp_path: Path) -> None:
    """Port 99999 is refused by `validate`, naming the endpoint, not found at call time."""
    error = load_error(tmp_path, MINIMAL.replace("https://api.example.com/v1", "http://h:99999/v1"))
    assert "endpoints.cand" in str(error) and "invalid port" in str(error)


def test_a_header_with_a_line_break_is_a_config_error(tmp_path: Path) -> None:
    """A header value that would split the request on the wire is refused when loading."""
    text = MINIMAL.replace(
        'api_key_env = "PARALLAX_TEST_KEY"',
        'api_key_env = "PARALLAX_TEST_KEY"\nheaders = { "X-Team" = "a\\nb" }',
    )
    error = load_error(tmp_path, text)
    assert "endpoints.cand" in str(error) and "line break" in str(error)


@pytest.mark.parametrize(
    ("value", "expected"),
    [('"X-LiteLLM-Model-Name"', "x-litellm-model-name"), ('""', ""), (None, None)],
)
def test_served_model_header_is_a_lower_cased_header_name(
    tmp_path: Path, value: str | None, expected: str | None
) -> None:
    """`served_model_header` is read as a header name (case-insensitive); unset it is None."""
    line = f"\nserved_model_header = {value}" if value is not None else ""
    text = MINIMAL.replace('api_key_env = "PARALLAX_TEST_KEY"', f'api_key_env = "X"{line}')
    assert expected == load_config(write(tmp_path, text)).endpoint("cand").served_model_header


def test_a_served_model_header_that_is_no_header_name_is_a_config_error(tmp_path: Path) -> None:
    """A name no response header can have (a space, a colon) is refused naming the key."""
    text = MINIMAL.replace(
        'api_key_env = "PARALLAX_TEST_KEY"', 'served_model_header = "x-model: name"'
    )
    error = load_error(tmp_path, text)
    assert "endpoints.cand.served_model_header" in str(error)


# --- strict types -------------------------------------------------------------------------------


def _in_cand(line: str) -> str:
    return MINIMAL.replace('model = "cand-model"\n', f'model = "cand-model"\n{line}\n')


@pytest.mark.parametrize(
    ("text", "key", "reason"),
    [
        (_in_cand('stream = "yes"'), "endpoints.cand.stream", 'must be true or false, got "yes"'),
        (_in_cand("stream = 1"), "endpoints.cand.stream", "must be true or false, got 1"),
        (
            "budget_usd = true\n" + MINIMAL,
            "budget_usd",
            "must be a number, got true",
        ),
        (_in_cand("max_tokens = 512.0"), "endpoints.cand.max_tokens", "must be a whole number"),
        (_in_cand('temperature = "0"'), "endpoints.cand.temperature", 'must be a number, got "0"'),
        (_in_cand("concurrency = true"), "endpoints.cand.concurrency", "must be a whole number"),
        (_in_cand('retry = { attempts = "3" }'), "endpoints.cand.retry.attempts", "whole number"),
        (_in_cand("headers = { X-Team = 7 }"), "endpoints.cand.headers.X-Team", "must be a string"),
        (MINIMAL + "noise_check = 1\n", "suites.cities.noise_check", "must be true or false"),
        (MINIMAL + "samples = 2.0\n", "suites.cities.samples", "must be a whole number"),
    ],
)
def test_a_value_not_of_its_keys_type_is_refused_not_coerced(
    tmp_path: Path, text: str, key: str, reason: str
) -> None:
    """`stream = "yes"` is no boolean and `budget_usd = true` no amount: each is refused at its
    key with what was written, instead of read as a value the author never wrote."""
    err = load_error(tmp_path, text)
    assert (err.key, reason in err.reason) == (key, True), str(err)


@pytest.mark.parametrize(
    ("line", "value", "read"),
    [
        ('budget_usd = "${PARALLAX_TEST_VALUE:-5}"', None, 5.0),
        ('budget_usd = "${PARALLAX_TEST_VALUE}"', "0.25", 0.25),
        ('run_grace_seconds = "${PARALLAX_TEST_VALUE}"', "7", 7.0),
    ],
)
def test_a_variable_is_read_as_the_number_it_spells(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, line: str, value: str | None, read: float
) -> None:
    """A `${VAR}` is the one string a number key takes: its value is read as if written there
    (so `budget_usd = "${PARALLAX_BUDGET:-5}"`, as the README suggests, stays a budget)."""
    if value is None:
        monkeypatch.delenv("PARALLAX_TEST_VALUE", raising=False)
    else:
        monkeypatch.setenv("PARALLAX_TEST_VALUE", value)
    priced = 'model = "\\1"\nmax_tokens = 64\nprice = { input_per_mtok = 1, output_per_mtok = 1 }'
    text = line + "\n" + re.sub(r'model = "(\w+-model)"', priced, MINIMAL)
    config = load_config(write(tmp_path, text)).config
    name = line.split(" = ", maxsplit=1)[0]
    assert getattr(config, name) == read


@pytest.mark.parametrize(
    ("value", "read"), [("true", True), ("false", False), ("yes", None), ("1", None)]
)
def test_a_variable_is_a_boolean_only_when_it_spells_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str, read: bool | None
) -> None:
    """`stream = "${STREAM}"` reads true or false as TOML writes them; "yes" or "1" in the
    variable is refused as it would be in the file."""
    monkeypatch.setenv("PARALLAX_TEST_VALUE", value)
    text = _in_cand('stream = "${PARALLAX_TEST_VALUE}"')
    if read is None:
        err = load_error(tmp_path, text)
        assert err.key == "endpoints.cand.stream"
        assert err.reason.startswith("must be true or false, got ")
    else:
        assert load_config(write(tmp_path, text)).endpoint("cand").stream is read


def test_a_variable_in_a_text_key_stays_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model, a header or a param read from a variable is the variable's text, even when
    it looks like a number: only a key that is no text reads a number from it."""
    monkeypatch.setenv("PARALLAX_TEST_VALUE", "123")
    var = '"${PARALLAX_TEST_VALUE}"'
    text = _in_cand(
        f"headers = {{ X-Team = {var} }}\nparams = {{ user = {var} }}\n"
        'body_env = ["PARALLAX_TEST_VALUE"]'
    ).replace('model = "cand-model"', 'model = "${PARALLAX_TEST_VALUE}"')
    cand = load_config(write(tmp_path, text)).endpoint("cand")
    assert (cand.model, cand.headers, cand.params) == ("123", {"X-Team": "123"}, {"user": "123"})
    assert {type(cand.model), type(cand.headers["X-Team"]), type(cand.params["user"])} == {str}


# --- header values ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "key"),
    [
        ('anthropic_version = "a\\nb"', "endpoints.cand.anthropic_version"),
        ('anthropic_version = "2023-06-01 "', "endpoints.cand.anthropic_version"),
        ('headers = { X-Team = "caf\u00e9" }', "endpoints.cand.headers.X-Team"),
        ('headers = { X-Team = "a\\u0007b" }', "endpoints.cand.headers.X-Team"),
        ('headers = { X-Team = " padded" }', "endpoints.cand.headers.X-Team"),
    ],
)
def test_a_value_no_header_can_carry_is_refused_at_load(
    tmp_path: Path, line: str, key: str
) -> None:
    """Every config value sent as a header (anthropic_version, each of `headers`) is checked at
    load: `validate` refuses one no client sends as written, naming its key, instead of a run
    that fails at its first call naming none."""
    err = load_error(tmp_path, _in_cand(line))
    assert err.key == key
    assert err.reason.startswith("is no header value: printable ASCII only")


def test_a_header_name_that_is_no_token_is_refused_at_load(tmp_path: Path) -> None:
    """A header name with a space or a colon (or an empty one) is refused naming it."""
    err = load_error(tmp_path, _in_cand('headers = { "X Team" = "a" }'))
    assert (err.key, "is no header name" in err.reason) == (
        "endpoints.cand.headers.X Team.[key]",
        True,
    )


def test_a_header_value_from_a_variable_is_checked_and_never_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A header read from a variable (Azure's `api-key`) with a key file's newline is refused
    at its key, and the message never shows the value."""
    monkeypatch.setenv("PARALLAX_TEST_VALUE", "sk-secret-value\n")
    err = load_error(tmp_path, _in_cand('headers = { api-key = "${PARALLAX_TEST_VALUE}" }'))
    assert err.key == "endpoints.cand.headers.api-key"
    assert "secret" not in str(err)


# --- amounts past any real one ------------------------------------------------------------------

_PRICED = re.sub(
    r'model = "(\w+-model)"',
    'model = "\\1"\nprice = { input_per_mtok = 3, output_per_mtok = 15 }',
    MINIMAL,
)


@pytest.mark.parametrize(
    ("old", "new", "key"),
    [
        ("input_per_mtok = 3,", "input_per_mtok = 1e308,", "endpoints.ref.price.input_per_mtok"),
        ("output_per_mtok = 15", "output_per_mtok = 1e7", "endpoints.ref.price.output_per_mtok"),
        (
            "output_per_mtok = 15",
            "output_per_mtok = 15, cached_input_per_mtok = 1e300",
            "endpoints.ref.price.cached_input_per_mtok",
        ),
        ('snapshots_dir = "s"', "budget_usd = 1e308", "budget_usd"),
        ('candidate = "cand"', 'candidate = "cand"\nbudget_usd = 1e10', "suites.cities.budget_usd"),
        (
            'model = "cand-model"',
            'model = "cand-model"\nmax_tokens = 10000000000000',
            "endpoints.cand.max_tokens",
        ),
    ],
)
def test_a_price_budget_or_max_tokens_past_any_real_one_is_refused_at_load(
    tmp_path: Path, old: str, new: str, key: str
) -> None:
    """A price of 1e308 made a budget's estimate overflow (a traceback) and, without a budget,
    summary.json's cost `Infinity`: every amount a cost is computed from is bounded at load
    (a dollar a token, a billion-dollar budget, a 32-bit max_tokens), named by its key."""
    err = load_error(tmp_path, ('snapshots_dir = "s"\n' + _PRICED).replace(old, new, 1))
    assert (err.key, err.reason.startswith("Input should be less than or equal to ")) == (key, True)


def test_the_largest_price_and_budget_load(tmp_path: Path) -> None:
    """The bounds themselves are amounts a config may name."""
    text = "budget_usd = 1e9\n" + _PRICED.replace(
        "input_per_mtok = 3,", "input_per_mtok = 1e6,"
    ).replace("price = {", "max_tokens = 64\nprice = {")
    loaded = load_config(write(tmp_path, text))
    assert (loaded.budget_usd("cities"), loaded.endpoint("ref").price) == (
        1e9,
        Price(input_per_mtok=1e6, output_per_mtok=15),
    )


# --- numbers that are not finite ----------------------------------------------------------------

# where each config table's keys are written in MINIMAL: (text before, text after a key line)
_TABLES: dict[type[BaseModel], tuple[str, str]] = {
    Config: ("", ""),
    Thresholds: ("thresholds.", ""),
    EndpointConfig: ("", "endpoints.cand."),
    Timeouts: ("timeout.", "endpoints.cand."),
    RetryPolicy: ("retry.", "endpoints.cand."),
    Price: ("price.", "endpoints.cand."),
    SuiteConfig: ("", "suites.cities."),
}


def _float_keys() -> list[tuple[type[BaseModel], str]]:
    """Every float field of every config table (a new table or field is found on its own)."""
    found = []
    for model in _Strict.__subclasses__():
        for name, info in model.model_fields.items():
            if info.annotation is float or float in typing.get_args(info.annotation):
                found.append((model, name))
    return found


def test_every_float_field_lives_in_a_table_the_next_test_can_write() -> None:
    """The test below covers every table that holds a float, so none is left out."""
    assert {model for model, _ in _float_keys()} <= set(_TABLES)


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", '"${PARALLAX_TEST_NUMBER}"'])
@pytest.mark.parametrize(
    ("model", "name"), _float_keys(), ids=[f"{m.__name__}.{n}" for m, n in _float_keys()]
)
def test_a_float_that_is_not_finite_is_refused_at_load(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    model: type[BaseModel],
    name: str,
    value: str,
) -> None:
    """inf, -inf and NaN (written in TOML or read from an env var) pass every bound and crash
    a run deep in a library: each float key refuses them at load, named by its dotted key."""
    monkeypatch.setenv("PARALLAX_TEST_NUMBER", "inf")
    prefix, table = _TABLES[model]
    line = f"{prefix}{name} = {value}\n"
    if model is Price:  # a price table needs both rates: the others are given, finite
        rates = {"input_per_mtok": "1", "output_per_mtok": "1", name: value}
        line = "".join(f"{prefix}{key} = {rate}\n" for key, rate in rates.items())
    if table == "endpoints.cand.":
        text = MINIMAL.replace('model = "cand-model"\n', f'model = "cand-model"\n{line}')
    elif table == "suites.cities.":
        text = MINIMAL + line
    else:
        text = line + MINIMAL
    err = load_error(tmp_path, text)
    expected = f"{table}{prefix}{name}"
    assert expected == err.key
    assert err.reason.startswith("must be a finite number, got ")


def test_a_body_template_number_that_is_not_finite_is_refused(tmp_path: Path) -> None:
    """The free-form body template is sent as JSON, which has no NaN: refused at load, with
    where in the template it sits."""
    text = MINIMAL.replace(
        'model = "cand-model"\n', 'model = "cand-model"\nbody_template = {a = [1, {b = nan}]}\n'
    )
    err = load_error(tmp_path, text)
    expected = ("endpoints.cand.body_template", "a[1].b must be a finite number, got nan")
    assert expected == (err.key, err.reason)


# --- empty values -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "key"),
    [
        ('model = "cand-model"', "endpoints.cand.model"),
        ('base_url = "https://api.example.com/v1"', "endpoints.cand.base_url"),
        ('fixtures = "cities.jsonl"', "suites.cities.fixtures"),
        ('candidate = "cand"', "suites.cities.candidate"),
        ('cassette = "ref.jsonl"', "endpoints.ref.cassette"),
    ],
)
def test_a_variable_that_is_set_but_empty_is_named_where_it_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, old: str, key: str
) -> None:
    """`model = "${CAND_MODEL}"` with CAND_MODEL="" names the key and the variable and says
    it is empty, instead of a rule about the table that names neither."""
    monkeypatch.setenv("PARALLAX_TEST_EMPTY", "")
    name = old.split(" = ", maxsplit=1)[0]
    path = write(tmp_path, MINIMAL.replace(old, f'{name} = "${{PARALLAX_TEST_EMPTY}}"'))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    expected = f"{path}: {key}: ${{PARALLAX_TEST_EMPTY}} is empty"
    assert expected == str(info.value)


def test_an_empty_string_where_a_value_is_needed_is_named(tmp_path: Path) -> None:
    """`model = ""` written in the file is refused at its key, not as a missing model."""
    err = load_error(tmp_path, MINIMAL.replace('model = "cand-model"', 'model = ""'))
    expected = ("endpoints.cand.model", "must not be empty")
    assert expected == (err.key, err.reason)


def test_an_empty_variable_inside_a_longer_value_is_named_beside_the_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`base_url = "${URL}/v1"` with URL="" fails as a URL; the message says which variable
    came out empty, so the fix is plain."""
    monkeypatch.setenv("PARALLAX_TEST_EMPTY", "")
    text = MINIMAL.replace('"https://api.example.com/v1"', '"${PARALLAX_TEST_EMPTY}/v1"')
    err = load_error(tmp_path, text)
    expected = (
        "endpoints.cand",
        "base_url must be an http(s) URL, got '/v1' (base_url: ${PARALLAX_TEST_EMPTY} is empty)",
    )
    assert expected == (err.key, err.reason)


# --- what a request is shaped from: templates, params, stream, request_sha ----------------------


def _cand(tmp_path: Path, lines: str, base: str = MINIMAL) -> Path:
    """MINIMAL with `lines` added to the openai-chat endpoint `cand`."""
    return write(tmp_path, base.replace('model = "cand-model"\n', f'model = "cand-model"\n{lines}'))


def test_an_endpoint_shapes_nothing_by_default(tmp_path: Path) -> None:
    """No template, no params, no stream: the case's own system prompt and prompt are sent."""
    shape = load_config(write(tmp_path, MINIMAL)).shape("cand")
    assert (shape.system, shape.user_template, dict(shape.params), shape.stream) == (
        None,
        None,
        {},
        False,
    )
    sent = {"case_id": "c1", "vars": {}, "path": "f.jsonl", "line": 3}
    assert shape.system_prompt(prompt="Q?", system="Be brief.", **sent) == "Be brief."
    assert shape.user_prompt(prompt="Q?", system="Be brief.", **sent) == "Q?"


def test_templates_inline_and_in_files_are_compiled_at_load(tmp_path: Path) -> None:
    """`system` inline and `user_template_file` (relative to the config's folder) are compiled
    when the config loads; the rendered text is what a case is sent."""
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "user.j2").write_text("{{ prompt }} ({{ vars.tone }})\n")
    path = _cand(
        tmp_path,
        'system = "v2: {{ system or \'Answer.\' }}"\nuser_template_file = "prompts/user.j2"\n',
    )
    shape = load_config(path).shape("cand")
    assert shape.user_template is not None and shape.user_template.origin == "prompts/user.j2"
    sent = {"case_id": "c1", "vars": {"tone": "dry"}, "path": "f.jsonl", "line": 3}
    assert shape.system_prompt(prompt="Q?", system=None, **sent) == "v2: Answer."
    assert shape.user_prompt(prompt="Q?", system=None, **sent) == "Q? (dry)\n"


def test_a_messages_case_gets_the_system_template_but_no_user_template(tmp_path: Path) -> None:
    """A conversation (prompt None) is sent as written: the user template does not apply, the
    system template still gives its system turn."""
    shape = load_config(_cand(tmp_path, 'system = "S"\nuser_template = "U {{ prompt }}"\n'))
    sent = {"case_id": "c1", "vars": {}, "path": "f.jsonl", "line": 3}
    assert shape.shape("cand").user_prompt(prompt=None, system=None, **sent) is None
    assert shape.shape("cand").system_prompt(prompt=None, system=None, **sent) == "S"


def test_an_undefined_name_is_the_cases_error_when_rendered(tmp_path: Path) -> None:
    """A template compiles with any name; rendering a case without it names the case, the
    fixture file:line, the name and the template's key (exit 65)."""
    from runner.errors import FixtureError

    shape = load_config(_cand(tmp_path, 'user_template = "{{ vars.customer }}"\n')).shape("cand")
    with pytest.raises(FixtureError) as info:
        shape.user_prompt(case_id="c1", prompt="Q", system=None, vars={}, path="f.jsonl", line=4)
    expected = (
        "f.jsonl:4: case 'c1': undefined name 'vars.customer' (in endpoints.cand.user_template)"
    )
    assert (expected, 65) == (str(info.value), info.value.exit_code)


@pytest.mark.parametrize(
    ("lines", "key", "reason"),
    [
        ('system = "{% if %}"\n', "endpoints.cand.system", "template line 1: "),
        ('user_template = "{{ x | nope }}"\n', "endpoints.cand.user_template", "template line 1"),
        ('system = ""\n', "endpoints.cand.system", "must not be empty"),
        ('system_file = "nope.j2"\n', "endpoints.cand.system_file", "no such file: nope.j2"),
        (
            'system = "a"\nsystem_file = "s.j2"\n',
            "endpoints.cand.system_file",
            "set endpoints.cand.system or endpoints.cand.system_file, not both",
        ),
        (
            'user_template = "a"\nuser_template_file = "s.j2"\n',
            "endpoints.cand.user_template_file",
            "not both",
        ),
        (
            'stream = "sometimes"\n',
            "endpoints.cand.stream",
            'must be true or false, got "sometimes"',
        ),
        ("params = 3\n", "endpoints.cand.params", "must be a table, got 3"),
    ],
)
def test_a_template_or_shape_key_that_cannot_work_names_its_key(
    tmp_path: Path, lines: str, key: str, reason: str
) -> None:
    """A template that does not compile, is empty, names no file or is set twice, and a stream
    or params of the wrong type, each fail at load naming the key (exit 78)."""
    (tmp_path / "s.j2").write_text("x")
    err = load_error(tmp_path, textwrap.dedent(_cand(tmp_path, lines).read_text()))
    assert key == err.key
    assert reason in err.reason


def test_a_template_file_error_names_the_file_and_its_line(tmp_path: Path) -> None:
    """A template file that does not compile names the key, the file and the line in it."""
    (tmp_path / "sys.j2").write_text("line one\n{{ oops(\n")
    err = load_error(tmp_path, _cand(tmp_path, 'system_file = "sys.j2"\n').read_text())
    assert err.key == "endpoints.cand.system_file"
    assert err.reason.startswith("sys.j2:2: ")


@pytest.mark.parametrize("name", sorted(PROTOCOL_KEYS))
def test_params_refuse_the_keys_the_protocol_sets(tmp_path: Path, name: str) -> None:
    """`params.model`, `params.messages`, `params.stream`, ... would send a second value for a
    key parallax sets (from the endpoint or the case): refused naming it and where it comes from."""
    err = load_error(tmp_path, _cand(tmp_path, f"params = {{ {name} = 1 }}\n").read_text())
    assert f"endpoints.cand.params.{name}" == err.key
    assert err.reason.startswith("is set by parallax from ")


@pytest.mark.parametrize(
    ("value", "key", "reason"),
    [
        ("{ at = 1979-05-27T07:32:00Z }", "endpoints.cand.params.at", "a TOML date or time"),
        ("{ on = 1979-05-27 }", "endpoints.cand.params.on", "a TOML date or time"),
        ("{ x = { at = 07:32:00 } }", "endpoints.cand.params.x.at", "a TOML date or time"),
        ("{ stop = ['a', 1979-05-27] }", "endpoints.cand.params.stop[1]", "a TOML date or time"),
        ("{ top_p = nan }", "endpoints.cand.params.top_p", "must be a finite number, got nan"),
        ("{ a = 1, b = [inf] }", "endpoints.cand.params.b[0]", "must be a finite number, got inf"),
    ],
)
def test_params_hold_json_values_only(tmp_path: Path, value: str, key: str, reason: str) -> None:
    """A TOML date or time, or a number that is not finite, has no JSON form: refused at load
    at its own dotted key, however deep it sits."""
    err = load_error(tmp_path, _cand(tmp_path, f"params = {value}\n").read_text())
    assert (key, True) == (err.key, err.reason.startswith(reason))


def test_params_are_kept_as_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """JSON values of any shape pass through unchanged, a `${VAR}` that body_env lists read
    as everywhere."""
    monkeypatch.setenv("PARALLAX_TEST_EFFORT", "low")
    text = (
        'params = { top_p = 0.5, seed = 7, stop = ["\\n"], extra = { a = true }, '
        'reasoning_effort = "${PARALLAX_TEST_EFFORT}" }\nstream = true\n'
        'body_env = ["PARALLAX_TEST_EFFORT"]\n'
    )
    shape = load_config(_cand(tmp_path, text)).shape("cand")
    expected = {
        "top_p": 0.5,
        "seed": 7,
        "stop": ["\n"],
        "extra": {"a": True},
        "reasoning_effort": "low",
    }
    assert (expected, True) == (dict(shape.params), shape.stream)


@pytest.mark.parametrize("field", SHAPE_KEYS)
def test_an_http_json_endpoint_refuses_the_chat_shape_keys(tmp_path: Path, field: str) -> None:
    """An http-json endpoint's body is its body_template: a template, params or stream there
    would be silently unused, so each is refused naming its key."""
    (tmp_path / "t.j2").write_text("x")
    value = {"params": "{ seed = 1 }", "stream": "true"}.get(field, '"t.j2"')
    http = MINIMAL.replace('kind = "openai-chat"', 'kind = "http-json"').replace(
        'model = "cand-model"\n',
        'model = "cand-model"\nbody_template = { q = "{{prompt}}" }\n',
    )
    err = load_error(tmp_path, _cand(tmp_path, f"{field} = {value}\n", base=http).read_text())
    assert f"endpoints.cand.{field}" == err.key
    assert err.reason.startswith("does not apply to an http-json endpoint")


def test_a_recorded_endpoint_carries_the_shape_its_cassette_answers(tmp_path: Path) -> None:
    """A recorded endpoint stands in for a live one: its templates compile and are pinned."""
    text = MINIMAL.replace('cassette = "ref.jsonl"', 'cassette = "ref.jsonl"\nsystem = "v1"')
    shape = load_config(write(tmp_path, text)).shape("ref")
    assert shape.system is not None and shape.system.source == "v1"


def _sha(tmp_path: Path, lines: str) -> str:
    return load_config(_cand(tmp_path, lines)).shape("cand").request_sha


def test_request_sha_is_stable_across_loads(tmp_path: Path) -> None:
    """The same config loads to the same request_sha, every time."""
    lines = 'system = "v1 {{ prompt }}"\nparams = { seed = 1, top_p = 0.9 }\n'
    first = _sha(tmp_path, lines)
    assert (16, first) == (len(first), _sha(tmp_path, lines))
    assert first != load_config(write(tmp_path, MINIMAL)).shape("ref").request_sha


@pytest.mark.parametrize(
    "lines",
    [
        'system = "v2 {{ prompt }}"\n',
        'system = "v1 {{ prompt }}"\nuser_template = "{{ prompt }}"\n',
        'system = "v1 {{ prompt }}"\nparams = { seed = 2 }\n',
        'system = "v1 {{ prompt }}"\nstream = true\n',
        'system = "v1 {{ prompt }}"\ntemperature = 0.5\n',
        'system = "v1 {{ prompt }}"\nmax_tokens = 64\n',
    ],
)
def test_request_sha_moves_with_what_shapes_the_request(tmp_path: Path, lines: str) -> None:
    """A template edit, params, stream, temperature or max_tokens each move request_sha."""
    assert _sha(tmp_path, lines) != _sha(tmp_path, 'system = "v1 {{ prompt }}"\n')


def test_request_sha_follows_a_template_files_contents_not_its_name(tmp_path: Path) -> None:
    """Editing a template file moves request_sha; the same text inline or in a file does not."""
    (tmp_path / "sys.j2").write_text("v1 {{ prompt }}")
    in_file = _sha(tmp_path, 'system_file = "sys.j2"\n')
    assert in_file == _sha(tmp_path, 'system = "v1 {{ prompt }}"\n')
    (tmp_path / "sys.j2").write_text("v1 {{ prompt }}.")
    assert in_file != _sha(tmp_path, 'system_file = "sys.j2"\n')


def test_request_sha_ignores_where_and_how_a_request_is_sent(tmp_path: Path) -> None:
    """Base URL, headers, timeouts and concurrency change nothing the model is asked."""
    lines = 'system = "v1"\n'
    moved = MINIMAL.replace("https://api.example.com/v1", "http://127.0.0.1:9/v1")
    moved = moved.replace(
        'api_key_env = "PARALLAX_TEST_KEY"',
        'api_key_env = "PARALLAX_TEST_KEY"\nconcurrency = 2\nheaders = { X-Team = "a" }',
    )
    assert (
        _sha(tmp_path, lines)
        == load_config(_cand(tmp_path, lines, moved)).shape("cand").request_sha
    )


def test_a_recorded_endpoint_names_the_protocol_its_replies_are_written_in(
    tmp_path: Path,
) -> None:
    """protocol on a recorded endpoint picks the wire format of its cassette's replies; unset,
    they are openai-chat as they always were."""
    loaded = load_config(
        write(
            tmp_path,
            MINIMAL.replace(
                'model = "ref-model"', 'model = "ref-model"\nprotocol = "anthropic-messages"'
            ),
        )
    )
    plain = load_config(write(tmp_path, MINIMAL))
    expected = ("anthropic-messages", None)
    assert expected == (loaded.endpoint("ref").protocol, plain.endpoint("ref").protocol)


@pytest.mark.parametrize(
    ("old", "new", "key", "reason"),
    [
        (
            'model = "ref-model"',
            'model = "ref-model"\nprotocol = "http-json"',
            "endpoints.ref.protocol",
            "",
        ),
        (
            'model = "cand-model"',
            'model = "cand-model"\nprotocol = "anthropic-messages"',
            "endpoints.cand",
            "protocol is for a recorded endpoint: openai-chat is the protocol",
        ),
    ],
)
def test_a_protocol_that_cannot_be_is_refused(
    tmp_path: Path, old: str, new: str, key: str, reason: str
) -> None:
    """protocol takes openai-chat or anthropic-messages, and only on a recorded endpoint."""
    err = load_error(tmp_path, MINIMAL.replace(old, new, 1))
    assert key == err.key
    assert reason in err.reason


def test_a_recorded_endpoint_has_the_request_sha_of_the_live_one_it_stands_in_for(
    tmp_path: Path,
) -> None:
    """A cassette of an openai-chat endpoint's replies, with the same model and templates, pins
    the same request; a recorded endpoint of another protocol pins another."""
    live = load_config(_cand(tmp_path, 'system = "v1"\n')).shape("cand").request_sha
    recorded = MINIMAL.replace('cassette = "ref.jsonl"', 'cassette = "ref.jsonl"\nsystem = "v1"')
    recorded = recorded.replace('model = "ref-model"', 'model = "cand-model"')
    assert live == load_config(write(tmp_path, recorded)).shape("ref").request_sha
    other = recorded.replace(
        'kind = "recorded"', 'kind = "recorded"\nprotocol = "anthropic-messages"'
    )
    assert live != load_config(write(tmp_path, other)).shape("ref").request_sha
