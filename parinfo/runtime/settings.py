"""The process's thread counts, where each came from, and the rules for changing them.

One ``RuntimeSettings`` object (``Runtime.settings``) is the one place the counting rules are enforced:

* Intra-op count (parallel_for and native pools): process-wide, changeable any time from any
  thread; a change applies to parallel regions that start after it, regions already running keep
  their count.
* Inter-op count (fork/wait): an explicit set-once state, as ATen's ParallelNative has:
  NOT_SET -> SET (``set_num_interop_threads`` or a profile) -> CONSUMED (the pool started, first
  ``fork``); NOT_SET -> CONSUMED directly when the pool starts on the default. Setting it in SET
  or CONSUMED raises the reference's RuntimeError.
* Resolution with provenance: explicit call > applied profile (``configure``) > PARINFO_* variable >
  MKL_NUM_THREADS > OMP_NUM_THREADS (intra only) > default from the machine's usable CPUs.
"""
from __future__ import annotations

import enum
import operator
import os
import threading
from typing import TYPE_CHECKING

from parinfo.process.libraries import ParinfoRuntime, family, role_var
from parinfo.process.variables import count_from_env, read_setting
from parinfo.records.source import EXPLICIT_CALL, Kind, Source, followed_default, parinfo_default, profile, variable

if TYPE_CHECKING:
    from parinfo.machine.topology import MachineFacts

INTEROP_ERROR = ("Error: cannot set number of interop threads after parallel work has started "
                 "or set_num_interop_threads called")

EXPLICIT = EXPLICIT_CALL

# The variables each count reads, first wins (after an explicit call and a profile).
INTRA_VARS = family(ParinfoRuntime).count_vars  # PARINFO_NUM_THREADS, then torch's variables
INTER_VARS = (role_var("inter_op"),)
BACKEND_VAR = role_var("backend")

# Each pool holds at most this many threads per logical CPU of the machine, whatever the count asks
# (MKL and OpenBLAS cap their own pools the same way); a larger count is valid but capped.
CEILING_PER_CPU = 4


def pool_ceiling() -> int:
    """The most threads any parinfo pool runs: CEILING_PER_CPU x the machine's logical CPUs."""
    return CEILING_PER_CPU * (os.cpu_count() or 1)


class InteropState(enum.Enum):
    """Where the set-once inter-op count stands."""

    NOT_SET = "not set"
    SET = "set"
    CONSUMED = "consumed"


def check_count(n: object, what: str) -> int:
    """Validate a thread count given to the API: a positive int (bool, float and str are refused)."""
    if isinstance(n, bool):
        raise TypeError(f"{what} expects an int, but got bool ({n!r})")
    try:
        value = operator.index(n)  # type: ignore[arg-type]  # int and integer-like types (numpy integers), never float/str
    except TypeError:
        raise TypeError(f"{what} expects an int, but got {type(n).__name__} ({n!r})") from None
    if value < 1:
        raise ValueError(f"{what} expects a positive integer, but got {value}")
    return value


#: A count, the source that decided it, and the note on variables passed over ("ignored invalid ...").
Decided = tuple[int, Source, str | None]


def _from_env(names: tuple[str, ...], default: int, default_source: Source,
              environ: dict[str, str]) -> Decided:
    """(count, source, note on the invalid variables passed over) from the first valid variable in
    ``names``; ``default`` from ``default_source`` when none is valid."""
    ignored: list[tuple[str, str]] = []  # (variable, its invalid value)
    for name in names:
        raw = environ.get(name)
        if raw is None:
            continue
        n = count_from_env(name, environ)
        if n is None:
            ignored.append((name, raw))
            continue
        own = family(ParinfoRuntime)
        name_of = environ.get(own.var("profile"))
        source = profile(name_of, name) if name in own.variables and name_of else variable(name)
        note = _ignored_note(ignored)
        return n, source.noted(note), note
    note = _ignored_note(ignored)
    return default, default_source.noted(note), note


