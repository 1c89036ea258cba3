"""No library is named outside the registry: code asks a library's family (a method, an attribute),
or looks one up by role, kind or class, instead of comparing names; and adding a library is adding a
class.

The scan reads every module of parinfo/ outside the registry's and fails on a string literal equal to
a registry library's name, Python module or file prefix used in a comparison (``==``, ``!=``, ``in``),
as a subscript or ``.get`` key, or given to a lookup (``library("torch")``). The few places that must
write one (a key of a JSON shape that is public, code that cannot import the registry) are allowed
below with their reason; an entry that no longer matches anything fails, so the list cannot go stale.
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
from profile_machines import machine
from test_library_registry import REGISTRY

from parinfo.process import libraries as reg, setter
from parinfo.process.provenance import model_of, predict

PACKAGE = Path(__file__).resolve().parent.parent / "parinfo"

#: Calls that look a library up by what they are given.
LOOKUPS = {"library", "find", "family", "by_prefix", "by_internal_api"}

#: (module, word) -> why it is written there.
ALLOWED = {
    ("outside/attach/in_target.py", "torch"): "runs inside the target and imports nothing of parinfo: "
                                               "a key of the message the registry's facts arrive in",
    ("outside/attach/in_target.py", "parinfo"): "runs inside the target and imports nothing of parinfo: "
                                                 "is parinfo imported there",
    ("outside/attach/result.py", "torch"): "the attach answer's key for torch's raw facts",
    ("outside/remote.py", "python"): "the interpreter's executable name (python3.12...) read from outside",
    ("profiles/hook/sitecustomize.py", "torch"): "the start-up hook imports nothing of parinfo (the "
                                                  "registry's facts come in its variable): its report keys",
    ("profiles/hook/sitecustomize.py", "parinfo"): "the start-up hook's report key for parinfo's runtime",
    ("tuning/measure.py", "torch"): "the key of tune's result for torch's count in force",
    ("tuning/measure.py", "parinfo"): "the start-up hook's report key for parinfo's own counts (the hook "
                                      "writes it without the registry)",
    ("tuning/worker.py", "torch"): "the key of a tune worker's report for torch's counts",
    ("tuning/worker.py", "parinfo"): "the key of a tune worker's report for parinfo's runtime counts",
}


def _library_words(registry: reg.Registry = reg.REGISTRY) -> set[str]:
    """Every library's name, Python module and file prefixes."""
    words: set[str] = set()
    for lib in registry.records():
        words |= {lib.name, *(lib.module or "",), *lib.prefixes, *lib.not_prefixes, *lib.static_prefixes}
    return words - {""}


