"""The template sandbox's bounds: how much one render may build, and what may become text.

Jinja2's sandbox keeps a template from Python's internals, not from the machine: nested
`range(100000)` loops run for minutes, `{{ 10 ** 100000000 }}` hangs the config's load (Jinja2
folds constants when it compiles, even under `{% if false %}`), and `{{ 'x' * 1000000000 }}`
builds gigabytes. A prompt is some kilobytes, so every render is bounded by work, never by the
clock (the same case renders, or is refused, the same way on every machine):

- no value a template builds is longer than MAX_TEXT characters (or items): the operations
  that amplify their input in one step (`*` on text or lists, `**`, `%` and `format` widths,
  a width or count argument, `replace`, `join`, `indent`, `expandtabs`) are checked before they
  run, every other filter, method and operator result after;
- one render builds at most MAX_BUILT characters in all and runs at most MAX_LOOPS loop
  iterations (each iteration also charged the literal text of its body), and its text is at
  most MAX_TEXT characters;
- no number it builds has more than MAX_INT_BITS bits (`**` and `*` on integers).

And a template prints only data: a function, a generator or a Jinja2 helper object prints with
its memory address, so turning one into text is refused by whatever path it takes, printed
(`finalize`) or not (`|string`, `|format`, `|join`, `|pprint`, `~`, `%`, `str.format`).

`BoundedSandbox` is the environment; `Bounded` rewrites a parsed template so that its loops,
`~` and `{% set %}` blocks report to the render's `Budget` (`render`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from jinja2 import StrictUndefined, Template, nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import _PassArg
from jinja2.visitor import NodeTransformer

__all__ = [
    "MAX_BUILT",
    "MAX_INT_BITS",
    "MAX_LOOPS",
    "MAX_TEXT",
    "BoundedSandbox",
    "Budget",
    "Refused",
    "printable",
    "render",
]

MAX_TEXT = 1_000_000  # characters of the prompt, and of any one value a template builds
MAX_BUILT = 10_000_000  # characters one render may build, all its values together
MAX_LOOPS = 100_000  # loop iterations of one render (Jinja2's own range() holds 100,000)
MAX_INT_BITS = 16_384  # some 4,900 digits: Python will not print an integer much longer
_WIDTH = re.compile(r"\d+")  # a width or precision in a `%` or `format` spec
_LOOP = "_parallax_loop"  # the filters `Bounded` inserts; a template may name them, harmlessly
_TEXT = "_parallax_text"
_JOIN = "_parallax_join"
# filters that turn their value into text: a value that is no data is refused there
_TEXT_FILTERS = frozenset(
    {
        "capitalize",
        "center",
        "e",
        "escape",
        "filesizeformat",
        "forceescape",
        "format",
        "indent",
        "lower",
        "pprint",
        "replace",
        "string",
        "striptags",
        "title",
        "trim",
        "truncate",
        "upper",
        "urlencode",
        "urlize",
        "wordcount",
        "wordwrap",
        "xmlattr",
    }
)
# str methods whose result can be far longer than their string, checked before they run
_WIDTH_METHODS = frozenset({"center", "ljust", "rjust", "zfill"})


class Refused(Exception):
    """A render went past a bound, or turned a value that is no data into text."""


@dataclass(slots=True)
class Budget:
    """What one render has done so far."""

    loops: int = 0
    built: int = 0

    def loop(self, literal: int) -> None:
        self.loops += 1
        if self.loops > MAX_LOOPS:
            raise Refused(f"runs more than {MAX_LOOPS} loop iterations")
        self.build(literal)

    def build(self, size: int) -> None:
        self.built += size
        if self.built > MAX_BUILT:
            raise Refused(f"builds more than {MAX_BUILT} characters in all")


_budget: ContextVar[Budget | None] = ContextVar("template_budget", default=None)


def render(template: Template, context: Mapping[str, Any]) -> str:
    """`template` over `context` with a fresh budget, its text refused as soon as it passes
    MAX_TEXT characters (a loop's output is never held past the bound). A constant Jinja2
    folds when it compiles has no budget: only the bounds on each value apply to it."""
    token = _budget.set(Budget())
    try:
        kept, size = [], 0
        # the globals and the context merged once, as `new_context` would from a copy
        merged = template.new_context({**template.globals, **context}, shared=True)
        for piece in template.root_render_func(merged):
            size += len(piece)
            if size > MAX_TEXT:
                raise Refused(f"renders more than {MAX_TEXT} characters")
            kept.append(piece)
        return "".join(kept)
    finally:
        _budget.reset(token)


def printable(value: Any, depth: int = 0) -> bool:
    """Whether `value`'s text is the same on every run: text, numbers, and lists or objects
    of them (as a case's vars or a template's own literals are), not too deeply nested; a
    null inside one prints as it would in Python, which is at least the same every time."""
    if isinstance(value, str | int | float) or (value is None and depth > 0):  # bool is an int
        return True
    if depth >= 32:
        return False
    if isinstance(value, list | tuple):
        return all(printable(item, depth + 1) for item in value)
    if isinstance(value, dict):
        return all(printable(k, depth + 1) and printable(v, depth + 1) for k, v in value.items())
    return False


def refuse_unprintable(value: Any, how: str) -> None:
    """Refuse turning `value` into text (`how` says where) unless it is data; an undefined
    value is let through to raise its own error, which names it."""
    if isinstance(value, StrictUndefined) or printable(value):
        return
    if value is None:
        raise Refused(f"turns null into text ({how})")
    what = "a function" if callable(value) else f"a {type(value).__name__}"
    raise Refused(f"turns {what} into text ({how}), whose text is not the same on every run")


def _size(value: Any) -> int:
    return len(value) if isinstance(value, str | list | tuple | dict) else 0


def built(value: Any, what: str) -> Any:
    """`value` as an operation built it, within MAX_TEXT and charged to the render."""
    size = _size(value)
    if size > MAX_TEXT:
        raise Refused(f"{what} builds a value of {size} characters, past {MAX_TEXT}")
    if (budget := _budget.get()) is not None:
        budget.build(size)
    return value


def _past(size: int, what: str) -> None:
    if size > MAX_TEXT:
        raise Refused(f"{what} would build {size} characters or more, past {MAX_TEXT}")


def _widths(spec: str, what: str) -> None:
    """A `%` or `format` spec whose width or precision is past MAX_TEXT."""
    for digits in _WIDTH.findall(spec):
        if len(digits) > 7 or int(digits) > MAX_TEXT:
            raise Refused(f"{what} asks for a width of {digits[:12]}, past {MAX_TEXT}")


def _int_bits(value: Any) -> int:
    return value.bit_length() if isinstance(value, int) else 0


def check_binop(operator: str, left: Any, right: Any) -> None:
    """Refuse an operator whose result would be past a bound, before it is computed."""
    if operator == "**" and isinstance(left, int) and isinstance(right, int):
        if abs(left) > 1 and right > 0 and right * _int_bits(left) > MAX_INT_BITS:
            raise Refused(f"{left} ** {right} would have more than {MAX_INT_BITS} bits")
    elif operator == "*":
        if _int_bits(left) + _int_bits(right) > MAX_INT_BITS:
            raise Refused(f"a product would have more than {MAX_INT_BITS} bits")
        for seq, times in ((left, right), (right, left)):
            if isinstance(seq, str | list | tuple) and isinstance(times, int):
                _past(len(seq) * max(times, 0), f"repeating a value {times} times (*)")
    elif operator == "%" and isinstance(left, str):
        _widths(left, "'%' formatting")
        for arg in right if isinstance(right, tuple) else (right,):
            refuse_unprintable(arg, "'%' formatting")


def _check_ints(args: Iterable[Any], what: str) -> None:
    for arg in args:
        if isinstance(arg, int) and not isinstance(arg, bool) and arg > MAX_TEXT:
            raise Refused(f"{what} is given {arg}, past {MAX_TEXT}")


def check_call(fn: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
    """Refuse a method of a string whose result would be past MAX_TEXT, or that would turn a
    value that is no data into text, before it runs."""
    target = getattr(fn, "__wrapped__", fn)  # the sandbox wraps str.format
    owner, name = getattr(target, "__self__", None), getattr(target, "__name__", "")
    if not isinstance(owner, str):
        return
    what = f"str.{name}"
    values = (*args, *kwargs.values())
    if name in _WIDTH_METHODS:
        _check_ints(values, what)
    elif name == "expandtabs":
        size = max((v for v in values if isinstance(v, int)), default=8)
        _past(len(owner) + owner.count("\t") * max(size, 0), what)
    elif name in ("format", "format_map"):
        _widths(owner, what)
        mapped = name == "format_map" and bool(values) and isinstance(values[0], dict)
        for item in values[0].values() if mapped else values:
            refuse_unprintable(item, what)
    elif name == "join" and args:
        _joined(owner, args[0], what)
    elif name == "replace" and len(args) >= 2:
        _replaced(owner, args[0], args[1], what)


def _joined(separator: str, items: Any, what: str) -> list[Any]:
    listed = list(items) if isinstance(items, Iterable) else [items]
    for item in listed:
        refuse_unprintable(item, what)
    sizes = sum(len(item) if isinstance(item, str) else 24 for item in listed)
    _past(sizes + len(separator) * max(len(listed) - 1, 0), what)
    return listed


def _replaced(text: Any, old: Any, new: Any, what: str) -> None:
    if isinstance(text, str) and isinstance(old, str) and isinstance(new, str):
        hits = text.count(old) if old else len(text) + 1
        _past(len(text) + hits * max(len(new) - len(old), 0), what)


def _bounded_filter(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` with its result bounded (`built`) and, for a filter that turns its value into
    text, the value and arguments checked to be data; the amplifying ones checked first."""
    skip = 0 if _PassArg.from_obj(fn) is None else 1  # the context or environment comes first
    what = f"the {name} filter"

    @functools.wraps(fn)
    def bounded(*args: Any, **kwargs: Any) -> Any:
        value, rest = (args[skip], args[skip + 1 :]) if len(args) > skip else (None, ())
        if name in _TEXT_FILTERS:
            for item in (value, *rest, *kwargs.values()):
                refuse_unprintable(item, f"|{name}")
            _check_ints((*rest, *kwargs.values()), what)
            if name == "format" and isinstance(value, str):
                _widths(value, what)
            elif name == "replace" and len(rest) >= 2:
                _replaced(str(value), rest[0], rest[1], what)
            elif name == "indent" and isinstance(value, str):
                width = next((v for v in (*rest, kwargs.get("width")) if isinstance(v, int)), 4)
                _past(len(value) + (value.count("\n") + 1) * max(width, 0), what)
        elif name == "join":
            separator = next((v for v in (*rest, kwargs.get("d")) if isinstance(v, str)), "")
            args = (*args[:skip], _joined(separator, value, f"|{name}"), *rest)
        elif name in ("batch", "slice", "truncate", "wordwrap", "center"):
            _check_ints((*rest, *kwargs.values()), what)
        return built(fn(*args, **kwargs), what)

    return bounded


def _loop(items: Any, literal: int) -> Iterator[Any]:
    """A `{% for %}`'s items, each iteration charged to the render (with its literal text)."""
    budget = _budget.get()
    for item in items:
        if budget is not None:
            budget.loop(literal)
        yield item


def _text(items: list[Any]) -> str:
    """`a ~ b ~ c`: each part must be data, and the text within MAX_TEXT."""
    for item in items:
        refuse_unprintable(item, "~")
    parts = [str(item) for item in items]
    _past(sum(map(len, parts)), "~")
    text: str = built("".join(parts), "~")
    return text


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """Jinja2's immutable sandbox, with every operator, method and filter bounded."""

    intercepted_binops = frozenset({"*", "**", "%", "+"})

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.filters = {name: _bounded_filter(name, fn) for name, fn in self.filters.items()}
        self.filters[_LOOP] = _loop
        self.filters[_TEXT] = _text
        self.filters[_JOIN] = lambda value: built(value, "{% set %}")

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        check_binop(operator, left, right)
        return built(super().call_binop(context, operator, left, right), f"'{operator}'")

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        check_call(__obj, args, kwargs)
        return built(super().call(__context, __obj, *args, **kwargs), "a call")


class Bounded(NodeTransformer):
    """Rewrites a parsed template so its work reports to the render's budget: each loop's
    items go through `_loop` (charged its body's literal text an iteration), each `~` through
    `_text`, each `{% set %}` block's text through a size check."""

    def visit_For(self, node: nodes.For) -> nodes.Node:
        self.generic_visit(node)
        literal = sum(len(data.data) for data in node.find_all(nodes.TemplateData))
        node.iter = nodes.Filter(
            node.iter, _LOOP, [nodes.Const(literal)], [], None, None, lineno=node.lineno
        )
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        self.generic_visit(node)
        parts = nodes.List(node.nodes, lineno=node.lineno)
        return nodes.Filter(parts, _TEXT, [], [], None, None, lineno=node.lineno)

    def visit_AssignBlock(self, node: nodes.AssignBlock) -> nodes.Node:
        self.generic_visit(node)
        node.filter = nodes.Filter(node.filter, _JOIN, [], [], None, None, lineno=node.lineno)
        return node
