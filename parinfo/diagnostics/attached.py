"""The report of another process read from inside: ``parinfo show --pid PID --attach``.

What the process holds inside (each pool's count through the library's own getter, torch's counts,
the environment now, its Python threads, parinfo's runtime when it runs there) comes from the
script :func:`parinfo.outside.attach.attach` runs in it; the rest (its files, launch environment,
OS threads, machine facts, live counters) is read from /proc as for ``show --pid``.
:func:`read_attached` fills the report's sections with the same functions
:func:`parinfo.diagnostics.report.inspect` uses inside a process, so that every count and its source
read the same as the process's own ``parinfo.inspect()`` (counts that hold per thread are the main
thread's, where the script runs); the one assembler (:mod:`parinfo.diagnostics.assemble`) makes the
report.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Collection
from types import SimpleNamespace
from typing import TYPE_CHECKING

from parinfo.diagnostics.model import Report
from parinfo.diagnostics.parts import ProcessRead
from parinfo.errors import UsageError
from parinfo.process.library_inference import onnxruntime_version_in_view
from parinfo.records.record import record
from parinfo.records.unknown import Unknown

if TYPE_CHECKING:
    from parinfo.diagnostics.assemble import Filled
    from parinfo.diagnostics.model import ProcessInfo
    from parinfo.machine.procfs import Proc
    from parinfo.machine.topology import MachineFacts
    from parinfo.outside.attach import Attached
    from parinfo.outside.attach.result import Answer, ParinfoRead
    from parinfo.outside.remote import Identity
    from parinfo.process.frameworks import TorchInfo
    from parinfo.process.pools import PoolRow
    from parinfo.process.provenance import ModuleLibrary, SettingRow
    from parinfo.process.threads import ThreadList
    from parinfo.runtime.snapshot import RuntimeSection

__all__ = ["EACH_S", "LEAST_S", "Inside", "TreeRead", "inspect_attached", "inspect_tree", "read_attached",
           "read_inside", "read_process", "read_tree", "unreadable", "waits_for_parinfo"]

#: A process tree read inside (``show --pid P --children --attach``, ``watch --children --attach``,
#: ``host --attach``): the most one process may take of the total time, and the least left worth
#: trying another.
EACH_S = 2.0
LEAST_S = 0.05


def _pool_rows(attached: Attached, runtimes: list[PoolRow], objects: list[str]) -> list[PoolRow]:
    """The runtime rows of the process's maps, with what each library said of itself inside."""
    from parinfo.process import libraries as reg
    from parinfo.process.pools import mark_duplicates, torch_mkl_row

    answer = attached.answer
    layers = {lib.name: lib.layer_in(objects) for lib in reg.records() if lib.layer_files}
    rows = []
    for row in runtimes:
        read = answer.pools.get(row.filepath or "")
        if read is not None:
            row.num_threads, row.version, row.threading_layer = read.count, read.version, read.layer
            row.architecture, row.seen_by = read.architecture, "attach (the library's own getters)"
            if read.why is not None:
                row.note = f"not read inside the process: {read.why}"
        elif "pools" in answer.errors:
            row.note = f"not read inside the process: {answer.errors['pools']}"
        if row.threading_layer is None and row.library in layers:  # told by the files beside it (MKL)
            row.threading_layer = layers[row.library]
        rows.append(row)
    torch_row = torch_mkl_row(objects, rows, answer.torch)
    if torch_row is not None:
        rows.append(torch_row)
    mark_duplicates(rows)
    return rows


def _module_libraries(answer: Answer) -> list[ModuleLibrary]:
    """The Python-module libraries the process imported, as :func:`library_settings` takes them:
    a stand-in module holding what was read inside (its file and the attributes its record names).
    Only names the library's record gives are set: a name the process chose sets nothing (it could
    name ``__class__``)."""
    from parinfo.process import libraries as reg

    out: list[ModuleLibrary] = []
    for read in answer.python_libs:
        lib = reg.find(read.name)
        if lib is None or lib.kind is not reg.LibraryKind.PYTHON:
            continue
        module = SimpleNamespace(__file__=read.file)
        for dotted in lib.module_facts:
            if dotted not in read.facts:
                continue
            holder = module
            *parts, last = dotted.split(".")
            for part in parts:
                holder = holder.__dict__.setdefault(part, SimpleNamespace())
            setattr(holder, last, read.facts[dotted])
        for pool in lib.pools:  # each other pool's getter answers what it answered inside
            if pool.calls is not None and pool.calls.getter in read.pools:
                setattr(module, pool.calls.getter, _answered(read.pools[pool.calls.getter]))
        out.append((lib, module, read.count))
    return out


