"""The data-frame libraries' families: Arrow (pyarrow), Polars and DuckDB. Each is a Python module
with pools of its own, read only when the process has imported it, through getters that start no
pool and create no connection (the facts below were measured in real processes: docs/libraries.md).
"""
from __future__ import annotations

import math
import os
import re
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

from parinfo.machine import runtime_readings
from parinfo.process import defaults
from parinfo.process.defaults import NO_FACTS, ModuleFacts
from parinfo.process.library_base import Library, QuotaRule
from parinfo.process.library_parts import (
    Calls,
    Does,
    LibraryKind,
    Pool,
    Push,
    Reading,
    Takes,
    Uptake,
    as_count,
    digits_value,
)
from parinfo.safe_text import plural

if TYPE_CHECKING:
    from parinfo.machine.topology import MachineFacts

#: The variable that caps Arrow's CPU pool, its default included.
THREAD_LIMIT = "OMP_THREAD_LIMIT"
#: Arrow's IO pool variable, and the pool when it does not set it (arrow/io/interfaces.cc).
ARROW_IO_VAR, ARROW_IO_DEFAULT = "ARROW_IO_THREADS", 8


#: The largest count a C ``int`` holds: Arrow reads its variables into one, and a larger value is
#: none (OMP_NUM_THREADS=2147483648 gives the default; ARROW_IO_THREADS=2147483648 is refused, measured).
INT_MAX = 2**31 - 1


def leading_count(value: str | None) -> int | None:
    """The count Arrow reads from OMP_NUM_THREADS and OMP_THREAD_LIMIT: the number at the start
    (blanks and a sign before it; "2x", "1.5" and "1,3" give 2, 1, 1, measured), None unless above 0
    and within a C int."""
    m = _LEADING.match(value or "")
    n = digits_value(m.group(1)) if m else 0
    return n if 0 < n <= INT_MAX else None


def _exact_count(value: str | None, *, blanks: bool, most: int | None = None) -> int | None:
    """A count that is digits only (with ``blanks``: blanks and a plus sign allowed around them),
    at most ``most`` when given."""
    m = (_TRIMMED if blanks else _DIGITS).fullmatch(value or "")
    n = digits_value(m.group(1)) if m else 0
    return n if n > 0 and (most is None or n <= most) else None


_LEADING = re.compile(r"\s*\+?(\d+)", re.ASCII)
_DIGITS = re.compile(r"(\d+)", re.ASCII)
_TRIMMED = re.compile(r"\s*\+?(\d+)\s*", re.ASCII)


def threads_named(pattern: re.Pattern[str]) -> int | None:
    """How many of this process's threads have a kernel name matching ``pattern``; None where the
    names cannot be read (no /proc)."""
    from parinfo.errors import UsageError
    from parinfo.machine.procfs import this_or

    try:
        names = this_or(None).thread_names()
    except (UsageError, OSError):
        return None
    return sum(1 for _, name in names if name is not None and pattern.fullmatch(name))


#: The kernel names of Polars' rayon pool threads (polars-0, polars-1...).
_POLARS_WORKER = re.compile(r"polars-\d+")
#: The pid of the process that saw Polars' pool running.
_POLARS_STARTED: dict[str, int] = {}


