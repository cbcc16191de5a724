"""Specification of endpoint templates: sandboxed Jinja2 over a case, and request_sha."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.errors import ConfigError, FixtureError
from runner.fixtures.pin import fixture_sha
from runner.request.templates import PromptTemplate, _jinja, load_template, request_sha

KEY = "endpoints.candidate.user_template"


def compiled(source: str, key: str = KEY) -> PromptTemplate:
    return PromptTemplate.compile(source, config_path="parallax.toml", key=key)


def render(
    source: str,
    *,
    prompt: str | None = "Name the SKU.",
    system: str | None = None,
    vars: dict[str, str] | None = None,
) -> str:
    return compiled(source).render(
        case_id="c7", prompt=prompt, system=system, vars=vars, path="suite.jsonl", line=7
    )


def render_error(source: str, **kwargs: Any) -> str:
    with pytest.raises(FixtureError) as caught:
        render(source, **kwargs)
    assert caught.value.exit_code == 65
    return str(caught.value)


def compile_error(source: str) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        compiled(source)
    assert caught.value.exit_code == 78
    return caught.value


# --- rendering ---------------------------------------------------------------------------


def test_renders_prompt_system_and_vars() -> None:
    """A template sees the case's prompt, its system prompt and its vars by name."""
    out = render(
        "{{ system }} / {{ prompt }} for {{ vars.customer }} ({{ vars['tier'] }})",
        system="Be brief.",
        vars={"customer": "ACME", "tier": "gold"},
    )
    assert out == "Be brief. / Name the SKU. for ACME (gold)"


def test_text_is_sent_as_written() -> None:
    """No autoescape (a prompt is not HTML) and a final newline is kept."""
    assert render("<b>{{ prompt }}</b> & 'q'\n", prompt='a<b>&"c') == "<b>a<b>&\"c</b> & 'q'\n"


def test_template_line_breaks_are_newlines() -> None:
    """A template's CRLF line breaks are sent as \\n; the case's own text is left as it is."""
    assert render("a\r\nb {{ prompt }}\r\n", prompt="x\r\ny") == "a\nb x\r\ny\n"


def test_vars_default_to_empty() -> None:
    """A case without vars renders with `vars` as an empty object."""
    assert render("{{ vars | length }}{% for k in vars %}{{ k }}{% endfor %}", vars=None) == "0"


def test_undefined_var_names_the_case_and_the_name() -> None:
    """A var the case does not have is an error naming the case, the file:line and `vars.<name>`."""
    message = render_error("Dear {{ vars.customer }},", vars={"tier": "gold"})
    assert message == (f"suite.jsonl:7: case 'c7': undefined name 'vars.customer' (in {KEY})")


def test_undefined_var_by_subscript_and_nested() -> None:
    """`vars['x']` and `vars.x.y` name the missing var the same way; an index names itself."""
    assert "undefined name 'vars.customer'" in render_error("{{ vars['customer'] }}")
    assert "undefined name 'vars.customer'" in render_error("{{ vars.customer.name }}")
    assert "undefined name 'vars[0]'" in render_error("{{ vars[0] }}")


def test_undefined_top_level_name() -> None:
    """A name the template does not get (a typo, `now`, `lipsum`) is an undefined name."""
    assert "undefined name 'promt'" in render_error("{{ promt }}")
    assert "undefined name 'now'" in render_error("{{ now() }}")
    assert "undefined name 'lipsum'" in render_error("{{ lipsum() }}")


def test_undefined_in_a_test_is_an_error() -> None:
    """StrictUndefined: an undefined var in `{% if %}` fails rather than reading as false."""
    assert "undefined name 'vars.vip'" in render_error("{% if vars.vip %}x{% endif %}")


def test_defined_and_default_handle_optional_vars() -> None:
    """A template that allows for a missing var says so with `is defined` or `default`."""
    source = "{% if vars.vip is defined %}VIP {% endif %}{{ vars.name | default('friend') }}"
    assert render(source, vars={}) == "friend"
    assert render(source, vars={"vip": "y", "name": "Ann"}) == "VIP Ann"


def test_missing_system_is_false_and_defaultable() -> None:
    """A case without a system prompt sees `system` as null: false, and `or`/`default` apply."""
    assert render("{% if system %}[{{ system }}]{% endif %}x") == "x"
    assert render("{{ system or 'You are helpful.' }}") == "You are helpful."
    assert render("{{ system | default('You are helpful.') }}") == "You are helpful."
    assert render("{% if system %}[{{ system }}]{% endif %}x", system="S") == "[S]x"


