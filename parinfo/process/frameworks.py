"""Frameworks with thread pools of their own: torch's intra-op and inter-op pools.

torch is read only when it is already imported (or the caller asks for it): importing it costs
seconds and starts its runtime, which a report must never do behind the user's back.
"""
from __future__ import annotations

import importlib
from dataclasses import field

from parinfo.process import libraries as reg
from parinfo.process.pools import CONFLICT_NOTE, openmp_conflict
from parinfo.process.threads import ThreadList, live_threads
from parinfo.process.torch_config import TorchFacts, parse_parallel_info, torch_facts
from parinfo.records.record import record
from parinfo.records.unknown import Unknown

# c10::ThreadPool names its workers "PTThreadPool"; older builds used "pt_thread_pool".
_POOL_THREAD_NAMES = ("ptthreadpool", "pt_thread_pool")


@record
class TorchInfo:
    """torch's thread settings (the report's ``frameworks.torch``), all read through getters that
    change nothing:

    - ``version``: torch.__version__.
    - ``intra_op``: torch.get_num_threads() (in the calling thread: the OpenMP count is per thread).
    - ``inter_op``: torch.get_num_interop_threads().
    - ``aten_backend``: "OpenMP", "TBB" or "native thread pool" (from parallel_info()).
    - ``openmp``: the OpenMP version line, e.g. "201511 (a.k.a. OpenMP 4.5)", or None.
    - ``omp_max_threads`` / ``mkl_max_threads``: omp_get_max_threads() / mkl_get_max_threads() as
      parallel_info() prints them, or None.
    - ``mkl_available``: torch.backends.mkl.is_available().
    - ``mkl_version``: e.g. "2024.2", or None; ``mkl_line``: the whole MKL line, or None.
    - ``mkldnn_available``: torch.backends.mkldnn.is_available(); ``mkldnn_version`` (oneDNN), e.g. "3.12.0".
    - ``hardware_concurrency``: std::thread::hardware_concurrency(), the inter-op default.
    - ``pool_threads``: OS threads named PTThreadPool now (int), or "unknown (reason)".
    - ``interop_started``: True/False, or "unknown (reason)". With the OpenMP (or TBB) backend only the
      inter-op pool names its workers PTThreadPool, so any such thread means it has started; with the
      native backend the intra-op pool uses the same name, so only zero threads is conclusive.
    - ``env``: the variables parallel_info() lists, as it prints them.
    - ``parallel_info_text``: torch.__config__.parallel_info(), verbatim.
    - ``not_read``: why the counts were not read (Intel libiomp and LLVM libomp both loaded: every
      getter would call into an OpenMP runtime), or None.
    """

    version: str | None = None
    intra_op: int | None = None
    inter_op: int | None = None
    aten_backend: str | None = None
    openmp: str | None = None
    omp_max_threads: int | None = None
    mkl_max_threads: int | None = None
    mkl_available: bool | None = None
    mkl_version: str | None = None
    mkl_line: str | None = None
    mkldnn_available: bool | None = None
    mkldnn_version: str | None = None
    hardware_concurrency: int | None = None
    pool_threads: int | str | None = None
    interop_started: bool | str | None = None
    env: dict[str, str] = field(default_factory=dict)
    parallel_info_text: str | None = None
    not_read: str | None = None


def torch_pool_threads(threads: ThreadList | None = None) -> int | Unknown:
    """How many OS threads are torch pool workers (named PTThreadPool), or Unknown when the
    process's threads could not be listed."""
    threads = live_threads() if threads is None else threads
    if isinstance(threads.count, str):
        return threads.not_counted()
    return sum(1 for t in threads.threads if t.name.lower() in _POOL_THREAD_NAMES)


def torch_info_of(facts: TorchFacts, threads: ThreadList | None = None) -> TorchInfo:
    """torch's thread settings from its raw facts
    (:func:`torch_facts`: read here, or inside another process) and the process's OS threads
    (:func:`parinfo.process.threads.live_threads`; None: this process's)."""
    parsed = parse_parallel_info(facts.parallel_info or "")
    pool_threads = torch_pool_threads(threads)
    backend = parsed.aten_backend
    started: bool | Unknown
    if isinstance(pool_threads, Unknown):
        started = pool_threads
    elif pool_threads == 0:
        started = False
    elif backend and "native" in backend.lower():
        started = Unknown("native thread pool backend: intra-op and inter-op workers share the name "
                          f"PTThreadPool; {pool_threads} such threads")
    else:
        started = True
    return TorchInfo(
        version=facts.version,
        intra_op=facts.intra_op,
        inter_op=facts.inter_op,
        aten_backend=backend,
        openmp=parsed.openmp,
        omp_max_threads=parsed.omp_max_threads,
        mkl_max_threads=parsed.mkl_max_threads,
        mkl_available=facts.mkl_available,
        mkl_version=parsed.mkl_version,
        mkl_line=parsed.mkl_line,
        mkldnn_available=facts.mkldnn_available,
        mkldnn_version=parsed.mkldnn_version,
        hardware_concurrency=parsed.hardware_concurrency,
        pool_threads=pool_threads if isinstance(pool_threads, int) else str(pool_threads),
        interop_started=started if isinstance(started, bool) else str(started),
        env=dict(parsed.env),
        parallel_info_text=facts.parallel_info,
    )


def torch_info(import_if_missing: bool = False) -> TorchInfo | None:
    """torch's thread settings, or None when torch is not imported
    and ``import_if_missing`` is False.

    Everything is read through getters that change nothing (``get_num_interop_threads()`` does not
    start the inter-op pool; ``set_num_interop_threads`` stays allowed afterwards).
    """
    lib = reg.family(reg.Torch)
    torch = lib.loaded_module()
    if torch is None:
        if not import_if_missing:
            return None
        torch = importlib.import_module(str(lib.module))  # asked for explicitly

    if openmp_conflict():  # torch's getters call omp_get_max_threads(): never with the pair loaded
        return torch_unread(str(torch.__version__), CONFLICT_NOTE)
    return torch_info_of(torch_facts(torch))


def torch_unread(version: str | None, why: str) -> TorchInfo:
    """torch_info with only the version filled in: the counts are not read, and why."""
    return TorchInfo(version=version, not_read=why)
