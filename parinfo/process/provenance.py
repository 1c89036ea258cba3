"""Where each library's thread count came from: which variable, which default, or a call at run time.

Each library has its own rule (measured, see docs/process.md): the variables it reads in order, its
default, and its cap on a variable's request. The rules are facts of the library records
(:mod:`parinfo.process.libraries`); this module turns them into :class:`Model` objects and explains
a count with them. torch gets two models (intra-op, with and without MKL) and an inter-op one.

Libraries read their variables when they load, so the launch environment predicts them; when the
count in force matches the environment of now instead, the variable was set after launch but before
the library loaded. A count that no prediction explains was set at run time by an API call.

The rows it makes (:class:`SettingRow`) and what ``parinfo.apply`` set (:class:`SetByApply`) are
records of :mod:`parinfo.process.setting_row`; this module names them as before.
"""
from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from parinfo.process import libraries as reg
from parinfo.process.defaults import NO_FACTS, Cap, ModuleFacts, Rule, hardware_concurrency
from parinfo.process.pools import CONFLICT_NOTE, PoolRow
from parinfo.process.setting_row import Refused, SetByApply, SettingRow
from parinfo.process.variables import count_from_env
from parinfo.records.record import record
from parinfo.records.source import Kind, Source, library_default, run_time, unknown, variable
from parinfo.records.unknown import Unknown

__all__ = ["MODELS", "RUNTIME", "TORCH_KEYS", "TORCH_ROWS", "WATCH_MODULE", "LaunchEnviron", "Model",
           "ModuleLibrary", "Refused", "SetByApply", "SettingRow", "explain", "imported_libraries",
           "library_settings", "model_of", "predict", "read_after_apply", "set_at_import"]

if TYPE_CHECKING:
    from parinfo.machine.topology import MachineFacts
    from parinfo.process.frameworks import TorchInfo

RUNTIME = run_time("an API call", "set at run time (API call)")

#: The rows torch's two counts are shown in, and the profile keys that give them.
TORCH_ROWS = ("torch intra-op", "torch inter-op")
TORCH_KEYS = ("libraries.torch", "inter_op")
#: The module (parinfo/profiles/hook/_parinfo_import_watch.py, loaded by path under this name) that
#: sets torch's counts when ``import torch`` finishes: in a program launched by ``parinfo apply P --
#: COMMAND`` (the start-up hook) or after ``parinfo.apply()``; it records what it set.
WATCH_MODULE = "_parinfo_import_watch"


def set_at_import() -> dict[str, tuple[int, Source]]:
    """torch's counts a profile set when torch was imported in this process, from the watch's
    record: {row: (count, source)}; empty when nothing was set that way."""
    record = getattr(sys.modules.get(WATCH_MODULE), "SET", None)
    out: dict[str, tuple[int, Source]] = {}
    if not isinstance(record, dict):
        return out
    for row, key in zip(TORCH_ROWS, TORCH_KEYS, strict=True):
        found = record.get(row)
        if not (isinstance(found, tuple) and len(found) == 3):
            continue
        count, profile, who = found
        detail = f"{profile} ({key})"
        out[row] = (count, Source(Kind.PROFILE, detail, f"profile {detail}, set by {who} when torch was imported"))
    return out

#: The launch environment: a dict, or Unknown(why) when it cannot be read.
LaunchEnviron = Mapping[str, str] | Unknown


def read_after_apply(model: Model, key: str | None, environ: Mapping[str, str],
                     applied: Mapping[str, SetByApply] | None) -> SetByApply | None:
    """The apply() that set the variable ``model`` takes its count from (the first valid one), still
    set to its value, when the library (file path or module name ``key``) was not loaded yet then:
    the evidence that it read the value. None when a variable the user set decides."""
    if not applied or key is None:
        return None
    for var in model.precedence:
        if model.reads(var, environ) is None:
            continue  # unset or invalid: the library reads the next one
        found = applied.get(var)  # the variable that decides: set by apply(), or by someone else
        if found is not None and environ.get(var) == found.value and key not in found.loaded:
            return found
        return None
    return None


@record
class _Prediction:
    """What a library's rule predicts."""

    count: int | None
    source: Source  # a variable, the library's default, or unknown
    variable: str | None
    refused: Refused | None = None

    @property
    def phrase(self) -> str:
        return self.source.text


