"""JSON in and out of records, in one place, driven by the records' fields.

:func:`dump` makes JSON-ready data of a record (its fields in order; a :class:`~parinfo.source.Source`
as its object; enums as their values; tuples and sets as lists). :func:`load` reads such data back
into a record of a given class from the field annotations, and never raises on odd data: what
parinfo reads may come from another process, a fleet worker, an older or newer parinfo, or a hand-made
dict, so a missing or odd value becomes the field's default (or the empty value of its type: None,
"", 0, False, [], {}), and an odd item of a list or a mapping is left out.

A field can say how it travels through ``field(metadata=...)`` (several at once: ``{**OMIT_NONE, **key("x")}``):

- ``OMIT_NONE``: left out of the JSON while it is None (keys only some reports have);
- ``OMIT_EMPTY``: left out while it is None or empty ("", [], {});
- ``{"missing": value}``: the value a missing or odd field takes instead of the type's empty one;
- ``key(name)``: travels under another JSON key than its field's name;
- ``REQUIRED``: a record missing it (or holding an odd value) is odd as a whole: left out of a
  list, None where None is allowed (a finding or a counter that cannot be said in full);
- ``FLATTEN``: a record whose keys sit in its parent's object instead of an object of its own;
- ``LOCAL``: stays in the process: never written, never read (its default is kept).

A value read from another process is believed only within bounds, said in its annotation with
``typing.Annotated`` (at any depth: a list's items, a mapping's keys and values):

- ``Annotated[str, at_most(n)]``: a text is cut at ``n`` characters; ``Annotated[list[T], at_most(n)]``
  (a tuple, set or mapping alike): only its first ``n`` items are read, the rest is not looked at;
- ``Annotated[int, between(low, high)]``: a number outside ``low..high`` is odd, as one of another
  type is.

A record written as a JSON array of its fields in order (a compact row) says so with a class variable
``_json_array = True``; an array of another length is odd.

A record whose JSON form truly differs from its fields says so with two optional hooks: a
``_json_out(self, data)`` method that gets the field-by-field object and returns the JSON one, and a
``_json_in(cls, data)`` classmethod that gets the JSON object and returns the one to read the fields
from (or None: the object is odd as a whole). Both are for the few records that need them (a
computed figure, an older version's words), never a second converter.

Only the edges call this module: ``--json``, the fleet's rows, a report read back, the schema. The
annotations are resolved once per class, at its first conversion (``typing.get_type_hints``), so
records that never travel cost nothing at start-up.
"""
from __future__ import annotations

import dataclasses
import enum
import itertools
import json
import math
import sys
import types
import typing
from collections.abc import Mapping
from typing import Annotated, Any, TypeVar

from parinfo.source import Source

__all__ = ["FLATTEN", "LOCAL", "MAX_COUNT", "OMIT_EMPTY", "OMIT_NONE", "REQUIRED", "Bound", "Count", "at_most",
           "between", "dump", "dumps", "key", "load"]

_T = TypeVar("_T")

#: Field metadata: leave the field out of the JSON while it is None.
OMIT_NONE: Mapping[str, Any] = types.MappingProxyType({"omit_none": True})
#: Field metadata: leave the field out of the JSON while it is None or empty ("", [], {}).
OMIT_EMPTY: Mapping[str, Any] = types.MappingProxyType({"omit_empty": True})
#: Field metadata: a record without this field (or with an odd value in it) is odd as a whole.
REQUIRED: Mapping[str, Any] = types.MappingProxyType({"required": True})
#: Field metadata: the field's record writes its keys into its parent's object, and is read from it.
FLATTEN: Mapping[str, Any] = types.MappingProxyType({"flatten": True})
#: Field metadata: the field stays in the process (never written to JSON nor read from it).
LOCAL: Mapping[str, Any] = types.MappingProxyType({"local": True})


def key(name: str) -> Mapping[str, Any]:
    """Field metadata: the field travels under the JSON key ``name``."""
    return types.MappingProxyType({"key": name})


