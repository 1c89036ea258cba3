"""No call runs while a lock of the fork/wait hot path is held.

A Python thread can lose the GIL only at a call (or a loop's jump back). One that loses it while
holding the task ledger's lock, the budget's lock or a fork site's lock stalls every thread that
forks or waits, and they stay in step: with 8 threads forking, 20-45 us per task instead of 7.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

RUNTIME = Path(__file__).resolve().parent.parent / "parinfo" / "runtime"

# (module, class or None for the whole module, the lock expression)
HOT_LOCKS = [
    ("future.py", None, "ledger.lock"),
    ("native.py", "NativeLimits", "self.budget_lock"),
    ("adaptive.py", "ForkSite", "self.lock"),
]


def _with_blocks(tree: ast.AST, lock: str) -> list[ast.With]:
    return [node for node in ast.walk(tree) if isinstance(node, ast.With)
            and any(ast.unparse(item.context_expr) == lock for item in node.items)]


@pytest.mark.parametrize(("module", "cls", "lock"), HOT_LOCKS)
def test_no_call_while_a_hot_lock_is_held(module: str, cls: str | None, lock: str) -> None:
    tree: ast.AST = ast.parse((RUNTIME / module).read_text())
    if cls is not None:
        tree = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls)
    blocks = _with_blocks(tree, lock)
    assert blocks, f"no 'with {lock}:' found in {module}"
    calls = [f"{module}:{call.lineno}: {ast.unparse(call)}"
             for block in blocks for stmt in block.body for call in ast.walk(stmt)
             if isinstance(call, ast.Call)]
    assert calls == []
