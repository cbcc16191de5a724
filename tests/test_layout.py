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