class Model(NamedTuple):
    """How one library decides its count: variables read in order, the default, a cap on requests,
    and the variables that steer the cap."""

    precedence: tuple[str, ...]
    default: Rule
    cap: Cap | None = None
    cap_vars: tuple[str, ...] = ()
    refused: int | None = None  # the count kept when a request above the cap is refused (numexpr)
    reads: Callable[[str, Mapping[str, str]], int | None] = count_from_env  # (variable, env) -> count it takes


def _no_model(name: str) -> Model:
    """The model of a library parinfo knows no rule for: its count is unknown."""

    def unknown(facts: MachineFacts, ctx: ModuleFacts) -> tuple[int | None, str]:
        return None, f"parinfo has no model for {name}"

    return Model((), unknown)


def model_of(lib: reg.Library) -> Model:
    """The count model of a library record."""
    return Model(lib.count_vars, lib.default, lib.cap, lib.cap_vars, lib.refused, _reads(lib))


def _reads(lib: reg.Library) -> Callable[[str, Mapping[str, str]], int | None]:
    """How ``lib`` reads a count from a variable: its family's parse, else parinfo's."""
    return lib.count_in if lib.parses_itself else count_from_env


def pool_model(lib: reg.Library, pool: reg.Pool) -> Model:
    """The count model of ``lib``'s other pool ``pool`` (its variables in the loaded version, the
    family's pool default and cap)."""
    name = pool.name

    def default(facts: MachineFacts, ctx: ModuleFacts) -> tuple[int | None, str]:
        return lib.pool_default(name, facts, ctx)

    def cap(facts: MachineFacts, env: Mapping[str, str], ctx: ModuleFacts | None) -> tuple[int | None, str]:
        return lib.pool_cap(name, facts, env, ctx)

    return Model(lib.pool_vars(name), default, cap, pool.cap_vars, None, _reads(lib))


def _torch_models() -> dict[str, Model]:
    lib = reg.family(reg.Torch)
    torch = model_of(lib)
    return {
        "torch intra-op": torch,
        "torch intra-op (no MKL)": Model(lib.vars_without_mkl(), torch.default),
        "torch inter-op": Model((), hardware_concurrency),
    }


MODELS: dict[str, Model] = {
    **{lib.name: model_of(lib) for lib in reg.records()
       if lib.has_default and lib.kind is not reg.LibraryKind.FRAMEWORK},
    **_torch_models(),
    **{f"{lib.name} {pool.name}": pool_model(lib, pool) for lib in reg.python_libraries() for pool in lib.pools},
}


def predict(model: Model, env: Mapping[str, str], facts: MachineFacts,
            ctx: ModuleFacts | None = None) -> _Prediction:
    """The count ``model`` takes from environment ``env`` on a machine with ``facts``.

    Invalid values are skipped, as the libraries skip them.
    """
    ctx = ctx or NO_FACTS
    for var in model.precedence:
        n = model.reads(var, env)
        if n is None:
            continue
        said = variable(var, env[var])
        if model.cap is not None:
            cap, why = model.cap(facts, env, ctx)
            if cap is not None and n > cap and model.refused is not None:
                refused = Refused(var, n, cap, why, model.refused)
                return _Prediction(model.refused, said.with_text(
                    f"{said.text} refused: above {why}, so {model.refused} runs instead"), var, refused)
            if cap is not None and n > cap:
                n, said = cap, said.with_text(f"{said.text}, capped at {why}")
        return _Prediction(n, said, var)
    n, why = model.default(facts, ctx)
    if n is None:
        return _Prediction(None, unknown(why), None)
    return _Prediction(n, library_default(why), None)


def _changes(model: Model, env: Mapping[str, str], launch: Mapping[str, str]) -> list[str]:
    out = []
    for var in model.precedence + model.cap_vars:
        if env.get(var) != launch.get(var):
            out.append(f"{var}={launch.get(var, '(unset)')} at launch, now {env.get(var, '(unset)')}")
    return out


