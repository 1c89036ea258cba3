"""The families of the libraries an inference service loads: ONNX Runtime (an intra-op and an
inter-op pool per session), Hugging Face tokenizers (rayon's global pool) and OpenCV (its own pool
beside the OpenBLAS copy its wheel ships, which threadpoolctl sees as a native pool of its own).

Read only when imported, never imported, and never started: ONNX Runtime and tokenizers have no
getter, so their count is what a pool made now would get (``sized_at_use``); OpenCV's getter
(``cv2.getNumThreads``) starts no thread. The facts were measured on onnxruntime 1.32,
tokenizers 0.23 and opencv-python-headless 5.0 (tests/test_library_inference.py checks them
against the libraries in real processes).
"""
from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from parinfo.machine import runtime_readings
from parinfo.process.defaults import ModuleFacts
from parinfo.process.library_base import INTER_OP, Library, QuotaRule
from parinfo.process.library_parts import (
    FALSE_WORDS,
    Calls,
    Does,
    LibraryKind,
    Pool,
    Push,
    Reading,
    Takes,
    Uptake,
    digits_value,
)
from parinfo.records.source import Source, unknown, variable
from parinfo.records.unknown import Unknown
from parinfo.safe_text import plural

if TYPE_CHECKING:
    from parinfo.machine.topology import MachineFacts

def _digits(value: str | None, most: int, least: int = 1) -> int | None:
    """The number in ``value`` when it is plain ASCII digits (what ONNX Runtime, rayon and OpenCV
    parse: no sign, no blank, measured) from ``least`` to ``most``, else None."""
    n = digits_value(value) if value and value.isascii() and value.isdigit() else None
    return n if n is not None and least <= n <= most else None


def _zero(value: str) -> bool:
    return _digits(value, 0, 0) == 0


def _opencv_int(value: str | None) -> int | None:
    """OpenCV's reading of its variable: digits read as a 64-bit count (anything else raises), kept
    as a C int (above 2**31 - 1 it wraps: 4294967297 gives 1, 2147483648 a negative count)."""
    n = _digits(value, 2**64 - 1, 0)
    if n is None:
        return None
    wrapped = n % 2**32
    return wrapped - 2**32 if wrapped >= 2**31 else wrapped


#: The onnxruntime version of the process being read when it is not this one: its ``__version__``
#: read inside it (attach), or Unknown(why) (read from outside); None: this process's own module.
_VERSION_IN_VIEW: ContextVar[str | Unknown | None] = ContextVar("onnxruntime_version_in_view", default=None)


@contextmanager
def onnxruntime_version_in_view(version: str | Unknown) -> Iterator[None]:
    """While it lasts, :meth:`OnnxRuntime.reads_variables` judges ``version`` (another process's,
    or Unknown where it was not read), never the onnxruntime parinfo's own process imported."""
    token = _VERSION_IN_VIEW.set(version)
    try:
        yield
    finally:
        _VERSION_IN_VIEW.reset(token)