def _ignored_note(ignored: list[tuple[str, str]]) -> str | None:
    if not ignored:
        return None
    return "ignored invalid " + ", ".join(f"{name}={value!r}" for name, value in ignored)


INTRA_DEFAULT = parinfo_default("usable physical cores")
INTER_DEFAULT = parinfo_default("usable CPUs")


def read_facts() -> MachineFacts | None:
    """The machine's facts as the topology layer reads them now (affinity, cpuset and quota are
    re-read on every call); None when they cannot be read."""
    try:
        from parinfo.machine.topology import machine_facts

        return machine_facts()
    except Exception:  # an odd environment must not stop the runtime
        return None


def machine_of(facts: MachineFacts | None) -> tuple[int, int]:
    """(usable physical cores, usable CPUs) of ``facts``; the affinity when they are unknown."""
    if facts is not None:
        return max(1, int(facts.usable_physical_cores)), max(1, int(facts.usable_cpus))
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, n), max(1, n)


def _read_backend() -> tuple[str, Source]:
    """(backend, source) from PARINFO_BACKEND=native|sequential."""
    setting = read_setting(BACKEND_VAR, os.environ)
    return str(setting.value or "native"), setting.source(BACKEND_VAR)


class RuntimeSettings:
    """The intra-op and inter-op counts with their sources, the backend and the machine facts.

    Variables and machine facts are read once, at first use. ``intra_now`` is the current
    intra-op count for hot code (None before the first resolution).
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._intra_choice: tuple[int, Source] | None = None  # set by an explicit call or a profile
        self._inter_choice: tuple[int, Source] | None = None
        self._intra_default: Decided | None = None
        self._inter_default: Decided | None = None
        self._intra_outranked: list[str] = []  # profile requests an explicit call outranked
        self._machine: tuple[int, int] | None = None
        self.facts: MachineFacts | None = None  # the facts ``_machine`` came from
        self._backend: tuple[str, Source] | None = None
        self.interop_state = InteropState.NOT_SET
        self.intra_now: int | None = None
        self.ceiling = pool_ceiling()

    # machine and backend -------------------------------------------------------------------
    def machine(self) -> tuple[int, int]:
        """(usable physical cores, usable CPUs), read once."""
        if self._machine is None:
            self.facts = read_facts()
            self._machine = machine_of(self.facts)
        return self._machine

    def usable_cpus(self) -> int:
        """CPUs this process may use (affinity and quota respected)."""
        return self.machine()[1]

    def backend(self) -> tuple[str, Source]:
        """(backend, source): PARINFO_BACKEND=native|sequential, read once at first use."""
        if self._backend is None:
            self._backend = _read_backend()
        return self._backend

    def sequential(self) -> bool:
        return self.backend()[0] == "sequential"

    def peek(self, machine: tuple[int, int]) -> tuple[tuple[str, Source], tuple[int, Source], tuple[int, Source]]:
        """(backend, intra, inter) as they stand, resolving nothing: one not resolved yet is what it
        would resolve to now, from the environment and ``machine`` ((usable physical cores, usable
        CPUs), read elsewhere, e.g. by parinfo's attach from outside), and is not kept. Reads no
        machine fact and imports nothing."""
        with self._lock:
            env = dict(os.environ)
            cores, cpus = self._machine or machine
            backend = self._backend or _read_backend()
            intra = self._intra_choice or (self._intra_default or _from_env(INTRA_VARS, cores, INTRA_DEFAULT, env))[:2]
            inter = self._inter_choice or (self._inter_default or _from_env(INTER_VARS, cpus, INTER_DEFAULT, env))[:2]
            return backend, (intra[0], intra[1]), (inter[0], inter[1])

    # intra-op ------------------------------------------------------------------------------
    def intra(self) -> tuple[int, Source]:
        """The current intra-op (count, source)."""
        with self._lock:
            if self._intra_choice is not None:
                cur = self._intra_choice
            else:
                if self._intra_default is None:
                    self._intra_default = _from_env(INTRA_VARS, self.machine()[0], INTRA_DEFAULT, dict(os.environ))
                cur = self._intra_default[:2]
            self.intra_now = cur[0]
            return cur

    def intra_count(self) -> int:
        """The intra-op count, cheap after the first call."""
        n = self.intra_now
        return n if n is not None else self.intra()[0]

    def set_intra(self, n: int, source: Source) -> bool:
        """Record a new intra-op count; False when an explicit call outranks ``source`` (a profile)."""
        with self._lock:
            choice = self._intra_choice
            if source.kind is not Kind.EXPLICIT and choice is not None and choice[1].kind is Kind.EXPLICIT:
                self._intra_outranked.append(f"{source} asked {n}; the explicit call ({choice[0]}) "
                                             "takes precedence")
                return False
            self._intra_choice = (n, source)
            self.intra_now = n
            return True

    def intra_outranked(self) -> list[str]:
        """Profile requests for the intra-op count that an explicit call outranked."""
        with self._lock:
            return list(self._intra_outranked)

    # inter-op (set once) -------------------------------------------------------------------
    def inter(self) -> tuple[int, Source]:
        """The current inter-op (count, source); reading never starts the pool."""
        with self._lock:
            if self._inter_choice is not None:
                return self._inter_choice
            if self._inter_default is None:
                self._inter_default = _from_env(INTER_VARS, self.machine()[1], INTER_DEFAULT, dict(os.environ))
            return self._inter_default[:2]

    def check_inter_settable(self) -> None:
        """Raise the set-once RuntimeError unless the inter-op count is still NOT_SET."""
        if self.interop_state is not InteropState.NOT_SET:
            raise RuntimeError(INTEROP_ERROR)

    def set_inter(self, n: int, source: Source) -> None:
        """NOT_SET -> SET; any other state raises the set-once RuntimeError."""
        with self._lock:
            self.check_inter_settable()
            self._inter_choice = (n, source)
            self.interop_state = InteropState.SET

    def consume_inter(self) -> int:
        """-> CONSUMED (the inter-op pool starts); returns the count the pool uses."""
        with self._lock:
            self.interop_state = InteropState.CONSUMED
            return self.inter()[0]

    def inter_locked(self) -> bool:
        """True once the inter-op count can no longer change."""
        return self.interop_state is not InteropState.NOT_SET

    # a budget that changes ---------------------------------------------------------------------
    def chosen(self) -> bool:
        """True when someone chose the intra-op count (an explicit call or a profile)."""
        return self._intra_choice is not None

    def follow_machine(self, facts: MachineFacts | None, at: float) -> list[str]:
        """The usable CPUs changed (re-read at ``at``, seconds since the epoch): take ``facts`` as the machine's, and
        let the defaults nobody chose follow them. The intra-op default follows unless a call or a
        profile set the count; the inter-op default only while the count is not set (a started
        pool keeps its size: the set-once rule). A count from a variable stays. Returns the counts
        that changed, as "intra-op 2 -> 1"."""
        machine = machine_of(facts)
        changed = []
        with self._lock:
            self._machine, self.facts = machine, facts
            intra = self._intra_default
            if intra is not None:
                new = self._followed(intra, machine[0], at)
                if new != intra:
                    self._intra_default = new
                    if self._intra_choice is None:
                        self.intra_now = new[0]
                        if new[0] != intra[0]:
                            changed.append(f"intra-op {intra[0]} -> {new[0]}")
            inter = self._inter_default
            if inter is not None and self.interop_state is InteropState.NOT_SET:
                new = self._followed(inter, machine[1], at)
                if new != inter:
                    self._inter_default = new
                    if new[0] != inter[0]:
                        changed.append(f"inter-op {inter[0]} -> {new[0]}")
        return changed

    @staticmethod
    def _followed(default: Decided, n: int, at: float) -> Decided:
        """``default`` with the machine's new count, when it came from the machine."""
        _, source, note = default
        if not source.kind.default:  # a variable decided it
            return default
        return n, followed_default(source.detail, at).noted(note), note

    def after_fork_in_child(self) -> None:
        """Fresh lock in a forked child; counts and rules carry over from the parent."""
        self._lock = threading.RLock()