def explain(library: str, count: int | None, model: Model, environ: Mapping[str, str],
            launch_environ: LaunchEnviron, facts: MachineFacts, ctx: ModuleFacts | None = None,
            runtime: Source = RUNTIME, extra_match: tuple[int | None, Source] | None = None,
            unread: str = "not readable without changing it",
            pushed: tuple[int, Source] | None = None, after_apply: SetByApply | None = None,
            read: str = "before this library loaded") -> SettingRow:
    """The provenance row of ``count`` in force for ``library`` (without owner and filepath).

    ``runtime`` is the source of a count no variable or default explains (set at run time by the
    calls it names); ``extra_match`` is (count, source): another explanation tried before run time
    (e.g. torch setting its own OpenMP runtime's count); ``pushed`` is (count, source) when
    parinfo's runtime pushed a count into this very library: it wrote last, so it is tried before the
    environment (``parinfo.apply`` also sets the variables, after the library read them);
    ``after_apply`` is the apply() whose variables this library read because it loaded after them
    (:func:`read_after_apply`): the environment of now decided its count, even where the launch
    environment predicts the same (``read`` says when the library read it: a pool sized when made
    reads it then); ``unread`` says why a ``count`` of None was not read.
    """
    launch = None if isinstance(launch_environ, Unknown) else launch_environ
    launch_pred = predict(model, environ if launch is None else launch, facts, ctx)
    now_pred = predict(model, environ, facts, ctx)
    changes = [] if launch is None else _changes(model, environ, launch)
    notes = []
    if launch is None:
        notes.append(f"launch environment {launch_environ}; predicted from the environment now")
    expected = launch_pred.count
    ignored: list[str] = []
    refused: Refused | None = None
    variable_: str | None = None
    source: Source
    if count is None:
        variable_ = launch_pred.variable
        source = unknown(unread)
        if launch_pred.count is not None:
            source = source.with_text(f"{source.text}; would be {launch_pred.count} by {launch_pred.phrase}")
    elif pushed is not None and count == pushed[0]:  # parinfo's runtime set it last
        source = pushed[1]
    elif after_apply is not None and now_pred.source.kind is Kind.VARIABLE and count == now_pred.count:
        variable_, expected, refused = now_pred.variable, now_pred.count, now_pred.refused
        source = Source(Kind.PROFILE, f"{after_apply.profile} ({now_pred.variable})",
                        f"{now_pred.phrase} (set by parinfo.apply, profile {after_apply.profile}, {read})")
    elif launch_pred.count is None:  # no model predicts this library's count
        source = launch_pred.source
    elif count == launch_pred.count:
        variable_, source, refused = launch_pred.variable, launch_pred.source, launch_pred.refused
        if changes and now_pred.count is not None and now_pred.count != count:
            notes.append("changed after launch, after this library read it (ignored): " + "; ".join(changes))
            ignored = [var for var in model.precedence + model.cap_vars
                       if launch is not None and environ.get(var) != launch.get(var)]
    elif count == now_pred.count:
        variable_, expected, refused = now_pred.variable, now_pred.count, now_pred.refused
        source = now_pred.source.noted("set after launch, before this library loaded")
    elif extra_match is not None and extra_match[0] == count:
        source = extra_match[1]
    else:
        source = runtime
        if changes:
            notes.append("; ".join(changes))
    return SettingRow(library, count, source, list(model.precedence), False, variable_, expected,
                      list(model.cap_vars), "; ".join(notes) or None, now_pred.count, ignored, refused)


#: A Python-module library as a process has it: its record, the module (or what stands for it: the
#: attributes its ``context`` reads, and ``__file__``) and its count in force (None: not read).
ModuleLibrary = tuple[reg.Library, Any, "int | None"]


def imported_libraries() -> list[ModuleLibrary]:
    """The Python-module libraries (numexpr...) this process has imported, with their counts."""
    out = []
    for lib in reg.python_libraries():
        module = sys.modules.get(lib.module or "")
        if module is not None:
            out.append((lib, module, lib.read_count(module)))
    return out


