"""``parinfo.tune()``: measure a workload's thread-count curve and say which counts win.

Each point runs with its counts really in force: by default in a fresh process started with the
thread variables set (libraries read them at load), or in this process through the runtime and
threadpoolctl (``in_process=True``), or, for a command, as a whole launched process. The search
(parinfo.tuning.search) measures the ends and powers of two, then refines around the best, and says
which points it ruled out and why.
"""
from __future__ import annotations

import datetime as _dt
import importlib.util
import os
import shutil
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from parinfo.tuning import search
from parinfo.tuning.measure import (CommandMeasurer, InProcessMeasurer, Settings, WorkerMeasurer,
                                   WorkloadFailed, noise_check)
from parinfo.tuning.search import Point, SearchResult, Stats
from parinfo.tuning.workloads import BUILTIN, FRAMEWORKS, compile_user, describe, uses_interop
from parinfo.machine.cpulist import format_cpu_list
from parinfo.errors import UsageError

OBJECTIVES = ("latency", "throughput")
NOISY_SPREAD = 0.10  # a point whose relative spread exceeds this is called noisy
MAX_COUNT_FACTOR = 64  # counts above 64 x logical CPUs are refused as a typo

__all__ = ["tune", "TuneResult", "WorkloadFailed", "OBJECTIVES"]

Progress = Callable[[str, dict], None]


def _cpu_model() -> str:
    """The CPU's brand and kernel-relevant ISA, or "unknown (why)"."""
    from parinfo.machine.cpuid import cpu_identity

    try:
        ident = cpu_identity()
    except Exception as exc:  # noqa: BLE001 - a description, never a failure
        return f"unknown ({exc})"
    brand = ident.get("brand") or f"unknown ({ident.get('unknown', {}).get('brand', 'no brand')})"
    extra = [x for x in (ident.get("arch"), " ".join(ident.get("isa") or [])) if x]
    return brand + (f" ({', '.join(extra)})" if extra else "")


