"""What the script inside the target answered, parsed as data and believed only within bounds.

The answer is JSON written by code running in another process, which may be hostile or simply
broken: it is parsed with the standard parser (no NaN, no Infinity), every field is taken only when
it has the expected type and lies within its bounds (counts from 1 to :data:`MAX_COUNT`, texts cut
at :data:`MAX_TEXT` characters, at most :data:`MAX_ITEMS` rows of anything), and a field that is
not is unknown, never an error. Texts keep what they say; they are escaped where they are shown.
The records below say their types and bounds in their annotations, and :func:`parinfo.records.convert.load`
reads them (the few shapes of the script's own, in ``_json_in`` hooks).
"""
from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import field
from typing import Annotated, Any

from parinfo.process.provenance import SetByApply
from parinfo.process.torch_config import TorchFacts
from parinfo.records.convert import MAX_COUNT, REQUIRED, Count, at_most, between, load
from parinfo.records.payload import integer, rows, section
from parinfo.records.record import record

#: The longest text kept, and the most rows of any list or mapping.
MAX_TEXT = 4096
MAX_ITEMS = 4096

#: A text of the answer, cut at MAX_TEXT characters; a count of threads (1 to MAX_COUNT).
Text = Annotated[str, at_most(MAX_TEXT)]
__all__ = ["MAX_COUNT", "MAX_ITEMS", "MAX_TEXT", "Answer", "BadAnswer", "Count", "Text", "parse"]


class BadAnswer(ValueError):
    """The answer is not one parinfo can read (the words say why)."""


@record(frozen=True)
class PythonFacts:
    """The target's interpreter: version, executable, implementation, platform, and its GIL facts
    (``free_threaded`` from sys.abiflags, ``gil_enabled`` from sys._is_gil_enabled(), ``x_gil``
    the ``-X gil`` value)."""

    version: Annotated[str, at_most(64)] | None = None
    version_info: Annotated[tuple[int, ...], at_most(3)] = ()
    executable: Text | None = None
    implementation: Annotated[str, at_most(64)] | None = None
    platform: Annotated[str, at_most(64)] | None = None
    free_threaded: bool | None = None
    gil_enabled: bool | None = None
    x_gil: Annotated[str, at_most(16)] | None = None

    @classmethod
    def _json_in(cls, data: Mapping[str, Any]) -> Mapping[str, Any]:
        """The script sends ``abiflags``: a free-threaded build's hold a "t"."""
        abiflags = data.get("abiflags")
        return {**data, "free_threaded": "t" in abiflags[:16] if isinstance(abiflags, str) else None}


@record(frozen=True)
class NativeRead:
    """What one loaded library said of itself through its own getters: its count for the main
    thread, version, threading layer and kernels; ``why`` when it could not be asked."""

    count: Count | None = None
    version: Annotated[str, at_most(200)] | None = None
    layer: Annotated[str, at_most(64)] | None = None
    architecture: Annotated[str, at_most(100)] | None = None
    why: Annotated[str, at_most(400)] | None = None


@record(frozen=True)
class ModuleRead:
    """An imported Python-module library (numexpr...): its file, its count (None: not read; ``why``:
    its getter raised, and what it raised), the attributes its record's ``module_facts`` name, and
    the counts of its other pools' getters by getter name (``pools``: Arrow's io_thread_count)."""

    name: Annotated[str, at_most(200)] = field(metadata=REQUIRED)
    file: Text | None = None
    count: Count | None = None
    why: Annotated[str, at_most(400)] | None = None
    facts: Annotated[dict[Annotated[str, at_most(200)], bool | Annotated[int, between(-(1 << 62), 1 << 62)] | Text
                          | None], at_most(MAX_ITEMS)] = field(default_factory=dict)
    pools: Annotated[dict[Annotated[str, at_most(200)], Count | None], at_most(MAX_ITEMS)] = field(
        default_factory=dict)


@record(frozen=True)
class PyThread:
    """A Python thread: its OS thread id (None before it started), name and daemon flag; the script
    sends ``[native_id, name, daemon]``."""

    _json_array = True

    native_id: Annotated[int, between(1, 1 << 22)] | None
    name: Text = field(metadata=REQUIRED)
    daemon: bool


