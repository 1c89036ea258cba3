"""JSON in and out of records, in one place, driven by the records' fields.

:func:`dump` makes JSON-ready data of a record (its fields in order; a :class:`~parinfo.records.source.Source`
as its object; enums as their values; tuples and sets as lists). :func:`load` reads such data back
into a record of a given class from the field annotations, in one of two ways that each caller
chooses (``strict`` has no default, so no caller is lenient by accident):

- ``strict=False``, for hostile input (another process's answer, a fleet worker's row, a file another
  user controls): it never raises; a missing or odd value becomes the field's default (or the empty
  value of its type: None, "", 0, False, [], {}), and an odd item of a list or a mapping is left out;
- ``strict=True``, for trusted input (a test's payload, a report read back): an unknown key (with the
  key it may mean), a missing REQUIRED field, a value of the wrong type or outside its bounds raises
  :class:`~parinfo.errors.RecordError` naming its path (``pools[2].num_threads``); a missing field that
  is not REQUIRED takes its default, as in the JSON of an older parinfo. A record reads the keys its
  fields travel under, and those its class lists in ``_json_extra`` (written by its ``_json_out``,
  older words its ``_json_in`` takes); a key only an older version wrote, which nothing reads, is in
  its class's ``_json_gone`` ((key, why) pairs), named as obsolete. The keys are checked as given, before
  ``_json_in``, and a value that hook replaces is read as given too.

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

from parinfo.errors import RecordError
from parinfo.records.source import Kind, Source

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

    def check(self, got: Any) -> None:
        """A strict reading's check: a RecordError for what the lenient one cuts or refuses."""
        if self.most is not None and isinstance(got, _SIZED) and len(got) > self.most:
            raise RecordError(f"{len(got)} long, more than its bound {self.most}")
        number = isinstance(got, (int, float)) and not isinstance(got, bool)
        if number and ((self.low is not None and got < self.low) or (self.high is not None and got > self.high)):
            raise RecordError(f"{got} is out of its bounds {self.low}..{self.high}")


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
    got: _T = _record(cls, {}, False, whole=False)
    return got


class _Reading:
    """How one field of a record is read: its JSON key (None: the parent's whole object), its hint,
    whether the record needs it, and what it takes when missing (_NOTHING: its default)."""

    __slots__ = ("hint", "json_key", "missing", "name", "required")

    def __init__(self, name: str, json_key: str | None, hint: Any, required: bool, missing: Any) -> None:
        self.name, self.json_key, self.hint, self.required, self.missing = name, json_key, hint, required, missing


_READINGS: dict[type, tuple[tuple[_Reading, ...], Any]] = {}
_KNOWN: dict[type, frozenset[str]] = {}


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


def _known(cls: type) -> frozenset[str]:
    """The keys a record's JSON object may hold (what a strict reading accepts): its fields' keys
    (a flattened record's keys in their stead), and the keys its class lists in ``_json_extra``
    (written by its ``_json_out``, or older words its ``_json_in`` reads); worked out once per class."""
    known = _KNOWN.get(cls)
    if known is None:
        hints, keys = _hints(cls), set(getattr(cls, "_json_extra", ()))
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


def _meant(name: str, known: frozenset[str]) -> str:
    """`` (did you mean KEY?)`` for the known key closest to ``name``, or ""."""
    import difflib  # only when an error is said: 2 ms at start-up otherwise

    close = difflib.get_close_matches(name, sorted(known), n=1)
    return f" (did you mean {close[0]}?)" if close else ""


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
    if hook is not None:
        data = hook(data)
        if data is None:
            if strict:
                raise RecordError(f"not a {cls.__name__} as its reader takes one")
            if whole:
                return _NOTHING
            data = {}
    values: dict[str, Any] = {}
    if strict:
        for r in readings:
            k = r.json_key
            if k is None:  # a flattened record: its keys were checked with its parent's
                flat_cls = _record_type(r.hint)
                got = _record(flat_cls, data, True, flat=True) if flat_cls is not None else _read(r.hint, data, True)
            elif k in data:
                try:
                    got = _read(r.hint, data[k], True)
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
        else:
            got = _read(r.hint, data[r.json_key], False) if r.json_key in data else _NOTHING
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
    origin, args = _shape(hint)
    if origin is typing.Annotated:
        return _bounded(args, value, strict)
    if origin in (typing.Union, types.UnionType):
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
    if value is None:
        return _wrong(hint, value) if strict else _NOTHING
    if origin is typing.Literal:
        if value in args:
            return value
        return _refuse(strict, f"{value!r} is not one of {', '.join(map(repr, args))}")
    if origin in (list, tuple, set, frozenset):
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
    if origin in (dict, Mapping):
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
    if isinstance(hint, type):
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


def _refuse(strict: bool, why: str) -> Any:
    """_NOTHING, or, ``strict``, the error ``why``."""
    if strict:
        raise RecordError(why)
    return _NOTHING


def _wrong(hint: Any, value: Any) -> Any:
    """A strict reading's error for a value of the wrong type (a lenient one's is _NOTHING, given
    where it is found: no call on that path)."""
    shown = "null" if value is None else type(value).__name__
    raise RecordError(f"expected {_named(hint)}, not {shown}", of_type=True)


def _named(hint: Any) -> str:
    """A hint in words for an error: ``int``, ``list``, ``int or null``."""
    origin, args = _shape(hint)
    if origin is typing.Annotated:
        return _named(args[0])
    if origin in (typing.Union, types.UnionType):
        return " or ".join("null" if a is type(None) else _named(a) for a in args)
    if origin is not None:
        return "a JSON object" if origin in (dict, Mapping) else "a JSON array"
    if isinstance(hint, type) and hasattr(hint, "__dataclass_fields__"):
        return f"{hint.__name__} (an object)"
    return getattr(hint, "__name__", str(hint))


def _union_error(hint: Any, errors: list[RecordError], value: Any) -> Any:
    """The error of a value no member of a union takes: that of the member it went furthest into (a
    record's bad key, a refused value), else that of a value of none of its types."""
    deepest = max(errors, key=lambda e: (len(e.parts), not e.of_type))
    if deepest.parts or not deepest.of_type:
        raise deepest
    return _wrong(hint, value)


_SOURCE_KEYS = frozenset({"kind", "detail", "text", "when"})
_SOURCE_KINDS = frozenset(k.value for k in Kind)


def _strict_source(value: Any, source: Source | None) -> None:
    """A strict reading's check of a source: the object ``Source.to_json`` writes (or a version 1 text)."""
    if isinstance(value, Mapping):
        odd = [str(k) for k in value if k not in _SOURCE_KEYS]
        if odd:
            raise RecordError(f"unknown key{_meant(odd[0], _SOURCE_KEYS)}", (odd[0],))
        kind = value.get("kind")
        if kind not in _SOURCE_KINDS:
            raise RecordError(f"{kind!r} is not a source kind", ("kind",))
    if source is None:
        _wrong(Source, value)


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