def _module_rows(lib: reg.Library, module: Any, count: int | None, environ: Mapping[str, str],
                 launch_environ: LaunchEnviron, facts: MachineFacts,
                 applied: Mapping[str, SetByApply] | None = None,
                 set_here: Mapping[str, tuple[int, Source]] | None = None) -> list[SettingRow]:
    """The rows of a library that is a Python module (numexpr...), imported in the process: its
    main count (``count``), then each of its other pools ("pyarrow io"), read here. A pool sized
    when made (the library's ``sized_at_use`` for its main pool, the :class:`Pool`'s for another)
    reads the environment of now, not the launch's, its count is what a pool made now gets, and its
    note says so; what the environment imposes on a pool (:meth:`imposed`) comes before its
    precedence (for a pool with a getter: when the getter gave nothing). ``set_here``: {row: (count,
    source)} for the counts ``parinfo.apply`` set through the library's setter, which explain them
    while they hold."""
    env = environ if lib.sized_at_use or isinstance(launch_environ, Unknown) else launch_environ
    ctx = lib.context(module, env)
    setter = lib.set_in_module
    pools: list[tuple[str, str | None, int | None, Model, Source, str]] = [
        (lib.name, None, count, model_of(lib), run_time(lib.set_call()) if setter else RUNTIME, lib.sized_at_use)]
    pools += [(f"{lib.name} {p.name}", p.name, lib.read_pool(p.name, module), pool_model(lib, p),
               run_time(lib.pool_call(p.name)) if setter and p.calls is not None else RUNTIME,
               p.sized_at_use) for p in lib.pools]
    rows = []
    for name, pool, n, model, runtime, sized in pools:
        sized = sized if n is None else ""  # a pool whose getter answers has been sized: its count is read
        imposed = lib.imposed(environ, pool) if sized or n is None else None
        if sized:
            n = imposed[0] if imposed else predict(model, environ, facts, ctx).count
        row = explain(name, n, model, environ, environ if sized else launch_environ, facts, ctx,
                      runtime=runtime, unread=lib.unread, pushed=(set_here or {}).get(name),
                      after_apply=read_after_apply(model, "" if sized else lib.module, environ, applied),
                      read="before this library read it" if sized else "before this library loaded")
        if imposed is not None:
            row.count, row.source = imposed
        if sized:
            row.note = "; ".join(w for w in (row.note, sized) if w)
        row.owner, row.filepath = lib.module, getattr(module, "__file__", None)
        rows.append(row)
    said = lib.row_note(module)
    if said:
        rows[0].note = f"{rows[0].note}; {said}" if rows[0].note else said
    return rows


def predicted_rows(libs: list[reg.Library], launch_environ: Mapping[str, str], facts: MachineFacts,
                   why: str) -> list[SettingRow]:
    """The rows of Python-module libraries a process read from outside has loaded (``libs``): each
    pool's count is unknown (``why``: a Python module keeps it inside the process), and what the
    launch environment predicts for it is said as a prediction, never as a count in force."""
    rows = []
    for lib in libs:
        ctx = lib.context(None, launch_environ)
        models = [(lib.name, model_of(lib))] + [(f"{lib.name} {p.name}", pool_model(lib, p)) for p in lib.pools]
        for name, model in models:
            row = explain(name, None, model, launch_environ, launch_environ, facts, ctx, unread=why)
            row.owner = lib.module
            rows.append(row)
    return rows


def library_settings(pools: list[PoolRow], torch: TorchInfo | None, environ: Mapping[str, str],
                     launch_environ: LaunchEnviron | None, facts: MachineFacts,
                     pushed: Mapping[str, tuple[int, Source]] | None = None,
                     applied: Mapping[str, SetByApply] | None = None,
                     modules: list[ModuleLibrary] | None = None,
                     framework_set: Mapping[str, tuple[int, Source]] | None = None) -> list[SettingRow]:
    """For each library in force, the count and the source that decided it.

    ``pools``: :func:`parinfo.process.pools.native_pools`; ``torch``: :func:`parinfo.process.frameworks.torch_info`
    or None; ``environ``: the environment now; ``launch_environ``: the launch environment
    (:func:`parinfo.process.environment.launch_environment`), Unknown(why), or None to read it here; ``facts``: a
    :class:`parinfo.machine.topology.MachineFacts`; ``pushed``: {library file: (count, source)} for
    the pools parinfo's runtime pushed a count into, which explains them
    (:meth:`parinfo.runtime.snapshot.Push.by_file`); ``applied``: the
    variables ``parinfo.apply`` set and what was loaded then (``Runtime.applied_env()``), which
    explains a library that loaded after them; ``framework_set``: {row: (count, source)} for the
    framework counts a profile set in this process (torch's: by ``parinfo.apply`` with torch
    imported, ``Runtime.framework_set()``, or at torch's import, :func:`set_at_import`), which
    explain them while they hold. One row per pool
    row, then torch's intra-op and
    inter-op rows when torch is given, then each Python-module library (numexpr...) that is
    imported (``modules``; default: this process's, :func:`imported_libraries`).
    """
    if launch_environ is None:
        from parinfo.process.environment import launch_environment

        launch_environ = launch_environment()
    rows: list[SettingRow] = []
    pushed = pushed or {}
    torch_intra = torch.intra_op if torch else None
    torch_rows = _torch_rows(torch, environ, launch_environ, facts, applied, framework_set) if torch else []
    first = torch_rows[0].source if torch_rows else None
    torch_set_at_run_time = first is not None and first.kind is Kind.RUN_TIME
    for pool in pools:
        library = pool.library
        model = MODELS.get(library) or _no_model(library)
        extra = None
        rec = reg.find(library)
        along = rec.set_along if rec is not None else None
        if along is not None and pool.owner == along.framework and torch_intra:
            extra = _set_by_torch(along, torch_intra, torch_set_at_run_time, _openmp_build(torch))
        unread = CONFLICT_NOTE if pool.note == CONFLICT_NOTE else "not readable without changing it"
        row = explain(library, pool.num_threads, model, environ, launch_environ, facts,
                      extra_match=extra, unread=unread, pushed=pushed.get(pool.filepath or ""),
                      after_apply=read_after_apply(model, pool.filepath, environ, applied))
        row.owner, row.filepath = pool.owner, pool.filepath
        rows.append(row)
    rows.extend(torch_rows)
    for lib, module, count in imported_libraries() if modules is None else modules:
        rows.extend(_module_rows(lib, module, count, environ, launch_environ, facts, applied, framework_set))
    return rows