class Bound:
    """A bound on a value read (the metadata of ``typing.Annotated``; made by :func:`at_most` or
    :func:`between`)."""

    __slots__ = ("high", "low", "most")

    def __init__(self, most: int | None = None, low: float | None = None, high: float | None = None) -> None:
        self.most, self.low, self.high = most, low, high

    def __repr__(self) -> str:
        return f"Bound(most={self.most}, low={self.low}, high={self.high})"

    def before(self, value: Any) -> Any:
        """``value`` as far as it is read: a list's, tuple's or mapping's first items."""
        most = self.most
        if most is not None:
            if isinstance(value, (list, tuple)):
                return value[:most]
            if isinstance(value, Mapping):
                return dict(itertools.islice(value.items(), most))
        return value

    def after(self, got: Any) -> Any:
        """What was read, cut (a text) or refused (a number out of bounds: _NOTHING)."""
        if isinstance(got, str):
            return got if self.most is None else got[:self.most]
        number = isinstance(got, (int, float)) and not isinstance(got, bool)
        if number and ((self.low is not None and got < self.low) or (self.high is not None and got > self.high)):
            return _NOTHING
        return got


def at_most(n: int) -> Bound:
    """``Annotated`` metadata: a text is cut at ``n`` characters; a list, tuple, set or mapping is read
    from its first ``n`` items."""
    return Bound(most=n)


def between(low: float | None = None, high: float | None = None) -> Bound:
    """``Annotated`` metadata: a number below ``low`` or above ``high`` is odd."""
    return Bound(low=low, high=high)


_NOTHING = object()  # what a reader gives for a value it does not accept

#: The largest thread count believed from another process (threads of one pool).
MAX_COUNT = 1 << 16
#: A count of threads read from another process: 1 to MAX_COUNT, else unknown.
Count = Annotated[int, between(1, MAX_COUNT)]
_SIZED = (str, list, tuple, dict, set, frozenset)
_PLAIN = frozenset({str, int, float, bool, type(None)})