def _answered(count: int | None) -> Callable[[], int | None]:
    """A getter for a stand-in module that gives what the real one gave inside the process."""
    return lambda: count


def onnxruntime_version(answer: Answer) -> str | Unknown:
    """The ``onnxruntime.__version__`` the attached process answered, or Unknown(why): which of its
    variables it reads is its version's business, never parinfo's own import's."""
    from parinfo.process import libraries as reg
    from parinfo.process.library_inference import OnnxRuntime

    name = reg.family(OnnxRuntime).name
    for read in answer.python_libs:
        if read.name == name:
            found = read.facts.get("__version__")
            return found if isinstance(found, str) else Unknown(f"its {name} gave no __version__")
    return Unknown(f"{name} is not imported there")


def _getters_raised(settings: list[SettingRow], answer: Answer) -> None:
    """The row of a library whose getter raised inside the process says so ("unknown (cv2.getNumThreads()
    raised error: ...)"), and what the environment would give, where nothing more telling (a variable
    the library refuses) explains it already."""
    from parinfo.process import libraries as reg
    from parinfo.records.source import unknown

    raised = {read.name: read.why for read in answer.python_libs if read.why is not None and read.count is None}
    for row in settings:
        lib = reg.find(row.library)
        why, source = raised.get(row.library), row.source
        if why is None or lib is None or row.count is not None or source is None or source.detail != lib.unread:
            continue
        _, would, prediction = source.text.partition("; would be ")
        row.source = unknown(why, f"unknown ({why})" + (f"; would be {prediction}" if would else ""))


def _threads(proc: Proc, answer: Answer) -> ThreadList:
    """The OS threads of ``proc`` from /proc, each with the name of the Python thread it runs."""
    from parinfo.process.thread_owners import attribute
    from parinfo.process.threads import live_threads

    listing = live_threads(proc)
    names = {t.native_id: t.name for t in answer.threads or () if t.native_id is not None}
    for thread in listing.threads:
        thread.python_name = names.get(thread.tid)
    return attribute(listing, proc, {tid: name for tid, name in names.items() if name is not None})


@record
class Inside:
    """What an attach gives, made into the report's rows: the answer (``found``); the pool rows
    (``pools``) with what each library said of itself; the OS threads with their Python names;
    torch's settings (None: not imported); parinfo's runtime state there (``runtime``, None: not
    read); each count in force with the source that decided it (``settings``: rows of
    :func:`parinfo.process.provenance.library_settings`, parinfo's own pools aside); and what was
    read outside to explain them: the launch environment (``launch``, or "unknown (why)") and the
    machine as the process sees it (``facts``)."""

    found: Attached
    pools: list[PoolRow]
    threads: ThreadList
    torch: TorchInfo | None
    runtime: RuntimeSection | None
    settings: list[SettingRow]
    launch: dict[str, str] | Unknown
    facts: MachineFacts

    def counts(self) -> list[SettingRow]:
        """Every count in force with the source that decided it, as the process's own report lists
        them ("Thread counts in force"): parinfo's own pools first when parinfo runs there."""
        own = self.runtime.setting_rows() if self.runtime is not None else []
        return own + self.settings

    def pool_counts(self) -> list[PoolRow]:
        """The pool rows (copies), each with its count in force (``num_threads``) and the source that
        decided it (``count_source``) as the process's own report explains them; a pool not read
        inside has None and "unknown (why)"."""
        import dataclasses

        from parinfo.records.source import unknown

        explained = {row.filepath: row for row in self.settings}
        out = []
        for row in self.pools:
            setting = explained.get(row.filepath)
            count = row.num_threads if setting is None else setting.count
            source = (setting.source if setting is not None and setting.source is not None
                      else unknown(row.note or "not read inside the process"))
            out.append(dataclasses.replace(row, num_threads=count, count_source=source))
        return out

    @property
    def read(self) -> str:
        """How it was read, in words: the means and the round trip."""
        return f"{self.found.means}, {self.found.seconds * 1000:.0f} ms"


