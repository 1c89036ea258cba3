"""What the script inside the target answered, parsed as data and believed only within bounds.

The answer is JSON written by code running in another process, which may be hostile or simply
broken: it is parsed with the standard parser (no NaN, no Infinity), every field is taken only when
it has the expected type and lies within its bounds (counts from 1 to :data:`MAX_COUNT`, texts cut
at :data:`MAX_TEXT` characters, at most :data:`MAX_ITEMS` rows of anything), and a field that is
not is unknown, never an error. Texts keep what they say; they are escaped where they are shown.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import field
from typing import Any

from parinfo.payload import flag, integer, rows, section, text
from parinfo.process.provenance import SetByApply
from parinfo.record import record

#: The largest count believed (threads of one pool).
MAX_COUNT = 1 << 16
#: The longest text kept, and the most rows of any list or mapping.
MAX_TEXT = 4096
MAX_ITEMS = 4096


class BadAnswer(ValueError):
    """The answer is not one parinfo can read (the words say why)."""


def _text(value: Any, limit: int = MAX_TEXT) -> str | None:
    found = text(value)
    return None if found is None else found[:limit]


def _count(value: Any) -> int | None:
    n = integer(value)
    return n if n is not None and 1 <= n <= MAX_COUNT else None


@record(frozen=True)
class PythonFacts:
    """The target's interpreter: version, executable, implementation, platform, and its GIL facts
    (``free_threaded`` from sys.abiflags, ``gil_enabled`` from sys._is_gil_enabled(), ``x_gil``
    the ``-X gil`` value)."""

    version: str | None = None
    version_info: tuple[int, ...] = ()
    executable: str | None = None
    implementation: str | None = None
    platform: str | None = None
    free_threaded: bool | None = None
    gil_enabled: bool | None = None
    x_gil: str | None = None

    @classmethod
    def of(cls, data: Any) -> PythonFacts:
        d = section(data)
        info = d.get("version_info")
        version_info = tuple(v for v in info[:3] if integer(v) is not None) if isinstance(info, list) else ()
        abiflags = _text(d.get("abiflags"), 16)
        return cls(_text(d.get("version"), 64), version_info, _text(d.get("executable")),
                   _text(d.get("implementation"), 64), _text(d.get("platform"), 64),
                   None if abiflags is None else "t" in abiflags, flag(d.get("gil_enabled")),
                   _text(d.get("x_gil"), 16))


@record(frozen=True)
class NativeRead:
    """What one loaded library said of itself through its own getters: its count for the main
    thread, version, threading layer and kernels; ``why`` when it could not be asked."""

    count: int | None = None
    version: str | None = None
    layer: str | None = None
    architecture: str | None = None
    why: str | None = None


@record(frozen=True)
class ModuleRead:
    """An imported Python-module library (numexpr...): its file, its count (None: not read) and the
    attributes its record's ``module_facts`` name."""

    name: str
    file: str | None = None
    count: int | None = None
    facts: dict[str, Any] = field(default_factory=dict)


@record(frozen=True)
class PyThread:
    """A Python thread: its OS thread id (None before it started), name and daemon flag."""

    native_id: int | None
    name: str
    daemon: bool


@record(frozen=True)
class ParinfoRead:
    """parinfo inside the target: its version; whether its runtime module is loaded; the runtime's
    state (``parinfo.runtime.info()``, None while its counts are unresolved), what ``parinfo.apply``
    set, and the module that turned the GIL back on; ``busy`` when part of it could not be read."""

    version: str | None = None
    runtime_loaded: bool = False
    info: dict[str, Any] | None = None
    applied: dict[str, SetByApply] | None = None
    gil_reenabled_by: str | None = None
    busy: str | None = None


@record(frozen=True)
class Answer:
    """Everything the script answered (see :mod:`parinfo.process.attach.in_target`)."""

    pid: int
    python: PythonFacts
    environ: dict[str, str]
    modules: frozenset[str]
    python_threads: int | None
    threads: list[PyThread] | None
    pools: dict[str, NativeRead]
    torch: dict[str, Any] | None
    python_libs: list[ModuleRead]
    parinfo: ParinfoRead | None
    errors: dict[str, str]


