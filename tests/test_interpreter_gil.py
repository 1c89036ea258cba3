"""The interpreter's GIL facts: the build, the GIL now, who asked, the module that turned it back on,
and Python threads x per-thread pools.

No free-threaded interpreter can be installed here, so the free-threaded cases run on injected
facts (sysconfig's variable, ``sys._is_gil_enabled``, ``sys._xoptions``, the environment); the
warning watch runs on this interpreter's real warnings machinery, fed CPython's exact message
from C (``PyErr_WarnEx``, the call CPython's import makes) and from Python.
"""
from __future__ import annotations

import sysconfig

from conftest import run_json
from test_diagnostics_rules import base, diagnose

from parinfo.process.interpreter import InterpreterFacts, interpreter_facts
from parinfo.process.pools import PoolRow
from parinfo.records.convert import dump, load

FT = {"Py_GIL_DISABLED": 1}
GOMP2 = [load(PoolRow, {"library": "libgomp", "user_api": "openmp", "internal_api": "openmp", "num_threads": 2},
              strict=True)]
PTHREADS_BLAS4 = [load(PoolRow, {"library": "openblas", "user_api": "blas", "internal_api": "openblas",
                                     "num_threads": 4, "threading_layer": "pthreads"}, strict=True)]
MESSAGE = ("The global interpreter lock (GIL) has been enabled to load module 'fakepkg._speedups', which has "
           "not declared that it can run safely without the GIL. To override this behavior and keep the GIL "
           "disabled (at your own risk), run with PYTHON_GIL=0 or -Xgil=0.")


def facts(**kw) -> InterpreterFacts:
    kw.setdefault("config_var", FT.get)
    kw.setdefault("xoptions", {})
    kw.setdefault("environ", {})
    kw.setdefault("reenabled_by", None)
    return interpreter_facts(**kw)


def test_this_interpreter_is_a_default_build_with_the_gil():
    f = interpreter_facts()
    assert sysconfig.get_config_var("Py_GIL_DISABLED") in (None, 0)  # ground truth for this machine
    assert f.free_threaded_build is False and f.gil_enabled is True and not f.gil_off
    assert f.threads_at_once is None


def test_default_build_facts_from_sysconfig():
    f = facts(config_var={"Py_GIL_DISABLED": 0}.get, is_gil_enabled=None)
    assert f.free_threaded_build is False and f.gil_enabled is True
    assert f.gil_source.text == "a default build always holds the GIL"


def test_free_threaded_gil_off_counts_threads_times_per_thread_pools():
    f = facts(is_gil_enabled=lambda: False, python_threads=4, pools=GOMP2 + PTHREADS_BLAS4)
    assert f.free_threaded_build is True and f.gil_enabled is False and f.gil_off
    # OpenBLAS with pthreads is one pool for the process: the callers queue on it; libgomp's limit
    # holds per calling thread: each Python thread may start a team of 2
    assert (f.per_thread_pool, f.per_thread_threads, f.threads_at_once) == ("libgomp", 2, 8)


def test_torch_counts_as_a_per_thread_pool():
    f = facts(is_gil_enabled=lambda: False, python_threads=3, pools=GOMP2, torch_intra=4)
    assert (f.per_thread_pool, f.threads_at_once) == ("torch intra-op", 12)


def test_with_the_gil_on_threads_do_not_multiply():
    f = facts(is_gil_enabled=lambda: True, python_threads=4, pools=GOMP2)
    assert f.free_threaded_build is True and f.gil_enabled is True and f.threads_at_once is None


def test_free_threaded_build_without_the_getter_is_unknown():
    f = facts(is_gil_enabled=None)
    assert f.gil_enabled is None and f.gil_source.text.startswith("unknown")
    assert facts(is_gil_enabled=lambda: 1 / 0).gil_source.text.startswith("unknown (sys._is_gil_enabled() failed")


def test_x_option_wins_over_the_variable_and_says_who_asked():
    f = facts(is_gil_enabled=lambda: False, xoptions={"gil": "0"}, environ={"PYTHON_GIL": "1"})
    assert (f.gil_requested, f.gil_requested_by) == ("0", "-X gil=0 (command line)")
    f = facts(is_gil_enabled=lambda: True, environ={"PYTHON_GIL": "1"})
    assert (f.gil_requested, f.gil_requested_by) == ("1", "env PYTHON_GIL=1")
    assert facts().gil_requested is None