def dump(value: Any) -> Any:
    """``value`` as JSON-ready data (records field by field, honouring their metadata and hooks)."""
    cls = type(value)
    if cls in _PLAIN:
        return value
    if cls is Source:
        return value.to_json()
    if isinstance(value, enum.Enum):
        return value.value
    fields = _FIELDS.get(cls) or (_fields(cls) if hasattr(cls, "__dataclass_fields__") else None)
    if fields is not None:
        if getattr(cls, "_json_array", False):
            return [dump(getattr(value, name)) for name, f in fields if not f.metadata.get("local")]
        out: dict[str, Any] = {}
        for name, f in fields:
            item = getattr(value, name)
            meta = f.metadata
            if meta:
                if meta.get("local") or (item is None and meta.get("omit_none")):
                    continue
                if meta.get("omit_empty") and (item is None or (isinstance(item, _SIZED) and not item)):
                    continue
                if meta.get("flatten"):
                    out.update(dump(item))
                    continue
                name = meta.get("key", name)
            out[name] = dump(item)
        hook = getattr(cls, "_json_out", None)
        return out if hook is None else hook(value, out)
    if isinstance(value, Mapping):
        return {str(k): dump(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [dump(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted(dump(v) for v in value)
    return value


def dumps(data: Any, **options: Any) -> str:
    """JSON text of ``data`` (made by :func:`dump`), valid whatever it holds: a number that is not
    finite (which JSON cannot say) is written as null."""
    try:
        return json.dumps(data, allow_nan=False, **options)
    except ValueError:
        return json.dumps(_finite(data), allow_nan=False, **options)


def _finite(data: Any) -> Any:
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, Mapping):
        return {k: _finite(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [_finite(v) for v in data]
    return data


def load(cls: type[_T], data: Any) -> _T:
    """A ``cls`` record from JSON data; anything missing or odd takes its default (see the module)."""
    got = _read(cls, data)
    if got is not _NOTHING:
        return got  # type: ignore[no-any-return]
    if dataclasses.is_dataclass(cls) and isinstance(data, Mapping):  # asked for, so kept whole
        kept: _T = _record(cls, data, strict=False)
        return kept
    return _empty_record(cls)


_FIELDS: dict[type, tuple[tuple[str, dataclasses.Field[Any]], ...]] = {}


def _fields(cls: type) -> tuple[tuple[str, dataclasses.Field[Any]], ...]:
    """(name, field) of a record's fields, ClassVar and InitVar pseudo-fields left out; once per class."""
    got = _FIELDS[cls] = tuple((f.name, f) for f in dataclasses.fields(cls))
    return got


# -- reading, by annotation ---------------------------------------------------------------------

_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
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
    got: _T = _record(cls, {}, strict=False)
    return got


class _Reading:
    """How one field of a record is read: its JSON key (None: the parent's whole object), its hint,
    whether the record needs it, and what it takes when missing (_NOTHING: its default)."""

    __slots__ = ("hint", "json_key", "missing", "name", "required")

    def __init__(self, name: str, json_key: str | None, hint: Any, required: bool, missing: Any) -> None:
        self.name, self.json_key, self.hint, self.required, self.missing = name, json_key, hint, required, missing


_READINGS: dict[type, tuple[tuple[_Reading, ...], Any]] = {}


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
                                bool(meta.get("required")), missing))
        found = _READINGS[cls] = (tuple(out), getattr(cls, "_json_in", None))
    return found


_EMPTY = object()  # a field without a default: its type's empty value when missing


def _record(cls: type[_T], data: Mapping[str, Any], strict: bool = True) -> Any:
    """A ``cls`` record of ``data``, or _NOTHING when ``strict`` and a REQUIRED field is not there."""
    readings, hook = _READINGS.get(cls) or _readings(cls)
    if hook is not None:
        data = hook(data)
        if data is None:
            if strict:
                return _NOTHING
            data = {}
    values: dict[str, Any] = {}
    for r in readings:
        if r.json_key is None:
            got = _read(r.hint, data)
        else:
            got = _read(r.hint, data[r.json_key]) if r.json_key in data else _NOTHING
        if got is _NOTHING:
            if strict and r.required:
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


_SHAPES: dict[Any, tuple[Any, tuple[Any, ...]]] = {}


def _shape(hint: Any) -> tuple[Any, tuple[Any, ...]]:
    """(origin, args) of a hint, worked out once per hint."""
    try:
        return _SHAPES[hint]
    except KeyError:
        got = _SHAPES[hint] = (typing.get_origin(hint), typing.get_args(hint))
        return got
    except TypeError:  # an unhashable hint
        return typing.get_origin(hint), typing.get_args(hint)


def _read(hint: Any, value: Any) -> Any:
    """``value`` as ``hint`` says, or _NOTHING when it is not one."""
    if hint is str:  # the commonest first
        return value if isinstance(value, str) else _NOTHING
    if hint is int:
        return value if isinstance(value, int) and not isinstance(value, bool) else _NOTHING
    if hint is Any or hint is object:
        return value
    if hint is Source:
        source = Source.from_json(value)
        return _NOTHING if source is None else source
    origin, args = _shape(hint)
    if origin is typing.Annotated:
        return _bounded(args, value)
    if origin in (typing.Union, types.UnionType):
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
        return value if value in args else _NOTHING
    if origin in (list, tuple, set, frozenset):
        if not isinstance(value, (list, tuple)):
            return _NOTHING
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
        inner = args[1] if len(args) == 2 else Any
        keys = args[0] if args and _shape(args[0])[0] is typing.Annotated else None  # a bounded key
        out = {}
        for k, v in value.items():
            got = _read(inner, v)
            if got is not _NOTHING:
                name = str(k) if keys is None else _read(keys, str(k))
                if name is not _NOTHING:
                    out[name] = got
        return out
    if isinstance(hint, type):
        if hasattr(hint, "__dataclass_fields__"):
            if isinstance(value, Mapping):
                return _record(hint, value)
            if isinstance(value, (list, tuple)) and getattr(hint, "_json_array", False):
                readings = (_READINGS.get(hint) or _readings(hint))[0]
                if len(value) == len(readings):
                    return _record(hint, {r.json_key or r.name: v for r, v in zip(readings, value, strict=True)})
            return _NOTHING
        if issubclass(hint, enum.Enum):
            try:
                return hint(value)
            except ValueError:
                return _NOTHING
        if hint is bool:
            return value if isinstance(value, bool) else _NOTHING
        if hint is int:
            return value if isinstance(value, int) and not isinstance(value, bool) else _NOTHING
        if hint is float:  # a finite number only: JSON has no other
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            return value if number and math.isfinite(value) else _NOTHING
        if hint is str:
            return value if isinstance(value, str) else _NOTHING
    return _NOTHING


def _bounded(args: tuple[Any, ...], value: Any) -> Any:
    """``value`` read as ``Annotated[hint, bounds...]`` (``args``) says, or _NOTHING."""
    bounds = [b for b in args[1:] if isinstance(b, Bound)]
    for b in bounds:
        value = b.before(value)
    got = _read(args[0], value)
    for b in bounds:
        if got is _NOTHING:
            break
        got = b.after(got)
    return got
