"""pytest plugin: share the usable CPUs among a test session's worker processes.

Opt in with ``pytest -p parinfo.pytest_plugin`` (or ``addopts = "-p parinfo.pytest_plugin"`` in the
project's pytest configuration). Under pytest-xdist each worker is a process that starts its own
full-width BLAS and OpenMP pools, so ``-n 4`` on 4 CPUs runs 4 x 4 threads. With
``--parinfo-budget`` each worker gets ``usable CPUs // workers`` (at least 1) for every pool,
applied as a profile (``parinfo.apply``: the variables for libraries not yet loaded, the one push
path for pools already loaded) before the worker's conftest files and test modules are imported.
Without the option the header warns when workers x the widest pool exceed the usable CPUs. Without
xdist the whole session is one worker.
"""
from __future__ import annotations

import os
import sys
from typing import Any

import pytest

_KEY = "parinfo"  # in a worker's workeroutput: what its pools held at the end of its session


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("parinfo").addoption(
        "--parinfo-budget", action="store_true", default=False,
        help="give every thread pool of each test worker its share of the usable CPUs "
             "(usable // workers, at least 1; pytest-xdist workers or the one process)")


def _worker_id() -> str | None:
    return os.environ.get("PYTEST_XDIST_WORKER")


def _planned_workers(config: pytest.Config) -> int:
    """How many processes run tests: xdist's workers, or this one process."""
    if _worker_id() is not None:
        return int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    return len(getattr(config.option, "tx", None) or ()) or 1


def _runs_tests_here(config: pytest.Config) -> bool:
    """False in the xdist controller, which only hands tests to its workers."""
    return _worker_id() is not None or not getattr(config.known_args_namespace, "numprocesses", None)


def _facts() -> Any:
    from parinfo.machine.topology import machine_facts

    return machine_facts()


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    """Put the share in force before conftest files and test modules import numpy or torch."""
    if not early_config.known_args_namespace.parinfo_budget or not _runs_tests_here(early_config):
        return
    from parinfo.profiles.applying import apply

    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    share = max(1, _facts().usable_cpus // workers)
    outcome = apply({"version": 1, "name": "pytest-budget", "intra_op": share, "inter_op": share,
                     "description": f"usable CPUs // {workers} test workers"})
    kept = [line for line in outcome["skipped"] if "set by the user" in line]
    early_config.stash[_share] = (share, kept)


_share = pytest.StashKey[tuple[int, list[str]]]()
_seen = pytest.StashKey[dict[str, dict[str, Any]]]()


def pytest_collection_finish(session: pytest.Session) -> None:
    """torch has no variable for its inter-op count: set it once the test modules imported torch,
    before a test runs an op (torch takes the count only before its pool starts)."""
    budget = session.config.stash.get(_share, None)
    if budget is not None and "torch" in sys.modules:
        from parinfo.process.setter import set_torch

        set_torch(intra=budget[0], inter=budget[0])


def _held_now(kept: list[str]) -> dict[str, Any]:
    """What this process's pools hold now, read back from each library."""
    from parinfo.process.setter import native_pools, torch_counts

    pools: dict[str, int] = {}
    for pool in native_pools():
        n = pool.get()
        if n is not None:
            pools[pool.record.name] = max(n, pools.get(pool.record.name, 0))
    if "torch" in sys.modules:
        intra, inter = torch_counts()
        if intra is not None:
            pools["torch intra-op"] = intra
        if inter is not None:
            pools["torch inter-op"] = inter
    return {"pools": pools, "kept": kept}


def pytest_sessionfinish(session: pytest.Session) -> None:
    budget = session.config.stash.get(_share, None)
    workeroutput = getattr(session.config, "workeroutput", None)
    if budget is not None and workeroutput is not None:
        workeroutput[_KEY] = _held_now(budget[1])


@pytest.hookimpl(optionalhook=True)  # an xdist hook: absent without xdist
def pytest_testnodedown(node: Any, error: Any) -> None:
    held = getattr(node, "workeroutput", {}).get(_KEY)
    if held is not None:
        node.config.stash.setdefault(_seen, {})[node.gateway.id] = held


def pytest_report_header(config: pytest.Config) -> list[str]:
    workers = _planned_workers(config)
    facts = _facts()
    usable = facts.usable_cpus
    if getattr(config.option, "tx", None):
        who = f"{workers} xdist worker{'s' if workers != 1 else ''}"
    else:
        who = "1 process (no xdist workers)"
    share = max(1, usable // workers)
    if config.getoption("parinfo_budget"):
        return [f"parinfo: budget: {who} share {usable} usable CPUs: each gets {share} thread"
                f"{'s' if share != 1 else ''} for every pool (OpenMP, BLAS, MKL, torch intra- and inter-op)"]
    widest = _widest_default(facts)
    if widest is None or workers * widest[0] <= usable:
        return []
    count, library, why = widest
    return [f"parinfo: warning: {who} x {count} threads ({library}, {why}) = {workers * count} threads on "
            f"{usable} usable CPUs; add --parinfo-budget to give each worker {share}"]


def _widest_default(facts: Any) -> tuple[int, str, str] | None:
    """The widest pool a worker's libraries would start from this environment, as their rules say."""
    from parinfo.process.provenance import MODELS, predict

    best: tuple[int, str, str] | None = None
    for name, model in MODELS.items():
        guess = predict(model, os.environ, facts)
        if guess.count is not None and (best is None or guess.count > best[0]):
            best = (guess.count, name, guess.phrase)
    return best


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """What each worker's pools held at its end, read back inside it."""
    from_workers = config.stash.get(_seen, None)
    seen: dict[str, dict[str, Any]] = dict(from_workers) if from_workers is not None else {}
    budget = config.stash.get(_share, None)
    if budget is not None and _worker_id() is None:
        seen["this process"] = _held_now(budget[1])
    for worker in sorted(seen):
        held = seen[worker]
        pools = ", ".join(f"{lib} {n}" for lib, n in sorted(held["pools"].items())) or "no native pool loaded"
        terminalreporter.write_line(f"parinfo: {worker}: {pools}")
        for line in held["kept"]:
            terminalreporter.write_line(f"parinfo: {worker}: {line}")
