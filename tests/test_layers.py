"""The layers of ../DESIGN: imports flow down the list, never up (checked on the source, with ast)."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "parinfo"
# Lower number = lower layer. Top-level helpers (errors, safe_text, version) are usable from every layer.
LAYER = {"errors": 0, "safe_text": 0, "version": 0, "machine": 1, "process": 2, "runtime": 3, "diagnostics": 4,
         "profiles": 5, "tuning": 6, "fleet": 6, "watching": 6, "cli": 7}


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

