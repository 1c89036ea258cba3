"""The inspector: every fact about this process's parallelism, with provenance and findings.

:func:`inspect` chooses the reader (this process from inside: :func:`read_here`; another one from
outside or attached) and the one assembler (:func:`parinfo.diagnostics.assemble.assemble`) makes,
without changing anything, a :class:`~parinfo.diagnostics.model.Report` (typed sections; ``to_dict`` is
the ``--json`` payload). The front ends render it (``parinfo.cli.render_text``); its torch-style
text, which :func:`parinfo.parallel_info` returns, is :mod:`parinfo.diagnostics.torch_block`.
"""
from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

from parinfo.diagnostics.model import SCHEMA_VERSION, Report
from parinfo.diagnostics.parts import IMPLEMENTATIONS
from parinfo.process import libraries as reg
from parinfo.process.environment import EnvRow
from parinfo.process.outer import OuterThreads
from parinfo.runtime.state import RUNTIME

if TYPE_CHECKING:
    from parinfo.diagnostics.assemble import Filled

__all__ = ["SCHEMA_VERSION", "Report", "inspect"]


def _python_version() -> str:
    """platform.python_version(): the version as sys.version spells it (3.11.2, 3.13.0rc1)."""
    return sys.version.split()[0]


def inspect(imports: list[str] | None = None, *, torch: bool = False, root: str = "/",
            pid: int | None = None, children: bool = False, outer_threads: int | None = None,
            attach: bool = False, timeout: float | None = None, all_threads: bool = False) -> Report:
    """Inspect this process, or process ``pid`` from outside (with ``children``: its whole tree), or
    from inside with ``attach`` (a CPython 3.14+ process: a script run there through
    ``sys.remote_exec`` reads its counts, within ``timeout`` seconds, 5 by default; see
    docs/process.md; with ``children`` too, each 3.14+ process of the tree is read inside within
    ``timeout`` in all, the others from outside, and ``process.tree_reads`` says which). Changes
    nothing: no variable, no thread count, no thread, no import.

    ``imports`` are modules to import first so their native pools load (None or []: none; an import
    can start threads, so only what is asked is imported; ``parinfo show`` asks for numpy);
    ``torch=True`` imports torch when it is not imported yet (it never is otherwise). Neither
    applies to another process, which is read from /proc (parinfo.diagnostics.outside_report.inspect_pid).
    ``outer_threads`` is how many threads run this process's work at once (detected inside Dask,
    Ray and loky workers when not given); each may start a full team of every pool.
    The ``teams`` section gives the team each thread that runs a thread pool's tasks (and this one)
    gets from each pool; ``all_threads``: every live Python thread (this process only).
    """
    from parinfo.diagnostics import outside_report
    from parinfo.diagnostics.assemble import assemble

    if pid is not None:
        from parinfo.machine.checks import pid as checked_pid

        pid = checked_pid(pid, "pid")
    if attach or not outside_report.pid_is_self(pid) or children:
        from parinfo.process.library_inference import onnxruntime_version_in_view
        from parinfo.records.unknown import Unknown

        # another process: its onnxruntime's version is read inside it (attach) or not at all, never
        # taken from the one this process imported
        with onnxruntime_version_in_view(Unknown("read from outside")):
            return _another(pid, attach, children, timeout, root, imports, torch, outer_threads)
    if timeout is not None:
        from parinfo.errors import UsageError

        raise UsageError("timeout applies to attach only (attach=True, or --attach)")
    return assemble(read_here(imports, torch, root, outer_threads, all_threads), None, root)


def _another(pid: int | None, attach: bool, children: bool, timeout: Any, root: str, imports: list[str] | None,
             torch: bool, outer_threads: int | None) -> Report:
    """The report of process ``pid`` (or this one's tree, with ``children``) read from outside or attached."""
    from parinfo.diagnostics import outside_report

    if attach:
        return _attached(pid, children, timeout, root, imports, torch, outer_threads)
    if timeout is not None:
        from parinfo.errors import UsageError

        raise UsageError("timeout applies to attach only (attach=True, or --attach)")
    from parinfo.outside.remote import open_process

    proc = open_process(os.getpid() if pid is None else pid)  # the door: the report's one handle
    return outside_report.inspect_pid(proc, children=children, root=root)


