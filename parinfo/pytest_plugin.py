"""pytest plugin: share the usable CPUs among a test session's worker processes.

Load it any way pytest loads a plugin: ``pytest -p parinfo.pytest_plugin`` (or ``addopts = "-p
parinfo.pytest_plugin"``), ``pytest_plugins = ["parinfo.pytest_plugin"]`` in the rootdir's conftest,
``PYTEST_PLUGINS=parinfo.pytest_plugin``, or a ``pytest11`` entry point named
``parinfo.pytest_plugin``. Under pytest-xdist each worker is a process that starts its own
full-width BLAS and OpenMP pools, so ``-n 4`` on 4 CPUs runs 4 x 4 threads. With
``--parinfo-budget`` each worker gets ``usable CPUs // workers`` (at least 1) for every pool,
applied as a profile (``parinfo.apply``: the variables for libraries not yet loaded, the one push
path for pools already loaded): before the worker's conftest files are imported when the plugin is
registered that early (``-p``, an entry point), else at ``pytest_configure``, which pytest replays to
a plugin a conftest registers, still before any test module is imported. Without the option the
header warns when workers x the widest pool exceed the usable CPUs, among the pools that will load:
those loaded in the controller, and those shipped by the modules the session's test and conftest
files import (read from the files, never imported); it says which and how it knows. Without xdist
the whole session is one worker.
"""
from __future__ import annotations

import os
import re
import sys
from typing import Any, TypedDict

import pytest

import parinfo.safe_file as safe_file
from parinfo.records.record import record
from parinfo.safe_text import plural

_KEY = "parinfo"  # in a worker's workeroutput: what its pools held at the end of its session
_COUNT_VAR = "PYTEST_XDIST_WORKER_COUNT"
_MAX_WORKERS = 65536  # more than any xdist session starts: a larger count is not one xdist wrote


@record(frozen=True)
class Workers:
    """How many processes of this session run tests, and an environment value that was ignored."""

    count: int
    xdist: bool  # xdist workers (True) or this one process
    ignored: str | None  # one line naming the value and why it was not used

    def who(self) -> str:
        if not self.xdist:
            return "1 process (no xdist workers)"
        return f"{plural(self.count, 'xdist worker')}"


@record(frozen=True)
class Budget:
    """The share put in force in this process, and lines the summary adds (variables kept, a failure)."""

    share: int
    notes: list[str]


_budget = pytest.StashKey[Budget]()


class Held(TypedDict):
    """What a process's pools held at the end of its session (a worker sends it to the controller in
    its ``workeroutput``): each library's count, and the notes on counts that were kept."""

    pools: dict[str, int]
    kept: list[str]


