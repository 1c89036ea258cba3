"""Measuring one point with its counts really in force: a fresh worker process (default), a launched
command, or this process through the runtime and threadpoolctl. Also the machine-noise check."""
from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import field
from typing import TYPE_CHECKING, Any, TypedDict

from parinfo.errors import TuneError
from parinfo.process import setter
from parinfo.records.convert import LOCAL, dump, key
from parinfo.records.record import record
from parinfo.records.unknown import Unknown
from parinfo.safe_text import plural
from parinfo.tuning.search import Point, Stats
from parinfo.tuning.tail import OutputTail
from parinfo.tuning.usercode import RAISED
from parinfo.tuning.workloads import TORCH, Command, Workload

if TYPE_CHECKING:  # pragma: no cover
    from parinfo.launch.child import ChildEnv
    from parinfo.machine.topology import MachineFacts
    from parinfo.tuning.worker import Job

#: The name of the profile each trial process is launched under (PARINFO_PROFILE in its environment).
TRIAL_PROFILE = "parinfo-tune-trial"
_MAX_REPORTS = 64  # start-up hook reports read per trial
_MAX_REPORT_BYTES = 1 << 16
_MAX_RESULT_BYTES = 1 << 26  # a worker's samples and counts


class WorkloadFailed(TuneError):
    """The workload itself failed (the user's code raised, or the command exited non-zero).

    ``exit_code`` is what the CLI exits with (1 for a raising statement or function, the command's
    own code for a command); ``output`` is the user's traceback or the command's output.
    """

    def __init__(self, message: str, *, exit_code: int, output: str) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.output = output


def exit_status(returncode: int) -> int:
    """A child's status as a shell reports it: its code, or 128+N when signal N killed it."""
    return 128 - returncode if returncode < 0 else returncode


def ended(returncode: int) -> str:
    """How a child ended, in words: "exited with code 3", "was killed by SIGKILL (signal 9)"."""
    if returncode >= 0:
        return f"exited with code {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = "an unknown signal"
    return f"was killed by {name} (signal {-returncode})"


def point_label(p: Point) -> str:
    return f"{p.intra} intra-op x {p.inter} inter-op"


def trial_child(p: Point, choices: Mapping[str, str], facts: MachineFacts, report: str) -> ChildEnv:
    """The environment of a process that measures ``p``, built as ``parinfo apply`` builds a launched
    program's (parinfo.launch.child): the point's counts as a profile's ``intra_op``/``inter_op``
    (every library's variable, and the start-up hook that sets torch's counts when torch is imported),
    ``choices`` as its ``allocator``/``openmp`` keys (preloaded), overriding the user's variables as
    ``--force`` does; the hook writes what it reads back to the folder ``report``."""
    from parinfo.errors import ProfileError
    from parinfo.launch.child import child_environ
    from parinfo.profiles.loading import resolve_profile

    body: dict[str, object] = {"version": 1, "name": TRIAL_PROFILE, "intra_op": p.intra, "inter_op": p.inter,
                               **choices}  # a profile's document: the profile reader checks every value
    try:
        plan = resolve_profile(body, facts)
    except ProfileError as exc:
        raise TuneError(f"cannot launch {point_label(p)}: {exc.message}") from None
    return child_environ(plan, os.environ, force=True, report=report)


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def read_json(path: str, limit: int) -> Any:
    """The JSON document in the regular file ``path`` (at most ``limit`` bytes, read through
    :mod:`parinfo.safe_file`: the trial's own code may have put a FIFO or a link there). OSError or
    ValueError (its words say why) when it cannot be read; nesting too deep for the parser is a
    ValueError too."""
    import parinfo.safe_file as safe_file

    raw = safe_file.read_file(path, limit)
    try:
        return json.loads(raw.decode("utf-8", "replace"))
    except RecursionError:
        raise ValueError("nested too deeply") from None


class HookReport(TypedDict, total=False):
    """What the start-up hook of a trial process read back, checked: torch's and parinfo's counts
    (``intra_op``, ``inter_op``: an int or None), and for each file the trial preloaded whether the
    process had it mapped (None: not said)."""

    torch: dict[str, int | None]
    parinfo: dict[str, int | None]
    preloaded: dict[str, bool | None]