@record(frozen=True)
class ParinfoRead:
    """parinfo inside the target: its version; whether its runtime module is loaded; the runtime's
    state (``parinfo.runtime.info()``, None while its counts are unresolved), what ``parinfo.apply``
    set, and the module that turned the GIL back on; ``busy`` when part of it could not be read."""

    version: Annotated[str, at_most(64)] | None = None
    runtime_loaded: bool = False
    info: dict[str, Any] | None = None
    applied: Annotated[dict[Annotated[str, at_most(200)], SetByApply], at_most(MAX_ITEMS)] | None = None
    gil_reenabled_by: Annotated[str, at_most(400)] | None = None
    busy: Annotated[str, at_most(400)] | None = None

    @classmethod
    def _json_in(cls, data: Mapping[str, Any]) -> Mapping[str, Any]:
        """The script sends the runtime's part under ``state``."""
        return {**section(data.get("state")), "version": data.get("version"),
                "runtime_loaded": data.get("runtime_loaded")}


@record(frozen=True)
class Answer:
    """Everything the script answered (see :mod:`parinfo.outside.attach.in_target`); ``torch`` is
    torch's raw facts (:class:`~parinfo.process.torch_config.TorchFacts`), None when it sent none."""

    pid: int
    python: PythonFacts
    environ: Annotated[dict[Text, Annotated[str, at_most(1 << 16)]], at_most(MAX_ITEMS)]
    modules: Annotated[frozenset[str], at_most(MAX_ITEMS)]
    python_threads: Annotated[int, between(0, MAX_ITEMS * 16)] | None
    threads: Annotated[list[PyThread], at_most(MAX_ITEMS)] | None
    pools: Annotated[dict[Text, NativeRead], at_most(MAX_ITEMS)]
    torch: TorchFacts | None
    python_libs: Annotated[list[ModuleRead], at_most(64)]
    parinfo: ParinfoRead | None
    errors: Annotated[dict[Annotated[str, at_most(64)], Annotated[str, at_most(400)]], at_most(64)]

    @classmethod
    def _json_in(cls, data: Mapping[str, Any]) -> Mapping[str, Any]:
        """The script's shapes: ``threads`` as ``[count, rows]``, ``pools`` as rows each naming its
        file (``path``), ``torch`` as its raw facts (an empty object: none)."""
        threads = data.get("threads")
        count, listed = threads if isinstance(threads, list) and len(threads) == 2 else (None, None)
        pools = {row["path"]: row for row in rows(data.get("pools"))[:MAX_ITEMS] if isinstance(row.get("path"), str)}
        torch = data.get("torch")
        return {**data, "python_threads": count, "threads": listed, "pools": pools,
                "torch": torch if section(torch) else None}


def parse(raw: bytes, token: str, pid: int | None) -> Answer:
    """The answer in ``raw``; BadAnswer when it is not JSON, not the answer to this attach
    (``token``), or not from the process (``pid``: the pid as the process sees itself)."""
    def refuse(constant: str) -> Any:
        raise BadAnswer(f"the answer holds {constant}")

    def finite(text: str) -> float | None:  # 1e999 reads as infinity, which no count or JSON may hold
        number = float(text)
        return number if math.isfinite(number) else None

    try:
        data = json.loads(raw.decode("ascii"), parse_constant=refuse, parse_float=finite)
    except BadAnswer:
        raise
    except (ValueError, RecursionError) as exc:  # not ASCII, not JSON, a number of too many digits, too deep
        raise BadAnswer(f"the answer is not JSON ({str(exc)[:100]})") from None
    d = section(data)
    if d.get("token") != token:
        raise BadAnswer("the answer is not to this attach (its token differs)")
    answered = integer(d.get("pid"))
    if pid is not None and answered != pid:
        raise BadAnswer(f"the answer comes from pid {answered}, not from the process attached to")
    if integer(d.get("too_big")) is not None:
        raise BadAnswer(f"the answer was {d['too_big']} bytes, more than the channel holds")
    return load(Answer, d, strict=False)  # hostile: believed within bounds