class OnnxRuntime(Library):
    """ONNX Runtime's pools, one set per session, each sized when the session is made. Intra-op
    (its main pool): ``SessionOptions.intra_op_num_threads``, else ORT_INTRA_OP_NUM_THREADS (read
    then, not at import; from 1.29), else the machine's physical cores; a pool of n adds n - 1
    threads (the caller runs one part). Inter-op (its pool "inter-op", row "onnxruntime inter-op"):
    made only for a session in ``ExecutionMode.ORT_PARALLEL``, sized from
    ``SessionOptions.inter_op_num_threads``, else ORT_INTER_OP_NUM_THREADS, else physical cores.
    No process-wide getter: each count is what a new session with default options gets."""

    name = label = module = "onnxruntime"
    kind = LibraryKind.PYTHON
    precedence: tuple[str, ...] = ("ORT_INTRA_OP_NUM_THREADS",)
    profile_key, profile_var = "onnxruntime", "ORT_INTRA_OP_NUM_THREADS"
    pools = (Pool(INTER_OP, precedence=("ORT_INTER_OP_NUM_THREADS",), profile_key="inter_op", sized_at_use=(
        "what a new session in ORT_PARALLEL execution mode gets (sequential sessions, the default, have "
        "no inter-op pool); one made with SessionOptions.inter_op_num_threads set, or sharing the global "
        "pools, keeps its own count")),)
    push = Push.NONE
    listed = "loaded"
    module_facts = ("__version__",)  # read inside an attached process: which variables it reads
    sized_at_use = ("what a new session with default options gets; a session made with "
                    "SessionOptions.intra_op_num_threads set, or sharing the global pools "
                    "(set_global_thread_pool_sizes), keeps its own count")
    note = ("a pool per session, sized when the session is made; 0 or unset: physical cores "
            "(affinity and CPU quota ignored); set it with ORT_INTRA_OP_NUM_THREADS before a session "
            "is made, or SessionOptions.intra_op_num_threads in code. Its inter-op pool is made only "
            "for a session in ExecutionMode.ORT_PARALLEL: ORT_INTER_OP_NUM_THREADS, or "
            "SessionOptions.inter_op_num_threads")
    quota_rule = QuotaRule.IGNORES  # onnxruntime 1.32: a session adds 1 thread (2 physical cores) in a 0.5-CPU cgroup
    read_when = "before a session is made"

    def how_to_set(self, n: int, pool: str | None = None) -> str:
        """Its variable (from 1.29) before a session is made, or the session option in code."""
        option = f"SessionOptions.{'inter' if pool else 'intra'}_op_num_threads = {n}"
        found = self.count_vars if pool is None else self.pool_vars(pool)
        return f"{super().how_to_set(n, pool)}, or {option} in code" if found else f"set {option} in code"

    #: The first version that reads the variables (1.28 ignores them, measured; 1.29's library names them).
    reads_from = (1, 29)

    def reads_variables(self) -> bool:
        """Whether the loaded onnxruntime reads its variables (True when it is not loaded, or its
        version cannot be told): this process's, or the one of the process being read
        (:func:`onnxruntime_version_in_view`)."""
        other = _VERSION_IN_VIEW.get()
        version = getattr(self.loaded_module(), "__version__", "") if other is None else other
        found = re.match(r"(\d+)\.(\d+)", "" if isinstance(version, Unknown) else str(version))
        return found is None or (int(found[1]), int(found[2])) >= self.reads_from

    @property
    def count_vars(self) -> tuple[str, ...]:
        """Its intra-op variable, in the loaded version: none before 1.29."""
        return self.precedence if self.reads_variables() else ()

    def pool_vars(self, name: str) -> tuple[str, ...]:
        """Its inter-op variable, in the loaded version: none before 1.29."""
        return super().pool_vars(name) if self.reads_variables() else ()

    def default(self, facts: MachineFacts, ctx: ModuleFacts) -> tuple[int | None, str]:
        """The machine's physical cores, whatever the affinity mask and the CPU quota."""
        n = facts.physical_cores or facts.logical_cpus
        if n is None:
            return None, "the machine's physical cores (not readable)"
        n = runtime_readings.onnxruntime(n)
        return n, f"{plural(n, 'physical core')} of the machine (ONNX Runtime ignores affinity and CPU quota)"

    def count_in(self, var: str, env: Mapping[str, str]) -> int | None:
        """Digits only, into a C int ("007" is 7); 0 and the empty value ask for the default."""
        return _digits(env.get(var), 2**31 - 1)

    def reading(self, var: str, value: str) -> Reading | None:
        """Before 1.29 it does not read its variables: parinfo's verdict stands."""
        return super().reading(var, value) if self.reads_variables() else None

    def refusal(self, var: str, value: str) -> Reading:
        """0 and the empty value: its default; anything else (a sign, a blank, "1x", a count above a
        C int) makes each new session raise RuntimeError (measured)."""
        if not value or _zero(value):
            return Reading(Does.DEFAULT)
        return Reading(Does.RAISES, words="raises RuntimeError when a session is made")

    def uptake(self, module: Any, n: int) -> Uptake:
        """Each session reads its variable when it is made (from 1.29): new sessions take the
        count, sessions made before keep theirs; before 1.29 only SessionOptions sets it."""
        code = ("so = onnxruntime.SessionOptions(); so.intra_op_num_threads = "
                f"{n}; onnxruntime.InferenceSession(model, so)")
        if not self.reads_variables():
            return Uptake(Takes.CODE, code=code + f" (onnxruntime {getattr(module, '__version__', '?')} "
                                                  "reads no variable)")
        return Uptake(Takes.AT_USE, when="when a session is made: sessions made before keep their count",
                      code=code)

    def pool_default(self, name: str, facts: MachineFacts, ctx: ModuleFacts) -> tuple[int | None, str]:
        """The inter-op pool's default is the intra-op pool's: the machine's physical cores."""
        return self.default(facts, ctx)

    def imposed(self, env: Mapping[str, str], pool: str | None = None) -> tuple[int | None, Source] | None:
        """A value its parser refuses (a sign, a space, a letter) in the variable of the pool (the
        intra-op one, or ``pool``'s): making a session raises (from 1.29: before, the variables are
        not read)."""
        for var in self.count_vars if pool is None else self.pool_vars(pool):
            value = env.get(var)
            reading = None if value is None else self.reading(var, value)
            if reading is not None and reading.does is Does.RAISES:
                why = (f"{var}={value!r} is not a plain count: making a session raises RuntimeError "
                       "(ONNX Runtime reads digits only)")
                return None, unknown(why, f"unknown ({why})")
        return None