def test_printing_a_missing_system_is_an_error() -> None:
    """Printing a null system prompt is an error naming it, not the word "None" in a prompt."""
    message = render_error("{{ system }}\n{{ prompt }}")
    assert "case 'c7': 'system' is null for this case (test it with {% if system %})" in message


def test_messages_case_has_no_prompt() -> None:
    """For a `messages` case (prompt None), a template that prints the prompt fails by name."""
    assert "'prompt' is null for this case" in render_error("Q: {{ prompt }}", prompt=None)
    assert render("{{ prompt or 'conversation' }}", prompt=None) == "conversation"


@pytest.mark.parametrize(
    ("source", "printed"),
    [
        ("{{ vars.get('nope') }}", "prints null"),
        ("{{ prompt.upper }}", "prints a function"),
        ("{{ dict }}", "prints a function"),
        ("{{ vars | map('upper') }}", "prints a generator"),
        ("{{ vars.items() }}", "prints a dict_items"),
        ("{{ cycler(1, 2) }}", "prints a Cycler"),
        ("{{ namespace() }}", "prints a Namespace"),
        ("{{ self }}", "prints a TemplateReference"),
    ],
)
def test_values_whose_text_varies_do_not_print(source: str, printed: str) -> None:
    """A null, a function or an object whose text holds a memory address is refused by name."""
    assert printed in render_error(source, vars={"a": "x"})


def test_plain_values_print() -> None:
    """Text, numbers, booleans and lists or objects of them print as Python writes them."""
    assert render("{{ 1 + 1 }} {{ 0.5 }} {{ true }} {{ [1, 'a', none] }} {{ dict(k=1) }}") == (
        "2 0.5 True [1, 'a', None] {'k': 1}"
    )
    assert render("{{ vars }}", vars={"a": "x"}) == "{'a': 'x'}"


@pytest.mark.parametrize(
    ("source", "how"),
    [
        ("{{ prompt.upper | string }}", "|string"),
        ("{{ '%s' | format(prompt.upper) }}", "|format"),
        ("{{ [prompt.upper] | join }}", "|join"),
        ("{{ prompt.upper ~ '' }}", "~"),
        ("{{ prompt.upper | pprint }}", "|pprint"),
        ("{{ prompt.upper | upper }}", "|upper"),
        ("{{ '%s' % prompt.upper }}", "'%' formatting"),
        ("{{ '%(a)s' % {'a': cycler} }}", "'%' formatting"),
        ("{{ '{}'.format(prompt.upper) }}", "str.format"),
        ("{{ ', '.join([dict]) }}", "str.join"),
        ("{{ vars | map('upper') | string }}", "|string"),
        ("{% set x %}{{ 'a' ~ joiner() }}{% endset %}{{ x }}", "~"),
        ("{{ 'total: ' ~ vars.items() }}", "~"),
    ],
)
def test_a_value_that_is_no_data_never_becomes_text(source: str, how: str) -> None:
    """Printing a function or a helper object was refused, but `|string`, `|format`, `|join`,
    `~`, `|pprint` (and `%`, str.format) turned one into text that holds its memory address,
    which `validate` passed and which differed on every run: every path is refused."""
    message = render_error(source, vars={"a": "x"})
    assert "case 'c7': turns " in message and f"into text ({how})" in message, message
    assert message.endswith(f"(in {KEY})")


