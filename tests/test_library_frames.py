"""The data-frame families (Arrow, Polars, DuckDB) on made-up machines, and a family's other pools
(:class:`Pool`): defaults, caps, precedence, and what is read without starting anything."""
from __future__ import annotations

import json
import os
import re
import types

import pytest
from profile_machines import machine

from parinfo.process import libraries as reg, library_frames
from parinfo.process.defaults import NO_FACTS
from parinfo.process.environment import environment_report
from parinfo.process.provenance import MODELS, library_settings, predict
from parinfo.records.source import SourceKind, unknown


def test_arrow_cpu_pool_first_list_entry_capped_by_the_thread_limit():
    m, f = MODELS["pyarrow"], machine(4)
    assert predict(m, {"OMP_NUM_THREADS": "3,2"}, f).count == 3
    assert predict(m, {"OMP_NUM_THREADS": "100"}, f).count == 100  # no cap at the CPUs
    p = predict(m, {"OMP_NUM_THREADS": "5", "OMP_THREAD_LIMIT": "3"}, f)
    assert (p.count, p.variable) == (3, "OMP_NUM_THREADS") and "capped at OMP_THREAD_LIMIT=3" in p.phrase
    p = predict(m, {"OMP_NUM_THREADS": "0"}, f)  # invalid: the default
    assert (p.count, p.source.kind) == (4, SourceKind.LIBRARY_DEFAULT)


def test_arrow_default_follows_affinity_not_quota_and_the_thread_limit():
    arrow = reg.family(reg.Arrow)
    assert arrow.default(machine(4, affinity=[1], quota=0.5), NO_FACTS)[0] == 1
    assert arrow.default(machine(4, quota=0.5), NO_FACTS)[0] == 4
    limited = arrow.context(None, {"OMP_THREAD_LIMIT": " 2"})
    assert arrow.default(machine(4), limited) == (2, "2 (4 CPUs in affinity, capped at OMP_THREAD_LIMIT=2; "
                                                     "quota ignored)")
    assert arrow.context(None, {"OMP_THREAD_LIMIT": "x"}).limit is None
    p = predict(MODELS["pyarrow"], {}, machine(4), limited)
    assert (p.count, p.source.kind) == (2, SourceKind.LIBRARY_DEFAULT)


def test_arrow_io_pool_its_variable_else_eight_whatever_the_cpus():
    m = MODELS["pyarrow io"]
    assert predict(m, {}, machine(1, quota=0.5)).count == 8
    assert predict(m, {"ARROW_IO_THREADS": "20"}, machine(2)).count == 20
    assert predict(m, {"ARROW_IO_THREADS": "0", "OMP_NUM_THREADS": "1"}, machine(2)).count == 8
    assert m.precedence == ("ARROW_IO_THREADS",)


@pytest.mark.parametrize(("value", "arrow", "arrow_io", "polars"), [
    ("2", 2, 2, 2), ("2x", 2, None, None), ("1.5", 1, None, None), ("1,3", 1, None, None),
    (" +2 ", 2, None, 2), ("+2", 2, None, 2), ("0", None, None, None), ("-1", None, None, None), ("", None, None, None),
])
def test_each_library_parses_its_variables_its_own_way(value, arrow, arrow_io, polars):
    a, p = reg.family(reg.Arrow), reg.family(reg.Polars)
    assert a.parses_itself and p.parses_itself and not reg.library("openblas").parses_itself
    assert a.count_in("OMP_NUM_THREADS", {"OMP_NUM_THREADS": value}) == arrow
    assert a.count_in("ARROW_IO_THREADS", {"ARROW_IO_THREADS": value}) == arrow_io
    assert p.count_in("POLARS_MAX_THREADS", {"POLARS_MAX_THREADS": value}) == polars
    assert predict(MODELS["pyarrow io"], {"ARROW_IO_THREADS": value}, machine(2)).count == (arrow_io or 8)


