"""parinfo.apply() returns records: what was set (what, value, where, source), what was skipped and
why (a Reason, not a sentence), what is not in force; the words are made only when shown, and they
are the lines apply() has always printed."""
from __future__ import annotations

import textwrap

from conftest import clean_env, run_json

from parinfo.profiles.applied import (
    Applied,
    AtImport,
    Done,
    Drift,
    Gap,
    Reach,
    Reason,
    Skipped,
    Where,
)
from parinfo.profiles.plan import Plan, Setting
from parinfo.records.source import profile as profile_source

FAKE_TORCH = """
import sys, types
torch = types.ModuleType("torch")
state = {"intra": 4, "inter": 4}
torch.set_num_threads = lambda n: state.update(intra=n)
torch.get_num_threads = lambda: state["intra"]
torch.set_num_interop_threads = lambda n: state.update(inter=n)
torch.get_num_interop_threads = lambda: state["inter"]
sys.modules["torch"] = torch
"""


def _run(body: str, torch: bool = False, **env: str) -> dict:
    code = "import json, os, sys\n" + FAKE_TORCH * torch + textwrap.dedent(body)
    return run_json(code, env=clean_env(**env), timeout=120)


def test_apply_returns_typed_records_and_the_words_come_from_them():
    out = _run("""
        import parinfo
        from parinfo.profiles.applied import Applied, Done, Reason, Skipped, Where
        r = parinfo.apply({"version": 1, "name": "ft", "intra_op": 2, "inter_op": 3,
                           "env": {"OMP_WAIT_POLICY": "passive"}})
        assert isinstance(r, Applied) and all(isinstance(d, Done) for d in r.applied)
        (kept,) = r.skipped
        runtime = [(d.what, d.value, d.source.kind.value) for d in r.applied if d.where is Where.RUNTIME]
        torch = [(d.what, d.value, d.library, d.via) for d in r.applied if d.where is Where.FRAMEWORK]
        variables = {d.what: d.value for d in r.applied if d.where is Where.VARIABLE}
        print(json.dumps({"lines": r.lines(), "runtime": runtime, "torch": torch, "variables": variables,
                          "kept": [kept.what, kept.where.value, kept.reason.value, kept.user_value, kept.value],
                          "text": str(r), "plan": r.plan.name}))
    """, True, OMP_WAIT_POLICY="active")
    assert out["runtime"] == [["intra_op", 2, "profile"], ["inter_op", 3, "profile"]]
    assert out["torch"] == [["intra_op", 2, "torch", "torch.set_num_threads"],
                            ["inter_op", 3, "torch", "torch.set_num_interop_threads"]]
    assert out["variables"]["OMP_NUM_THREADS"] == "2" and "OMP_WAIT_POLICY" not in out["variables"]
    assert out["kept"] == ["OMP_WAIT_POLICY", "variable", "user set", "active", "passive"]
    lines = out["lines"]
    assert set(lines) == {"applied", "skipped", "not_in_force", "threads", "at_import"}
    assert lines["applied"][:2] == ["runtime intra-op count 2", "runtime inter-op count 3"]
    assert lines["applied"][-2:] == ["torch.set_num_threads(2)", "torch.set_num_interop_threads(3)"]
    assert lines["skipped"] == ["OMP_WAIT_POLICY: kept 'active' set by the user over the profile's 'passive' "
                                "(force=True overrides)"]
    assert lines["not_in_force"] == [] and lines["at_import"] == []
    assert out["text"].splitlines()[0] == "profile ft applied" and "  torch.set_num_threads(2)" in out["text"]
    assert out["plan"] == "ft"


def test_a_framework_not_imported_yet_is_an_at_import_record():
    out = _run("""
        import parinfo
        r = parinfo.apply({"version": 1, "name": "later", "intra_op": 1, "inter_op": 2})
        (later,) = r.at_import
        print(json.dumps([later.library, later.inter, later.intra, str(later), "torch" in sys.modules]))
    """)
    assert out == ["torch", 2, 1, "torch is not imported yet: torch.set_num_interop_threads(2) and "
                   "torch.set_num_threads(1) when `import torch` finishes, before any op runs (a count torch "
                   "refuses then is a 'parinfo: not in force' line on stderr)", False]


def test_the_users_own_count_variable_is_a_reason_not_a_sentence():
    out = _run("""
        import parinfo
        r = parinfo.apply({"version": 1, "name": "u", "intra_op": 2, "inter_op": 1})
        print(json.dumps([[s.what, s.where.value, s.reason.value, s.reason.users, str(s)] for s in r.skipped]))
    """, True, PARINFO_NUM_THREADS="3", MKL_NUM_THREADS="5")
    assert ["intra_op", "runtime", "user set", True, "runtime intra-op: PARINFO_NUM_THREADS set by the user stays "
            "in force"] in out
    assert ["intra_op", "framework", "user set", True, "torch.set_num_threads(5) from MKL_NUM_THREADS set by "
            "the user"] in out


def _plan() -> Plan:
    return Plan(name="p", description="", origin="<profile>", intra_op=Setting("intra_op", 1, "1"),
                inter_op=Setting("inter_op", 1, "1"))