def test_data_still_becomes_text_by_every_path() -> None:
    """The same paths over text, numbers and lists of them render as before."""
    source = (
        "{{ 7 | string }} {{ '%s-%d' | format('a', 2) }} {{ [1, 'b'] | join('/') }} "
        "{{ 'x' ~ 1 }} {{ [1] | pprint }} {{ '%s' % prompt }} {{ '{}!'.format(vars.a) }} "
        "{{ ','.join(vars | list) }} {{ vars | dictsort | string }}"
    )
    assert render(source, vars={"a": "x"}) == ("7 a-2 1/b x1 [1] Name the SKU. x! a [('a', 'x')]")


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        (
            "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
            "runs more than 100000 loop iterations",
        ),
        ("{{ 10 ** 100000000 }}", "10 ** 100000000 would have more than 16384 bits"),
        ("{{ 'x' * 1000000000 }}", "repeating a value 1000000000 times (*) would build"),
        ("{{ [1] * 1000000000 }}", "repeating a value 1000000000 times (*) would build"),
        ("{{ 'x' * 2 * 1000000 }}", "would build 2000000 characters or more, past 1000000"),
        ("{{ 'x' | center(1000000000) }}", "the center filter is given 1000000000"),
        ("{{ 'x'.ljust(1000000000) }}", "str.ljust is given 1000000000"),
        ("{{ '%1000000000d' % 1 }}", "'%' formatting asks for a width of 1000000000"),
        ("{{ '{:>1000000000}'.format(1) }}", "str.format asks for a width of 1000000000"),
        ("{{ '%1000000000d' | format(1) }}", "the format filter asks for a width"),
        ("{{ ('x' * 1000000) | replace('x', 'xx') }}", "the replace filter would build"),
        ("{{ ('x\n' * 400000) | indent(1000) }}", "the indent filter would build"),
        ("{{ 'a\tb'.expandtabs(1000000000) }}", "str.expandtabs would build"),
        (
            "{% set ns = namespace(s='x') %}{% for i in range(40) %}"
            "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}",
            "~ would build 1048576 characters or more",
        ),
        (
            "{% set ns = namespace(s='x') %}{% for i in range(40) %}"
            "{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s | length }}",
            "'+' builds a value of 1048576 characters",
        ),
        ("{{ range(10000) | map('center', 1000000) | join }}", "builds more than 10000000"),
        (
            "{% macro m() %}{% for i in range(100000) %}{{ 'y' * 1000 }}{% endfor %}{% endmacro %}"
            "{{ m() | length }}",
            "builds more than 10000000 characters in all",
        ),
        (
            "{% for i in range(2000) %}{{ 'y' * 1000 }}{% endfor %}",
            "renders more than 1000000 characters",
        ),
    ],
)
def test_a_template_is_bounded_by_work_never_by_the_clock(source: str, reason: str) -> None:
    """Nested range(100000) loops ran for minutes, `10 ** 100000000` hung and `'x' *
    1000000000` took gigabytes: every render is bounded in what it builds and how long it
    loops, each refusal one line naming the case and the key, the same on every machine."""
    message = render_error(source)
    assert message.startswith("suite.jsonl:7: case 'c7': ") and reason in message, message
    assert message.endswith(f"(in {KEY})")


def test_a_huge_constant_is_never_folded_when_the_config_loads() -> None:
    """Jinja2 folds constant expressions when it compiles, even under `{% if false %}`: the
    config's load computed `10 ** 100000000` (and `'x' * 1000000000`). They are left to the
    render, which refuses them only where they run."""
    for source in ("{% if false %}{{ 10 ** 100000000 }}{{ 'x' * 1000000000 }}{% endif %}ok",):
        assert render(source) == "ok"
    compiled("{{ 10 ** 100000000 }}{{ ('x' | center(100)) | center(1000000000) }}")


def test_the_bounds_leave_a_large_ordinary_prompt_alone() -> None:
    """A prompt of a few hundred kilobytes, built in loops, renders as it always did."""
    source = (
        "{% for i in range(5000) %}{{ loop.index }}: {{ prompt }} {{ 'ab' * 20 }}\n{% endfor %}"
    )
    out = render(source)
    assert out.count("\n") == 5000 and len(out) > 250_000


@pytest.mark.parametrize(
    "source",
    [
        "{{ ''.__class__.__mro__ }}",
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ cycler.__init__.__globals__ }}",
        "{{ joiner.__init__.__globals__.os }}",
        "{{ ''.format.__globals__ }}",
        "{{ '{0.__class__}'.format(prompt) }}",
        "{% set x = 1 %}{{ x.__class__ }}",
        "{{ vars.update({'a': 'b'}) }}",
        "{{ vars.pop('a') }}",
        "{{ self._TemplateReference__context }}",
    ],
)
def test_sandbox_escapes_are_case_errors(source: str) -> None:
    """Reaching for Python internals or mutating the case is refused as one line, exit 65."""
    message = render_error(source, vars={"a": "x"})
    assert message.startswith("suite.jsonl:7: case 'c7': refused by the sandbox: access to ")
    assert message.endswith(f"is unsafe. (in {KEY})")


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        ("{{ 1 / 0 }}", "ZeroDivisionError: division by zero"),
        ("{{ 'a' + 1 }}", "TypeError: "),
        ("{{ range(10 ** 9) | list }}", "OverflowError: Range too big."),
        ("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "RecursionError: "),
    ],
)
def test_errors_a_template_raises_are_case_errors(source: str, reason: str) -> None:
    """An exception the template raises (arithmetic, a huge range, recursion) is one line."""
    assert f"case 'c7': {reason}" in render_error(source)


