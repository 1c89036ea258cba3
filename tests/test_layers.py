"""The layers of ../DESIGN, checked on the source with ast: imports flow down the list, never up; no
two modules import each other, however indirectly; nothing inside the package goes through the
``parinfo`` facade.

Every import counts, wherever it sits: at module level, inside a function, under TYPE_CHECKING, and
relative ones. ``from X import name`` is an import of X.name when that is a module, else of X; a
package's ``__init__`` is a module of its own (named after the package).
"""
from __future__ import annotations

import ast
from collections import deque
from functools import cache
from pathlib import Path
from typing import NamedTuple

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "parinfo"
# Lower number = lower layer. The records (records/) and the loose helpers (errors, safe_text, safe_file, version) are
# usable from every layer; what reads another running process (outside) sits above the process facts it uses; the pytest
# plugin sits with the CLI, at the top.
LAYER = {"errors": 0, "safe_text": 0, "safe_file": 0, "version": 0, "records": 0, "machine": 1,
         "process": 2, "outside": 3, "runtime": 4,
         "diagnostics": 5, "profiles": 6, "launch": 7, "tuning": 8, "fleet": 8, "watching": 8, "host": 8, "cli": 9,
         "pytest_plugin": 9}


class Import(NamedTuple):
    target: str  # the parinfo module imported
    line: int


@cache
def _modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package's ``__init__`` by the package's name)."""
    mods = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return mods


def _base(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The module a ``from ... import`` names, a relative one resolved against ``module``."""
    if not node.level:
        return node.module or ""
    parts = module.split(".") if is_package else module.split(".")[:-1]
    parts = parts[:len(parts) - (node.level - 1)]
    return ".".join([*parts, *([node.module] if node.module else [])])


def _nearest_module(name: str) -> str | None:
    """``name``, or the module it is an attribute of; None outside parinfo."""
    mods = _modules()
    while name not in mods and "." in name:
        name = name.rpartition(".")[0]
    return name if name in mods and name.split(".")[0] == "parinfo" else None


def _imports_in(module: str, is_package: bool, source: str) -> list[Import]:
    """The parinfo modules that ``source`` (the text of ``module``) imports, wherever the import sits."""
    mods = _modules()
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _base(module, is_package, node)
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
        else:
            continue
        found += [Import(target, node.lineno) for target in map(_nearest_module, names)
                  if target is not None and target != module]
    return sorted(set(found), key=lambda i: (i.line, i.target))


@cache
def _imports() -> dict[str, tuple[Import, ...]]:
    """The parinfo modules each module of the package imports, with the line of each import."""
    return {module: tuple(_imports_in(module, path.name == "__init__.py", path.read_text()))
            for module, path in _modules().items()}


def _layer_of(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] != "parinfo" or len(parts) < 2:
        return None
    return LAYER.get(parts[1])


def _where(module: str, line: int) -> str:
    return f"{_modules()[module].relative_to(PACKAGE.parent)}:{line}"


def test_imports_flow_down_the_layers():
    upward = []
    for module, imports in _imports().items():
        own = _layer_of(module)
        for imp in imports:
            target = _layer_of(imp.target)
            if own is not None and target is not None and target > own:
                upward.append(f"{_where(module, imp.line)}: {module} imports {imp.target}")
    assert upward == []


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def _a_round_trip(graph: dict[str, set[str]], members: list[str]) -> list[str]:
    """A shortest path from the first member back to itself inside the circle."""
    start, inside = members[0], set(members)
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        v = queue.popleft()
        for w in sorted(graph[v] & inside):
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [*reversed(path), start]
            if w not in came_from:
                came_from[w] = v
                queue.append(w)
    raise AssertionError(f"no way round {members}")


def describe_circles() -> list[str]:
    """One paragraph per import circle: its modules, one way round it, and every import inside it."""
    imports = _imports()
    graph = {module: {imp.target for imp in found} for module, found in imports.items()}
    out = []
    for members in _circles(graph):
        lines = [f"import circle of {len(members)} modules ({', '.join(members)}), "
                 f"e.g. {' -> '.join(_a_round_trip(graph, members))}"]
        for module in members:
            lines += [f"    {_where(module, imp.line)}: {module} imports {imp.target}"
                      for imp in imports[module] if imp.target in members]
        out.append("\n".join(lines))
    return out


def test_no_import_circles():
    circles = describe_circles()
    if circles:
        pytest.fail("modules that import each other (move what they share to the module that owns it):\n"
                    + "\n".join(circles), pytrace=False)


