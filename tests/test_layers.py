"""The layers of ../DESIGN: imports flow down the list, never up (checked on the source, with ast)."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "parinfo"
# Lower number = lower layer. Top-level helpers (errors, safe_text, version, payload) are usable from every layer.
LAYER = {"errors": 0, "safe_text": 0, "version": 0, "payload": 0, "machine": 1, "process": 2, "runtime": 3,
         "diagnostics": 4, "profiles": 5, "tuning": 6, "fleet": 6, "watching": 6, "cli": 7}


def _layer_of(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] != "parinfo" or len(parts) < 2:
        return None
    return LAYER.get(parts[1])


def _imports(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append(node.module)
            out.extend(f"{node.module}.{a.name}" for a in node.names if node.module == "parinfo")
        elif isinstance(node, ast.Import):
            out.extend(a.name for a in node.names)
    return out


def test_imports_flow_down_the_layers():
    upward = []
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        own = _layer_of(".".join(rel.parts))
        if own is None:
            continue
        for module in _imports(path):
            target = _layer_of(module)
            if target is not None and target > own:
                upward.append(f"{'.'.join(rel.parts)} imports {module}")
    assert upward == []


def test_every_layer_folder_says_what_it_owns():
    for name, layer in LAYER.items():
        folder = PACKAGE / name
        if layer and folder.is_dir():
            doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text()))
            assert doc and len(doc) > 40, name


def test_no_module_imports_a_name_from_the_facade():
    """``from parinfo import X`` inside the package goes through the facade's lazy exports, which reach
    up to the CLI: a module imports the module that defines X (a subpackage is fine)."""
    subpackages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    found = []
    for path in PACKAGE.rglob("*.py"):
        if path == PACKAGE / "__init__.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "parinfo" and node.level == 0:
                found += [f"{path.relative_to(PACKAGE.parent)}: {a.name}" for a in node.names
                          if a.name not in subpackages]
    assert found == []



def _module_imports() -> dict[str, set[str]]:
    """Every module of the package -> the package modules it imports, in functions too."""
    paths = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        paths[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {name: set() for name in paths}
    for name, path in paths.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # ``from pkg import sub`` imports pkg.sub; ``from mod import name`` imports mod
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in paths else node.module
                           for a in node.names]
            else:
                continue
            for module in targets:
                while module not in paths and "." in module:
                    module = module.rsplit(".", 1)[0]
                if module in paths and module != name:
                    graph[name].add(module)
    return graph


def _reaches(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


def test_no_import_circle_through_the_facade_the_report_or_the_process_layer():
    """The facade, diagnostics/ and process/ import no module that imports them back (counting
    imports inside functions: they run too)."""
    graph = _module_imports()
    ours = [m for m in graph if m == "parinfo" or m.startswith(("parinfo.diagnostics", "parinfo.process"))]
    circles = sorted(m for m in ours if m in _reaches(graph, m))
    assert circles == []