def test_no_random_or_clock_in_the_environment() -> None:
    """The environment offers nothing that draws at random or reads the clock."""
    env = _jinja().env
    assert sorted(env.globals) == ["cycler", "dict", "joiner", "namespace", "range"]
    assert "random" not in env.filters
    assert not {"now", "today", "time", "random", "lipsum"} & set(env.globals)


def test_rendering_is_deterministic_across_runs() -> None:
    """The same template over the same case renders the same text, whatever Python's RNG says."""
    source = "{% for k, v in vars | dictsort %}{{ loop.index }}:{{ k }}={{ v|upper }};{% endfor %}"
    template = compiled(source)
    outs = set()
    for seed in range(5):
        random.seed(seed)
        outs.add(
            template.render(
                case_id="c", prompt="p", system=None, vars={"b": "2", "a": "1"}, path="f", line=1
            )
        )
    assert outs == {"1:a=1;2:b=2;"}


def test_render_leaves_the_case_vars_alone() -> None:
    """Rendering gets a copy of the vars: nothing a template does reaches the case."""
    case_vars = {"a": "x"}
    render("{% set vars = {} %}{{ vars | length }}", vars=case_vars)
    assert case_vars == {"a": "x"}


def test_render_without_a_line() -> None:
    """The fixture line is optional in the message; the file is always named."""
    with pytest.raises(FixtureError) as caught:
        compiled("{{ vars.x }}").render(
            case_id="c1", prompt="p", system=None, vars={}, path="s.jsonl"
        )
    assert str(caught.value) == f"s.jsonl: case 'c1': undefined name 'vars.x' (in {KEY})"


# --- compiling ---------------------------------------------------------------------------


def test_syntax_error_names_the_key_and_line() -> None:
    """A template that does not parse is a config error with its key and the template's line."""
    error = compile_error("Hello\n{{ prompt }\n")
    assert error.key == KEY
    assert str(error) == f"parallax.toml: {KEY}: template line 2: unexpected '}}'"


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        ("{% if prompt %}open", "template line 1: Unexpected end of template."),
        ("{{ prompt | shout }}", "template line 1: No filter named 'shout'."),
        ("{{ [1, 2] | random }}", "template line 1: No filter named 'random'."),
        ("{% if prompt is shouting %}{% endif %}", "template line 1: No test named 'shouting'."),
        ("{% if x %}\n{{ y | shout }}{% endif %}", "template line 2: No filter named 'shout'."),
        ("{% filter shout %}x{% endfilter %}", "template line 1: No filter named 'shout'."),
        ("a\n{% include 'other.j2' %}", "template line 2: a template cannot include"),
        ("{% extends 'base.j2' %}", "template line 1: a template cannot include"),
        ("{% import 'm.j2' as m %}", "template line 1: a template cannot include"),
        ("{% from 'm.j2' import x %}", "template line 1: a template cannot include"),
        ("{{ " + "[" * 300 + "]" * 300 + " }}", "nested too deeply to compile"),
        ("{{ " + "(" * 5000 + "1" + ")" * 5000 + " }}", "nested too deeply to compile"),
    ],
)
def test_templates_that_cannot_render_are_refused_at_load(source: str, reason: str) -> None:
    """Unknown filters and tests, unclosed blocks, includes and absurd nesting exit 78 at load."""
    assert str(compile_error(source)).startswith(f"parallax.toml: {KEY}: {reason}")


def test_compiled_template_is_reused() -> None:
    """A template compiles once and renders any number of cases."""
    template = compiled("{{ prompt }}!")
    outs = [
        template.render(case_id=str(i), prompt=str(i), system=None, vars={}, path="f", line=i)
        for i in range(3)
    ]
    assert outs == ["0!", "1!", "2!"]


# --- template files ----------------------------------------------------------------------


def test_inline_template(tmp_path: Path) -> None:
    """`user_template` inline compiles under its own key."""
    template = load_template("p.toml", tmp_path, KEY, inline="{{ prompt }}", file=None)
    assert template is not None
    assert (template.source, template.key, template.origin) == ("{{ prompt }}", KEY, None)


def test_neither_inline_nor_file(tmp_path: Path) -> None:
    """An endpoint that sets neither key has no template: the case's text is sent as is."""
    assert load_template("p.toml", tmp_path, KEY, inline=None, file=None) is None


