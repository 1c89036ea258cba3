"""Reading JSON into records, by their annotations, for :func:`parinfo.records.convert.load` (the module
:mod:`parinfo.records.convert` says how strict and lenient readings differ). The annotations are resolved once
per class, at its first reading.
"""
from __future__ import annotations

import dataclasses
import enum
import math
import sys
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

from parinfo.errors import RecordError
from parinfo.records.field_marks import FIELDS as _FIELDS, NOTHING as _NOTHING, Bound, fields as _fields
from parinfo.records.reading_errors import (
    SOURCE_KEYS as _SOURCE_KEYS,
    SOURCE_KINDS as _SOURCE_KINDS,
    meant as _meant,
    refuse as _refuse,
    shape as _shape,
    strict_source as _strict_source,
    union_error as _union_error,
    wrong as _wrong,
)
from parinfo.records.source import Source
from parinfo.records.unknown import Unknown

_T = TypeVar("_T")


def load(cls: type[_T], data: Any, *, strict: bool) -> _T:
    """A ``cls`` record from JSON data. Every caller says how far it trusts the data:

    - ``strict=True`` (trusted: a test's payload, a report read back): an unknown key, a missing
      REQUIRED field, a value of the wrong type or out of its bounds raises
      :class:`~parinfo.errors.RecordError` naming its path (``machine.usable_cpu: unknown key (did
      you mean usable_cpus?)``); a missing field that is not REQUIRED takes its default, as in the
      JSON of an older parinfo;
    - ``strict=False`` (hostile: another process, a fleet worker, a file another user controls):
      never raises; anything missing or odd takes its default (see the module)."""
    if strict:
        got = _read(cls, data, True)
        return got  # type: ignore[no-any-return]
    got = _read(cls, data, False)
    if got is not _NOTHING:
        return got  # type: ignore[no-any-return]
    if dataclasses.is_dataclass(cls) and isinstance(data, Mapping):  # asked for, so kept whole
        kept: _T = _record(cls, data, False, whole=False)
        return kept
    return _empty_record(cls)


_HINTS: dict[type, dict[str, object]] = {}


def _hints(cls: type) -> dict[str, object]:
    hints = _HINTS.get(cls)
    if hints is None:
        module = sys.modules.get(cls.__module__)
        namespace = {**vars(typing), **(vars(module) if module is not None else {})}
        try:
            hints = typing.get_type_hints(cls, globalns=namespace, include_extras=True)
        except NameError:  # an annotation naming what only type checkers import: each field alone
            hints = {}
            for name, f in cls.__dataclass_fields__.items():  # type: ignore[attr-defined]
                try:
                    hints[name] = eval(f.type, namespace) if isinstance(f.type, str) else f.type
                except NameError:
                    hints[name] = Any
        _HINTS[cls] = hints
    return hints


def _empty_record(cls: type[_T]) -> _T:
    got: _T = _record(cls, {}, False, whole=False)
    return got


class _Reading:
    """How one field of a record is read: its JSON key (None: the parent's whole object), its hint,
    whether the record needs it, what it takes when missing (_NOTHING: its default), and whether an
    empty object is None (EMPTY_IS_NONE)."""

    __slots__ = ("empty_none", "hint", "json_key", "missing", "name", "required")

    def __init__(self, name: str, json_key: str | None, hint: Any, required: bool, missing: Any,
                 empty_none: bool = False) -> None:
        self.name, self.json_key, self.hint, self.required, self.missing = name, json_key, hint, required, missing
        self.empty_none = empty_none


_READINGS: dict[type, tuple[tuple[_Reading, ...], Any]] = {}
_KNOWN: dict[type, frozenset[str]] = {}
_ALONE: dict[type, Any] = {}  # the key of a record's ALONE field (None: it has none)