#: The values of TOKENIZERS_PARALLELISM that turn tokenizers' pool off (any case; measured 0.23):
#: the empty value, and "f" and "n" besides the usual words.
TOKENIZERS_OFF = ("", "f", "n", *FALSE_WORDS)


def rayon_default(facts: MachineFacts, ctx: ModuleFacts | None = None) -> tuple[int, str]:
    """rayon's default pool: Rust's ``available_parallelism``: the CPUs in affinity, at most the
    CPU quota rounded down (at least 1)."""
    n = len(facts.affinity) or facts.logical_cpus or 1
    if facts.quota is not None and int(facts.quota) < n:
        q = max(1, int(facts.quota))
        return q, (f"{plural(q, 'CPU')}: the CPU quota of {facts.quota:g} rounded down "
                   "(Rust's available_parallelism)")
    return n, f"{plural(n, 'CPU')} in affinity (Rust's available_parallelism)"


class Tokenizers(Library):
    """Hugging Face tokenizers: rayon's global pool, started by the first batch encode (never by
    parinfo), of RAYON_NUM_THREADS, else RAYON_RS_NUM_CPUS, else Rust's available_parallelism; a
    pool of n adds n threads. TOKENIZERS_PARALLELISM off (read at each call) keeps batches in the
    calling thread; so does a child forked after the pool was used."""

    name = label = module = "tokenizers"
    kind = LibraryKind.PYTHON
    precedence = ("RAYON_NUM_THREADS", "RAYON_RS_NUM_CPUS")
    reads = ("TOKENIZERS_PARALLELISM",)
    profile_key, profile_var = "tokenizers", "RAYON_NUM_THREADS"  # rayon's global pool: every user of it
    push = Push.NONE
    listed = "loaded"
    sized_at_use = ("the pool its first batch encode starts (parinfo cannot tell whether it has "
                    "started: the variables it read then decide); a child forked after the pool "
                    "was used encodes in its calling thread")
    note = ("rayon's global pool, started at the first batch encode and never resized; invalid or 0: "
            "the default; TOKENIZERS_PARALLELISM=false runs batches in the calling thread")
    quota_rule = QuotaRule.FOLLOWS  # tokenizers 0.23: a batch encode adds no thread in a 0.5-CPU cgroup (pool of 1)
    read_when = "before its first batch encode"

    def default(self, facts: MachineFacts, ctx: ModuleFacts) -> tuple[int | None, str]:
        return rayon_default(facts, ctx)

    def count_in(self, var: str, env: Mapping[str, str]) -> int | None:
        """rayon's parse: digits with an optional plus sign, nothing around them, into a 64-bit
        count (" 3", "3 " and "1x" are skipped silently, measured)."""
        return _digits((env.get(var) or "").removeprefix("+"), 2**64 - 1)

    def reading(self, var: str, value: str) -> Reading | None:
        """TOKENIZERS_PARALLELISM is taken whatever it says: off for its false words (exactly, in
        any case: " false" is on, measured), on for anything else."""
        if var != self.reads[0]:
            return super().reading(var, value)
        off = value.lower() in TOKENIZERS_OFF
        return Reading(Does.TAKES, words="takes it as false: batches run in the calling thread" if off
                       else "takes it as true: batches run in its pool")

    def refusal(self, var: str, value: str) -> Reading:
        """0 asks for the default (documented); anything else it skips silently (the next variable,
        then the default)."""
        return Reading(Does.DEFAULT) if _zero(value.removeprefix("+")) else Reading(Does.IGNORES)

    def uptake(self, module: Any, n: int) -> Uptake:
        """rayon reads its variable when its global pool starts, and keeps the size after."""
        return Uptake(Takes.AT_USE, when="when its first batch encode starts rayon's pool (a pool started "
                                         "before keeps its size: parinfo cannot tell whether it has)",
                      code=f"RAYON_NUM_THREADS={n} before the program starts")

    def imposed(self, env: Mapping[str, str], pool: str | None = None) -> tuple[int | None, Source] | None:
        """TOKENIZERS_PARALLELISM off: batches run in the calling thread, whatever the pool's size."""
        var = self.reads[0]
        value = env.get(var)
        if value is not None and value.lower() in TOKENIZERS_OFF:
            return 1, variable(var, value, f"env {var}={value}: batches run in the calling thread (no pool)")
        return None


