"""torch's own account of its thread settings: ``torch.__config__.parallel_info()``, read and parsed.

Below both :mod:`parinfo.process.pools` (MKL linked into torch) and :mod:`parinfo.process.frameworks`
(torch's counts), which use it. Never imports torch: the text is read only from a torch already imported.
"""
from __future__ import annotations

import re
from dataclasses import field
from typing import Annotated, Any

from parinfo.process import libraries as reg
from parinfo.records.convert import MAX_COUNT, Count, at_most, load
from parinfo.records.record import record

_TORCH = reg.family(reg.Torch)

#: torch's getters a report reads (key -> the call, from the torch module), all of which change
#: nothing; the same calls are made inside another process by parinfo's attach.
TORCH_CALLS: dict[str, str] = {
    "intra_op": _TORCH.calls.getter if _TORCH.calls is not None else "get_num_threads",
    "inter_op": _TORCH.interop_calls.getter if _TORCH.interop_calls is not None else "get_num_interop_threads",
    "parallel_info": "__config__.parallel_info",
    "mkl_available": "backends.mkl.is_available",
    "mkldnn_available": "backends.mkldnn.is_available",
}


@record(frozen=True)
class TorchFacts:
    """torch's raw facts: its version and what :data:`TORCH_CALLS` return, read in this process
    (:func:`torch_facts`) or inside another by parinfo's attach, each within its bounds (a value of
    the wrong type is None)."""

    version: Annotated[str, at_most(200)] | None = None
    intra_op: Count | None = None
    inter_op: Count | None = None
    parallel_info: Annotated[str, at_most(1 << 16)] | None = None
    mkl_available: bool | None = None
    mkldnn_available: bool | None = None


def torch_facts(torch: Any) -> TorchFacts:
    """What :data:`TORCH_CALLS` return in this process, with torch's version (the raw facts of
    :func:`~parinfo.process.frameworks.torch_info_of`)."""
    out: dict[str, object] = {"version": str(torch.__version__)}  # torch's answers, checked by load below
    for key, dotted in TORCH_CALLS.items():
        obj = torch
        for part in dotted.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                break
        out[key] = obj() if callable(obj) else None
    return load(TorchFacts, out, strict=False)  # torch's answers are not ours: a wrong type is None


@record(frozen=True)
class ParallelInfo:
    """The facts of torch's ``parallel_info()`` text (:func:`parse_parallel_info`); a line that is
    absent gives None. ``openmp``: "201511 (a.k.a. OpenMP 4.5)"; ``mkl_version``: "2024.2";
    ``mkl_line``: the whole MKL line; ``mkldnn_version``: "3.12.0"; ``aten_backend``: "OpenMP",
    "native thread pool" or "TBB"; ``env``: each variable as torch printed it, "[not set]" included."""

    intra_op: int | None = None
    inter_op: int | None = None
    omp_max_threads: int | None = None
    mkl_max_threads: int | None = None
    hardware_concurrency: int | None = None
    openmp: str | None = None
    mkl_line: str | None = None
    mkl_version: str | None = None
    mkldnn_version: str | None = None
    aten_backend: str | None = None
    env: dict[str, str] = field(default_factory=dict)


def parallel_info_text() -> str | None:
    """``torch.__config__.parallel_info()`` when torch is imported, else None (never imports torch)."""
    torch = _TORCH.loaded_module()
    if torch is None or not hasattr(torch, "__config__"):
        return None
    text = torch.__config__.parallel_info()
    return text if isinstance(text, str) else None


def parse_parallel_info(text: str) -> ParallelInfo:
    """Pick the facts out of torch's parallel_info() text."""
    def num(pattern: str) -> int | None:  # a count from 1 to MAX_COUNT: the text may be another process's
        m = re.search(pattern + r"\s*:\s*(\d{1,6})(?!\d)", text)
        return int(m.group(1)) if m and 1 <= int(m.group(1)) <= MAX_COUNT else None

    def found(pattern: str, flags: int = re.MULTILINE) -> str | None:
        m = re.search(pattern, text, flags)
        return m.group(1).strip() if m else None

    mkl_line = found(r"^(.*Math Kernel Library.*)$")
    v = re.search(r"Version ([\d.]+)", mkl_line or "")
    env = {}
    section = text.split("Environment variables:", 1)
    if len(section) == 2:
        for line in section[1].splitlines():
            m = re.match(r"^\s+([A-Z_][A-Z0-9_]*)\s*:\s*(.*)$", line)
            if m:
                env[m.group(1)] = m.group(2).strip()
            elif line.strip() and not line.startswith((" ", "\t")):
                break
    return ParallelInfo(
        intra_op=num(r"at::get_num_threads\(\)"), inter_op=num(r"at::get_num_interop_threads\(\)"),
        omp_max_threads=num(r"omp_get_max_threads\(\)"), mkl_max_threads=num(r"mkl_get_max_threads\(\)"),
        hardware_concurrency=num(r"hardware_concurrency\(\)"), openmp=found(r"^OpenMP (\d+.*)$"),
        mkl_line=mkl_line, mkl_version=v.group(1).rstrip(".") if v else None,
        mkldnn_version=found(r"MKL-DNN v([\w.]+)", 0), aten_backend=found(r"^ATen parallel backend:\s*(.+)$"),
        env=env)
