"""Issue 37: a reason is a value, never words to read back. A scan of the package's syntax trees
fails on

- (a) a function whose return annotation is a union of ``str`` with another type than None or
  ``Unknown`` (the "value, or the reason as text" shape: :class:`parinfo.records.unknown.Unknown` is
  the value for "could not read this", so ``str | Unknown`` is a text value or a typed reason),
  unless it is listed below with why its ``str`` is a value;
- (b) a comparison, ``in`` or ``startswith``-like call with a text that begins "unknown": a decision
  on the words parinfo writes for an unknown value;
- (c) inside an ``except ... as exc`` block, a comparison, ``in`` or ``startswith``-like call on the
  error (``str(exc)``, ``exc.reason``, or a name made from it): a decision on a message, allowed
  only for another program's words, listed with whose.

An entry that no longer matches fails too, so the lists shrink as the code does.
"""
from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "parinfo"


#: (a) module:function -> why its ``str`` is allowed.
UNION_ALLOWED: dict[str, str] = {
    # a value, not a reason
    "parinfo.profiles.key_rules:Affinity.check": "a keyword (none, compact, spread) or a CPU list: both are values",
    "parinfo.profiles.value_rules:Count.check": "a count or the text of an expression over machine facts",
    "parinfo.records.unknown:in_words":
        "the edge: a record field keeps an Unknown's words for the JSON, which stays byte-identical",
}

#: (b) module:function -> why it reads the words of an unknown value.
UNKNOWN_WORDS_ALLOWED: dict[str, str] = {
    "parinfo.records.unknown:Unknown.from_words":
        "the JSON edge: a report read back carries an unknown value as its words, made a value here once",
}

#: (c) module:function -> whose message it decides on.
MESSAGE_ALLOWED: dict[str, str] = {
    "parinfo.profiles.hook._parinfo_import_watch:guard_interop.<locals>.guarded":
        "torch's RuntimeError text for a refused set_num_interop_threads (no type of its own)",
    "parinfo.profiles.yaml_nodes:parse":
        "PyYAML's problem and context texts (a MarkedYAMLError has no kind per problem)",
    "parinfo.cli.tune:_measure": "the workload's own output (another program's), tested only for its last newline",
}

_TEXT_CALLS = {"startswith", "endswith", "removeprefix", "removesuffix", "__contains__"}
_COMPARE = (ast.Eq, ast.NotEq, ast.In, ast.NotIn)


def _modules() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        yield name, ast.parse(path.read_text(encoding="utf-8"), str(path))


def _functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Every function with its qualified name (``Class.method``, ``f.<locals>.g``)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield f"{prefix}{node.name}", node
            yield from _functions(node, f"{prefix}{node.name}.<locals>.")
        else:
            yield from _functions(node, prefix)


