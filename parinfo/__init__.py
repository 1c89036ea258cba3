"""parinfo: show, explain and set how a Python process uses its CPU threads.

Importing parinfo changes nothing in the process; the public names below load their modules on
first use so that ``import parinfo`` stays cheap.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from parinfo.version import __version__

_EXPORTS: dict[str, str] = {
    # inspector
    "inspect": "parinfo.diagnostics.report",
    "parallel_info": "parinfo.diagnostics.torch_block",
    "Report": "parinfo.diagnostics.report",
    "machine_facts": "parinfo.machine.topology",
    "MachineFacts": "parinfo.machine.topology",
    "Source": "parinfo.records.source",
    "SourceKind": "parinfo.records.source",
    # runtime
    "set_num_threads": "parinfo.runtime",
    "get_num_threads": "parinfo.runtime",
    "set_num_interop_threads": "parinfo.runtime",
    "get_num_interop_threads": "parinfo.runtime",
    "fork": "parinfo.runtime",
    "wait": "parinfo.runtime",
    "Future": "parinfo.runtime",
    "parallel_for": "parinfo.runtime",
    "parallel_reduce": "parinfo.runtime",
    "in_parallel_region": "parinfo.runtime",
    "get_thread_num": "parinfo.runtime",
    "profile": "parinfo.runtime",
    "refresh": "parinfo.runtime",
    # limits in the threads that call
    "thread_limits": "parinfo.runtime.thread_limits",
    "worker_initializer": "parinfo.runtime.thread_limits",
    "limit_new_threads": "parinfo.runtime.thread_limits",
    "limited_threads": "parinfo.runtime.thread_limits",
    # profiles and apply
    "load_profile": "parinfo.profiles.loading",
    "resolve_profile": "parinfo.profiles.loading",
    "apply": "parinfo.profiles.applying",
    "Applied": "parinfo.profiles.applied",
    "Plan": "parinfo.profiles.plan",
    # live evidence
    "watch": "parinfo.watching.sample",
    "Sample": "parinfo.watching.model",
    # tune
    "tune": "parinfo.tuning.sweep",
    # errors
    "ParinfoError": "parinfo.errors",
    "UsageError": "parinfo.errors",
    "ProfileError": "parinfo.errors",
    "ApplyError": "parinfo.errors",
    "TuneError": "parinfo.errors",
}

__all__ = ["__version__", *_EXPORTS]


#: Subpackages reachable as attributes without importing them first (``parinfo.runtime.info()``,
#: ``parinfo.fleet.gather(client)``).
_SUBPACKAGES = ("machine", "process", "runtime", "diagnostics", "profiles", "tuning", "fleet", "watching", "cli")


def __getattr__(name: str) -> Any:
    if name in _SUBPACKAGES:
        return importlib.import_module(f"parinfo.{name}")
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'parinfo' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext parinfo``: the ``%parinfo`` (report) and ``%parinfo_watch`` (live samples) magics."""
    from parinfo.cli.magics import load

    load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    """``%unload_ext parinfo``: remove the magics."""
    from parinfo.cli.magics import unload

    unload(ipython)


def __dir__() -> list[str]:
    return sorted(__all__)


if TYPE_CHECKING:  # pragma: no cover
    # The lazy exports above, for type checkers (``X as X``: re-exported).
    from parinfo.diagnostics.report import Report as Report, inspect as inspect
    from parinfo.diagnostics.torch_block import parallel_info as parallel_info
    from parinfo.errors import (
        ApplyError as ApplyError,
        ParinfoError as ParinfoError,
        ProfileError as ProfileError,
        TuneError as TuneError,
        UsageError as UsageError,
    )
    from parinfo.machine.topology import MachineFacts as MachineFacts, machine_facts as machine_facts
    from parinfo.profiles.applied import Applied as Applied
    from parinfo.profiles.applying import apply as apply
    from parinfo.profiles.loading import load_profile as load_profile, resolve_profile as resolve_profile
    from parinfo.profiles.plan import Plan as Plan
    from parinfo.records.source import Source as Source, SourceKind as SourceKind
    from parinfo.runtime import (
        Future as Future,
        fork as fork,
        get_num_interop_threads as get_num_interop_threads,
        get_num_threads as get_num_threads,
        get_thread_num as get_thread_num,
        in_parallel_region as in_parallel_region,
        parallel_for as parallel_for,
        parallel_reduce as parallel_reduce,
        profile as profile,
        refresh as refresh,
        set_num_interop_threads as set_num_interop_threads,
        set_num_threads as set_num_threads,
        wait as wait,
    )
    from parinfo.runtime.thread_limits import (
        limit_new_threads as limit_new_threads,
        limited_threads as limited_threads,
        thread_limits as thread_limits,
        worker_initializer as worker_initializer,
    )
    from parinfo.tuning.sweep import tune as tune
    from parinfo.watching.model import Sample as Sample
    from parinfo.watching.sample import watch as watch