def hook_report(folder: str, pid: int, child: ChildEnv) -> HookReport | Unknown | None:
    """What the start-up hook of a trial read back (the process ``pid``'s report, else the first of
    its Python descendants'). None when no report was written; Unknown, with why, when one was there
    but could not be read (the trial wrote the folder: hostile input)."""
    mine = f"{pid}.json"
    try:
        with os.scandir(folder) as entries:  # the command may fill the folder: bounded
            names = [e.name for e in itertools.islice(entries, _MAX_REPORTS * 4) if e.name.endswith(".json")]
    except OSError:
        return None
    names = ([mine] if os.path.lexists(os.path.join(folder, mine)) else []) + sorted(n for n in names if n != mine)
    why = None
    for name in names[:_MAX_REPORTS]:
        try:
            data = read_json(os.path.join(folder, name), _MAX_REPORT_BYTES)
        except (OSError, ValueError) as exc:
            why = why or f"cannot read the start-up hook's report {name}: {getattr(exc, 'strerror', None) or exc}"
            continue
        if not isinstance(data, dict):
            why = why or f"the start-up hook's report {name} is not a JSON object"
            continue
        out: HookReport = {}
        torch, ours = _counts(data.get("torch")), _counts(data.get("parinfo"))
        if torch is not None:
            out["torch"] = torch
        if ours is not None:
            out["parinfo"] = ours
        if child.preloaded:
            mapped = data.get("preloaded")
            mapped = mapped if isinstance(mapped, dict) else {}
            out["preloaded"] = {path: mapped.get(path) if isinstance(mapped.get(path), bool) else None
                                for path in child.preloaded}
        return out
    return None if why is None else Unknown(why)


def _counts(value: object) -> dict[str, int | None] | None:
    """The intra-op and inter-op counts of a hook report's entry (an int or None each), None when the
    entry is not an object."""
    if not isinstance(value, dict):
        return None
    return {k: _int_or_none(value.get(k)) for k in ("intra_op", "inter_op")}


#: What ``in_force`` says for a trial whose process wrote no report.
NO_REPORT = ("unknown (the command did not run parinfo's start-up hook: it is not a Python program, or it "
             "ended without running its exit handlers)")


@record
class Settings:
    """How each point is timed (a tune's JSON gives the first three; the timeout stays here)."""

    warmup: int = 1
    repeats: int = 5
    min_time: float = field(default=0.05, metadata=key("min_time_s"))
    timeout: float = field(default=600.0, metadata=LOCAL)


@record
class Measurer:
    """Common part: remembers what each point reported as in force."""

    workload: Workload
    settings: Settings
    concurrent: bool  # True: inter = concurrent requests; False: inter = the workload's inter-op pool
    facts: MachineFacts
    in_force: dict[Point, Any] = field(default_factory=dict)

    def concurrency(self, p: Point) -> int:
        return p.inter if self.concurrent else 1

    def __call__(self, p: Point) -> Stats:
        """Measure ``p`` with nothing preloaded, and remember what was in force."""
        stats, self.in_force[p] = self.trial(p, {})
        return stats

    def trial(self, p: Point, choices: Mapping[str, str]) -> tuple[Stats, Any]:  # pragma: no cover - overridden
        """Measure ``p`` with ``choices`` (profile keys ``allocator``/``openmp``: word) preloaded; the
        timings and what the process reported in force."""
        raise NotImplementedError

    def restore(self) -> None:
        """Put back what measuring changed in this process (nothing, when points run elsewhere)."""