def test_each_record_says_the_line_apply_has_always_said():
    src = profile_source("p")
    said = {
        Done("OMP_NUM_THREADS", "1", Where.VARIABLE, overrode="4"):
            "OMP_NUM_THREADS=1 (overrode the user's '4', force=True)",
        Done("inter_op", 2, Where.RUNTIME, src, already=True): "runtime inter-op count 2 (already in force, from "
                                                                "profile p)",
        Done("openmp pool (libgomp.so.1)", 1, Where.POOL, per_thread=True):
            "openmp pool (libgomp.so.1) limited to 1 in this thread",
        Done("numexpr", 2, Where.MODULE, via="numexpr.set_num_threads"): "numexpr.set_num_threads(2)",
        Done("affinity", (0, 1, 2), Where.AFFINITY, threads=3): "affinity 0-2 for 3 threads",
        Done("memory", "bind:0", Where.MEMORY, via="set_mempolicy", threads=1):
            "memory bind:0 (set_mempolicy) for the calling thread and the threads and processes it starts from "
            "now on; 1 other thread already running keeps its own policy (the kernel sets it per thread: apply() "
            "before starting threads, or launch with parinfo apply P -- COMMAND)",
        Skipped("allocator", Where.PRELOAD, Reason.NOT_PRELOADABLE, "jemalloc", path="/lib/libjemalloc.so.2",
                variables=("MALLOC_CONF",), launch="parinfo apply p -- COMMAND"):
            "allocator jemalloc not preloaded (nor MALLOC_CONF): a running process cannot change its malloc; "
            "launch the program with `parinfo apply p -- COMMAND` to preload /lib/libjemalloc.so.2",
        Skipped("blas pool", Where.POOL, Reason.USER_VALUE_INVALID, variable="OPENBLAS_NUM_THREADS",
                user_value="x", now=4):
            "blas pool: left at 4 (OPENBLAS_NUM_THREADS='x' set by the user is not a valid count)",
        Skipped("blas pool", Where.POOL, Reason.REFUSED, 2, error="no symbol"):
            "blas pool: could not set 2 threads (no symbol)",
        Skipped("blas pool", Where.POOL, Reason.USER_SET, 3, variable="OPENBLAS_NUM_THREADS", now=3):
            "blas pool: kept at 3 from OPENBLAS_NUM_THREADS set by the user",
        Skipped("intra_op", Where.FRAMEWORK, Reason.USER_VALUE_INVALID, library="torch", variable="MKL_NUM_THREADS",
                user_value="x"):
            "torch intra-op: MKL_NUM_THREADS='x' set by the user is not a valid count; torch's count left as it is",
        Skipped("intra_op", Where.FRAMEWORK, Reason.USER_SET, 2, library="torch", variable="MKL_NUM_THREADS",
                user_value="1", at_import=True):
            "torch intra-op: at import torch follows MKL_NUM_THREADS='1' set by the user",
        Skipped("inter_op", Where.FRAMEWORK, Reason.REFUSED, 2, library="torch", now=8, error="too late"):
            "torch inter-op stays 8: too late",
        Skipped("affinity", Where.AFFINITY, Reason.REFUSED, (5,), error="12 (Invalid argument)"):
            "affinity 5 not set: 12 (Invalid argument)",
        Skipped("memory", Where.MEMORY, Reason.NUMA_UNKNOWN, "local"):
            "memory local: this machine's NUMA nodes are unknown; the policy is left as it is",
        Drift("intra_op", Where.RUNTIME, 2, 4, source=src): "runtime intra-op count is 4 (from profile p), not 2",
        Drift("blas pool", Where.POOL, 1, 4): "blas pool runs 4 threads, not 1",
        Drift("inter_op", Where.FRAMEWORK, 2, 8, library="torch"):
            "torch inter-op count is 8, not 2 (set once, before torch's inter-op pool starts)",
        Drift("affinity", Where.AFFINITY, (0, 1), (0, 1, 2)): "affinity is [0, 1, 2], not [0, 1]",
    }
    assert {str(record): line for record, line in said.items()} == {line: line for line in said.values()}


def test_per_thread_reach_and_its_gap_are_one_record_in_two_lines():
    reach = Reach("openmp pool (libgomp.so.1)", 1, ("MainThread", 7), others=("w-0",), start=4)
    assert not reach.new_threads_follow
    assert str(reach) == ("openmp pool (libgomp.so.1): 1 in this thread (MainThread, tid 7) only (OpenMP limits "
                          "are per thread); threads started from now on start at 4; the 1 other live thread (w-0) "
                          "keep their own count")
    assert str(Gap(reach)).startswith("openmp pool (libgomp.so.1) is limited to 1 in this thread (MainThread, tid 7) "
                                      "only: threads started from now on run 4, and the 1 other live thread (w-0) "
                                      "keep theirs (4 unless they set one); put 'threads: every' in the profile")
    result = Applied(_plan(), not_in_force=(Gap(reach),), threads=(reach,),
                     at_import=(AtImport("torch", 2, "torch.set_num_interop_threads", None, "torch.set_num_threads"),))
    assert result.lines()["threads"] == [str(reach)] and result.lines()["not_in_force"] == [str(Gap(reach))]
    assert result.lines()["at_import"][0].startswith("torch is not imported yet: torch.set_num_interop_threads(2) "
                                                     "when `import torch` finishes")


def _threading_helpers(source: str) -> list[str]:
    """Functions that take a list of lines to append to (what apply() threaded through its helpers)."""
    import ast

    return sorted({f.name for f in ast.walk(ast.parse(source)) if isinstance(f, ast.FunctionDef)
                   for a in (*f.args.args, *f.args.kwonlyargs)
                   if a.annotation is not None and ast.unparse(a.annotation) == "list[str]"})


def test_no_helper_of_apply_threads_a_list_of_lines():
    from pathlib import Path

    # before: _not_preloaded, _configure, _pool_lines, _modules, _torch, _affinity and _memory
    profiles = Path(__file__).resolve().parent.parent / "parinfo" / "profiles"
    modules = ("applying.py", "applied.py", "thread_reach.py", "at_import.py")
    threading = [(name, _threading_helpers((profiles / name).read_text())) for name in modules]
    assert threading == [(name, []) for name in modules]