def test_the_report_payload_round_trips_and_the_finding_fires_past_the_usable_cpus():
    s = base(2)
    f = facts(is_gil_enabled=lambda: False, python_threads=4, pools=GOMP2)
    s["backend"] = {"runtime": "native", "python": dump(f)}
    found = [x for x in diagnose(s) if x.id == "free-threaded-oversubscribed"]
    assert len(found) == 1 and found[0].severity == "warning"
    assert "4 Python threads x libgomp 2 threads = 8 threads can run at once on 2 usable CPUs" in found[0].message
    s["backend"]["python"] = dump(facts(is_gil_enabled=lambda: False, python_threads=1, pools=GOMP2))
    assert not [x for x in diagnose(s) if x.id == "free-threaded-oversubscribed"]  # 1 x 2 fits 2 CPUs
    s["backend"]["python"] = dump(facts(is_gil_enabled=lambda: True, python_threads=4, pools=GOMP2))
    assert not [x for x in diagnose(s) if x.id == "free-threaded-oversubscribed"]  # the GIL serialises them


def test_gil_turned_back_on_by_a_module_is_an_info_finding():
    s = base(2)
    s["backend"] = {"python": dump(facts(is_gil_enabled=lambda: True, reenabled_by="fakepkg._speedups"))}
    found = [x for x in diagnose(s) if x.id == "gil-reenabled"]
    assert len(found) == 1 and found[0].severity == "info" and "fakepkg._speedups" in found[0].message
    s["backend"]["python"]["free_threaded_build"] = False
    assert not [x for x in diagnose(s) if x.id == "gil-reenabled"]


def test_the_text_report_names_the_build_the_gil_and_the_product():
    from parinfo.diagnostics.wording import python_text as _python_text

    f = facts(is_gil_enabled=lambda: False, python_threads=4, pools=GOMP2, xoptions={"gil": "0"})
    assert _python_text(f) == ("free-threaded build, GIL off, asked by -X gil=0 (command line), "
                               "4 Python threads x libgomp 2 = 8 threads at once")
    assert _python_text(facts(config_var={}.get)) == "default build (GIL)"


WATCH = r"""
import ctypes, json, sys, warnings
from parinfo.process.interpreter import interpreter_facts, watch_gil_warning
MESSAGE = sys.argv[1]
if sys.argv[2] == "watch":
    assert watch_gil_warning(warnings)  # the module given: on this default build too
shown = []
if sys.argv[3] == "own-showwarning":
    warnings.showwarning = lambda *a, **k: shown.append(str(a[0]))
# from C, the way CPython's import warns (PyErr_WarnFormat), then from Python
ctypes.pythonapi.PyErr_WarnEx(ctypes.py_object(RuntimeWarning), MESSAGE.encode(), ctypes.c_ssize_t(1))
warnings.warn("unrelated", RuntimeWarning)
print(json.dumps({"module": interpreter_facts(reenabled_by=True).gil_reenabled_by, "shown": len(shown)}))
"""


def test_the_warning_names_the_module_and_is_shown_as_before():
    import json
    import sys

    from conftest import clean_env

    def run(*args: str, flags: tuple[str, ...] = ()):
        import subprocess

        p = subprocess.run([sys.executable, *flags, "-c", WATCH, MESSAGE, *args], capture_output=True,
                           text=True, env=clean_env(), timeout=60)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout.strip().splitlines()[-1]), p.stderr

    watched, err_watched = run("watch", "default")
    plain, err_plain = run("plain", "default")
    assert watched["module"] == "fakepkg._speedups" and plain["module"] is None
    assert err_watched == err_plain and "fakepkg._speedups" in err_watched and "unrelated" in err_watched
    # a user's own showwarning still gets every warning
    mine, _ = run("watch", "own-showwarning")
    assert mine == {"module": "fakepkg._speedups", "shown": 2}
    # filtered out: nothing is shown, and parinfo does not claim to have seen it
    ignored, err = run("watch", "default", flags=("-W", "ignore::RuntimeWarning"))
    assert ignored["module"] is None and err == ""


def test_inspect_reports_the_interpreter_in_the_backend_section():
    d = run_json("import json, parinfo; print(json.dumps(parinfo.inspect().to_dict()['backend']['python']))")
    assert d["free_threaded_build"] is False and d["gil_enabled"] is True
    assert d["python_threads"] >= 1 and d["threads_at_once"] is None