#: What changes torch's intra-op count at run time in its OpenMP build, where torch reads the calling
#: thread's OpenMP count: nothing left in the process tells these apart, so none is named alone.
_OPENMP_CALLERS = ("torch.set_num_threads, or an OpenMP limit in this thread (threadpoolctl's "
                   "threadpool_limits, omp_set_num_threads)")


def _openmp_build(torch: TorchInfo | None) -> bool:
    return torch is not None and "openmp" in (torch.aten_backend or "").lower()


def _set_by_torch(along: reg.SetAlong, intra: int, set_at_run_time: bool,
                  openmp_build: bool) -> tuple[int | None, Source]:
    """How torch, with intra-op count ``intra``, set the count of a library it sets along with its
    own (its OpenMP runtime, MKL: the library record's ``set_along``): (count, source) for
    :func:`explain`'s ``extra_match``. Changed at run time in torch's OpenMP build, the count may
    come from torch.set_num_threads (which sets its OpenMP runtime and MKL too) or from an OpenMP
    limit set in this thread (which torch and MKL's OpenMP layer read): the words name both."""
    framework = along.framework
    if set_at_run_time:
        if openmp_build:
            return intra, run_time(_OPENMP_CALLERS,
                                   f"set at run time to torch's intra-op count ({intra}): by {_OPENMP_CALLERS}")
        call = reg.library(framework).set_call(intra)
        return intra, run_time(call, f"set at run time by {call}, which sets {framework}'s {along.named} too")
    return intra, Source(Kind.FRAMEWORK, framework, f"set by {framework} to its intra-op count ({intra}){along.when}")


def _torch_rows(torch: TorchInfo, environ: Mapping[str, str], launch_environ: LaunchEnviron,
                facts: MachineFacts, applied: Mapping[str, SetByApply] | None = None,
                framework_set: Mapping[str, tuple[int, Source]] | None = None) -> list[SettingRow]:
    """torch's intra-op and inter-op provenance rows."""
    rows = []
    framework_set = framework_set or {}
    lib = reg.family(reg.Torch)
    if torch:
        intra_model = MODELS["torch intra-op" if torch.mkl_available else "torch intra-op (no MKL)"]
        row = explain("torch intra-op", torch.intra_op, intra_model, environ, launch_environ, facts,
                      runtime=(run_time(_OPENMP_CALLERS, f"set at run time in this thread: by {_OPENMP_CALLERS}, "
                                        "which torch reads here")
                               if _openmp_build(torch) else run_time(lib.set_call())),
                      pushed=framework_set.get(TORCH_ROWS[0]),
                      after_apply=read_after_apply(intra_model, lib.module, environ, applied))
        row.owner = lib.module
        rows.append(row)
        ctx = ModuleFacts(hardware_concurrency=torch.hardware_concurrency)
        row = explain("torch inter-op", torch.inter_op, MODELS["torch inter-op"], environ,
                      launch_environ, facts, ctx, runtime=run_time(lib.interop_call()),
                      pushed=framework_set.get(TORCH_ROWS[1]))
        row.owner = lib.module
        rows.append(row)
    return rows