def _environ(value: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, item in list(section(value).items())[:MAX_ITEMS]:
        found = _text(item, 1 << 16)
        if isinstance(key, str) and found is not None:
            out[key[:MAX_TEXT]] = found
    return out


def _threads(value: Any) -> tuple[int | None, list[PyThread] | None]:
    if not isinstance(value, list) or len(value) != 2:
        return None, None
    count, listed = integer(value[0]), value[1]
    threads = None
    if isinstance(listed, list):
        threads = []
        for item in listed[:MAX_ITEMS]:
            if isinstance(item, list) and len(item) == 3 and isinstance(item[1], str):
                threads.append(PyThread(integer(item[0]), item[1][:MAX_TEXT], item[2] is True))
    return (count if count is not None and 0 <= count <= MAX_ITEMS * 16 else None), threads


def _pools(value: Any) -> dict[str, NativeRead]:
    out: dict[str, NativeRead] = {}
    for row in rows(value)[:MAX_ITEMS]:
        path = _text(row.get("path"))
        if path is not None:
            out[path] = NativeRead(_count(row.get("count")), _text(row.get("version"), 200),
                                   _text(row.get("layer"), 64), _text(row.get("architecture"), 100),
                                   _text(row.get("why"), 400))
    return out


def _torch(value: Any) -> dict[str, Any] | None:
    d = section(value)
    if not d:
        return None
    return {"version": _text(d.get("version"), 200), "intra_op": _count(d.get("intra_op")),
            "inter_op": _count(d.get("inter_op")), "parallel_info": _text(d.get("parallel_info"), 1 << 16),
            "mkl_available": flag(d.get("mkl_available")), "mkldnn_available": flag(d.get("mkldnn_available"))}


def _python_libs(value: Any) -> list[ModuleRead]:
    out = []
    for row in rows(value)[:64]:
        name = _text(row.get("name"), 200)
        if name is not None:
            facts = {str(k)[:200]: v for k, v in section(row.get("facts")).items()
                     if v is None or isinstance(v, (bool, str)) or integer(v) is not None}
            out.append(ModuleRead(name, _text(row.get("file")), _count(row.get("count")), facts))
    return out


def _applied(value: Any) -> dict[str, SetByApply] | None:
    if value is None:
        return None
    out = {}
    for name, item in list(section(value).items())[:MAX_ITEMS]:
        d = section(item)
        found, profile = _text(d.get("value")), _text(d.get("profile"), 400)
        loaded = d.get("loaded")
        if isinstance(name, str) and found is not None and profile is not None and isinstance(loaded, list):
            out[name] = SetByApply(found, profile, frozenset(str(p)[:MAX_TEXT] for p in loaded[:MAX_ITEMS]))
    return out


def _parinfo(value: Any) -> ParinfoRead | None:
    if not isinstance(value, Mapping):
        return None
    state = section(value.get("state"))
    info = state.get("info")
    return ParinfoRead(_text(value.get("version"), 64), value.get("runtime_loaded") is True,
                       dict(info) if isinstance(info, Mapping) else None, _applied(state.get("applied")),
                       _text(state.get("gil_reenabled_by"), 400), _text(state.get("busy"), 400))


def parse(raw: bytes, token: str, pid: int | None) -> Answer:
    """The answer in ``raw``; BadAnswer when it is not JSON, not the answer to this attach
    (``token``), or not from the process (``pid``: the pid as the process sees itself)."""
    def refuse(constant: str) -> Any:
        raise BadAnswer(f"the answer holds {constant}")

    try:
        data = json.loads(raw.decode("ascii"), parse_constant=refuse)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise BadAnswer(f"the answer is not JSON ({str(exc)[:100]})") from None
    d = section(data)
    if d.get("token") != token:
        raise BadAnswer("the answer is not to this attach (its token differs)")
    answered = integer(d.get("pid"))
    if pid is not None and answered != pid:
        raise BadAnswer(f"the answer comes from pid {answered}, not from the process attached to")
    if integer(d.get("too_big")) is not None:
        raise BadAnswer(f"the answer was {d['too_big']} bytes, more than the channel holds")
    python_threads, threads = _threads(d.get("threads"))
    modules = d.get("modules")
    return Answer(
        pid=answered or 0,
        python=PythonFacts.of(d.get("python")),
        environ=_environ(d.get("environ")),
        modules=frozenset(m for m in modules[:MAX_ITEMS] if isinstance(m, str)) if isinstance(modules, list)
        else frozenset(),
        python_threads=python_threads,
        threads=threads,
        pools=_pools(d.get("pools")),
        torch=_torch(d.get("torch")),
        python_libs=_python_libs(d.get("python_libs")),
        parinfo=_parinfo(d.get("parinfo")),
        errors={str(k)[:64]: str(v)[:400] for k, v in list(section(d.get("errors")).items())[:64]},
    )