@dataclass
class TuneResult:
    """The measured curve, the winner, what was skipped and why, and what may have disturbed it."""

    spec: dict
    workload: str
    objective: str
    mode: str  # "subprocess" | "in-process" | "command"
    pairs: bool  # points are inter x intra pairs (else intra-op counts, one request at a time)
    concurrent: bool  # inter = concurrent requests (throughput) rather than the workload's inter-op pool
    machine: dict
    search: SearchResult
    settings: Settings
    in_force: dict[Point, Any] = field(default_factory=dict)
    noise: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # counts asked for but not in force
    started: str = ""
    total_time_s: float = 0.0

    # ------------------------------------------------------------------ accessors
    @property
    def best(self) -> Point:
        assert self.search.best is not None
        return self.search.best

    @property
    def best_stats(self) -> Stats:
        return self.search.stats[self.best]

    @property
    def measured(self) -> list[tuple[Point, Stats]]:
        """Measured points in ascending order (inter-op, then intra-op)."""
        return sorted(self.search.stats.items(), key=lambda kv: (kv[0].inter, kv[0].intra))

    def label(self, p: Point) -> str:
        return p.label(self.pairs)

    @property
    def axis(self) -> str:
        if not self.pairs:
            return "intra-op threads"
        return "requests x intra-op threads" if self.concurrent else "inter-op x intra-op threads"

    @property
    def unit(self) -> str:
        return "s per request" if self.concurrent else "s per call"

    def counts(self) -> dict:
        """The winning counts as profile keys."""
        d = {"intra_op": self.best.intra}
        if self.pairs:
            d["inter_op"] = self.best.inter
        return d

    # ------------------------------------------------------------------ export
    def to_dict(self) -> dict:
        """Plain, JSON-serialisable form (what ``parinfo tune --json`` prints)."""
        def pt(p: Point) -> dict:
            return {"intra_op": p.intra, "inter_op": p.inter, "label": self.label(p)}

        points = []
        for p, s in self.measured:
            d = {**pt(p), **s.to_dict(), "per_second": 1.0 / s.median if s.median > 0 else None,
                 "order": self.search.order.index(p) + 1, "noisy": s.spread > NOISY_SPREAD,
                 "confirmed": p in self.search.confirmed,
                 "in_force": self.in_force.get(p)}
            points.append(d)
        return {
            "workload": self.workload,
            "spec": self.spec,
            "objective": self.objective,
            "mode": self.mode,
            "axis": self.axis,
            "unit": self.unit,
            "machine": self.machine,
            "settings": {"warmup": self.settings.warmup, "repeats": self.settings.repeats,
                         "min_time_s": self.settings.min_time},
            "candidates": len(self.search.candidates),
            "points": points,
            "best": {**pt(self.best), **self.best_stats.to_dict()},
            "counts": self.counts(),
            "skipped": [{**pt(p), "reason": r} for p, r in sorted(self.search.skipped.items(),
                                                                key=lambda kv: (kv[0].inter, kv[0].intra))],
            "noise": list(self.noise),
            "notes": list(self.notes),
            "started": self.started,
            "total_time_s": self.total_time_s,
        }

    def skipped_summary(self) -> str:
        """One line naming the skipped points compactly."""
        sk = self.search.skipped
        if not sk:
            return "none"
        if not self.pairs:
            return format_cpu_list([p.intra for p in sk])
        return ", ".join(self.label(p) for p in sorted(sk, key=lambda p: (p.inter, p.intra)))

    def to_profile_yaml(self, name: str | None = None) -> str:
        """A profile (``version: 1``) with the winning counts, and comments recording how they were found."""
        import yaml

        m = self.machine
        kind = self.spec["kind"]
        name = name or f"tuned-{kind}"
        b, bs = self.best, self.best_stats
        how = {"subprocess": "each point in a fresh process",
               "in-process": "in one process through the runtime and threadpoolctl",
               "command": "the command timed as a whole process"}[self.mode]
        obj = ("latency: fastest single call" if self.objective == "latency"
               else "throughput: most requests per second with concurrent requests")
        lines = [
            f"# Written by `parinfo tune` on {self.started}.",
            f"# Workload: {self.workload}",
            f"# Objective: {obj}; {how}; axis: {self.axis}",
            f"# Machine: {m['cpu_model']}; {m['usable_cpus']} usable CPUs "
            f"({m['usable_physical_cores']} physical cores), affinity {m['affinity']}",
            f"# Timing: {self.settings.warmup} warm-up, median of {self.settings.repeats} repeats; "
            f"total {self.total_time_s:.1f} s",
            f"# Measured ({self.unit}, median and relative spread):",
        ]
        for p, s in self.measured:
            mark = "  <- chosen" if p == b else ""
            lines.append(f"#   {self.label(p):>7}: {s.median * 1e3:.4g} ms ({s.spread:.0%}){mark}")
        lines.append(f"# Skipped: {self.skipped_summary()}")
        for note in self.noise:
            lines.append(f"# Noise: {note}")
        for note in self.notes:
            lines.append(f"# Note: {note}")
        if not self.pairs:
            lines.append("# inter_op was not measured (one request at a time): left to the default.")
        body: dict[str, Any] = {
            "version": 1,
            "name": name,
            "description": (f"Tuned by parinfo tune ({self.objective}) for {self.workload}: "
                            + (f"{b.inter} {'requests' if self.concurrent else 'inter-op'} x {b.intra} intra-op"
                               if self.pairs else f"{b.intra} intra-op thread{'s' if b.intra != 1 else ''}")
                            + f", {bs.median * 1e3:.4g} ms {self.unit.split(' ', 1)[1]}"),
            **self.counts(),
        }
        if self.spec.get("framework") == "torch":
            body["libraries"] = {"torch": b.intra}
        # a command's argument may hold a line break: keep every comment on one line
        comments = "".join(ln.replace("\r", "\\r").replace("\n", "\\n") + "\n" for ln in lines)
        return comments + yaml.safe_dump(body, sort_keys=False, width=1000)

    def write_profile(self, path: str | os.PathLike, name: str | None = None) -> None:
        """Write :meth:`to_profile_yaml` to ``path``."""
        text = self.to_profile_yaml(name)
        try:
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(text)
        except OSError as exc:
            raise UsageError(f"--write {path}: cannot write ({exc.strerror or exc})") from None

    def text_plot(self, width: int = 50) -> str:
        """Median time per measured point as horizontal bars (the terminal plot)."""
        from parinfo.tuning.plot import text_plot

        return text_plot(self, width)

    def plot(self, path: str | os.PathLike) -> None:
        """Save the curve as SVG or PNG with matplotlib (the ``plot`` extra)."""
        from parinfo.tuning.plot import save_plot

        save_plot(self, path)


# ---------------------------------------------------------------------- the entry point

def _not_in_force(p: Point, seen: Any, pairs: bool) -> list[str]:
    """Say where a library ran another intra-op count than the point asked for."""
    if not isinstance(seen, dict):
        return []
    out = []
    for lib, counts in seen.items():
        if isinstance(counts, dict):
            counts = [counts.get("intra_op")]
        if not isinstance(counts, list):
            continue
        wrong = sorted({c for c in counts if isinstance(c, int) and c != p.intra})
        if wrong:
            out.append(f"{p.label(pairs)}: {lib} ran {', '.join(map(str, wrong))} threads, not {p.intra} "
                       f"(the library capped or ignored the count; this point measured that)")
    return out


def _check_int(name: str, value: Any, lo: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"{name} must be an integer, got {value!r}")
    if value < lo:
        raise UsageError(f"{name} must be at least {lo}, got {value}")
    return value