def _readings(cls: type) -> tuple[tuple[_Reading, ...], Any]:
    """The fields a record reads, with its ``_json_in`` hook (or None); worked out once per class."""
    found = _READINGS.get(cls)
    if found is None:
        hints, out = _hints(cls), []
        for name, f in _FIELDS.get(cls) or _fields(cls):
            meta = f.metadata
            if not f.init or meta.get("local"):
                continue
            hint = hints.get(name, Any)
            if "missing" in meta:
                missing = meta["missing"]
            elif f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
                missing = _NOTHING
            else:
                missing = _EMPTY
            out.append(_Reading(name, None if meta.get("flatten") else meta.get("key", name), hint,
                                bool(meta.get("required")), missing, bool(meta.get("empty_none"))))
        found = _READINGS[cls] = (tuple(out), getattr(cls, "_json_in", None))
    return found


def _known(cls: type) -> frozenset[str]:
    """The keys a record's JSON object may hold (what a strict reading accepts): its fields' keys
    (a flattened record's keys in their stead), and the keys its class declares in ``_json_extra``
    (written by its ``_json_out``, or older words its ``_json_in`` reads); worked out once per class."""
    known = _KNOWN.get(cls)
    if known is None:
        hints, keys = _hints(cls), {k for k, _ in getattr(cls, "_json_extra", ())}
        for name, f in _FIELDS.get(cls) or _fields(cls):
            meta = f.metadata
            if meta.get("local"):
                continue
            if meta.get("flatten"):
                keys |= _known(_record_type(hints.get(name, Any)) or object)
            else:
                keys.add(meta.get("key", name))
        known = _KNOWN[cls] = frozenset(keys)
    return known


def _record_type(hint: Any) -> type | None:
    """The record class a hint names (``X``, ``X | None``, ``Annotated[X, ...]``), or None."""
    if isinstance(hint, type) and hasattr(hint, "__dataclass_fields__"):
        return hint
    for arg in typing.get_args(hint):
        found = _record_type(arg)
        if found is not None:
            return found
    return None


def _unknown(cls: type, data: Mapping[str, Any]) -> RecordError:
    """The error of the first key of ``data`` that ``cls``'s JSON never holds, with the key it may mean."""
    known = _known(cls)
    name = next(str(k) for k in data if k not in known)
    gone = dict(getattr(cls, "_json_gone", ())).get(name)
    if gone is not None:
        return RecordError(f"obsolete key ({gone})", (name,))
    return RecordError(f"unknown key{_meant(name, known)}", (name,))


_NONE = type(None)
_EMPTY = object()  # a field without a default: its type's empty value when missing


def _record(cls: type[_T], data: Mapping[str, Any], strict: bool, whole: bool = True, flat: bool = False) -> Any:
    """A ``cls`` record of ``data``. Lenient (not ``strict``): _NOTHING when ``whole`` and a REQUIRED
    field is not there. ``strict``: a RecordError for an unknown key (unless ``flat``: the keys are
    its parent's, checked there), a missing REQUIRED field or an odd value."""
    readings, hook = _READINGS.get(cls) or _readings(cls)
    given = data
    if strict and not flat:
        known = _KNOWN.get(cls) or _known(cls)
        if not known.issuperset(data):
            raise _unknown(cls, data)
        alone = _ALONE.get(cls, _NOTHING)
        if alone is _NOTHING:
            alone = _ALONE[cls] = next((f.metadata.get("key", n) for n, f in _FIELDS.get(cls) or _fields(cls)
                                        if f.metadata.get("alone")), None)
        if alone is not None and data.get(alone) is not None and len(data) > 1:
            other = next(str(k) for k in data if k != alone)
            raise RecordError(f"a record whose {alone} is set holds that key alone", (other,))
    if hook is not None:
        data = hook(data)
        if data is None:
            if strict:
                raise RecordError(f"not a {cls.__name__} as its reader takes one")
            if whole:
                return _NOTHING
            data = {}
    values: dict[str, object] = {}
    if strict:
        for r in readings:
            k = r.json_key
            if k is None:  # a flattened record: its keys were checked with its parent's
                flat_cls = _record_type(r.hint)
                got = _record(flat_cls, data, True, flat=True) if flat_cls is not None else _read(r.hint, data, True)
            elif k in data:
                try:
                    got = None if r.empty_none and data[k] == {} else _read(r.hint, data[k], True)
                    if hook is not None and k in given and given[k] is not data[k] and given[k] is not None:
                        _read(r.hint, given[k], True)  # as given, not as the hook made it
                except RecordError as e:  # a key its hook made (a WorkerRow's report) is not in the path
                    raise (e.within(k) if k in given else e) from None
            elif r.required:
                raise RecordError("missing (the record needs it)", (k,))
            elif r.missing is _NOTHING:
                continue
            else:
                got = _empty(r.hint) if r.missing is _EMPTY else r.missing
            values[r.name] = got
        return cls(**values)
    for r in readings:
        if r.json_key is None:
            got = _read(r.hint, data, False)
        elif r.json_key in data:
            v = data[r.json_key]
            got = None if r.empty_none and v == {} else _read(r.hint, v, False)
        else:
            got = _NOTHING
        if got is _NOTHING:
            if whole and r.required:
                return _NOTHING
            if r.missing is _NOTHING:
                continue
            got = _empty(r.hint) if r.missing is _EMPTY else r.missing
        values[r.name] = got
    return cls(**values)