def _literals(node: ast.expr) -> list[str]:
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return [n.value for n in items if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def _called(node: ast.Call) -> str | None:
    f = node.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None


def named_libraries(source: str, words: set[str]) -> list[tuple[int, str]]:
    """(line, word) for each library word ``source`` compares with, uses as a key, or looks up."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        used: list[str] = []
        if isinstance(node, ast.Compare) and any(isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn))
                                                 for op in node.ops):
            used = [w for operand in (node.left, *node.comparators) for w in _literals(operand)]
        elif isinstance(node, ast.Subscript):
            used = _literals(node.slice)
        elif isinstance(node, ast.Call) and node.args and (_called(node) in LOOKUPS or _called(node) == "get"):
            used = _literals(node.args[0])
        found += [(node.lineno, w) for w in used if w in words]
    return found


def _scan() -> dict[tuple[str, str], list[int]]:
    words = _library_words()
    hits: dict[tuple[str, str], list[int]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel in REGISTRY:
            continue
        for line, word in named_libraries(path.read_text(), words):
            hits.setdefault((rel, word), []).append(line)
    return hits


def test_no_library_is_named_outside_the_registry():
    hits = _scan()
    named = sorted(f"{rel}:{line} {word!r}" for (rel, word), lines in hits.items() if (rel, word) not in ALLOWED
                   for line in lines)
    assert named == [], "ask the library's family (a method, an attribute) or look it up by role, kind or class"


def test_every_allowed_name_is_still_used():
    assert sorted(set(ALLOWED) - set(_scan())) == []


def test_the_scan_sees_each_way_of_naming_a_library():
    planted = ('a = lib.name == "torch"\nb = "mkl" != row.library\nc = name in ("libgomp", "x")\n'
               'd = mods["numexpr"]\ne = mods.get("openblas")\nf = reg.library("blis")\n'
               'g = lib.name == "numpyish"\nh = print("torch")\ni = lib.name is reg.Torch\n'
               'j = path.startswith("libmkl_core")\nk = "libscipy_openblas" not in files\n')
    words = _library_words()
    assert named_libraries(planted, words) == [(1, "torch"), (2, "mkl"), (3, "libgomp"), (4, "numexpr"),
                                               (5, "openblas"), (6, "blis"), (11, "libscipy_openblas")]


def test_every_library_is_one_family_class_with_a_unique_name():
    libs = reg.records()
    assert len({lib.name for lib in libs}) == len(libs)
    assert len({type(lib) for lib in libs}) == len(libs)  # one instance per family
    for lib in libs:
        assert type(lib) is not reg.Library and isinstance(lib, reg.Library), lib.name
        assert lib.name and lib.label, type(lib).__name__
        assert reg.family(type(lib)) is lib and reg.find(lib.name) is lib
        assert type(lib).__doc__, f"{type(lib).__name__} says what it is"
        for prefix in lib.prefixes:  # found by its own files, by no other family first
            assert reg.by_prefix(prefix + ".so") is lib, prefix
    assert reg.openmp_runtimes() == tuple(lib.name for lib in libs if isinstance(lib, reg.OpenMPLibrary))
    # the name the hook-loadable setter and the runtime's hot paths use is the registry's
    torch = reg.family(reg.Torch)
    assert setter.TORCH == torch.name == torch.module
    assert str(reg.Scope.THREAD) == setter.THREAD_SCOPE


def test_behaviour_is_methods_the_families_override():
    facts = machine(4, smt=2)
    mkl, openblas, numba = reg.family(reg.Mkl), reg.family(reg.OpenBLAS), reg.family(reg.Numba)
    assert mkl.cap(facts, {}) == (4, "4 physical cores (MKL_DYNAMIC is not FALSE)")
    assert mkl.cap(facts, {"MKL_DYNAMIC": "false"}) == (None, "")
    assert mkl.plan_note({"mkl": 8}, {"usable_physical_cores": 4}, {}) is not None
    assert openblas.plan_note({"mkl": 8}, {"usable_physical_cores": 4}, {}) is None  # the base answer
    assert not reg.family(reg.Accelerate).has_default and openblas.has_default
    assert numba.quiet_getter() == "" and reg.family(reg.Numexpr).quiet_getter() == "get_num_threads"
    assert openblas.idle_wait is not None and openblas.idle_wait.layers == ("pthreads",) and mkl.idle_wait is None


class _FakeModule:
    """A stand-in for a new library's Python module."""

    def __init__(self) -> None:
        self.threads = 5

    def threads_now(self) -> int:
        return self.threads


class _FakeBlas(reg.Library):
    """A library added by a class: its files, its variable, its default and how its count is read."""

    name, label, module = "fakeblas", "Fake BLAS", "fakeblas"
    prefixes = ("libfakeblas",)
    user_api = internal_api = "blas"
    precedence = ("FAKEBLAS_NUM_THREADS", "OMP_NUM_THREADS")
    push, calls = reg.Push.SETTER, reg.Calls("set_threads", "threads_now")

    def default(self, facts: Any, ctx: Any) -> tuple[int | None, str]:
        return 3, "3 (fakeblas's own default)"


def test_adding_a_library_is_adding_a_class():
    fresh = reg.Registry((*reg.records(), _FakeBlas()))
    fake = fresh.by_prefix("libfakeblas.so.3")
    assert isinstance(fake, _FakeBlas) and reg.by_prefix("libfakeblas.so.3") is None
    assert fresh.family(_FakeBlas) is fake and fresh.find("fakeblas") is fake
    assert fake.read_count(_FakeModule()) == 5 and fake.set_call(2) == "fakeblas.set_threads(2)"
    facts = machine(4)
    model = model_of(fake)
    assert predict(model, {"FAKEBLAS_NUM_THREADS": "2"}, facts).count == 2
    assert predict(model, {"OMP_NUM_THREADS": "6"}, facts).count == 6
    said = predict(model, {}, facts)
    assert said.count == 3 and "fakeblas's own default" in said.source.text


@pytest.mark.parametrize("file_name", ["libomptarget.so", "libtbbmalloc.so.2", "libnotalib.so"])
def test_a_file_no_family_owns_is_none(file_name):
    assert reg.by_prefix(file_name) is None