def _spec(workload: str | None, framework: str, size: int, stmt: str | None, setup: str | None,
          module: str | None, command: Sequence[str] | None) -> dict:
    given = [n for n, v in (("--stmt", stmt), ("--module", module), ("a command", command)) if v]
    if len(given) > 1:
        raise UsageError(f"give one workload, not {' and '.join(given)}")
    if framework not in FRAMEWORKS:
        raise UsageError(f"--framework {framework!r}: use one of {', '.join(FRAMEWORKS)}")
    if given and workload not in (None, "matmul"):
        raise UsageError(f"give either a built-in workload ({workload}) or {given[0]}, not both")
    if setup and not stmt:
        raise UsageError("--setup needs --stmt")
    if stmt is not None:
        for src, opt in ((setup or "pass", "--setup"), (stmt, "--stmt")):
            try:
                compile_user(src, f"<{opt[2:]}>")
            except SyntaxError as exc:
                raise UsageError(f"{opt}: {exc.msg} at line {exc.lineno}, column {exc.offset}: "
                                 f"{(exc.text or '').strip()!r}") from None
        return {"kind": "stmt", "stmt": stmt, "setup": setup or "pass", "framework": framework}
    if module is not None:
        mod, sep, func = module.partition(":")
        if not sep or not mod or not func or not all(p.isidentifier() for p in mod.split(".")) \
                or not func.isidentifier():
            raise UsageError(f"--module {module!r}: use pkg.module:function")
        return {"kind": "module", "module": module, "framework": framework}
    if command:
        cmd = list(command)
        if shutil.which(cmd[0]) is None:
            hint = f" (built-in workloads: {', '.join(BUILTIN)})" if len(cmd) == 1 else ""
            raise UsageError(f"command not found: {cmd[0]!r}{hint}")
        return {"kind": "command", "command": cmd, "framework": framework}
    workload = workload or "matmul"
    if workload not in BUILTIN:
        raise UsageError(f"unknown workload {workload!r}: use one of {', '.join(BUILTIN)}, "
                         f"or --stmt, --module, -- COMMAND")
    need = "torch" if framework == "torch" else "numpy"
    if importlib.util.find_spec(need) is None:
        raise UsageError(f"the {workload} workload with --framework {framework} needs {need}: pip install {need}")
    spec = {"kind": workload, "framework": framework}
    if workload == "matmul":
        spec["size"] = _check_int("--size", size)
    if workload == "ensemble":
        try:
            from parinfo.runtime import fork, wait  # noqa: F401
        except ImportError:
            raise UsageError("the ensemble workload needs parinfo.runtime (fork/wait), which is missing "
                             "from this installation") from None
    return spec