@cache
def _facade_homes() -> dict[str, str]:
    """Where each name the facade offers really lives: its lazy ``_EXPORTS`` table (name -> module) and
    the names it imports from parinfo's modules."""
    homes: dict[str, str] = {}
    for node in ast.walk(ast.parse((PACKAGE / "__init__.py").read_text())):
        if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith("parinfo."):
            homes.update((a.asname or a.name, str(node.module)) for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None \
                and "_EXPORTS" in {getattr(t, "id", None) for t in _targets(node)}:
            homes.update(ast.literal_eval(node.value))
    return homes


def _targets(node: ast.Assign | ast.AnnAssign) -> list[ast.expr]:
    return node.targets if isinstance(node, ast.Assign) else [node.target]


def _defined_in_the_facade() -> set[str]:
    """Names the facade itself assigns at module level (``__version__`` while it lives there)."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    return {t.id for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign))
            for t in _targets(node) if isinstance(t, ast.Name)}


def _instead(name: str) -> str:
    """What to write instead of reaching ``name`` through the facade."""
    if f"parinfo.{name}" in _modules():
        return f"write import parinfo.{name} (or from parinfo.{name} import ...)"
    home = _facade_homes().get(name)
    if home:
        return f"write from {home} import {name}"
    if name in _defined_in_the_facade():
        return f"{name} is defined in the facade: give it a module of its own below it"
    return f"import {name} from the module that defines it"


def _facade_uses(module: str, is_package: bool, source: str) -> list[tuple[int, str]]:
    """(line, what to write instead) for each use of the facade in ``source`` (the text of ``module``)."""
    mods = _modules()
    used = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and _base(module, is_package, node) == "parinfo":
            used += [(node.lineno, f"from parinfo import {a.name}: {_instead(a.name)}") for a in node.names]
        elif isinstance(node, ast.Import) and any(a.name == "parinfo" for a in node.names):
            used.append((node.lineno, "import parinfo: import the module you use"))
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "parinfo" \
                and f"parinfo.{node.attr}" not in mods:
            used.append((node.lineno, f"parinfo.{node.attr}: {_instead(node.attr)}"))
    return sorted(used)


def test_nothing_inside_the_package_goes_through_the_facade():
    used = [f"{_where(module, line)}: {what}" for module, path in _modules().items() if module != "parinfo"
            for line, what in _facade_uses(module, path.name == "__init__.py", path.read_text())]
    if used:
        pytest.fail("modules of the package that go through the parinfo facade:\n" + "\n".join(used), pytrace=False)


def test_every_layer_folder_says_what_it_owns():
    for name, layer in LAYER.items():
        folder = PACKAGE / name
        if layer and folder.is_dir():
            doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text()))
            assert doc and len(doc) > 40, name


# The checks above see what hid the circles: these make sure they keep seeing it.

SOURCE = """
from typing import TYPE_CHECKING
from . import show
from .. import errors
if TYPE_CHECKING:
    from parinfo.process.libraries import Library
def f():
    import parinfo.machine.topology
    from parinfo.process import libraries, not_a_module
    import json
"""


def test_every_import_counts_wherever_it_sits():
    found = _imports_in("parinfo.cli.launch", False, SOURCE)
    assert [(i.target, i.line) for i in found] == [
        ("parinfo.cli.show", 3), ("parinfo.errors", 4), ("parinfo.process.libraries", 6),
        ("parinfo.machine.topology", 8), ("parinfo.process", 9), ("parinfo.process.libraries", 9)]
    # in a package's __init__, "." is the package itself
    assert [i.target for i in _imports_in("parinfo.cli", True, "from . import show")] == ["parinfo.cli.show"]


FACADE = """
import parinfo.runtime
from parinfo import inspect, runtime
from .. import __version__
def f():
    import parinfo
    parinfo.runtime.info()
    return parinfo.inspect()
"""


def test_every_way_through_the_facade_is_seen():
    assert _facade_uses("parinfo.cli.launch", False, FACADE) == [
        (3, f"from parinfo import inspect: write from {_facade_homes()['inspect']} import inspect"),
        (3, "from parinfo import runtime: write import parinfo.runtime (or from parinfo.runtime import ...)"),
        (4, f"from parinfo import __version__: {_instead('__version__')}"),
        (6, "import parinfo: import the module you use"),
        (8, f"parinfo.inspect: write from {_facade_homes()['inspect']} import inspect")]


def test_circles_are_found_and_named_by_a_way_round():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"f"}, "f": {"e"}}
    assert _circles(graph) == [["a", "b", "c"], ["e", "f"]]
    assert _a_round_trip(graph, ["a", "b", "c"]) == ["a", "b", "c", "a"]
    assert _circles({"a": {"b"}, "b": set()}) == []