def _own_nodes(func: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a function's body, not those of the functions and classes nested in it."""
    for node in ast.iter_child_nodes(func):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        yield node
        yield from _own_nodes(node)


def union_members(node: ast.expr | None) -> list[str]:
    """The members of a return annotation, as source text (``X | str``, ``Union[X, str]``, ``Optional[X]``,
    or any of these quoted)."""
    if node is None:
        return []
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return union_members(node.left) + union_members(node.right)
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            return union_members(ast.parse(node.value, mode="eval").body)
        except SyntaxError:
            return [node.value]
    if isinstance(node, ast.Subscript) and ast.unparse(node.value) in ("Union", "typing.Union", "Optional",
                                                                        "typing.Optional"):
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        found = [m for item in items for m in union_members(item)]
        return [*found, "None"] if ast.unparse(node.value).endswith("Optional") else found
    return [ast.unparse(node)]


def value_or_text(func: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether ``func`` returns a union of str with a type other than None."""
    members = union_members(func.returns)
    return "str" in members and any(m not in ("str", "None", "Unknown") for m in members)


def _texts(node: ast.AST) -> list[str]:
    """The literal texts ``node`` is (a string, an f-string's opening text) or holds (a tuple, list or set of them)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
        return [str(node.values[0].value)]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [t for item in node.elts for t in _texts(item)]
    return []


def _decisions(func: ast.AST) -> Iterator[tuple[ast.AST, list[ast.AST]]]:
    """Each comparison or text-test call in ``func``'s own body, with its operands."""
    for node in _own_nodes(func):
        if isinstance(node, ast.Compare) and any(isinstance(op, _COMPARE) for op in node.ops):
            yield node, [node.left, *node.comparators]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in _TEXT_CALLS):
            yield node, [node.func.value, *node.args]


def reads_unknown_words(func: ast.AST) -> bool:
    """Whether ``func`` decides on a text that begins "unknown" (rule b)."""
    return any(t.lower().startswith("unknown") for _, operands in _decisions(func)
               for operand in operands for t in _texts(operand))


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def reads_a_message(func: ast.AST) -> bool:
    """Whether ``func``, in an ``except ... as NAME`` block, decides on the error or on a name made
    from it (rule c); ``isinstance`` and attributes that are not its words (``errno``) are not decisions."""
    for handler in _own_nodes(func):
        if not isinstance(handler, ast.ExceptHandler) or handler.name is None:
            continue
        tainted = {handler.name}
        for node in ast.walk(handler):
            if isinstance(node, ast.Assign) and _names(node.value) & tainted:
                tainted |= {n for target in node.targets for n in _names(target)}
        for _, operands in _decisions(ast.Module(body=handler.body, type_ignores=[])):
            for operand in operands:
                if _about_words(operand, tainted):
                    return True
    return False


def _about_words(node: ast.AST, tainted: set[str]) -> bool:
    """Whether ``node`` is the error's words (``str(exc)``, ``exc.message``, a tainted name), not a
    number or a type of it (``exc.errno``, ``type(exc)``)."""
    if isinstance(node, ast.Name):
        return node.id in tainted
    if isinstance(node, ast.Attribute):
        return node.attr not in ("errno", "winerror", "returncode", "code", "column", "lineno", "name") and \
            _about_words(node.value, tainted)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("str", "repr"):
        return any(_about_words(a, tainted) for a in node.args)
    if isinstance(node, ast.BoolOp):
        return any(_about_words(v, tainted) for v in node.values)
    return False


def _scan() -> tuple[set[str], set[str], set[str]]:
    unions, words, messages = set(), set(), set()
    for module, tree in _modules():
        for qualname, func in _functions(tree):
            where = f"{module}:{qualname}"
            if value_or_text(func):
                unions.add(where)
            if reads_unknown_words(func):
                words.add(where)
            if reads_a_message(func):
                messages.add(where)
    return unions, words, messages


SCAN = _scan()


def _check(found: set[str], allowed: dict[str, str], what: str) -> None:
    new = sorted(found - set(allowed))
    stale = sorted(set(allowed) - found)
    assert not new, f"{what}: {new} (return an Unknown or a typed error, or list it here with why)"
    assert not stale, f"listed but no longer found (remove from the list): {stale}"


def test_no_function_returns_a_value_or_a_reason_as_text():
    _check(SCAN[0], UNION_ALLOWED, "returns X | str where the str is a reason")


def test_nothing_decides_on_the_words_of_an_unknown_value():
    _check(SCAN[1], UNKNOWN_WORDS_ALLOWED, "decides on the words 'unknown (...)'")


def test_nothing_decides_on_parinfos_own_messages():
    _check(SCAN[2], MESSAGE_ALLOWED, "decides on an error's message")


def _one(source: str) -> ast.FunctionDef:
    node = ast.parse(source).body[0]
    assert isinstance(node, ast.FunctionDef)
    return node


def test_the_scan_sees_each_shape_it_forbids():
    for bad in ("def f() -> int | str: ...", "def f() -> 'bytes | str': ...",
                "def f() -> Union[int, str]: ...", "def f() -> Optional[int | str]: ..."):
        assert value_or_text(_one(bad)), bad
    for fine in ("def f() -> str | None: ...", "def f() -> Optional[str]: ...", "def f() -> int: ...",
                 "def f() -> list[int | str]: ...", "def f() -> str | Unknown: ..."):
        assert not value_or_text(_one(fine)), fine
    assert reads_unknown_words(_one("def f(x):\n    return x.startswith('unknown (')"))
    assert reads_unknown_words(_one("def f(x):\n    return x == 'Unknown'"))
    assert reads_unknown_words(_one("def f(x):\n    return x.startswith(('a', f'unknown {x}'))"))
    assert not reads_unknown_words(_one("def f(x):\n    return x or 'unknown'"))
    assert reads_a_message(_one("def f():\n    try:\n        g()\n    except E as exc:\n"
                                "        if 'is empty' in str(exc):\n            pass"))
    assert reads_a_message(_one("def f():\n    try:\n        g()\n    except E as exc:\n"
                                "        why = exc.strerror or 'x'\n        return 'FUSE' in why"))
    assert reads_a_message(_one("def f():\n    try:\n        g()\n    except E as exc:\n"
                                "        return exc.reason.startswith('out of range')"))
    assert not reads_a_message(_one("def f():\n    try:\n        g()\n    except E as exc:\n"
                                    "        return exc.errno == 2 or isinstance(exc, KeyError)"))