def _empty(hint: Any) -> Any:
    """The empty value of a type: None where None is allowed, else "", 0, False, [], {} or a record."""
    origin = typing.get_origin(hint)
    if origin is typing.Annotated:
        return _empty(typing.get_args(hint)[0])
    if hint is Any or hint is type(None):
        return None
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        return None if type(None) in args else _empty(args[0])
    if origin in (list, tuple, set, frozenset) or hint in (list, tuple):
        return (origin or hint)()
    if origin in (dict, Mapping) or hint is dict:
        return {}
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _empty_record(hint)
    if hint in (str, int, float, bool):
        return hint()
    return None


def _read(hint: Any, value: Any, strict: bool) -> Any:
    """``value`` as ``hint`` says; when it is not one, _NOTHING (or, ``strict``, a RecordError)."""
    if hint is str:  # the commonest first
        return value if isinstance(value, str) else (_wrong(hint, value) if strict else _NOTHING)
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        return _wrong(hint, value) if strict else _NOTHING
    if hint is Any or hint is object:
        return value
    if hint is Source:
        source = Source.from_json(value)
        if strict and (source is None or not isinstance(value, Mapping) or not _SOURCE_KEYS.issuperset(value)
                       or value.get("kind") not in _SOURCE_KINDS):
            _strict_source(value, source)  # raises, unless a version 1 text
        return _NOTHING if source is None else source
    if hint is Unknown:  # the words "unknown (why)" a record's unknown value is written as
        return Unknown.from_words(value) if isinstance(value, str) else (_wrong(hint, value) if strict else _NOTHING)
    origin, args = _shape(hint)
    if origin is typing.Annotated:
        return _bounded(args, value, strict)
    if origin in (typing.Union, types.UnionType):
        return _read_union(hint, args, value, strict)
    if value is None:
        return _wrong(hint, value) if strict else _NOTHING
    if origin is typing.Literal:
        if value in args:
            return value
        return _refuse(strict, f"{value!r} is not one of {', '.join(map(repr, args))}")
    if origin in (list, tuple, set, frozenset):
        return _read_items(hint, origin, args, value, strict)
    if origin in (dict, Mapping):
        return _read_mapping(hint, args, value, strict)
    if isinstance(hint, type):
        return _read_class(hint, value, strict)
    return _wrong(hint, value) if strict else _NOTHING


def _read_union(hint: Any, args: tuple[Any, ...], value: Any, strict: bool) -> Any:
    """``value`` as the first member of a union that takes it."""
    if value is None:
        return None if type(None) in args else (_wrong(hint, value) if strict else _NOTHING)
    if strict:
        errors: list[RecordError] = []  # made once, only by a member that refuses
        for arg in args:
            if arg is not _NONE:
                try:
                    return _read(arg, value, True)
                except RecordError as e:
                    errors = [*errors, e]
        return _union_error(hint, errors, value)
    for arg in args:
        if arg is type(None):
            continue
        got = _read(arg, value, False)
        if got is not _NOTHING:
            return got
    return _NOTHING


