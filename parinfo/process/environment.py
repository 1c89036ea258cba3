"""The thread-steering environment variables of this process: now, at launch, valid or not, who reads them.

Native libraries read their variables once, when they load. A variable changed after launch (an
``os.environ`` edit) is therefore seen only by libraries loaded after the edit; the launch value comes
from ``/proc/<pid>/environ`` (the file psutil's ``Process.environ()`` reads), which keeps the environment
the process started with.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Collection, Mapping
from dataclasses import field
from typing import TYPE_CHECKING

from parinfo.errors import UsageError
from parinfo.process.libraries import LibraryKind, Var, library, listed_unset
from parinfo.process.variables import THREAD_VARS, judge, looks_thread_related
from parinfo.records.convert import OMIT_EMPTY, OMIT_NONE
from parinfo.records.record import record

if TYPE_CHECKING:
    from parinfo.machine.procfs import Proc
from parinfo.records.unknown import Unknown


@record
class EnvRow:
    """One thread-steering variable: a row of the report's ``environment`` section (its JSON).

    - ``name``: the variable.
    - ``value``: its value now (str), or None when unset.
    - ``launch_value``: its value when the process started (str), None when it was unset then, or
      "unknown (reason)" when the launch environment cannot be read.
    - ``changed_after_launch``: True when the value now differs from the launch value (set, changed
      or removed after launch), False when equal, None when the launch value is unknown.
    - ``valid``: True/False for a set variable whose syntax parinfo knows; None when unset or unchecked.
      Where a reader parses the variable its own way (its family says how, measured), False when any
      of its readers refuses the value (ignores it, warns, or raises).
    - ``problem``: why the value is invalid (one line), else None; where a reader parses it its own
      way, what each reader does with it ("libgomp prints a warning and uses its default; pyarrow takes 1").
    - ``readers``: the runtimes that read it (e.g. ["libgomp", "torch", "openblas"]); [] when unknown.
    - ``summary``: what it controls, in a few words.
    - ``known``: True when the variable is in parinfo's table (the library registry's THREAD_VARS).
    - ``set_by``: who set a set variable: "set at launch", "set by the import of scikit-learn"
      (a package known to set it on import, and imported), "set after launch by this process", or
      None (unset, or the launch environment is unknown).
    - ``capped_to``: the count parinfo's runtime runs when this variable decides its count and asks
      for more than the pool ceiling (only then in its JSON).
    - ``importers``: the packages whose import set it (``set_by`` in words), [] when the user or the
      launch environment did (only when not empty in its JSON): rules ask this, not the words.
    """

    name: str = field(metadata={"missing": "?"})
    value: str | None = None
    launch_value: str | None = None
    changed_after_launch: bool | None = None
    valid: bool | None = None
    problem: str | None = None
    readers: list[str] = field(default_factory=list)
    summary: str | None = None
    known: bool = False
    set_by: str | None = None
    capped_to: int | None = field(default=None, metadata=OMIT_NONE)
    importers: list[str] = field(default_factory=list, metadata=OMIT_EMPTY)


def launch_environment(handle: Proc | None = None) -> dict[str, str] | Unknown:
    """The environment process ``handle`` (default: this one) was launched with.

    On Linux this is ``/proc/<pid>/environ``, the block the kernel copied at exec time, which later
    ``os.environ`` edits do not touch (the file psutil's ``Process.environ()`` reads; read here
    directly to keep psutil's import off ``parinfo show``'s path). Elsewhere psutil is asked.
    Returns a dict, or Unknown(why) when it cannot be read (no permission, no procfs).
    """
    from parinfo.machine.procfs import parse_environ, this_or

    proc = this_or(handle)
    if not proc.exists() and not os.path.isdir("/proc/self"):
        return _psutil_environ(proc.pid)  # no procfs here
    try:
        raw = proc.read_or_why("environ", 1 << 22)
    except UsageError as exc:
        return Unknown(str(exc))
    return raw if isinstance(raw, Unknown) else parse_environ(raw)


def _psutil_environ(pid: int | None) -> dict[str, str] | Unknown:
    try:
        import psutil

        return dict(psutil.Process(pid).environ())
    except Exception as exc:  # psutil raises AccessDenied, NoSuchProcess, OSError...
        return Unknown.of(exc)



def _python_too_old(spec: Var | None, python: tuple[int, int]) -> bool:
    return spec is not None and spec.python is not None and python < spec.python


def _readers_here(spec: Var | None, python: tuple[int, int], modules: Collection[str]) -> list[str]:
    """The readers of a variable in the process (``modules``: those it imported): Python itself only
    from the version that reads it, a library that borrows it only when imported."""
    if spec is None:
        return []
    return [r for r in spec.readers
            if not (library(r).kind is LibraryKind.INTERPRETER and _python_too_old(spec, python))
            and library(r).reader_shown(spec.name, modules)]


def _summary_here(spec: Var | None, python: tuple[int, int]) -> str:
    if spec is None:
        return "not in parinfo's table; its name looks thread-related"
    if _python_too_old(spec, python):
        major, minor = spec.python or (0, 0)
        return (f"{spec.summary}; this Python {python[0]}.{python[1]} does not read it "
                f"(Python reads it from {major}.{minor})")
    return spec.summary


def _importers(spec: Var | None, value: str | None, launch_value: str | None, launch_known: bool,
               modules: Collection[str]) -> list[str]:
    """The imported packages known to set the variable, when it was set after launch (else [])."""
    if value is None or not launch_known or launch_value == value:
        return []
    return [package for module, package in (spec.set_on_import if spec else ()) if module in modules]


def _set_by(value: str | None, launch_value: str | None, launch_known: bool, importers: list[str]) -> str | None:
    if value is None or not launch_known:
        return None
    if launch_value == value:
        return "set at launch"
    if importers:
        return "set by the import of " + " or ".join(importers)
    return "set after launch by this process"


def _generic_unread(name: str, imported: Collection[str]) -> bool:
    """A generic name (NPROC) while no library that reads it is loaded: another program's setting."""
    spec = THREAD_VARS.get(name)
    if spec is None or not spec.generic:
        return False
    from parinfo.process.libraries import find

    return not any((lib := find(r)) is not None and lib.is_loaded(imported) for r in spec.readers)