class Arrow(Library):
    """Arrow's C++ pools as pyarrow sets them: a CPU pool (``cpu_count``) and an IO pool
    (``io_thread_count``). Both are made at their getter's first call (pyarrow's import makes
    neither), which reads their variables then; neither starts a thread (workers start with the
    first task). Both are resized at any time by their setters. parinfo reads them through those
    getters: where the program had not called them yet, that read makes the pools from the
    environment of that moment (no thread), as the program's own first call would have."""

    name = label = module = "pyarrow"
    kind = LibraryKind.PYTHON
    precedence = ("OMP_NUM_THREADS",)
    reads = (THREAD_LIMIT,)
    cap_vars = (THREAD_LIMIT,)
    borrowed = ("OMP_NUM_THREADS", THREAD_LIMIT)
    profile_key, profile_var = "openmp", "OMP_NUM_THREADS"  # it reads OpenMP's variable, so it takes that count
    push, calls = Push.SETTER, Calls("set_cpu_count", "cpu_count")
    pools = (Pool("io", Calls("set_io_thread_count", "io_thread_count"), (ARROW_IO_VAR,), io=True),)
    thread_names = (("jemalloc_bg_thd", "jemalloc's background thread (its allocator), from its first allocation"),)
    listed = "loaded"
    note = ("CPU pool: OMP_NUM_THREADS (its first entry), else the CPUs in affinity, capped by "
            "OMP_THREAD_LIMIT; the quota is ignored. IO pool: ARROW_IO_THREADS, else 8. Each is read "
            "at its getter's first call; set_cpu_count / set_io_thread_count resize them at any time")
    quota_rule = QuotaRule.IGNORES  # pyarrow 26: cpu_count() 2 (affinity) in a 0.5-CPU cgroup
    read_when = "before pyarrow is imported"

    def context(self, module: Any, env: Mapping[str, str]) -> ModuleFacts:
        return ModuleFacts(limit=leading_count(env.get(THREAD_LIMIT)))

    def count_in(self, var: str, env: Mapping[str, str]) -> int | None:
        """OMP_NUM_THREADS: the number at its start (:func:`leading_count`); ARROW_IO_THREADS:
        digits only, within a C int ("+1", " 1 ", "1x", "0", "" are refused with an "Invalid value"
        line on stderr)."""
        if var == ARROW_IO_VAR:
            return _exact_count(env.get(var), blanks=False, most=INT_MAX)
        return leading_count(env.get(var))

    def refusal(self, var: str, value: str) -> Reading:
        """ARROW_IO_THREADS: an "Invalid value" line on stderr, and 8; the others: silently the default."""
        return Reading(Does.WARNS) if var == ARROW_IO_VAR else Reading(Does.IGNORES)

    def default(self, facts: MachineFacts, ctx: ModuleFacts) -> tuple[int | None, str]:
        """The CPUs in affinity (not the quota), at most OMP_THREAD_LIMIT."""
        n, why = defaults.affinity_cpus(facts)
        if ctx.limit is not None and ctx.limit < n:
            return ctx.limit, f"{ctx.limit} ({why}, capped at {THREAD_LIMIT}={ctx.limit}; quota ignored)"
        return n, f"{why} (Arrow ignores the CPU quota)"

    def cap(self, facts: MachineFacts, env: Mapping[str, str],
            ctx: ModuleFacts | None = None) -> tuple[int | None, str]:
        """OMP_THREAD_LIMIT caps OMP_NUM_THREADS' request; nothing else does (100 is taken on 2 CPUs)."""
        limit = leading_count(env.get(THREAD_LIMIT))
        return (None, "") if limit is None else (limit, f"{THREAD_LIMIT}={limit}")

    def pool_default(self, name: str, facts: MachineFacts, ctx: ModuleFacts) -> tuple[int | None, str]:
        if name == "io":
            return ARROW_IO_DEFAULT, f"{ARROW_IO_DEFAULT} (Arrow's IO pool; CPUs, affinity and quota ignored)"
        return super().pool_default(name, facts, ctx)


class Polars(Library):
    """Polars' rayon pool: started when first used, of the count Polars took from POLARS_MAX_THREADS
    at import (a value set after the import is not read, even before the pool starts: measured on
    2.1); fixed from then on. ``thread_pool_size()`` starts it, so it is called only once the
    pool's threads (``polars-N``) are there; before, the report says what the pool will take."""

    name = label = module = "polars"
    kind = LibraryKind.PYTHON
    precedence = ("POLARS_MAX_THREADS",)
    profile_key, profile_var = "polars", "POLARS_MAX_THREADS"
    push = Push.NONE
    listed = "loaded"
    unread = "its pool has not started: thread_pool_size() would start it"
    thread_names = (
        ("polars-*", "its rayon pool, one per thread of thread_pool_size(), started at first use"),
        ("tokio-rt-worker", "its tokio runtime (async and cloud IO), thread_pool_size() threads, started at "
                            "the first query"),
        ("async-executor-", "its async executor, thread_pool_size() threads, started at the first query"),
        ("polars-ooc-clea", "its out-of-core spill cleaner, started at import"),
        ("jemalloc_bg_thd", "jemalloc's background threads (its allocator), from import"),
    )
    note = ("POLARS_MAX_THREADS (blanks allowed; 0 or invalid: the default), else the CPUs in affinity, "
            "at most the CPU quota rounded down (at least 1), read at import; fixed after")
    quota_rule = QuotaRule.FOLLOWS  # polars 2.1: thread_pool_size() 1 in a 0.5-CPU cgroup
    read_when = "before `import polars`"

    def count_in(self, var: str, env: Mapping[str, str]) -> int | None:
        """Digits, blanks and a plus sign around them allowed; "1x", "1.5", "1,3" and 0 give the
        default ("1x" with a UserWarning "illegal value")."""
        return _exact_count(env.get(var), blanks=True)

    def refusal(self, var: str, value: str) -> Reading:
        """0 asks rayon for its default, silently: RAYON_NUM_THREADS, else the CPUs (measured: with
        RAYON_NUM_THREADS=3 the pool has 3, while unset or invalid it keeps its own default); anything
        else it takes no count from (the empty value, "1x", "-1", "2,3") gives a UserWarning
        "illegal value" and the default (measured)."""
        if _TRIMMED.fullmatch(value):
            return Reading(Does.DEFAULT, words="takes it as rayon's default (RAYON_NUM_THREADS, else the CPUs)")
        return Reading(Does.WARNS)

    def default(self, facts: MachineFacts, ctx: ModuleFacts) -> tuple[int | None, str]:
        """Rust's available_parallelism: the CPUs in affinity, at most the quota rounded down (at
        least 1)."""
        n, why = defaults.affinity_cpus(facts)
        if facts.quota is not None and max(1, math.floor(facts.quota)) < n:
            q = max(1, math.floor(facts.quota))
            return q, f"{q} (the CPU quota of {facts.quota:g} rounded down; {why})"
        return n, f"{why} (at most the CPU quota rounded down)"

    def read_count(self, module: Any) -> int | None:
        """thread_pool_size() once the pool runs (its threads are there), else None: it would start it.
        A pool seen running stays (rayon's global pool never ends), so this process (by pid: a forked
        child has no threads) looks for its threads only until it has seen them."""
        pid = os.getpid()
        if _POLARS_STARTED.get("pid") != pid:
            if not threads_named(_POLARS_WORKER):
                return None
            _POLARS_STARTED["pid"] = pid
        try:
            return as_count(module.thread_pool_size())
        except Exception:
            return None

    def quiet_getter(self) -> str:
        return ""

    def attach_getter(self) -> tuple[str, tuple[str, str] | None]:
        """thread_pool_size(), once the pool's threads run (it would start them)."""
        return "thread_pool_size", ("thread", "polars-")

    def uptake(self, module: Any, n: int) -> Uptake:
        """Polars takes POLARS_MAX_THREADS at import (a value set after it, even before the pool
        starts, is not read: measured on 2.1) and keeps the size: only a new process changes it."""
        return Uptake(Takes.STARTED, code=f"POLARS_MAX_THREADS={n} before `import polars`",
                      now=self.read_count(module), when="at import")


