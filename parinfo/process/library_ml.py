"""The machine-learning frameworks' families that keep pools of their own: TensorFlow (an intra-op
and an inter-op pool, made when its eager context starts) and JAX on the CPU (XLA's Eigen pool,
made when its CPU backend starts).

Read only when imported, never imported, and never started: neither has a getter for the size its
pools take by themselves, so a pool not started yet is reported as what it will take
(``sized_at_use``), and a started one is counted by its threads' names where they carry one
(``tf_Compute``, ``tf_XLAEigen``). The facts were measured on tensorflow-cpu 2.21 and jax/jaxlib
0.10.2 (tests/test_library_ml.py checks them against the libraries in real processes).
"""
from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from parinfo.process import defaults
from parinfo.process.defaults import ModuleFacts
from parinfo.process.library_base import INTER_OP, Library
from parinfo.process.library_frames import threads_named
from parinfo.process.library_parts import (
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
from parinfo.records.source import Source, unknown, variable
from parinfo.safe_text import plural

if TYPE_CHECKING:
    from parinfo.machine.topology import MachineFacts

#: A number as absl's and TensorFlow's parsers take it: blanks around it, an optional sign.
_SIGNED = re.compile(r"\s*([+-]?)(\d+)\s*", re.ASCII)
INT32_MAX = 2**31 - 1


def signed_int32(value: str | None) -> int | None:
    """The C ``int`` that TensorFlow's ``safe_strto32`` and absl's ``SimpleAtoi`` read from
    ``value``: blanks around it and a sign allowed, digits only ("3x", "1.5" and a value beyond a
    C int are refused: None; measured)."""
    m = _SIGNED.fullmatch(value or "")
    if m is None:
        return None
    n = digits_value(m.group(2)) * (-1 if m.group(1) == "-" else 1)
    return n if -INT32_MAX - 1 <= n <= INT32_MAX else None


# -- TensorFlow ----------------------------------------------------------------------------------
INTRA_VAR, INTER_VAR = "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS"
_TF_COMPUTE = re.compile(r"tf_Compute")
_EAGER = "tensorflow.python.eager.context"


def _tf_context() -> Any:
    """TensorFlow's eager context object when one was made (None: none yet), read from its module
    without making one."""
    return getattr(sys.modules.get(_EAGER), "_context", None)


def tf_started() -> bool:
    """Whether TensorFlow's eager context has started (its first op made its pools)."""
    return bool(getattr(_tf_context(), "_initialized", False))


class TensorFlow(Library):
    """TensorFlow's two pools, made when its eager context starts (at the first op, not at import):
    intra-op (its main pool, adding that many threads named "python") and inter-op (its pool
    "inter-op", threads named ``tf_Compute``). Each: the count set by ``tf.config.threading``'s
    setter before that start, else TF_NUM_INTRAOP_THREADS / TF_NUM_INTEROP_THREADS read at that
    start, else the CPUs in affinity (the quota ignored). Fixed from then on: the setters raise
    RuntimeError. The getters give only what a setter set (0: not set) and start nothing."""

    name, label, module = "tensorflow", "TensorFlow", "tensorflow"
    kind = LibraryKind.PYTHON
    precedence = (INTRA_VAR,)
    profile_key, profile_var = "tensorflow", INTRA_VAR
    pools = (Pool(INTER_OP, precedence=(INTER_VAR,), profile_key="inter_op", sized_at_use=(
        "what its eager context takes when it starts (at the first op); once started it keeps its size "
        "(its tf_Compute threads)")),)
    push = Push.NONE
    listed = "loaded"
    thread_names = (
        ("tf_Compute", "its inter-op pool, one thread per inter-op count, from the first op"),
        ("tf_graph_runner", "its graph runner, one thread, from the first op"),
    )
    sized_at_use = ("what its eager context takes when it starts (at the first op): its intra-op "
                    "threads carry no name of their own, so a started pool is not counted; it kept "
                    "the count it took then")
    note = ("an intra-op and an inter-op pool, made at the first op (not at import) from "
            "tf.config.threading's setters, else TF_NUM_INTRAOP_THREADS / TF_NUM_INTEROP_THREADS, else "
            "the CPUs in affinity (quota ignored); fixed after: the setters raise RuntimeError")

    @staticmethod
    def _getter(module: Any, which: str) -> int | None:
        """What ``tf.config.threading.get_<which>_parallelism_threads()`` says, when a setter set it
        (0: none did); called only once an eager context object exists (it makes one otherwise),
        and it starts nothing (measured: no thread, the context not initialised)."""
        if sys.modules.get(_EAGER) is not None and _tf_context() is None:
            return None
        try:
            n = as_count(getattr(module.config.threading, f"get_{which}_parallelism_threads")())
        except Exception:
            return None
        return n if n is not None and n > 0 else None

    def read_count(self, module: Any) -> int | None:
        """The intra-op count a setter gave; else None: what the pool takes from the environment."""
        return self._getter(module, "intra_op")

    def read_pool(self, name: str, module: Any) -> int | None:
        """The inter-op count a setter gave, else its started pool's ``tf_Compute`` threads, else
        None (not started: what it will take)."""
        set_here = self._getter(module, "inter_op")
        if set_here is not None or not tf_started():
            return set_here
        return threads_named(_TF_COMPUTE) or None

    def row_note(self, module: Any) -> str | None:
        if not hasattr(module, "config") or not tf_started():
            return None
        return "its eager context has started: both pools kept the counts they took then"

    def default(self, facts: MachineFacts, ctx: ModuleFacts) -> tuple[int | None, str]:
        """The CPUs in affinity (the CPU quota ignored, measured in a nested cgroup)."""
        n, why = defaults.affinity_cpus(facts)
        return n, f"{why} (TensorFlow ignores the CPU quota)"

    def pool_default(self, name: str, facts: MachineFacts, ctx: ModuleFacts) -> tuple[int | None, str]:
        return self.default(facts, ctx)

    def count_in(self, var: str, env: Mapping[str, str]) -> int | None:
        """:func:`signed_int32`, above 0 (0 asks for the default)."""
        n = signed_int32(env.get(var))
        return n if n is not None and n > 0 else None

    def refusal(self, var: str, value: str) -> Reading:
        """0: the default; a negative intra-op count aborts the process at the first op ("Check
        failed: num_threads >= 1"); anything else (and a negative inter-op count): the default,
        silently (measured)."""
        n = signed_int32(value)
        if n == 0:
            return Reading(Does.DEFAULT)
        if var == INTRA_VAR and n is not None and n < 0:
            return Reading(Does.RAISES, words="aborts the process at its first op (Check failed: num_threads >= 1)")
        return Reading(Does.IGNORES)

    def imposed(self, env: Mapping[str, str], pool: str | None = None) -> tuple[int | None, Source] | None:
        """A negative intra-op count: the first op aborts the process."""
        value = env.get(INTRA_VAR)
        n = signed_int32(value)
        if pool is not None or value is None or n is None or n >= 0:
            return None
        why = f"{INTRA_VAR}={value!r} is negative: TensorFlow aborts the process at its first op"
        return None, unknown(why, f"unknown ({why})")

    def uptake(self, module: Any, n: int) -> Uptake:
        """Its variables are read when the eager context starts: before it, the variable reaches
        it (unless a setter set the count: it wins); after, nothing does."""
        code = (f"tf.config.threading.set_intra_op_parallelism_threads({n}) before the first op, or "
                f"{INTRA_VAR}={n} before the program starts")
        if tf_started():
            return Uptake(Takes.STARTED, code=code, now=self.read_count(module), when="at its first op")
        if self.read_count(module) is not None:
            return Uptake(Takes.CODE, code=code + " (the program's own setter call decides it)")
        return Uptake(Takes.AT_USE, when="when its first op starts the eager context", code=code)


# -- JAX -----------------------------------------------------------------------------------------
NPROC_VAR, DEVICES_VAR, XLA_FLAGS = "NPROC", "JAX_NUM_CPU_DEVICES", "XLA_FLAGS"
_FORCED = re.compile(r"(?:^|\s)--?xla_force_host_platform_device_count=(\d+)(?=\s|$)", re.ASCII)
_XLA_EIGEN = re.compile(r"tf_XLAEigen")


def _xla_backend_started() -> bool:
    """Whether JAX made a backend already (its first op, ``jax.devices()``), read without making one."""
    return bool(getattr(sys.modules.get("jax._src.xla_bridge"), "_backends", None))


def _python_int(value: str | None) -> int | None:
    """``int(value)`` (how JAX reads its flags' variables), None where it raises."""
    try:
        return None if value is None else int(value)
    except ValueError:
        return None


def cpu_devices(module: Any, env: Mapping[str, str]) -> tuple[int, str]:
    """The CPU devices JAX's CPU backend makes, and what says so: ``jax_num_cpu_devices`` (the
    loaded module's config, else JAX_NUM_CPU_DEVICES; read at import) when 1 or more, else XLA_FLAGS'
    ``--xla_force_host_platform_device_count``, else 1 (measured)."""
    config = getattr(module, "config", None)
    n = as_count(getattr(config, "jax_num_cpu_devices", None)) if config is not None else None
    if n is None:
        n = _python_int(env.get(DEVICES_VAR))
        where = f"{DEVICES_VAR}={env.get(DEVICES_VAR)}"
    else:
        where = f"jax_num_cpu_devices={n}"
    if n is not None and n >= 1:
        return n, where
    forced = _FORCED.findall(env.get(XLA_FLAGS, ""))
    if forced and int(forced[-1]) >= 1:
        return int(forced[-1]), f"{XLA_FLAGS} --xla_force_host_platform_device_count={int(forced[-1])}"
    return 1, ""


class Jax(Library):
    """JAX on the CPU: XLA's Eigen intra-op pool (``tf_XLAEigen`` threads), made when its CPU backend
    starts (the first op or ``jax.devices()``, not the import), of NPROC (read then; 0 or negative:
    none), else the CPUs in affinity (the quota ignored), and never fewer than its CPU devices.
    Fixed from then on. No getter: a started pool is counted by its threads. XLA_FLAGS'
    ``--xla_cpu_multi_thread_eigen=false`` does not shrink it (measured)."""

    name = label = module = "jax"
    kind = LibraryKind.PYTHON
    precedence = (NPROC_VAR,)
    reads = (DEVICES_VAR, XLA_FLAGS)
    borrowed = (NPROC_VAR,)  # a generic name: named as read by JAX only while it is imported
    profile_key, profile_var = "jax", NPROC_VAR
    push = Push.NONE
    listed = "loaded"
    thread_names = (("tf_XLAEigen", "XLA's Eigen intra-op pool (JAX's CPU backend), from its first op"),)
    module_facts = ("config.jax_num_cpu_devices",)
    sized_at_use = ("what its CPU backend takes when it starts (at the first op or jax.devices()); "
                    "once started it keeps its size (its tf_XLAEigen threads)")
    note = ("XLA's Eigen pool, made when the CPU backend starts: NPROC (a name other tools may read too), "
            "else the CPUs in affinity (quota ignored), at least its CPU devices (JAX_NUM_CPU_DEVICES, "
            "XLA_FLAGS=--xla_force_host_platform_device_count); fixed after")

    def read_count(self, module: Any) -> int | None:
        """Its started pool's ``tf_XLAEigen`` threads; None before it starts."""
        return (threads_named(_XLA_EIGEN) or None) if _xla_backend_started() else None

    def context(self, module: Any, env: Mapping[str, str]) -> ModuleFacts:
        n, why = cpu_devices(module, env)
        return ModuleFacts(floor=n, limit_why=why) if why else ModuleFacts()

    def default(self, facts: MachineFacts, ctx: ModuleFacts) -> tuple[int | None, str]:
        """The CPUs in affinity (the quota ignored), at least its CPU devices."""
        n, why = defaults.affinity_cpus(facts)
        if ctx.floor is not None and ctx.floor > n:
            return ctx.floor, f"{plural(ctx.floor, 'CPU device')} ({ctx.limit_why}; above the {why})"
        return n, f"{why} (XLA ignores the CPU quota)"

    def count_in(self, var: str, env: Mapping[str, str]) -> int | None:
        """NPROC: :func:`signed_int32`, raised to the CPU devices ``env`` gives (1 at least: 0 and
        below keep one thread per device, measured)."""
        n = signed_int32(env.get(var))
        return None if n is None else max(n, cpu_devices(None, env)[0])

    def reading(self, var: str, value: str) -> Reading | None:
        """JAX_NUM_CPU_DEVICES is read at import by Python's int(): anything else raises ValueError
        there; 0 makes the backend's start raise; a negative value is its default (one device)."""
        if var == XLA_FLAGS:
            return None
        if var != DEVICES_VAR:
            return super().reading(var, value)
        n = _python_int(value)
        if n is None:
            return Reading(Does.RAISES, words="raises ValueError at `import jax`")
        if n == 0:
            return Reading(Does.RAISES, words="makes the CPU backend's start raise RuntimeError")
        return Reading(Does.TAKES, n) if n > 0 else Reading(Does.DEFAULT)

    def imposed(self, env: Mapping[str, str], pool: str | None = None) -> tuple[int | None, Source] | None:
        """Its CPU devices, when NPROC asks for fewer: the pool has one thread per device at least."""
        n = signed_int32(env.get(NPROC_VAR))
        devices, why = cpu_devices(None, env)
        if n is None or not why or devices <= n:
            return None
        said = f"env {NPROC_VAR}={env[NPROC_VAR]}, raised to its {plural(devices, 'CPU device')} ({why})"
        return devices, variable(NPROC_VAR, env[NPROC_VAR], said)

    def uptake(self, module: Any, n: int) -> Uptake:
        """NPROC is read when the CPU backend starts: before it, the variable reaches it; after, nothing."""
        code = f"os.environ['{NPROC_VAR}'] = '{n}' before JAX's first op"
        if _xla_backend_started():
            return Uptake(Takes.STARTED, code=code, now=self.read_count(module), when="at its first op")
        return Uptake(Takes.AT_USE, when="when its first op starts the CPU backend", code=code)