def read_here(imports: list[str] | None, torch: bool, root: str, outer_threads: int | None,
              all_threads: bool = False) -> Filled:
    """What this process knows of itself, read from inside (:func:`inspect` with no other pid and
    no attach): every section but those the assembler adds."""
    from parinfo.diagnostics.assemble import Filled
    from parinfo.diagnostics.model import Backend, Frameworks, ProcessInfo
    from parinfo.machine.procfs import Proc
    from parinfo.machine.topology import machine_facts
    from parinfo.process import environment, frameworks, pools, probing as probe, provenance, serving, threads
    from parinfo.process.interpreter import interpreter_facts, watch_gil_warning
    from parinfo.process.mapped import MapsOnce, current_objects
    from parinfo.process.thread_owners import attribute as attribute_owners

    watch_gil_warning()  # a module imported from now on that turns the GIL back on is named

    if outer_threads is not None and (isinstance(outer_threads, bool) or not isinstance(outer_threads, int)
                                      or outer_threads < 1):
        from parinfo.errors import UsageError

        raise UsageError(f"outer_threads must be a positive integer, not {outer_threads!r}")
    wanted = list(imports or [])
    torch_module = str(reg.family(reg.Torch).module)
    if torch and torch_module not in wanted:
        wanted.append(torch_module)
    probes = probe.import_probes(wanted)

    facts = machine_facts(root)
    maps = MapsOnce(Proc.of(None))  # read at most once, for the pools and the threads' owners alike
    objects = current_objects(maps)
    pool_rows = pools.native_pools(objects=objects)
    torch_info = frameworks.torch_info(import_if_missing=False)
    launch_env = environment.launch_environment()
    env_rows = environment.environment_report(os.environ, launch_env)
    runtime = RUNTIME.snapshot()
    runtime.mark_capped(env_rows)
    pushed = runtime.native_push.by_file() if runtime.native_push is not None else None
    settings = runtime.setting_rows() + provenance.library_settings(
        pool_rows, torch_info, os.environ, launch_env, facts, pushed, RUNTIME.applied_env(),
        framework_set={**provenance.set_at_import(), **RUNTIME.framework_set()})
    framework_info = Frameworks(torch_info)
    return Filled(
        machine=facts,
        process=ProcessInfo(pid=os.getpid(), python=_python_version(), executable=sys.executable,
                            implementation=IMPLEMENTATIONS.get(sys.implementation.name, sys.implementation.name),
                            platform=sys.platform),
        probes=probes,
        runtime=runtime,
        backend=Backend(runtime.backend, runtime.started,
                        pools.threading_layers(pool_rows),
                        None if framework_info.torch is None else framework_info.torch.aten_backend,
                        interpreter_facts(pools=pool_rows,
                                          torch_intra=None if torch_info is None else torch_info.intra_op),
                        serving.allocator_served(objects, os.environ, launch_env),
                        serving.openmp_served(objects, os.environ, launch_env)),
        pools=pool_rows,
        frameworks=framework_info,
        settings=settings,
        environment=env_rows,
        threads=attribute_owners(threads.live_threads(), maps=maps),
        outer=_outer_section(outer_threads, facts.usable_cpus, env_rows, launch_env),
        teams=_teams(settings, pool_rows, all_threads),
    )


def _teams(settings: list[Any], pool_rows: list[Any], all_threads: bool) -> Any:
    """The ``teams`` section: this thread and those that run a thread pool's tasks (``all_threads``:
    every Python thread); None when there is no other thread to show."""
    import threading

    from parinfo.process import thread_teams
    from parinfo.process.provenance import TORCH_ROWS
    from parinfo.records.unknown import Unknown

    module = sys.modules.get("parinfo.runtime.thread_limits")  # never imported: no thread was limited
    limited = {} if module is None else {t.native_id: (t.how, t.limits) for t in module.limited_threads()}
    here = threading.get_native_id()
    threads = [t for t in thread_teams.python_threads(limited)
               if all_threads or t.native_id == here or t.worker is not None]
    if len(threads) < 2:
        return None
    torch_last: Any = Unknown("torch is not imported")
    if any(thread_teams.follows(row) or row.library == TORCH_ROWS[0] for row in settings):
        from parinfo.process.torch_last_set import last_set_count

        torch_last = last_set_count()
    return thread_teams.build(settings, pool_rows, threads, here, torch_last)


def _attached(pid: int | None, children: bool, timeout: Any, root: str, imports: list[str] | None,
              torch: bool, outer_threads: int | None) -> Report:
    """The report of ``pid`` read from inside; option mixes that make no sense raise UsageError."""
    from parinfo.diagnostics.outside_report import pid_is_self as live_pid_is_self
    from parinfo.errors import UsageError
    from parinfo.outside.remote import open_process

    if pid is None or live_pid_is_self(pid):
        raise UsageError("attach reads another process (--pid PID): this one's report needs no attach")
    if timeout is not None:
        from parinfo.machine.checks import seconds
        from parinfo.outside.attach import MAX_TIMEOUT

        timeout = seconds(timeout, "timeout", 0.1, MAX_TIMEOUT)
    if imports or torch or outer_threads is not None:
        raise UsageError("attach reads a process as it is: imports, torch and outer_threads do not apply to it")
    proc = open_process(pid)  # the door: the one handle every reader of the report takes
    if children:
        from parinfo.diagnostics.attached import inspect_tree
        from parinfo.outside.attach import DEFAULT_TIMEOUT

        return inspect_tree(proc, DEFAULT_TIMEOUT if timeout is None else timeout, root)
    from parinfo.diagnostics.attached import inspect_attached

    return inspect_attached(proc, timeout=timeout, root=root)


def _outer_section(explicit: int | None, usable: int, env_rows: list[EnvRow],
                   launch_env: Any) -> OuterThreads:
    from parinfo.process import outer

    section = outer.outer_threads(explicit, usable)
    section.variables_set_by = outer.set_by(env_rows, section.framework, parinfo_set=RUNTIME.env_set(),
                                            launch_env=launch_env if isinstance(launch_env, dict) else None)
    return section
