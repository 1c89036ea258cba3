"""No module of the package over 450 lines, no function over 80 (issue 37): a module that grows past
the bound is split by what its parts hold, a function by its named steps. The offenders are listed.

A function's lines are those of its def's span (``def`` to its last line, decorators left out; a
nested function counts on its own and inside its parent).
"""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "parinfo"
MODULE_LINES = 450
FUNCTION_LINES = 80


def _long_functions(source: str) -> list[tuple[int, str, int]]:
    """(line, name, lines) of each function of ``source`` longer than FUNCTION_LINES."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > FUNCTION_LINES:
                found.append((node.lineno, node.name, lines))
    return sorted(found)


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_no_module_is_over_450_lines():
    offenders = []
    for path in _modules():
        lines = len(path.read_text().splitlines())
        if lines > MODULE_LINES:
            offenders.append(f"{path.relative_to(PACKAGE.parent)}: {lines} lines")
    assert offenders == []


def test_no_function_is_over_80_lines():
    offenders = [f"{path.relative_to(PACKAGE.parent)}:{line} {name}: {lines} lines"
                 for path in _modules() for line, name, lines in _long_functions(path.read_text())]
    assert offenders == []


def test_the_function_scan_counts_the_span_of_a_def():
    body = "\n".join(f"    x{i} = {i}" for i in range(FUNCTION_LINES - 1))
    short = f"@decorated\ndef short():\n{body}\n"
    long = f"def long():\n{body}\n    return x0\n\nasync def other():\n    pass\n"
    assert _long_functions(short) == []
    assert _long_functions(long) == [(1, "long", FUNCTION_LINES + 1)]
