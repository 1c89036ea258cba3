"""Import the modules whose native pools the report should show (like threadpoolctl's ``-i``).

Native pools exist only once their library is loaded, so ``parinfo show`` imports numpy (when
installed) before it looks; other modules only when asked. torch is never imported implicitly.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from dataclasses import field

from parinfo.records.convert import OMIT_NONE
from parinfo.records.record import record
from parinfo.records.unknown import describe

DEFAULT_PROBES = ("numpy",)


@record
class Probes:
    """What was imported so that native pools load: the report's ``probes`` section (its JSON).

    - ``requested``: the module names asked for, cleaned (stripped, de-duplicated, in order).
    - ``imported``: those this call imported.
    - ``already_imported``: those that were in sys.modules already.
    - ``failed``: {module: "ExceptionType: message"} for those that could not be imported.
    - ``environ_changed``: {variable: value or None} for thread variables an import set, changed or
      removed.
    - ``note``: a remark (a process read from outside: nothing was imported into it), or None (and
      then not in its JSON).
    """

    requested: list[str] | None = field(default_factory=list)
    imported: list[str] = field(default_factory=list)
    already_imported: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    environ_changed: dict[str, str | None] = field(default_factory=dict)
    note: str | None = field(default=None, metadata=OMIT_NONE)


def default_modules() -> list[str]:
    """The modules probed when none are asked for: numpy when it is installed (a cheap spec lookup)."""
    out = []
    for name in DEFAULT_PROBES:
        try:
            if importlib.util.find_spec(name) is not None:
                out.append(name)
        except (ImportError, ValueError):
            pass
    return out


def import_probes(modules: list[str] | None = None) -> Probes:
    """Import ``modules`` (None: :func:`default_modules`) so their native pools load; what
    happened, as :class:`Probes`.

    A module that fails to import is reported, never raised. Imports may touch the environment
    (scikit-learn's and threadpoolctl's imports set KMP_DUPLICATE_LIB_OK): what they set stays, as it
    would in a program that imports them, and is listed in ``environ_changed``.
    """
    requested: list[str] = []
    for name in default_modules() if modules is None else modules:
        name = name.strip()
        if name and name not in requested:
            requested.append(name)

    imported: list[str] = []
    already: list[str] = []
    failed: dict[str, str] = {}
    before = dict(os.environ)
    for name in requested:
        if name in sys.modules:
            already.append(name)
            continue
        if not all(part.isidentifier() for part in name.split(".")):
            failed[name] = "not a module name (use dotted Python names, e.g. numpy or scipy.linalg)"
            continue
        try:
            importlib.import_module(name)
        except BaseException as exc:  # a probe must survive SystemExit from a bad module
            if isinstance(exc, KeyboardInterrupt):
                raise
            failed[name] = describe(exc)
        else:
            imported.append(name)

    from parinfo.process.variables import looks_thread_related

    changed = {}
    for key in set(before) | set(os.environ):
        if looks_thread_related(key) and before.get(key) != os.environ.get(key):
            changed[key] = os.environ.get(key)
    return Probes(requested, imported, already, failed, dict(sorted(changed.items())))