def test_polars_default_affinity_and_quota_rounded_down():
    polars = reg.family(reg.Polars)
    assert polars.default(machine(4), NO_FACTS)[0] == 4
    assert polars.default(machine(4, affinity=[0, 1]), NO_FACTS)[0] == 2
    assert polars.default(machine(4, quota=2.5), NO_FACTS)[0] == 2
    assert polars.default(machine(4, quota=0.5), NO_FACTS)[0] == 1
    assert predict(MODELS["polars"], {"POLARS_MAX_THREADS": "5"}, machine(2)).count == 5  # no cap
    assert predict(MODELS["polars"], {"POLARS_MAX_THREADS": "0"}, machine(2)).count == 2


def test_polars_size_is_read_only_once_its_pool_runs(monkeypatch):
    polars = reg.family(reg.Polars)
    module = types.SimpleNamespace(thread_pool_size=lambda: pytest.fail("thread_pool_size starts the pool"))
    monkeypatch.setattr(library_frames, "_POLARS_WORKER", re.compile(r"no-such-thread-\d+"))
    assert polars.read_count(module) is None and polars.quiet_getter() == ""
    monkeypatch.setattr(library_frames, "_POLARS_WORKER", re.compile(r".*"))  # this thread stands for one
    assert polars.read_count(types.SimpleNamespace(thread_pool_size=lambda: 3)) == 3


def test_duckdb_default_ignores_affinity_quota_rounded_up():
    duck = reg.family(reg.DuckDB)
    assert duck.default(machine(4, affinity=[0]), NO_FACTS)[0] == 4
    assert duck.default(machine(4, quota=0.5), NO_FACTS)[0] == 1
    assert duck.default(machine(4, quota=1.05), NO_FACTS)[0] == 2
    assert duck.default(machine(2, quota=3.0), NO_FACTS)[0] == 3  # not capped at the CPUs (measured, duckdb 2.0)
    assert duck.precedence == () and duck.read_count(object()) is None and not duck.set_in_module


def test_a_family_with_another_pool_sets_and_reads_it_by_name():
    arrow = reg.family(reg.Arrow)
    seen: dict[str, int] = {}
    module = types.SimpleNamespace(set_io_thread_count=lambda n: seen.update(io=n), io_thread_count=lambda: 5,
                                   set_cpu_count=lambda n: seen.update(cpu=n), cpu_count=lambda: 2)
    arrow.push_pool("io", module, 4)
    arrow.push_count(module, 1)
    assert seen == {"io": 4, "cpu": 1}
    assert (arrow.read_pool("io", module), arrow.read_count(module)) == (5, 2)
    assert arrow.pool_call("io", 3) == "pyarrow.set_io_thread_count(3)" and arrow.set_call() == "pyarrow.set_cpu_count"
    assert arrow.interop_calls is None and "ARROW_IO_THREADS" in arrow.variables
    with pytest.raises(KeyError):
        arrow.pool("inter-op")
    with pytest.raises(TypeError):  # Polars' pool is not set through its module
        reg.family(reg.Polars).push_count(module, 1)


class _TwoPools(reg.Library):
    """A made-up family: a main pool with a getter, and a pool "side" with none (sized when made,
    refusing one value of its own variable), as ONNX Runtime's inter-op pool is."""

    name = module = "twopools"
    kind = reg.LibraryKind.PYTHON
    precedence = ("TWO_MAIN",)
    push, calls = reg.Push.SETTER, reg.Calls("set_n", "get_n")
    pools = (reg.Pool("side", precedence=("TWO_SIDE",), sized_at_use="what a side pool made now gets"),)

    def default(self, facts, ctx):
        return 7, "seven"

    def pool_default(self, name, facts, ctx):
        return 4, "four"

    def imposed(self, env, pool=None):
        if pool == "side" and env.get("TWO_SIDE") == "bad":
            return None, unknown("refused", "unknown (refused)")
        return None


