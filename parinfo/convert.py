"""JSON in and out of records, in one place, driven by the records' fields.

:func:`dump` makes JSON-ready data of a record (its fields in order; a :class:`~parinfo.source.Source`
as its object; enums as their values; tuples and sets as lists). :func:`load` reads such data back
into a record of a given class from the field annotations, and never raises on odd data: what
parinfo reads may come from another process, a fleet worker, an older or newer parinfo, or a hand-made
dict, so a missing or odd value becomes the field's default (or the empty value of its type: None,
"", 0, False, [], {}), and an odd item of a list or a mapping is left out.

A field can say how it travels through ``field(metadata=...)``:

- ``OMIT_NONE``: left out of the JSON while it is None (keys only some reports have);
- ``{"missing": value}``: the value a missing or odd field takes instead of the type's empty one.

Only the edges call this module: ``--json``, the fleet's rows, a report read back, the schema. The
annotations are resolved once per class, at its first conversion (``typing.get_type_hints``), so
records that never travel cost nothing at start-up.
"""
from __future__ import annotations

import dataclasses
import enum
import sys
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

from parinfo.source import Source

__all__ = ["OMIT_NONE", "dump", "load"]

_T = TypeVar("_T")

#: Field metadata: leave the field out of the JSON while it is None.
OMIT_NONE: Mapping[str, Any] = types.MappingProxyType({"omit_none": True})

_NOTHING = object()  # what a reader gives for a value it does not accept


def dump(value: Any) -> Any:
    """``value`` as JSON-ready data (records field by field, honouring ``OMIT_NONE``)."""
    if isinstance(value, Source):
        return value.to_json()
    if isinstance(value, enum.Enum):
        return value.value
    fields = getattr(type(value), "__dataclass_fields__", None)
    if fields is not None:
        out = {}
        for name, f in fields.items():
            item = getattr(value, name)
            if item is None and f.metadata.get("omit_none"):
                continue
            out[name] = dump(item)
        return out
    if isinstance(value, Mapping):
        return {str(k): dump(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [dump(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted(dump(v) for v in value)
    return value


def load(cls: type[_T], data: Any) -> _T:
    """A ``cls`` record from JSON data; anything missing or odd takes its default (see the module)."""
    got = _read(cls, data)
    return got if got is not _NOTHING else _empty_record(cls)


# -- reading, by annotation ---------------------------------------------------------------------

_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    hints = _HINTS.get(cls)
    if hints is None:
        module = sys.modules.get(cls.__module__)
        namespace = {**vars(typing), **(vars(module) if module is not None else {})}
        try:
            hints = typing.get_type_hints(cls, globalns=namespace)
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
    return _record(cls, {})


def _record(cls: type[_T], data: Mapping[str, Any]) -> _T:
    hints = _hints(cls)
    values: dict[str, Any] = {}
    for name, f in cls.__dataclass_fields__.items():  # type: ignore[attr-defined]
        if not f.init:
            continue
        got = _read(hints.get(name, Any), data[name]) if name in data else _NOTHING
        if got is _NOTHING:
            if "missing" in f.metadata:
                got = f.metadata["missing"]
            elif f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
                continue
            else:
                got = _empty(hints.get(name, Any))
        values[name] = got
    return cls(**values)


def _empty(hint: Any) -> Any:
    """The empty value of a type: None where None is allowed, else "", 0, False, [], {} or a record."""
    origin = typing.get_origin(hint)
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


def _read(hint: Any, value: Any) -> Any:
    """``value`` as ``hint`` says, or _NOTHING when it is not one."""
    if hint is Any or hint is object:
        return value
    if hint is Source:
        source = Source.from_json(value)
        return _NOTHING if source is None else source
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        if value is None:
            return None if type(None) in args else _NOTHING
        for arg in args:
            if arg is type(None):
                continue
            got = _read(arg, value)
            if got is not _NOTHING:
                return got
        return _NOTHING
    if value is None:
        return _NOTHING
    if origin is typing.Literal:
        return value if value in typing.get_args(hint) else _NOTHING
    if origin in (list, tuple, set, frozenset):
        if not isinstance(value, (list, tuple)):
            return _NOTHING
        args = typing.get_args(hint)
        if origin is tuple and args and args[-1] is not Ellipsis:  # a fixed-length tuple
            if len(value) != len(args):
                return _NOTHING
            items = [_read(a, v) for a, v in zip(args, value, strict=True)]
            return _NOTHING if any(i is _NOTHING for i in items) else tuple(items)
        inner = args[0] if args else Any
        items = [_read(inner, v) for v in value]
        return origin(i for i in items if i is not _NOTHING)
    if origin in (dict, Mapping):
        if not isinstance(value, Mapping):
            return _NOTHING
        args = typing.get_args(hint)
        inner = args[1] if len(args) == 2 else Any
        out = {}
        for k, v in value.items():
            got = _read(inner, v)
            if got is not _NOTHING:
                out[str(k)] = got
        return out
    if isinstance(hint, type):
        if dataclasses.is_dataclass(hint):
            return _record(hint, value) if isinstance(value, Mapping) else _NOTHING
        if issubclass(hint, enum.Enum):
            try:
                return hint(value)
            except ValueError:
                return _NOTHING
        if hint is bool:
            return value if isinstance(value, bool) else _NOTHING
        if hint is int:
            return value if isinstance(value, int) and not isinstance(value, bool) else _NOTHING
        if hint is float:
            return value if isinstance(value, (int, float)) and not isinstance(value, bool) else _NOTHING
        if hint is str:
            return value if isinstance(value, str) else _NOTHING
    return _NOTHING