class OpenCV(Library):
    """OpenCV's own pool (pthreads in the wheels; its bundled OpenBLAS is a separate native pool
    that reads none of its variables): cv2.getNumThreads() reads it without starting a thread.
    OPENCV_FOR_THREADS_NUM is read once, at the first getNumThreads or parallel call; unset or 0:
    the CPUs in affinity, at most the quota of the cgroup at the mount's root (a container's)."""

    name, label, module = "opencv", "OpenCV", "cv2"
    kind = LibraryKind.PYTHON
    precedence = ("OPENCV_FOR_THREADS_NUM",)
    profile_key, profile_var = "opencv", "OPENCV_FOR_THREADS_NUM"
    push, calls = Push.SETTER, Calls("setNumThreads", "getNumThreads")
    listed = "loaded"
    #: The only files OpenCV reads a quota from: a quota on a nested cgroup is not seen.
    quota_files = ("/sys/fs/cgroup/cpu.max", "/sys/fs/cgroup/cpu/cpu.cfs_quota_us")
    note = ("its own pool, besides the OpenBLAS copy the wheel ships; OPENCV_FOR_THREADS_NUM is read at "
            "the first getNumThreads or parallel call; cv2.setNumThreads resizes the pool at any time")
    quota_rule = QuotaRule.ROOT_ONLY  # opencv 5.0: getNumThreads() 2 in a nested 0.5-CPU cgroup
    read_when = "before its first parallel call"

    def default(self, facts: MachineFacts, ctx: ModuleFacts) -> tuple[int | None, str]:
        """The CPUs in affinity; at most the quota rounded down (at least 1) when the quota is the
        one of the cgroup mount's root, the only one OpenCV reads."""
        n = len(facts.affinity) or facts.logical_cpus or 1
        where = getattr(facts.quota_source, "detail", str(facts.quota_source))
        if facts.quota is not None and where in self.quota_files and int(facts.quota) < n:
            q = max(1, int(facts.quota))
            return q, f"{plural(q, 'CPU')}: the CPU quota of {facts.quota:g} in {where}, rounded down"
        seen = "" if facts.quota is None else f"; the quota in {where} is not one OpenCV reads"
        return n, f"{plural(n, 'CPU')} in affinity{seen}"

    def count_in(self, var: str, env: Mapping[str, str]) -> int | None:
        """Digits only (:func:`_opencv_int`); 0 asks for the default."""
        n = _opencv_int(env.get(var))
        return None if not n else max(n, 1)  # a negative count gives 1 (measured)

    def refusal(self, var: str, value: str) -> Reading:
        """0 asks for the default; anything else, the empty value included, makes getNumThreads and
        every parallel call raise cv2.error (measured)."""
        if _opencv_int(value) == 0:
            return Reading(Does.DEFAULT)
        return Reading(Does.RAISES, words="raises cv2.error from getNumThreads and every parallel call")

    def imposed(self, env: Mapping[str, str], pool: str | None = None) -> tuple[int | None, Source] | None:
        """A value its parser refuses: getNumThreads and every parallel call raise cv2.error."""
        value = env.get(self.precedence[0])
        reading = None if value is None else self.reading(self.precedence[0], value)
        if value is None or reading is None or reading.does is not Does.RAISES:
            return None
        why = (f"{self.precedence[0]}={value!r} is not a plain count: cv2.getNumThreads and every "
               "parallel call raise cv2.error")
        return None, unknown(why, f"unknown ({why})")