class DuckDB(Library):
    """DuckDB: a ``threads`` setting per database, given to each new connection; read with SQL
    (``current_setting('threads')``), which needs a connection. parinfo creates none and calls no
    ``duckdb.default_connection()`` (it creates the default database), so the report says what a new
    connection gets; existing ones may have been set otherwise."""

    name = label = module = "duckdb"
    kind = LibraryKind.PYTHON
    profile_key = "duckdb"  # no variable: a profile's count reaches it only in the program's code
    push = Push.NONE
    listed = "loaded"
    unread = ("a setting per connection, and parinfo creates none; existing connections may differ: "
              "SET threads = n, duckdb.connect(config={'threads': n})")
    note = ("no variable; a new connection takes SLURM_CPUS_ON_NODE, else its cgroup's CPU quota rounded up "
            "(even above the CPUs), else the online CPUs (affinity ignored); SET threads = n changes its "
            "database at any time")
    quota_rule = QuotaRule.FOLLOWS  # duckdb 2.0: current_setting('threads') 1 in a 0.5-CPU cgroup

    def how_to_set(self, n: int, pool: str | None = None) -> str:
        """No variable: SQL on each connection, or the config of a new one."""
        return f"run SET threads = {n} on each connection (or duckdb.connect(config={{'threads': {n}}}))"

    def default(self, facts: MachineFacts, ctx: ModuleFacts) -> tuple[int | None, str]:
        """DuckDB's own reading (:func:`parinfo.machine.runtime_readings.duckdb`): the machine's
        ``duckdb`` row; for facts without one (an older report) the tightest quota stands for its."""
        online = facts.logical_cpus or len(facts.affinity) or 1
        n = facts.usable_by_rule.get("duckdb") or runtime_readings.duckdb(online, facts.quota)
        if facts.quota is not None and n == math.ceil(facts.quota):
            return n, f"{n} (a new connection: the CPU quota of {facts.quota:g} rounded up)"
        if n == online:
            return n, f"{plural(n, 'online CPU')} (a new connection; affinity ignored)"
        return n, f"{n} (a new connection: {runtime_readings.SLURM_CPUS_VAR})"

    def quiet_getter(self) -> str:
        return ""

    def uptake(self, module: Any, n: int) -> Uptake:
        """No variable and no process-wide call: each database takes its count in code."""
        return Uptake(Takes.CODE, code=self.code_line(n))

    @staticmethod
    def code_line(n: int) -> str:
        """The code that gives a database ``n`` threads."""
        return f"duckdb.connect(config={{'threads': {n}}}), or SET threads = {n} on a connection"

    def plan_note(self, counts: Mapping[str, int], values: Mapping[str, int],
                  env: Mapping[str, str], facts: MachineFacts | None = None,
                  written: Collection[str] = ()) -> str | None:
        """DuckDB reads no variable: where the profile writes its count and its own default on the
        machine is another, only the program's code can give it that count."""
        want = counts.get(str(self.profile_key))
        if want is None or facts is None or self.profile_key not in written:
            return None
        default, why = self.default(facts, NO_FACTS)
        if default == want:
            return None
        return (f"duckdb reads no variable: a new connection takes {why}, not the profile's {want}; "
                f"in the program: {self.code_line(want)}")