def test_template_file_read_relative_to_base_dir(tmp_path: Path) -> None:
    """`user_template_file` is read relative to the config's directory, its bytes kept exactly."""
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "v2.j2").write_bytes("Répondez : {{ prompt }}\n".encode())
    template = load_template("p.toml", tmp_path, KEY, inline=None, file="prompts/v2.j2")
    assert template is not None
    assert template.source == "Répondez : {{ prompt }}\n"
    assert (template.key, template.origin) == (f"{KEY}_file", "prompts/v2.j2")
    out = template.render(case_id="c", prompt="Oui ?", system=None, vars={}, path="f", line=1)
    assert out == "Répondez : Oui ?\n"


def test_file_and_inline_render_and_digest_alike(tmp_path: Path) -> None:
    """The same text inline or in a file is the same template: moving it moves nothing."""
    (tmp_path / "t.j2").write_text("{{ prompt }}")
    inline = load_template("p.toml", tmp_path, KEY, inline="{{ prompt }}", file=None)
    in_file = load_template("p.toml", tmp_path, KEY, inline=None, file="t.j2")
    assert inline is not None and in_file is not None
    assert inline.source == in_file.source


def test_both_inline_and_file_is_refused(tmp_path: Path) -> None:
    """Setting a template both inline and as a file is a config error naming both keys."""
    (tmp_path / "t.j2").write_text("x")
    with pytest.raises(ConfigError) as caught:
        load_template("p.toml", tmp_path, KEY, inline="y", file="t.j2")
    assert str(caught.value) == f"p.toml: {KEY}_file: set {KEY} or {KEY}_file, not both"


def test_missing_template_file(tmp_path: Path) -> None:
    """A template file that does not exist is a config error naming the `_file` key."""
    with pytest.raises(ConfigError) as caught:
        load_template("p.toml", tmp_path, KEY, inline=None, file="nope.j2")
    assert str(caught.value) == f"p.toml: {KEY}_file: no such file: nope.j2"


def test_unreadable_template_file(tmp_path: Path) -> None:
    """A directory or a name with a NUL in it is a one-line config error, not a traceback."""
    (tmp_path / "d").mkdir()
    with pytest.raises(ConfigError, match=r"_file: cannot read d: "):
        load_template("p.toml", tmp_path, KEY, inline=None, file="d")
    with pytest.raises(ConfigError, match=r"_file: cannot read a\x00b: "):
        load_template("p.toml", tmp_path, KEY, inline=None, file="a\0b")


def test_template_file_not_utf8(tmp_path: Path) -> None:
    """A template file that is not UTF-8 is refused with the offending byte's offset."""
    (tmp_path / "t.j2").write_bytes(b"ok \xff")
    with pytest.raises(ConfigError) as caught:
        load_template("p.toml", tmp_path, KEY, inline=None, file="t.j2")
    assert str(caught.value) == f"p.toml: {KEY}_file: t.j2: not UTF-8 at byte 3"


def test_template_file_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    """A syntax error in a template file names the file and its line."""
    (tmp_path / "t.j2").write_text("line one\nline two\n{% for x in vars %}\n")
    with pytest.raises(ConfigError) as caught:
        load_template("p.toml", tmp_path, KEY, inline=None, file="t.j2")
    assert str(caught.value).startswith(f"p.toml: {KEY}_file: t.j2:3: Unexpected end of template.")


# --- request_sha -------------------------------------------------------------------------

BASE: dict[str, Any] = {
    "protocol": "openai-chat",
    "model_alias": "gpt-x",
    "system": "You are {{ vars.persona }}.",
    "user_template": "{{ prompt }}",
    "params": {"top_p": 0.9, "seed": 7, "stop": ["\n\n"]},
    "stream": False,
    "temperature": 0.0,
    "max_tokens": 512,
}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=10,
)


def test_request_sha_is_fixture_shas_rule_over_the_shape() -> None:
    """The digest is fixture_sha's rule (canonical JSON, sha256, 16 hex digits) over the named
    inputs, the model alias under `model`, an input that is None left out rather than null."""
    shape = {**BASE, "model": BASE["model_alias"], "system": None}
    del shape["model_alias"], shape["system"]
    assert request_sha(**{**BASE, "system": None}) == fixture_sha(shape)
    assert request_sha(**BASE) == "0c150583270052ca"  # changing the rule moves every pin


def shuffled(value: Any, rng: random.Random) -> Any:
    if isinstance(value, dict):
        items = [(k, shuffled(v, rng)) for k, v in value.items()]
        rng.shuffle(items)
        return dict(items)
    if isinstance(value, list):
        return [shuffled(v, rng) for v in value]
    return value