def environment_report(environ: Mapping[str, str] | None = None,
                       launch_environ: Mapping[str, str] | Unknown | None = None, *,
                       modules: Collection[str] | None = None, python: tuple[int, int] | None = None) -> list[EnvRow]:
    """One row per thread-steering variable: every variable of THREAD_VARS (set or not; a variable whose
    libraries ask to be listed only once loaded is left out while it is unset and they are not
    loaded), then every other set variable whose name looks thread-related (OMP_*, KMP_*, MKL_*, ...).

    ``environ`` defaults to ``os.environ``; ``launch_environ`` defaults to this process's launch
    environment (:func:`launch_environment`); pass Unknown(why) when it is not known.

    ``modules`` are the modules the process has imported and ``python`` its Python version (default:
    this process's), for a process read from inside by parinfo's attach.
    """
    env = os.environ if environ is None else environ
    imported: Collection[str] = sys.modules if modules is None else modules
    version = sys.version_info[:2] if python is None else python
    launch = launch_environment() if launch_environ is None else launch_environ
    launch_known = not isinstance(launch, Unknown)
    at_launch: Mapping[str, str] = {} if isinstance(launch, Unknown) else launch

    names = [n for n in THREAD_VARS if (listed_unset(n, imported) or n in env or n in at_launch)
             and not _generic_unread(n, imported)]
    extra = sorted(n for n in env if n not in THREAD_VARS and looks_thread_related(n))
    if launch_known:
        extra_launch = {n for n in at_launch if n not in THREAD_VARS and looks_thread_related(n)}
        extra = sorted(set(extra) | extra_launch)
    names.extend(extra)

    rows = []
    for name in names:
        value = env.get(name)
        spec = THREAD_VARS.get(name)
        if isinstance(launch, Unknown):
            launch_value: str | None = str(launch)
            changed: bool | None = None
        else:
            launch_value = launch.get(name)
            changed = launch_value != value
        readers = _readers_here(spec, version, imported)
        problem = judge(name, value, readers) if value is not None else None
        valid = None if value is None or spec is None else problem is None
        at = launch_value if launch_known else None
        importers = _importers(spec, value, at, launch_known, imported)
        rows.append(EnvRow(name, value, launch_value, changed, valid, problem, readers,
                           _summary_here(spec, version), spec is not None, _set_by(value, at, launch_known, importers),
                           importers=importers))
    return rows