def tune(workload: str | None = None, *, objective: str = "latency", framework: str = "numpy",
         size: int = 1024, stmt: str | None = None, setup: str | None = None, module: str | None = None,
         command: Sequence[str] | None = None, min_threads: int = 1, max_threads: int | None = None,
         min_inter: int = 1, max_inter: int | None = None, repeats: int = 5, warmup: int = 1,
         min_time: float = 0.05, timeout: float = 600.0, in_process: bool = False,
         exhaustive: bool = False, confirm: bool = True, margin: float = search.DEFAULT_MARGIN,
         check_noise: bool = True,
         progress: Progress | None = None, facts: Any = None) -> TuneResult:
    """Measure the workload at several thread counts and return the curve and the winner.

    ``workload`` is a built-in (matmul, elementwise, ensemble) unless ``stmt`` (with ``setup``),
    ``module`` ("pkg.mod:func") or ``command`` (argv) is given. With ``confirm`` the points within
    the noise of the fastest are measured once more and their samples pooled before the pick. ``objective`` latency sweeps intra-op
    counts ``min_threads..max_threads`` (default: the usable CPUs; more only if asked);
    throughput sweeps inter x intra pairs whose product fits ``max_threads`` (default usable CPUs),
    with ``inter`` concurrent requests. Raises UsageError/TuneError for bad input and
    WorkloadFailed when the workload itself fails.
    """
    t_start = time.perf_counter()
    if objective not in OBJECTIVES:
        raise UsageError(f"--objective {objective!r}: use latency or throughput")
    spec = _spec(workload, framework, size, stmt, setup, module, command)
    repeats = _check_int("--repeats", repeats)
    warmup = _check_int("--warmup", warmup, 0)
    if not isinstance(min_time, (int, float)) or min_time < 0:
        raise UsageError(f"--min-time must be a number of seconds >= 0, got {min_time!r}")
    if not isinstance(timeout, (int, float)) or timeout <= 0:
        raise UsageError(f"--timeout must be a number of seconds > 0, got {timeout!r}")

    if facts is None:
        from parinfo.machine.topology import machine_facts

        facts = machine_facts()
    usable = facts.usable_cpus
    cap = MAX_COUNT_FACTOR * (facts.logical_cpus or usable)
    min_threads = _check_int("--min", min_threads)
    max_threads = usable if max_threads is None else _check_int("--max", max_threads)
    if max_threads > cap:
        raise UsageError(f"--max {max_threads} is more than {MAX_COUNT_FACTOR} x the {facts.logical_cpus} "
                         f"logical CPUs; use at most {cap}")
    if min_threads > max_threads:
        raise UsageError(f"--min {min_threads} is above --max {max_threads}: nothing to measure "
                         f"(this machine has {usable} usable CPUs)")
    min_inter = _check_int("--min-inter", min_inter)
    if max_inter is not None:
        max_inter = _check_int("--max-inter", max_inter)
        if min_inter > max_inter:
            raise UsageError(f"--min-inter {min_inter} is above --max-inter {max_inter}: nothing to measure")

    pairs = objective == "throughput" or uses_interop(spec)
    concurrent = objective == "throughput"
    if pairs and min_threads * min_inter > max_threads:
        raise UsageError(f"--min {min_threads} x --min-inter {min_inter} does not fit --max {max_threads} "
                         f"(the product of inter-op and intra-op threads must fit)")
    if in_process and spec["kind"] == "command":
        raise UsageError("--in-process cannot time a command: it runs in its own process")
    if in_process and uses_interop(spec):
        raise UsageError("--in-process cannot sweep the ensemble workload: the inter-op count is set once "
                         "per process; drop --in-process")
    if in_process and framework == "torch" and spec["kind"] in BUILTIN:
        import torch  # noqa: F401 - asked for: the in-process torch workload needs it

    settings = Settings(warmup=warmup, repeats=repeats, min_time=float(min_time), timeout=float(timeout))
    if spec["kind"] == "command":
        measurer = CommandMeasurer(spec, settings, concurrent)
        mode = "command"
    elif in_process:
        measurer = InProcessMeasurer(spec, settings, concurrent)
        mode = "in-process"
    else:
        measurer = WorkerMeasurer(spec, settings, concurrent)
        mode = "subprocess"

    noise = noise_check(usable) if check_noise else []
    started = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    if pairs:
        inter_hi = min(max_inter or max_threads, max_threads)
        n_cands = len(search.pair_candidates(max_threads, (min_threads, max_threads), (min_inter, inter_hi)))
    else:
        n_cands = max_threads - min_threads + 1
    if progress:
        progress("start", {"candidates": n_cands, "workload": describe(spec)})

    seen: set[Point] = set()

    def measure(p: Point) -> Stats:
        again = p in seen
        seen.add(p)
        if progress:
            progress("confirming" if again else "measuring", {"point": p, "label": p.label(pairs)})
        s = measurer(p)
        if progress and not again:
            progress("measured", {"point": p, "label": p.label(pairs), "stats": s})
        return s

    try:
        if pairs:
            result = search.search_pairs(max_threads, measure, intra=(min_threads, max_threads),
                                         inter=(min_inter, min(max_inter or max_threads, max_threads)),
                                         margin=margin, exhaustive=exhaustive, confirm_close=confirm)
        else:
            result = search.search_counts(range(min_threads, max_threads + 1), measure, margin=margin,
                                          exhaustive=exhaustive, confirm_close=confirm)
    finally:
        if isinstance(measurer, InProcessMeasurer):
            measurer.restore()
    if progress:
        progress("done", {})

    for p, s in sorted(result.stats.items()):
        if s.spread > NOISY_SPREAD:
            noise.append(f"{p.label(pairs)}: spread {s.spread:.0%} of the median (noisy: raise --repeats "
                         f"or --min-time, or quiet the machine)")
    b = result.best
    assert b is not None
    rivals = [p for p, s in result.stats.items()
              if p != b and not search.clearly_worse(s, result.stats[b], margin)]
    if rivals:
        noise.append(f"within the noise of the best ({b.label(pairs)}): "
                     + ", ".join(p.label(pairs) for p in sorted(rivals)))

    notes = [n for p in sorted(result.stats) for n in _not_in_force(p, measurer.in_force.get(p), pairs)]

    machine = {"cpu_model": _cpu_model(), "logical_cpus": facts.logical_cpus,
               "physical_cores": facts.physical_cores, "usable_cpus": usable,
               "usable_physical_cores": facts.usable_physical_cores,
               "affinity": format_cpu_list(facts.affinity) if facts.affinity else "unknown"}
    return TuneResult(spec=spec, workload=describe(spec), objective=objective, mode=mode, pairs=pairs,
                      concurrent=concurrent, machine=machine, search=result, settings=settings,
                      in_force=dict(measurer.in_force), noise=noise, notes=notes, started=started,
                      total_time_s=time.perf_counter() - t_start)