@given(params=st.dictionaries(st.text(max_size=6), json_values, max_size=6), seed=st.integers())
def test_request_sha_ignores_key_order(params: dict[str, Any], seed: int) -> None:
    """The order of keys in params (at any depth) does not change the digest."""
    other = shuffled(params, random.Random(seed))
    assert request_sha(**{**BASE, "params": params}) == request_sha(**{**BASE, "params": other})


@settings(max_examples=200)
@given(
    field=st.sampled_from(["system", "user_template"]),
    at=st.integers(min_value=0),
    char=st.characters(),
)
def test_request_sha_moves_with_any_template_byte(field: str, at: int, char: str) -> None:
    """Any edit of either template's text (here one character replaced) moves the digest."""
    source = BASE[field]
    at %= len(source)
    edited = source[:at] + char + source[at + 1 :]
    if edited != source:
        assert request_sha(**{**BASE, field: edited}) != request_sha(**BASE)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("protocol", "anthropic-messages"),
        ("model_alias", "gpt-y"),
        ("model_alias", None),
        ("system", None),
        ("system", ""),
        ("user_template", None),
        ("params", {"top_p": 0.9, "seed": 8, "stop": ["\n\n"]}),
        ("params", {"top_p": 0.9, "seed": 7}),
        ("stream", True),
        ("temperature", 0.7),
        ("max_tokens", 256),
        ("body_template", {"q": "{prompt}"}),
    ],
)
def test_request_sha_moves_with_every_input(name: str, value: Any) -> None:
    """Every input that shapes the body is in the digest; an absent template is not an empty one."""
    assert request_sha(**{**BASE, name: value}) != request_sha(**BASE)


def test_a_template_file_that_is_no_regular_file_is_refused_without_reading(
    tmp_path: Path,
) -> None:
    """A FIFO nobody writes to (or /dev/zero) named as a template file is refused at once,
    as the config and fixture readers refuse it, never read until it blocks or fills memory
    (/dev/zero under an input root that holds it: outside one it is refused as outside)."""
    os.mkfifo(tmp_path / "fifo.j2")
    for file in ("fifo.j2", "/dev/zero"):
        with pytest.raises(ConfigError) as caught:
            load_template("p.toml", tmp_path, KEY, inline=None, file=file, root=Path("/"))
        expected = (
            f"p.toml: {KEY}_file: cannot read {file}: not a regular file (a device, FIFO or socket)"
        )
        assert expected == str(caught.value)


@pytest.mark.parametrize(
    ("template", "reason"),
    [
        ("{{ 'x' * 1000000000 }}", "repeating a value 1000000000 times (*) would build"),
        ("{% if false %}{{ 10 ** 100000000 }}{% endif %}{{ prompt | string }}", None),
        ("{{ prompt.upper | string }}", "turns a function into text (|string)"),
    ],
)
def test_validate_refuses_an_unbounded_template_naming_the_case_and_key(
    tmp_path: Path, template: str, reason: str | None
) -> None:
    """`{{ 'x' * 1000000000 }}` passed `validate` at 3.85 GB and `10 ** 100000000` hung the
    config's load: `validate` exits 65 on one line naming the fixture line, the case, the
    bound and the key, or passes the template whose huge constant never runs."""
    from relkit import run_parallax

    (tmp_path / "f.jsonl").write_text('{"id": "c1", "prompt": "Hi."}\n', "utf-8")
    (tmp_path / "c.jsonl").write_text('{"case_id": "c1", "completion": "x"}\n', "utf-8")
    (tmp_path / "parallax.toml").write_text(
        'runs_dir = "runs"\nsnapshots_dir = "snapshots"\n'
        '[endpoints.ref]\nkind = "recorded"\ncassette = "c.jsonl"\n'
        f'[endpoints.cand]\nkind = "recorded"\ncassette = "c.jsonl"\nuser_template = "{template}"\n'
        '[suites.s]\nfixtures = "f.jsonl"\nreference = "ref"\ncandidate = "cand"\n',
        "utf-8",
    )
    done = run_parallax("validate", "--config", "parallax.toml", cwd=tmp_path)
    if reason is None:
        assert done.returncode == 0, done.stderr
        return
    assert done.returncode == 65, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("parallax: f.jsonl:1: case 'c1': ") and reason in line, line
    assert line.endswith("(in endpoints.cand.user_template)")