def read_inside(proc: Proc, runtimes: list[PoolRow], objects: list[str], launch: dict[str, str] | Unknown,
                facts: MachineFacts, timeout: float) -> Inside:
    """Attach to ``proc`` (its runtime rows and loaded objects from its maps, its launch environment
    and machine facts read outside) and explain what it answered, as ``parinfo.inspect()`` would
    inside it. Raises the one-line errors of :func:`parinfo.outside.attach.attach`."""
    from parinfo.outside import attach
    from parinfo.process import libraries as reg, pools, provenance
    from parinfo.process.frameworks import torch_info_of, torch_unread
    from parinfo.records.convert import load
    from parinfo.runtime.settings import machine_of
    from parinfo.runtime.snapshot import RuntimeSection

    conflict = bool(pools.openmp_conflict(objects))
    found = attach.attach(proc, [(r.filepath, r.library) for r in runtimes if r.filepath],
                          machine_of(facts), timeout=timeout, skip_native=conflict)
    answer = found.answer
    pool_rows = _pool_rows(found, runtimes, objects)
    listing = _threads(proc, answer)
    torch = None
    if reg.family(reg.Torch).is_loaded(answer.modules) or answer.torch is not None:
        torch = (torch_unread(None, pools.CONFLICT_NOTE) if conflict
                 else torch_info_of(answer.torch, listing) if answer.torch is not None else None)
    inside = answer.parinfo
    rt = (load(RuntimeSection, inside.info, strict=False)  # the attached process's answer: hostile
          if inside is not None and inside.info is not None else None)
    applied = inside.applied if inside is not None else None
    push = rt.native_push if rt is not None else None
    with onnxruntime_version_in_view(onnxruntime_version(answer)):
        settings = provenance.library_settings(pool_rows, torch, answer.environ, launch, facts,
                                               push.by_file() if push is not None else None, applied,
                                               modules=_module_libraries(answer))
    _getters_raised(settings, answer)
    return Inside(found, pool_rows, listing, torch, rt, settings, launch, facts)


def read_process(proc: Proc, timeout: float, root: str = "/") -> Inside:
    """Attach to ``proc``, its maps, launch environment and machine facts read outside first (see
    :func:`read_inside`). Raises the one-line errors of :func:`parinfo.outside.attach.attach` (one
    too for an answer that breaks its reading in any way), and
    ProcessGone or NotAProcess for a pid that names no process parinfo can report on."""
    from parinfo.machine.topology import machine_facts
    from parinfo.outside import attach, remote
    from parinfo.process import pools
    from parinfo.process.tasks import NoAccess

    pid = proc.pid or 0
    proc.check()
    try:
        maps = remote.maps_text(proc)
    except NoAccess:
        raise attach.AttachError(f"cannot attach to pid {pid}: {proc.attach_refusal()}") from None
    try:
        launch: dict[str, str] | Unknown = remote.environment(proc)
    except NoAccess:
        launch = Unknown(proc.permission_reason())
    facts = machine_facts(root, proc)
    try:
        return read_inside(proc, remote.loaded_runtimes(proc, maps), pools.loaded_objects(maps), launch, facts,
                           timeout)
    except UsageError:
        raise
    except Exception as exc:  # an answer parinfo could not make sense of: one line, never a traceback
        raise attach.AttachError(unreadable(pid, exc)) from None


@record
class TreeRead:
    """What :func:`read_tree` did: the processes read inside (``inside``, by pid), how each process
    was read (``reads``, in the tree's order), and the seconds all attaches took together."""

    inside: dict[int, Inside]
    reads: list[ProcessRead]
    seconds: float


def unreadable(pid: int, exc: Exception) -> str:
    """The words for an attach that failed in a way parinfo did not foresee (an answer it could not
    make into a report): that process is unknown, the others are read on."""
    from parinfo.safe_text import escape_controls

    return escape_controls(f"pid {pid}'s answer could not be made into a report ({type(exc).__name__}: {exc})"[:400])