def _read_items(hint: Any, origin: Any, args: tuple[Any, ...], value: Any, strict: bool) -> Any:
    """``value`` as a list, tuple (of any or a fixed length) or set; a lenient reading drops the
    items it does not take (of a fixed-length tuple: the whole)."""
    if not isinstance(value, (list, tuple)):
        return _wrong(hint, value) if strict else _NOTHING
    if origin is tuple and args and args[-1] is not Ellipsis:  # a fixed-length tuple
        if len(value) != len(args):
            return _refuse(strict, f"expected {len(args)} items, not {len(value)}")
        items = [_item(a, v, i, strict) for i, (a, v) in enumerate(zip(args, value, strict=True))]
        return _NOTHING if any(i is _NOTHING for i in items) else tuple(items)
    inner = args[0] if args else Any
    if strict:
        try:
            return origin([_read(inner, v, True) for v in value])
        except RecordError:
            for i, v in enumerate(value):  # which item: read again, its index said
                _item(inner, v, i, True)
            raise
    items = [_read(inner, v, False) for v in value]
    return origin(i for i in items if i is not _NOTHING)


def _read_mapping(hint: Any, args: tuple[Any, ...], value: Any, strict: bool) -> Any:
    """``value`` as a mapping (its keys as texts, or as a bounded key type says); a lenient reading
    drops the items it does not take."""
    if not isinstance(value, Mapping):
        return _wrong(hint, value) if strict else _NOTHING
    inner = args[1] if len(args) == 2 else Any
    keys = args[0] if args and _shape(args[0])[0] is typing.Annotated else None  # a bounded key
    out = {}
    for k, v in value.items():
        if strict:
            try:
                got = _read(inner, v, True)
            except RecordError as e:
                raise e.within(str(k)) from None
        else:
            got = _read(inner, v, False)
        if got is not _NOTHING:
            name = str(k) if keys is None else _item(keys, str(k), str(k), strict)
            if name is not _NOTHING:
                out[name] = got
    return out


def _read_class(hint: type, value: Any, strict: bool) -> Any:
    """``value`` as a class says: a record (an object, or an array where the record reads one), an
    enum's value, or a plain bool, int, float (finite) or str."""
    if hasattr(hint, "__dataclass_fields__"):
        if isinstance(value, Mapping):
            return _record(hint, value, strict)
        if isinstance(value, (list, tuple)) and getattr(hint, "_json_array", False):
            readings = (_READINGS.get(hint) or _readings(hint))[0]
            if len(value) == len(readings):
                return _record(hint, {r.json_key or r.name: v for r, v in zip(readings, value, strict=True)},
                               strict)
            return _refuse(strict, f"expected an array of {len(readings)} items, not {len(value)}")
        return _wrong(hint, value) if strict else _NOTHING
    if issubclass(hint, enum.Enum):
        try:
            return hint(value)
        except ValueError:
            return _refuse(strict, f"{value!r} is not one of {', '.join(repr(m.value) for m in hint)}")
    if hint is bool:
        return value if isinstance(value, bool) else (_wrong(hint, value) if strict else _NOTHING)
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        return _wrong(hint, value) if strict else _NOTHING
    if hint is float:  # a finite number only: JSON has no other
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        return value if number and math.isfinite(value) else (_wrong(hint, value) if strict else _NOTHING)
    if hint is str:
        return value if isinstance(value, str) else (_wrong(hint, value) if strict else _NOTHING)
    return _wrong(hint, value) if strict else _NOTHING


def _item(hint: Any, value: Any, where: str | int, strict: bool) -> Any:
    """An item of a list (``where``: its index) or a mapping (its key) read as ``hint`` says; a strict
    reading's error names where it is."""
    try:
        return _read(hint, value, strict)
    except RecordError as e:
        raise e.within(where) from None


def _bounded(args: tuple[Any, ...], value: Any, strict: bool) -> Any:
    """``value`` read as ``Annotated[hint, bounds...]`` (``args``) says, or _NOTHING (``strict``: an
    error for a value out of its bounds, a text or a list longer than its bound)."""
    bounds = [b for b in args[1:] if isinstance(b, Bound)]
    if strict:
        got = _read(args[0], value, True)
        for b in bounds:
            b.check(got)
        return got
    for b in bounds:
        value = b.before(value)
    got = _read(args[0], value, False)
    for b in bounds:
        if got is _NOTHING:
            break
        got = b.after(got)
    return got
