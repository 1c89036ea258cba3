"""One handle per process: a pid becomes a :class:`parinfo.machine.procfs.Proc` once, at the door
(``show --pid``, ``--attach``, ``--children``, ``host``, the launcher's read-back, watch), every
reader takes that handle, and a report ends by checking that it still names the process first read.
"""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, clean_env, start_target, stop_target

from parinfo.machine.procfs import Proc, ProcessGone

PACKAGE = REPO / "parinfo"

# Run parinfo's command line with Proc.__init__ counting the handles made for each pid; the counts
# go to the file named first (stdout is the report's).
COUNTING = r'''
import collections, json, runpy, sys
from parinfo.machine import procfs

made = collections.Counter()
original = procfs.Proc.__init__

def counting(self, pid, root="/"):
    made[str(pid)] += 1
    original(self, pid, root)

procfs.Proc.__init__ = counting
out, sys.argv = sys.argv[1], ["parinfo", *sys.argv[2:]]
try:
    runpy.run_module("parinfo", run_name="__main__", alter_sys=True)
except SystemExit as exc:
    code = exc.code
else:
    code = 0
with open(out, "w") as f:
    json.dump({"made": made, "code": code}, f)
'''

# Its main thread runs Python code every 20 ms (an attach's script runs there) until stdin closes.
TARGET = ("import json, select, sys\n"
          "print(json.dumps({'up': True}), flush=True)\n"
          "while not select.select([sys.stdin], [], [], 0.02)[0]:\n"
          "    pass\n")


def _constructions(tree: ast.AST) -> list[int]:
    """Lines of the calls ``Proc(...)`` or ``something.Proc(...)`` in a module."""
    return [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call) and (
        (isinstance(node.func, ast.Name) and node.func.id == "Proc")
        or (isinstance(node.func, ast.Attribute) and node.func.attr == "Proc"))]


def test_proc_is_built_in_one_place():
    """Every module takes a handle or asks :meth:`Proc.of`: no module outside machine/procfs.py
    calls the class, and inside it only the factory does (``cls(...)``)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        lines = _constructions(ast.parse(path.read_text(encoding="utf-8")))
        if lines:
            found[str(path.relative_to(REPO))] = lines
    assert found == {}, f"Proc(...) outside Proc.of: {found}"
    procfs = ast.parse((PACKAGE / "machine" / "procfs.py").read_text(encoding="utf-8"))
    makers = [fn.name for fn in ast.walk(procfs) if isinstance(fn, ast.FunctionDef)
              for node in ast.walk(fn) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id == "cls"]
    assert makers == ["of"]


def _stat_line(pid: int, start: int) -> bytes:
    fields = ["S", "1", str(pid), "0", "0", "0", "0"] + ["0"] * 12 + [str(start)] + ["0"] * 30
    return f"{pid} (worker) ".encode() + " ".join(fields).encode() + b"\n"


def test_a_pid_reused_during_the_read_ends_the_report(tmp_path):
    """The check at the end of a report: the pid now names a process started later (another
    start time), so what was read is not one process's: ProcessGone, never a mixed report."""
    (tmp_path / "proc" / "80").mkdir(parents=True)
    stat = tmp_path / "proc" / "80" / "stat"
    stat.write_bytes(_stat_line(80, 100))
    proc = Proc.of(80, str(tmp_path))
    proc.check()
    proc.same_or_gone()  # still the same process: nothing to say
    stat.write_bytes(_stat_line(80, 999))
    with pytest.raises(ProcessGone, match="pid 80 exited while parinfo was reading it"):
        proc.same_or_gone()


def test_the_assembler_checks_the_handle_at_the_end(monkeypatch):
    """show --pid: a report whose handle no longer names its process at the end is ProcessGone."""
    from parinfo.diagnostics.outside_report import inspect_pid
    from parinfo.outside.remote import open_process

    proc, _ = start_target(TARGET)
    try:
        handle = open_process(proc.pid)
        inspect_pid(handle, sample_seconds=0.05)  # the same process throughout: a report
        monkeypatch.setattr(Proc, "same", lambda self: False)  # as if the pid went to another
        with pytest.raises(ProcessGone, match=f"pid {proc.pid} exited while parinfo was reading it"):
            inspect_pid(handle, sample_seconds=0.05)
    finally:
        stop_target(proc)


def _handles_made(python: str, tmp_path: Path, *args: str) -> tuple[dict[str, int], dict]:
    out = tmp_path / "made.json"
    done = subprocess.run([python, "-c", COUNTING, str(out), *args], capture_output=True, text=True, timeout=120,
                          env=clean_env(PYTHONPATH=str(REPO)), cwd=str(REPO))
    result = json.loads(out.read_text())
    assert result["code"] in (0, None), done.stderr
    return result["made"], json.loads(done.stdout)


def test_show_pid_makes_one_handle_for_the_pid(tmp_path):
    proc, _ = start_target(TARGET)
    try:
        made, report = _handles_made(sys.executable, tmp_path, "show", "--pid", str(proc.pid), "--json")
    finally:
        stop_target(proc)
    assert report["process"]["pid"] == proc.pid
    assert made[str(proc.pid)] == 1


def test_show_pid_attach_makes_one_handle_for_the_pid(py314_python: str, tmp_path):
    """A pid followed through ``show --pid --attach`` (parinfo on this Python: the call is made by
    the target's own 3.14 interpreter) enters Proc.__init__ once for that pid."""
    proc, _ = start_target(TARGET, python=py314_python, env=clean_env(PYTHONPATH=str(REPO)))
    try:
        made, report = _handles_made(sys.executable, tmp_path, "show", "--pid", str(proc.pid), "--attach", "--json")
    finally:
        stop_target(proc)
    assert report["process"]["pid"] == proc.pid and report["process"]["attached"]
    assert made[str(proc.pid)] == 1