def waits_for_parinfo(pid: int, ancestors: Collection[int]) -> str | None:
    """Why parinfo does not try to attach to ``pid`` in a tree or a scan, or None: it is parinfo
    itself, or one of its ancestors (``ancestors``: :func:`parinfo.outside.remote.ancestors`), a
    shell, test runner or launcher that waits for parinfo to end, typically in a call into C: its
    main thread would run the script only once parinfo has gone, and the time would be spent for
    nothing."""
    import os

    if pid == os.getpid():
        return "it is parinfo itself"
    if pid in ancestors:
        return (f"pid {pid} is an ancestor of parinfo (pid {os.getpid()}) and waits for it: its main thread "
                "would run the script only once parinfo has ended")
    return None


def read_tree(members: list[Proc], budget: float, root: str = "/") -> TreeRead:
    """Attach to each of ``members`` (their handles) in turn within ``budget`` seconds in all (each at most
    :data:`EACH_S` of what is left): every process that may be attached to (CPython 3.14+, remote
    debugging on, permitted) is read inside; each other one, refused, not tried (parinfo itself or
    an ancestor that waits for it: :func:`waits_for_parinfo`) or left untried once the time is
    spent, says why, and its counts are read from outside by the caller. Never raises for one
    process: a tree's reading goes on."""
    from parinfo.outside.remote import ancestors

    deadline = time.monotonic() + budget
    began = time.monotonic()
    inside: dict[int, Inside] = {}
    reads: list[ProcessRead] = []
    waiting = set(ancestors())
    for proc in members:
        pid = proc.pid or 0
        why = waits_for_parinfo(pid, waiting)
        if why is not None:
            reads.append(ProcessRead(pid, False, f"not attached: {why}"))
            continue
        left = deadline - time.monotonic()
        if left < LEAST_S:
            reads.append(ProcessRead(pid, False, f"not attached: the {budget:g} s for the tree's attaches was spent "
                                                 "(--timeout gives more)"))
            continue
        try:
            read = read_process(proc, min(left, EACH_S), root)
            read.pool_counts()
        except UsageError as exc:
            reads.append(ProcessRead(pid, False, f"not attached: {exc}"))
            continue
        except Exception as exc:  # one process's answer, however odd, never ends the tree's reading
            reads.append(ProcessRead(pid, False, f"not attached: {unreadable(pid, exc)}"))
            continue
        inside[pid] = read
        reads.append(ProcessRead(pid, True, read.read))
    return TreeRead(inside, reads, time.monotonic() - began)


def inspect_tree(proc: Proc, timeout: float, root: str = "/") -> Report:
    """The report of process ``proc`` and its descendants (``show --pid PID --children --attach``):
    each process of the tree that may be attached to read inside within ``timeout`` seconds in all
    (:func:`read_tree`), its pools' counts with the sources its own report gives; the others read
    from outside; ``process.tree_reads`` says how each process was read."""
    from parinfo.diagnostics.outside_report import inspect_pid
    from parinfo.outside import remote

    proc.check()
    members = [proc, *remote.children(proc)]
    tree = read_tree(members, timeout, root)
    inside = {p: read.pool_counts() for p, read in tree.inside.items()}
    return inspect_pid(proc, children=True, root=root, members=members, inside=inside, reads=tree.reads)


def inspect_attached(proc: Proc, *, timeout: float | None = None, root: str = "/") -> Report:
    """The report of process ``proc`` (CPython 3.14+) read from inside through ``sys.remote_exec``:
    :func:`read_attached` and :func:`parinfo.diagnostics.assemble.assemble`.

    Raises a one-line usage error when it cannot be had: ProcessGone, NotAProcess (a kernel thread,
    a zombie), or :class:`parinfo.outside.attach.AttachError` (an older Python, remote debugging
    off, not permitted, no Python code run within ``timeout`` seconds...).
    """
    from parinfo.diagnostics.assemble import assemble
    from parinfo.outside import attach

    read = read_process(proc, attach.DEFAULT_TIMEOUT if timeout is None else timeout, root)
    return assemble(read_attached(proc, read), proc, root)