_seen = pytest.StashKey[dict[str, Held]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("parinfo").addoption(
        "--parinfo-budget", action="store_true", default=False,
        help="give every thread pool of each test worker its share of the usable CPUs "
             "(usable // workers, at least 1; pytest-xdist workers or the one process)")


def _worker_id() -> str | None:
    return os.environ.get("PYTEST_XDIST_WORKER")


def _count_of(value: Any) -> int | None:
    """``value`` as a worker count (ASCII digits or an int, 1 to _MAX_WORKERS); None otherwise."""
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 6:
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= _MAX_WORKERS:
        return value
    return None


def _ignored(raw: str, why: str) -> str:
    from parinfo.safe_text import shorten

    return f"parinfo: {_COUNT_VAR}='{shorten(raw, 40)}' ignored: {why}"


def _workers(config: pytest.Config) -> Workers:
    """The processes that run this session's tests: in an xdist worker, the count xdist gave it (its
    ``workerinput``, else the variable xdist sets); in the controller, the workers it starts (once
    xdist has read ``-n``); else this one process. A count that is not a whole number from 1 to
    _MAX_WORKERS, or one set outside an xdist worker, is ignored and named."""
    raw = os.environ.get(_COUNT_VAR)
    if _worker_id() is not None:
        given = getattr(config, "workerinput", {}).get("workercount")
        count = _count_of(given) if given is not None else _count_of(raw)
        if count is not None:
            return Workers(count, True, None)
        why = f"not a whole number from 1 to {_MAX_WORKERS}; counted as 1 worker"
        return Workers(1, True, _ignored(raw or "", why))
    planned = len(getattr(config.option, "tx", None) or ()) if _xdist_runs(config) else 0
    ignored = None if raw is None else _ignored(raw, "this process is not an xdist worker "
                                                     "(PYTEST_XDIST_WORKER is not set)")
    return Workers(planned, True, ignored) if planned else Workers(1, False, ignored)


def _xdist_runs(config: pytest.Config) -> bool:
    """True in an xdist controller, once xdist has read ``-n`` (pytest_cmdline_main): it hands the
    tests to workers and runs none."""
    return bool(getattr(config.option, "tx", None)) and getattr(config.option, "dist", "no") != "no"


def _controller_early(namespace: Any) -> bool:
    """Before the command line is fully read: would this process be an xdist controller? Unsure
    cases count as a controller; pytest_configure settles them."""
    if _worker_id() is not None:
        return False
    return bool(getattr(namespace, "numprocesses", None) or getattr(namespace, "tx", None))


def _facts() -> Any:
    from parinfo.machine.topology import machine_facts

    return machine_facts()


def _put_in_force(config: pytest.Config, count: int) -> None:
    """Apply the share for ``count`` workers in this process, once; a failure becomes a summary line."""
    if config.stash.get(_budget, None) is not None:
        return
    from parinfo.errors import ParinfoError
    from parinfo.profiles.applying import apply

    share = max(1, _facts().usable_cpus // count)
    try:
        outcome = apply({"version": 1, "name": "pytest-budget", "intra_op": share, "inter_op": share,
                         "description": f"usable CPUs // {count} test workers"})
    except ParinfoError as exc:
        config.stash[_budget] = Budget(share, [f"budget not applied: {exc}"])
        return
    config.stash[_budget] = Budget(share, [str(s) for s in outcome.skipped if s.reason.users])


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    """Put the share in force before conftest files import numpy or torch (a plugin registered by
    ``-p``, an entry point or PYTEST_PLUGINS; pytest does not replay this hook to later ones)."""
    namespace = early_config.known_args_namespace
    if getattr(namespace, "parinfo_budget", False) and not _controller_early(namespace):
        _put_in_force(early_config, _workers(early_config).count)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """The share, if not yet in force: for a plugin a conftest registered (pytest replays this hook to
    it), and where only xdist's reading of ``-n`` tells that tests run here. Test modules are not
    imported yet; pools that conftest files loaded get the share through the push path."""
    if config.getoption("parinfo_budget") and not (_worker_id() is None and _xdist_runs(config)):
        _put_in_force(config, _workers(config).count)


def pytest_collection_finish(session: pytest.Session) -> None:
    """torch has no variable for its inter-op count: set it once the test modules imported torch,
    before a test runs an op (torch takes the count only before its pool starts)."""
    budget = session.config.stash.get(_budget, None)
    if budget is None:
        return
    from parinfo.process.setter import TORCH, set_torch

    if TORCH in sys.modules:
        set_torch(intra=budget.share, inter=budget.share)


def _held_now(notes: list[str]) -> Held:
    """What this process's pools hold now, read back from each library."""
    from parinfo.process.setter import TORCH, native_pools, torch_counts

    pools: dict[str, int] = {}
    for pool in native_pools():
        n = pool.get()
        if n is not None:
            pools[pool.record.name] = max(n, pools.get(pool.record.name, 0))
    if TORCH in sys.modules:
        intra, inter = torch_counts()
        if intra is not None:
            pools["torch intra-op"] = intra
        if inter is not None:
            pools["torch inter-op"] = inter
    return {"pools": pools, "kept": notes}


def pytest_sessionfinish(session: pytest.Session) -> None:
    budget = session.config.stash.get(_budget, None)
    workeroutput = getattr(session.config, "workeroutput", None)
    if budget is not None and workeroutput is not None:
        workeroutput[_KEY] = _held_now(budget.notes)


@pytest.hookimpl(optionalhook=True)  # an xdist hook: absent without xdist
def pytest_testnodedown(node: Any, error: Any) -> None:
    held = getattr(node, "workeroutput", {}).get(_KEY)
    if held is not None:
        node.config.stash.setdefault(_seen, {})[node.gateway.id] = held


def pytest_report_header(config: pytest.Config) -> list[str]:
    plan = _workers(config)
    lines = [plan.ignored] if plan.ignored else []
    facts = _facts()
    usable = facts.usable_cpus
    who = plan.who()
    share = max(1, usable // plan.count)
    if config.getoption("parinfo_budget"):
        return [*lines, f"parinfo: budget: {who} share {plural(usable, 'usable CPU')}: each gets "
                f"{plural(share, 'thread')} "
                "for every pool (OpenMP, BLAS, MKL, torch intra- and inter-op)"]
    lines += _advisory_lines(config)
    expected = _expected_pools(config)
    widest = _widest_default(facts, expected)
    if widest is None or plan.count * widest[0] <= usable:
        return lines
    count, library, why = widest
    return [*lines, f"parinfo: warning: {who} x {plural(count, 'thread')} ({library}; {why}) = "
            f"{plural(plan.count * count, 'thread')} on {plural(usable, 'usable CPU')}; add --parinfo-budget to give "
            f"each worker {share}"]


def _advisory_lines(config: pytest.Config) -> list[str]:
    """One line per known-bad library version (the advisories table) among the copies loaded here or
    shipped by the modules the session imports, each version read from its file; whether the tests
    call them from several threads is not known before they run, so each is said at info level."""
    from parinfo.diagnostics.advisory_rules import Copy, copy_findings
    from parinfo.process import libraries as reg
    from parinfo.process.advisories import for_library
    from parinfo.process.file_version import version_in_file
    from parinfo.process.pools import loaded_objects, owner_of
    from parinfo.process.shipped import shipped_runtimes

    paths = [p for p in loaded_objects() if reg.by_prefix(os.path.basename(p).lower()) is not None]
    for module in sorted(_session_imports(config)):
        paths += shipped_runtimes(module).values()
    copies = []
    for path in dict.fromkeys(paths):
        rec = reg.by_prefix(os.path.basename(path).lower())
        if rec is not None and for_library(rec.name):
            copies.append(Copy(rec.name, version_in_file(path, rec.name), owner_of(path), path, None, None))
    return [f"parinfo: {f.severity}: {f.id}: {f.message}; fix: {f.fix}"
            for f in copy_findings(copies, os.uname().machine)]


def _widest_default(facts: Any, expected: dict[str, str]) -> tuple[int, str, str] | None:
    """The widest pool a worker would start from this environment, as the libraries' rules say,
    among the pools ``expected`` to load ({model name: how the plugin knows})."""
    from parinfo.process.provenance import MODELS, predict

    best: tuple[int, str, str] | None = None
    for name, how in expected.items():
        guess = predict(MODELS[name], os.environ, facts)
        if guess.count is not None and (best is None or guess.count > best[0]):
            best = (guess.count, f"{name}, {how}", guess.phrase)
    return best


def _expected_pools(config: pytest.Config) -> dict[str, str]:
    """The pools this session's workers will load, and how the plugin knows, without importing a
    library: those loaded in this process (conftest files and plugins imported them), then those
    that the modules imported by the session's test and conftest files ship."""
    from parinfo.process import libraries as reg
    from parinfo.process.pools import loaded_objects
    from parinfo.process.provenance import MODELS
    from parinfo.process.shipped import shipped_runtimes

    found: dict[str, str] = {}
    for path in loaded_objects():
        rec = reg.by_prefix(os.path.basename(path).lower())
        if rec is not None and rec.name in MODELS:
            found.setdefault(rec.name, "loaded in this process")
    for rec in reg.records():
        if rec.module is not None and rec.module in sys.modules:
            for name in _models_of(rec.name):
                found.setdefault(name, "loaded in this process")
    for module in sorted(_session_imports(config)):
        for rec in reg.records():
            if rec.module == module:
                for name in _models_of(rec.name):
                    found.setdefault(name, f"the tests import {module}")
        for library in shipped_runtimes(module):
            if library in MODELS:
                found.setdefault(library, f"shipped by {module}, which the tests import")
    return found


def _models_of(library: str) -> list[str]:
    """The count models of a library's CPU pools: its own (or a framework's intra- and inter-op
    ones), then its other pools' ("onnxruntime inter-op"). An I/O pool ("pyarrow io", the
    registry's ``io_rows``) is left out: its threads wait on I/O (Arrow's are 8 whatever the CPUs),
    so workers x its threads oversubscribe no CPU."""
    from parinfo.process import libraries as reg
    from parinfo.process.provenance import MODELS

    names = [library] if library in MODELS else [f"{library} intra-op", f"{library} inter-op"]
    rec = reg.find(library)
    names += [f"{library} {pool.name}" for pool in (rec.pools if rec is not None else ())]
    io = reg.io_rows()
    return [name for name in dict.fromkeys(names) if name in MODELS and name not in io]


_IMPORT = re.compile(rb"^[ \t]*(?:import|from)[ \t]+([A-Za-z_][A-Za-z0-9_]*)", re.MULTILINE)
_MAX_FILES = 5000  # test and conftest files read at most
_SKIPPED_DIRS = ("__pycache__", "node_modules", "site-packages", "venv")


def _session_imports(config: pytest.Config) -> set[str]:
    """Top-level modules that the session's test and conftest files import (read, not imported),
    under the paths given on the command line (else the rootdir)."""
    roots = [str(a).split("::", 1)[0] for a in (config.args or [str(config.rootpath)])]
    names: set[str] = set()
    files = 0
    for root in roots:
        for path in _test_files(root):
            files += 1
            if files > _MAX_FILES:
                return names
            try:
                names.update(m.decode() for m in _IMPORT.findall(safe_file.read_file(path, 1 << 20, follow=True)))
            except OSError:
                continue
    return names


def _test_files(root: str) -> list[str]:
    if os.path.isfile(root):
        return [root]
    out = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in _SKIPPED_DIRS]
        out += [os.path.join(folder, f) for f in files
                if f == "conftest.py" or (f.endswith(".py") and (f.startswith("test_") or f.endswith("_test.py")))]
        if len(out) > _MAX_FILES:
            break
    return out


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """What each worker's pools held at its end, read back inside it."""
    from_workers = config.stash.get(_seen, None)
    seen: dict[str, Held] = dict(from_workers) if from_workers is not None else {}
    budget = config.stash.get(_budget, None)
    if budget is not None and _worker_id() is None:
        seen["this process"] = _held_now(budget.notes)
    for worker in sorted(seen):
        held = seen[worker]
        pools = ", ".join(f"{lib} {n}" for lib, n in sorted(held["pools"].items())) or "no native pool loaded"
        terminalreporter.write_line(f"parinfo: {worker}: {pools}")
        for line in held["kept"]:
            terminalreporter.write_line(f"parinfo: {worker}: {line}")