class WorkerMeasurer(Measurer):
    """Each point in a fresh ``python -m parinfo.tuning.worker`` process, launched as ``parinfo apply``
    launches a program."""

    def trial(self, p: Point, choices: Mapping[str, str]) -> tuple[Stats, Any]:
        s = self.settings
        job: Job = {"spec": dump(self.workload), "concurrency": self.concurrency(p),
                    "warmup": s.warmup, "repeats": s.repeats, "min_time": s.min_time}
        with tempfile.TemporaryDirectory(prefix="parinfo-tune-") as tmp:
            out = os.path.join(tmp, "result.json")
            child = trial_child(p, choices, self.facts, tmp)
            proc = subprocess.Popen([sys.executable, "-m", "parinfo.tuning.worker", json.dumps(job), out],
                                    env=child.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT)
            assert proc.stdout is not None
            tail = OutputTail(proc.stdout)
            try:
                proc.wait(timeout=s.timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise TuneError(f"point {point_label(p)} ran longer than "
                                f"{s.timeout:g} s (raise --timeout, or lower --repeats/--min-time)") from None
            output = tail.text()
            try:
                result = read_json(out, _MAX_RESULT_BYTES)
            except (OSError, ValueError):
                result = None
            report = hook_report(tmp, proc.pid, child)
        if result is None:
            raise WorkloadFailed(f"the worker for {point_label(p)} {ended(proc.returncode)} before reporting",
                                 exit_code=exit_status(proc.returncode) or 1, output=output)
        if not isinstance(result, dict):
            raise WorkloadFailed(f"the worker for {point_label(p)} wrote a result that is not a JSON object",
                                 exit_code=exit_status(proc.returncode) or 1, output=output)
        if result.get("error") == "usage":
            raise TuneError(result["text"])
        if result.get("error") == "user":
            raise WorkloadFailed(result.get("summary") or RAISED, exit_code=1, output=result["text"])
        seen = result.get("in_force")
        if isinstance(seen, dict) and report is not None and not isinstance(report, Unknown) and "preloaded" in report:
            seen["preloaded"] = report["preloaded"]
        elif isinstance(seen, dict) and isinstance(report, Unknown) and child.preloaded:
            seen["verified"] = str(report)
        return Stats(tuple(result["samples"]), result["number"]), seen


class CommandMeasurer(Measurer):
    """A command timed as a whole process, launched as ``parinfo apply`` launches it; ``inter`` copies
    run at once for throughput."""

    def _argv(self) -> list[str]:
        assert isinstance(self.workload, Command)
        return list(self.workload.command)

    def _run_once(self, p: Point, choices: Mapping[str, str]) -> tuple[float, Any]:
        with tempfile.TemporaryDirectory(prefix="parinfo-tune-") as tmp:
            child = trial_child(p, choices, self.facts, tmp)
            elapsed, pid = self._time(p, child)
            report = hook_report(tmp, pid, child)
        seen: dict[str, object] = {"env": {k: v for k, v in child.env.items() if os.environ.get(k) != v
                                           and not k.startswith("_")}}
        if isinstance(report, Unknown):
            seen["verified"] = str(report)
        else:
            seen.update(report if report is not None else {"verified": NO_REPORT})
        return elapsed, seen

    def _time(self, p: Point, child: ChildEnv) -> tuple[float, int]:
        n = self.concurrency(p)
        t0 = time.perf_counter()
        procs = []
        try:
            for _ in range(n):
                procs.append(subprocess.Popen(self._argv(), env=child.env, stdin=subprocess.DEVNULL,
                                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
        except OSError as exc:
            for q in procs:
                q.kill()
                q.wait()
            raise TuneError(f"cannot run {self._argv()[0]!r}: {exc.strerror or exc}") from None
        tails = [OutputTail(proc.stdout) for proc in procs if proc.stdout is not None]
        deadline = t0 + self.settings.timeout
        codes = []
        for proc in procs:
            try:
                codes.append(proc.wait(timeout=max(0.0, deadline - time.perf_counter())))
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                    q.wait()
                raise TuneError(f"the command ran longer than {self.settings.timeout:g} s at "
                                f"{point_label(p)} (raise --timeout)") from None
        elapsed = time.perf_counter() - t0
        for code, tail in zip(codes, tails, strict=False):
            if code != 0:
                raise WorkloadFailed(
                    f"the command {ended(code)} at {point_label(p)}; "
                    f"the sweep stopped (its output is above)", exit_code=exit_status(code), output=tail.text())
        return elapsed / n, procs[0].pid

    def trial(self, p: Point, choices: Mapping[str, str]) -> tuple[Stats, Any]:
        for _ in range(max(1, self.settings.warmup)):
            self._run_once(p, choices)
        runs = [self._run_once(p, choices) for _ in range(self.settings.repeats)]
        return Stats(tuple(t for t, _ in runs), 1), runs[-1][1]


class InProcessMeasurer(Measurer):
    """This process: counts set through the runtime, threadpoolctl and torch's setters."""

    def __init__(self, workload: Workload, settings: Settings, concurrent: bool, facts: MachineFacts) -> None:
        super().__init__(workload, settings, concurrent, facts)
        from parinfo.tuning.usercode import UserCodeError, WorkloadUsageError

        try:
            self.fn = workload.build()
        except UserCodeError as exc:
            raise WorkloadFailed(exc.summary, exit_code=1, output=exc.text) from None
        except WorkloadUsageError as exc:
            raise TuneError(str(exc)) from None
        except MemoryError:
            raise TuneError(f"{workload.describe()}: out of memory building the workload") from None
        self._saved_runtime: int | None = None
        try:
            from parinfo.runtime import get_num_threads
        except ImportError:
            pass
        else:
            self._saved_runtime = get_num_threads()
        self._saved_torch = setter.torch_intra_now()

    def restore(self) -> None:
        """Put back the intra-op counts this process had before the tune."""
        if self._saved_runtime is not None:
            from parinfo.runtime import get_num_threads, set_num_threads

            if get_num_threads() != self._saved_runtime:
                set_num_threads(self._saved_runtime)
        if self._saved_torch is not None:
            setter.torch_intra(self._saved_torch)

    def trial(self, p: Point, choices: Mapping[str, str]) -> tuple[Stats, Any]:
        if choices:  # refused when the options are checked: a library is preloaded at process start
            raise TuneError("in-process trials cannot preload an allocator or an OpenMP runtime")
        from parinfo.tuning.timing import time_calls
        from parinfo.tuning.usercode import UserCodeError

        set_runtime: Callable[[int], None] | None
        try:
            from parinfo.runtime import set_num_threads as set_runtime
        except ImportError:
            set_runtime = None
        if set_runtime is not None:
            set_runtime(p.intra)
        torch = self.workload.framework == TORCH
        pools = setter.native_pools()
        done = setter.set_counts(p.intra, torch=torch, pools=pools)
        s = self.settings
        try:
            samples, number = time_calls(self.fn, concurrency=self.concurrency(p), warmup=s.warmup,
                                           repeats=s.repeats, min_time=s.min_time)
        except UserCodeError as exc:
            raise WorkloadFailed(exc.summary, exit_code=1, output=exc.text) from None
        finally:
            native: dict[str, list[int | None]] = {}
            for pool in pools:
                native.setdefault(pool.internal_api or "?", []).append(pool.get())
            in_force: dict[str, object] = {**native}
            setter.restore([o for o in done if o.target != "intra-op"], pools)
        torch_now = setter.torch_intra_now() if torch else None
        if torch_now is not None:
            in_force["torch"] = {"intra_op": torch_now}
        return Stats(tuple(samples), number), in_force


MEASURERS: dict[str, type[Measurer]] = {"subprocess": WorkerMeasurer, "command": CommandMeasurer,
                                         "in-process": InProcessMeasurer}


def noise_check(usable_cpus: int, *, interval: float = 0.25, threshold: float = 20.0,
                limit: int = 5) -> list[str]:
    """Say what else keeps this machine busy now: CPU use over the last ``interval`` seconds (not the
    load average, whose minute-long memory reports work that has ended), and the busiest processes."""
    import psutil

    own_pid = os.getpid()
    procs = []
    for proc in psutil.process_iter(["pid", "name"]):
        if proc.pid == own_pid:
            continue
        try:
            proc.cpu_percent(None)
            procs.append(proc)
        except (psutil.Error, OSError):
            continue
    psutil.cpu_percent(None)  # starts the window the next call measures
    time.sleep(interval)
    notes = _busy_cpus(psutil.cpu_percent(None), psutil.cpu_count() or usable_cpus, usable_cpus, interval)
    busy = []
    for proc in procs:
        try:
            pct = proc.cpu_percent(None)
        except (psutil.Error, OSError):
            continue
        if pct >= threshold:
            busy.append((pct, proc.info.get("name") or "?", proc.pid))
    for pct, name, pid in sorted(busy, reverse=True)[:limit]:
        notes.append(f"another process is busy: {name} (pid {pid}) at {pct:.0f}% CPU")
    return notes


def _busy_cpus(percent: float, logical: int, usable_cpus: int, interval: float) -> list[str]:
    """A note when the CPUs in use over the window add up to more than half the usable CPUs."""
    in_use = percent / 100.0 * logical
    if in_use <= 0.5 * usable_cpus:
        return []
    return [(f"{plural(in_use, 'CPU', '.1f')} {'was' if in_use == 1 else 'were'} busy in the {interval:g} s before "
             f"the sweep ({usable_cpus} usable): "
             f"timings may be disturbed")]
