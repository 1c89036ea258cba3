"""The inspector's report: every fact about this process's parallelism, with provenance and findings.

:func:`inspect` gathers the facts from the lower layers (machine, process, runtime) without changing
anything; :class:`Report` holds them and turns into the ``--json`` payload (``to_dict``). The
front ends render it (``parinfo.cli.render_text``, and ``parinfo.cli.torch_block`` for
:func:`parinfo.parallel_info`).
"""
from __future__ import annotations

import os
import platform
import sys
from dataclasses import dataclass, field
from typing import Any

from parinfo.diagnostics.findings import Finding, at_least
from parinfo.diagnostics.process_rules import diagnose

#: Version of the ``--json`` payload; bumped on any incompatible change (docs/report-schema.md).
SCHEMA_VERSION = 1


@dataclass
class Report:
    """A snapshot of the process's parallelism. Every section is plain, JSON-ready data."""

    process: dict[str, Any]
    probes: dict[str, Any]
    machine: dict[str, Any]
    cpu: dict[str, Any]
    runtime: dict[str, Any]
    backend: dict[str, Any]
    pools: list[dict[str, Any]]
    frameworks: dict[str, Any]
    settings: list[dict[str, Any]]
    environment: list[dict[str, Any]]
    threads: dict[str, Any]
    findings: list[Finding] = field(default_factory=list)
    live: dict[str, Any] = field(default_factory=dict)  # throttling, pressure, stack budget (live.py)
    outer: dict[str, Any] = field(default_factory=dict)  # threads outside the pools (process/outer.py)

    def problems(self, severity: str = "warning") -> list[Finding]:
        """Findings at ``severity`` or above (what ``parinfo show --check`` fails on)."""
        return at_least(self.findings, severity)

    def to_dict(self) -> dict[str, Any]:
        """The ``parinfo show --json`` payload."""
        return {
            "schema_version": SCHEMA_VERSION,
            "parinfo_version": _version(),
            "process": self.process,
            "probes": self.probes,
            "machine": self.machine,
            "cpu": self.cpu,
            "runtime": self.runtime,
            "backend": self.backend,
            "pools": self.pools,
            "frameworks": self.frameworks,
            "settings": self.settings,
            "environment": self.environment,
            "threads": self.threads,
            "outer": self.outer,
            "findings": [f.to_dict() for f in self.findings],
            "live": self.live,
        }


def _version() -> str:
    from parinfo.version import __version__

    return __version__


def _runtime_rows(runtime: dict[str, Any]) -> list[dict[str, Any]]:
    from parinfo.runtime.settings import EXPLICIT, INTER_VARS, INTRA_VARS

    rows = []
    for key, label, variables in (("intra_op", "parinfo intra-op", INTRA_VARS),
                                  ("inter_op", "parinfo inter-op", INTER_VARS)):
        entry = runtime.get(key) or {}
        row = {"library": label, "count": entry.get("count"), "source": entry.get("source"),
               "precedence": [EXPLICIT, "profile", *variables, "default"]}
        if entry.get("capped_to") is not None:
            row["capped_to"] = entry["capped_to"]
        rows.append(row)
    return rows


def _mark_capped(env_rows: list[dict[str, Any]], runtime: dict[str, Any]) -> None:
    """A valid variable whose count parinfo's runtime caps at its pool ceiling says what runs."""
    for key in ("intra_op", "inter_op"):
        entry = runtime.get(key) or {}
        if entry.get("capped_to") is None:
            continue
        for row in env_rows:
            if entry.get("source") == f"env {row['name']}":
                row["capped_to"] = entry["capped_to"]


def inspect(imports: list[str] | None = None, *, torch: bool = False, root: str = "/",
            pid: int | None = None, children: bool = False, outer_threads: int | None = None) -> Report:
    """Inspect this process, or process ``pid`` from outside (with ``children``: its whole tree).
    Changes nothing: no variable, no thread count, no thread, no import.

    ``imports`` are modules to import first so their native pools load (None or []: none; an import
    can start threads, so only what is asked is imported; ``parinfo show`` asks for numpy);
    ``torch=True`` imports torch when it is not imported yet (it never is otherwise). Neither
    applies to another process, which is read from /proc (parinfo.diagnostics.live.inspect_pid).
    ``outer_threads`` is how many threads run this process's work at once (detected inside Dask,
    Ray and loky workers when not given); each may start a full team of every pool.
    """
    from parinfo.diagnostics import live

    if not live.pid_is_self(pid) or children:
        return live.inspect_pid(os.getpid() if pid is None else pid, children=children, root=root)
    from parinfo.machine.cpuid import cpu_identity
    from parinfo.machine.topology import machine_facts
    from parinfo.process import environment, frameworks, pools, probing as probe, provenance, threads
    from parinfo.runtime import info as runtime_info

    if outer_threads is not None and (isinstance(outer_threads, bool) or not isinstance(outer_threads, int)
                                      or outer_threads < 1):
        from parinfo.errors import UsageError

        raise UsageError(f"outer_threads must be a positive integer, not {outer_threads!r}")
    wanted = list(imports or [])
    if torch and "torch" not in wanted:
        wanted.append("torch")
    probes = probe.import_probes(wanted)

    facts = machine_facts(root)
    pool_rows = pools.native_pools()
    torch_info = frameworks.torch_info(import_if_missing=False)
    launch_env = environment.launch_environment()
    env_rows = environment.environment_report(os.environ, launch_env)
    rt = runtime_info()
    _mark_capped(env_rows, rt)
    settings = _runtime_rows(rt) + provenance.library_settings(
        pool_rows, torch_info, os.environ, launch_env, facts, rt.get("native_push"))

    report = Report(
        process={"pid": os.getpid(), "python": platform.python_version(),
                 "implementation": platform.python_implementation(), "executable": sys.executable,
                 "platform": sys.platform},
        probes=probes,
        machine=facts.to_dict(),
        cpu=cpu_identity(root),
        runtime=rt,
        backend={"runtime": rt.get("backend"),
                 "runtime_started": bool(rt.get("intra_pool_started") or rt.get("inter_pool_started")),
                 **pools.threading_layers(pool_rows),
                 "torch": None if torch_info is None else torch_info.get("aten_backend")},
        pools=pool_rows,
        frameworks={"torch": torch_info},
        settings=settings,
        environment=env_rows,
        threads=threads.live_threads(),
    )
    report.live = live.live_section(None, root)
    report.outer = _outer_section(outer_threads, facts.usable_cpus, env_rows, launch_env)
    report.findings = diagnose(report.to_dict())
    return report


def _outer_section(explicit: int | None, usable: int, env_rows: list[dict[str, Any]],
                   launch_env: Any) -> dict[str, Any]:
    from parinfo.process import outer

    section = outer.outer_threads(explicit, usable)
    section["variables_set_by"] = outer.set_by(env_rows, section["framework"],
                                               launch_env=launch_env if isinstance(launch_env, dict) else None)
    return section