def read_attached(proc: Proc, read: Inside) -> Filled:
    """What the attach ``read`` of ``proc`` gives of its report, each section as the process's own
    ``parinfo.inspect()`` would fill it (the rest read outside)."""
    from parinfo.diagnostics.assemble import Filled
    from parinfo.diagnostics.model import Backend, Frameworks
    from parinfo.outside import remote
    from parinfo.process import environment as envmod, outer, pools
    from parinfo.process.interpreter import interpreter_facts
    from parinfo.process.probing import Probes

    answer, torch, rt, launch = read.found.answer, read.torch, read.runtime, read.launch
    environ, inside, python = answer.environ, answer.parinfo, answer.python
    runtime = _runtime_section(rt, inside)
    version = python.version_info[:2] if len(python.version_info) >= 2 else None
    with onnxruntime_version_in_view(onnxruntime_version(answer)):
        env_rows = envmod.environment_report(environ, launch, modules=answer.modules,
                                             python=(version[0], version[1]) if version else None)
    runtime.mark_capped(env_rows)
    applied = inside.applied if inside is not None else None
    framework_info = Frameworks(torch)
    gil = python.gil_enabled
    interpreter = interpreter_facts(
        config_var=lambda name: None if python.free_threaded is None else int(python.free_threaded),
        is_gil_enabled=(lambda: gil) if gil is not None else None,
        xoptions={} if python.x_gil is None else {"gil": python.x_gil}, environ=environ,
        reenabled_by=(inside.gil_reenabled_by if inside is not None else None) or False,
        python_threads=answer.python_threads, pools=read.pools,
        torch_intra=None if torch is None else torch.intra_op)
    outer_section = outer.outer_of_modules(answer.modules)
    outer_section.variables_set_by = outer.set_by(
        env_rows, outer_section.framework,
        parinfo_set={name: s.value for name, s in (applied or {}).items()},
        launch_env=launch if isinstance(launch, dict) else None)
    return Filled(
        machine=read.facts, process=_attached_process(remote.identity(proc), read, answer),
        probes=Probes(note="attached: nothing was imported into the process"), runtime=runtime,
        backend=Backend(runtime.backend, runtime.started, pools.threading_layers(read.pools),
                        None if framework_info.torch is None else framework_info.torch.aten_backend, interpreter),
        pools=read.pools, frameworks=framework_info, threads=read.threads,
        settings=(runtime.setting_rows() if rt is not None else []) + read.settings,
        environment=env_rows, outer=outer_section)


def _runtime_section(rt: RuntimeSection | None, inside: ParinfoRead | None) -> RuntimeSection:
    """parinfo's runtime in the process as read inside, or why it has none that can be read."""
    from parinfo.diagnostics.model import RuntimeSection

    if rt is not None:
        return rt
    if inside is None or not inside.runtime_loaded:
        return RuntimeSection(unknown="parinfo's runtime is not loaded in the process: it has no counts there")
    return RuntimeSection(unknown=f"parinfo {inside.version or '(version unknown)'} in the process is older "
                                  "than attach: its runtime cannot be read from inside")


def _attached_process(ident: Identity, read: Inside, answer: Answer) -> ProcessInfo:
    """The ``process`` section of a process read inside: who it is, as its own interpreter says,
    how it was read, and what could not be read there."""
    from parinfo.diagnostics.model import ProcessInfo
    from parinfo.diagnostics.parts import IMPLEMENTATIONS
    from parinfo.records.unknown import unknown

    python, inside = answer.python, answer.parinfo
    process = ProcessInfo(pid=ident.pid, name=ident.name, ppid=ident.ppid, cmdline=ident.cmdline,
                          python=ident.python, executable=ident.executable, inspected_from=ident.inspected_from,
                          note=ident.note)
    process.python, process.executable = python.version or process.python, python.executable or process.executable
    process.implementation = IMPLEMENTATIONS.get(python.implementation or "", python.implementation)
    process.platform = python.platform
    process.attached = read.read
    if answer.errors:
        process.unreadable = {f"inside: {part}": unknown(why) for part, why in answer.errors.items()}
    if inside is not None and inside.busy:
        process.unreadable = {**(process.unreadable or {}), "parinfo.apply's variables": unknown(inside.busy)}
    return process