def test_a_pool_with_no_calls_is_what_one_made_now_gets_with_its_own_words():
    lib = _TwoPools()
    module = types.SimpleNamespace(get_n=lambda: 7, __file__="/x/twopools.py")

    def rows(now: dict[str, str], launch: dict[str, str]) -> dict[str, tuple]:
        got = library_settings([], None, now, launch, machine(4), modules=[(lib, module, lib.read_count(module))])
        return {r.library: (r.count, r.source.kind, r.source.text, r.note) for r in got}

    assert lib.read_pool("side", module) is None and lib.pool_vars("side") == ("TWO_SIDE",)
    with pytest.raises(TypeError):  # no setter: its row's run-time source names none
        lib.pool_call("side")
    said = rows({"TWO_SIDE": "5"}, {})  # set after launch: a side pool made now reads it
    assert said["twopools"] == (7, SourceKind.LIBRARY_DEFAULT, "default: seven", None)
    assert said["twopools side"][:2] == (5, SourceKind.VARIABLE)
    assert said["twopools side"][3] == "what a side pool made now gets"
    assert rows({}, {})["twopools side"][:3] == (4, SourceKind.LIBRARY_DEFAULT, "default: four")
    refused = rows({"TWO_SIDE": "bad"}, {"TWO_SIDE": "bad"})["twopools side"]
    assert refused[:3] == (None, SourceKind.UNKNOWN, "unknown (refused)")
    assert lib.imposes({"TWO_SIDE": "bad"}) and lib.imposed({"TWO_SIDE": "bad"}) is None


def test_torch_inter_op_is_its_pool_named_inter_op():
    torch = reg.family(reg.Torch)
    assert torch.pool("inter-op").calls == torch.interop_calls
    assert torch.interop_call(2) == "torch.set_num_interop_threads(2)"
    assert torch.variables == ("MKL_NUM_THREADS", "OMP_NUM_THREADS")  # its inter-op pool reads none


def test_a_borrowed_variable_names_its_reader_only_while_imported():
    def readers(modules: set[str]) -> list[str]:
        rows = environment_report({"OMP_NUM_THREADS": "2"}, {"OMP_NUM_THREADS": "2"}, modules=modules)
        return next(r.readers for r in rows if r.name == "OMP_NUM_THREADS")

    assert "pyarrow" not in readers(set()) and "pyarrow" in readers({"pyarrow"})
    rows = environment_report({}, {}, modules=set())
    assert not {"ARROW_IO_THREADS", "POLARS_MAX_THREADS", "OMP_THREAD_LIMIT"} & {r.name for r in rows}
    assert "POLARS_MAX_THREADS" in {r.name for r in environment_report({}, {}, modules={"polars"})}


def test_their_other_variables_are_not_taken_for_thread_variables():
    env = {"POLARS_VERBOSE": "1", "ARROW_DEFAULT_MEMORY_POOL": "system"}
    assert not set(env) & {r.name for r in environment_report(env, env, modules={"polars", "pyarrow"})}


def test_an_io_pool_is_no_cpu_pool() -> None:
    """Arrow's IO pool (8 threads that wait on I/O) is declared an I/O pool: the findings on counts
    above the CPUs and the sums of threads busy at once leave it out."""
    from parinfo.process import libraries

    assert libraries.io_rows() == frozenset({"pyarrow io"})
    assert all(not p.io for lib in libraries.records() for p in lib.pools if f"{lib.name} {p.name}" != "pyarrow io")


@pytest.mark.pools("pyarrow")
def test_arrow_io_pool_above_the_cpus_raises_no_finding() -> None:
    import shutil
    import subprocess
    import sys

    if shutil.which("taskset") is None:
        pytest.skip("taskset is not installed")
    code = ("import pyarrow, json, parinfo; r = parinfo.inspect(); "
            "print(json.dumps([[f.id, f.message] for f in r.findings]), pyarrow.io_thread_count())")
    done = subprocess.run(["taskset", "-c", "0", sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr
    findings, io = done.stdout.rsplit(" ", 1)
    assert int(io) == 8  # above the one CPU, by design
    assert not [f for f in json.loads(findings) if "pyarrow io" in f[1]], findings
