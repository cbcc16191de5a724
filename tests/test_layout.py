"""The package's layout: every subpackage installed, no module importing itself round a circle.

An import circle (`config` needs `protocols.wire` needs `config`) means two stages are one, and
which half loads first decides what breaks. So the modules of `runner` must import each other
as a tree-shaped graph, whether an import runs at the top of a module, under `TYPE_CHECKING`
(a circle of types is a circle of design) or inside a function (a lazy import that keeps
`--help` fast).
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "runner"


def _modules() -> dict[str, Path]:
    """Every module of the package by its dotted name (a package by its own name)."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imported(tree: ast.Module, name: str, is_package: bool, known: set[str]) -> Iterator[str]:
    """The modules of the package one module's source imports, wherever the import stands."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            for alias in node.names:
                child = f"{source}.{alias.name}"
                if child in known:
                    yield child  # `from runner.grading import tools` imports a module
                elif source in known:
                    yield source


def _import_graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    graph = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        graph[name] = set(_imported(tree, name, path.name == "__init__.py", known)) - {name}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_module_of_the_package_imports_itself_round_a_circle() -> None:
    """No two modules of runner import each other, directly or through others, whether the
    import is at the top, under TYPE_CHECKING or inside a function."""
    assert _circles(_import_graph()) == []


def test_the_circle_finder_finds_a_circle() -> None:
    """The check above would see a circle: two modules that import each other form one."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _circles(graph) == [["a", "b", "c"]]


def test_every_subpackage_is_installed() -> None:
    """Every folder of runner with an __init__.py is a package pyproject.toml ships, so an
    installed parallax (the container's) has every module a source checkout has."""
    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    packages = {
        ".".join(init.parent.relative_to(ROOT).parts) for init in PACKAGE.rglob("__init__.py")
    }
    assert packages <= listed, sorted(packages - listed)


def test_every_module_says_why_it_exists() -> None:
    """Every module opens with a docstring: the architecture page is built from them."""
    missing = [
        name
        for name, path in sorted(_modules().items())
        if ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) is None
    ]
    assert missing == []


# Keys and event names only a protocol's wire format has: a module that names one reads or
# writes that protocol's shape itself, which its module under runner/protocols/ is for.
WIRE_SHAPES = (
    *("usageMetadata", "promptTokenCount", "candidatesTokenCount", "thoughtsTokenCount"),
    *("cachedContentTokenCount", "functionCall", "finishReason", "modelVersion"),
    *("prompt_tokens_details", "input_tokens_details", "cache_read_input_tokens"),
    *("cache_creation_input_tokens", "chat.completion", "message_start", "message_delta"),
    *("content_block_start", "content_block_delta", "input_json_delta", "output_index"),
    *("response.completed", "response.output_item.added", "output_text"),
)
PROTOCOLS = PACKAGE / "protocols"
# The config schema names the protocols an endpoint's `kind` may be, and checks their keys.
SCHEMA = PACKAGE / "config.py"
# Modules that still choose what to do by comparing a protocol's kind, each with what it does:
# a protocol added reads through them as http-json until they ask its Wire instead.
DECIDES_BY_KIND = {
    "runner.reports.requestview": "reads a sent body's system prompt and turns per protocol",
    "runner.client.endpoint": "sends an http-json endpoint's answer_pointer with its exchange",
}


def _outside_protocols() -> dict[str, ast.Module]:
    return {
        name: ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for name, path in sorted(_modules().items())
        if PROTOCOLS not in path.parents and path != SCHEMA
    }


def _shapes_named(tree: ast.Module) -> set[str]:
    """The wire-shape names a module's strings hold (its docstrings and f-strings too)."""
    return {
        shape
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        for shape in WIRE_SHAPES
        if shape in node.value
    }


def _decides_by_kind(tree: ast.Module) -> bool:
    """Whether a module compares something with a protocol's kind: a `Kind` member (or its
    `value`, or a name bound to either), or a string that is one's value (`kind == "gemini"`,
    `adapter in (Kind.GEMINI, ...)`)."""
    from runner.protocols import Kind

    aliases: set[str] = set()

    def names_kind(node: ast.expr) -> bool:
        if isinstance(node, ast.Attribute) and node.attr == "value":
            return names_kind(node.value)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            return node.value.id == "Kind" and node.attr in Kind.__members__
        if isinstance(node, ast.Name):
            return node.id in aliases
        if isinstance(node, ast.Constant):
            return node.value in {kind.value for kind in Kind}
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            return any(names_kind(element) for element in node.elts)
        return False

    for node in tree.body:  # ANTHROPIC = Kind.ANTHROPIC_MESSAGES.value
        if isinstance(node, ast.Assign) and names_kind(node.value):
            aliases.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return any(
        isinstance(node, ast.Compare) and any(map(names_kind, [node.left, *node.comparators]))
        for node in ast.walk(tree)
    )


def test_no_module_outside_the_protocols_names_a_wire_shape() -> None:
    """A protocol's wire shape (its usage keys, its events, its reply's keys) is known to its
    own module under runner/protocols/ only: usage, cassettes and reports ask its `Wire`, so
    adding a protocol touches nothing else but the config schema and the docs."""
    named = {
        name: sorted(found)
        for name, tree in _outside_protocols().items()
        if (found := _shapes_named(tree))
    }
    assert named == {}


def test_only_the_protocols_decide_by_a_protocol_s_kind() -> None:
    """Outside runner/protocols/ (and the config schema), no module compares a kind to choose
    what to do, but the few listed, each still doing so (so the list only shrinks)."""
    deciding = {name for name, tree in _outside_protocols().items() if _decides_by_kind(tree)}
    assert deciding == set(DECIDES_BY_KIND)


def test_the_shape_checks_see_a_module_that_knows_a_protocol() -> None:
    """The two checks above would see a reader of Gemini's usage and a branch on its kind."""
    tree = ast.parse(
        "def tokens(kind, usage):\n"
        "    if kind == Kind.GEMINI or kind in ('x', 'openai-chat'):\n"
        "        return usage['usageMetadata']\n"
        "    return f'{usage}: finishReason'\n"
    )
    assert _shapes_named(tree) == {"usageMetadata", "finishReason"}
    assert _decides_by_kind(tree)
    assert _decides_by_kind(ast.parse("CHAT = Kind.OPENAI_CHAT.value\nchat = kind == CHAT"))
    assert not _decides_by_kind(ast.parse("ok = kind == 'recorded'"))
