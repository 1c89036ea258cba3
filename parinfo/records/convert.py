"""JSON in and out of records, in one place, driven by the records' fields.

:func:`dump` makes JSON-ready data of a record (its fields in order; a :class:`~parinfo.records.source.Source`
as its object; an :class:`~parinfo.records.unknown.Unknown` as its words "unknown (why)"; enums as their
values; tuples and sets as lists). :func:`load` reads such data back into a record of a given class
from the field annotations, in one of two ways that each caller chooses (``strict`` has no default,
so no caller is lenient by accident):

- ``strict=False``, for hostile input (another process's answer, a fleet worker's row, a file another
  user controls): it never raises; a missing or odd value becomes the field's default (or the empty
  value of its type: None, "", 0, False, [], {}), and an odd item of a list or a mapping is left out;
- ``strict=True``, for trusted input (a test's payload, a report read back): an unknown key (with the
  key it may mean), a missing REQUIRED field, a value of the wrong type or outside its bounds raises
  :class:`~parinfo.errors.RecordError` naming its path (``pools[2].num_threads``); a missing field that
  is not REQUIRED takes its default, as in the JSON of an older parinfo. A record reads the keys its
  fields travel under, and those its class declares in ``_json_extra`` ((key, type) pairs: written
  by its ``_json_out``, or older words its ``_json_in`` takes; the schema gives them that type); a
  key only an older version wrote, which nothing reads, is in its class's ``_json_gone`` ((key, why)
  pairs), named as obsolete. The keys are checked as given, before
  ``_json_in``, and a value that hook replaces is read as given too.

A field can say how it travels through ``field(metadata=...)`` (several at once: ``{**OMIT_NONE, **key("x")}``):

- ``OMIT_NONE``: left out of the JSON while it is None (keys only some reports have);
- ``OMIT_EMPTY``: left out while it is None or empty ("", [], {});
- ``{"missing": value}``: the value a missing or odd field takes instead of the type's empty one;
- ``key(name)``: travels under another JSON key than its field's name;
- ``REQUIRED``: a record missing it (or holding an odd value) is odd as a whole: left out of a
  list, None where None is allowed (a finding or a counter that cannot be said in full);
- ``FLATTEN``: a record whose keys sit in its parent's object instead of an object of its own;
- ``LOCAL``: stays in the process: never written, never read (its default is kept);
- ``ALONE``: while it is set, the record's JSON is this key alone (``{"unknown": why}``: a record that
  could not be read); left out while it is None;
- ``EMPTY_IS_NONE``: an empty object in this key is read as None (a section not gathered);
- ``doc(text)``: what the field means to a reader of the JSON (its description in the schema).

A value read from another process is believed only within bounds, said in its annotation with
``typing.Annotated`` (at any depth: a list's items, a mapping's keys and values):

- ``Annotated[str, at_most(n)]``: a text is cut at ``n`` characters; ``Annotated[list[T], at_most(n)]``
  (a tuple, set or mapping alike): only its first ``n`` items are read, the rest is not looked at;
- ``Annotated[int, between(low, high)]``: a number outside ``low..high`` is odd, as one of another
  type is; ``above(low)``: a number at or below ``low`` is odd;
- ``Annotated[str, among(*words)]``: a text that is none of ``words`` is odd; ``matching(pattern)``: a
  text in which the regular expression finds nothing is odd.

A record written as a JSON array of its fields in order (a compact row) says so with a class variable
``_json_array = True``; an array of another length is odd.

A record whose JSON form truly differs from its fields says so with two optional hooks: a
``_json_out(self, data)`` method that gets the field-by-field object and returns the JSON one, and a
``_json_in(cls, data)`` classmethod that gets the JSON object and returns the one to read the fields
from (or None: the object is odd as a whole). Both are for the few records that need them (a
computed figure, an older version's words), never a second converter. The keys a ``_json_out`` adds
are declared with their types in ``_json_extra``; one that writes a record in several shapes names the
keys every shape holds in ``_json_always``. The report's schema is made of these declarations
(:mod:`parinfo.records.schema`).

Only the edges call this module: ``--json``, the fleet's rows, a report read back, the schema. The
annotations are resolved once per class, at its first conversion (``typing.get_type_hints``), so
records that never travel cost nothing at start-up.

This module writes; the field metadata and bounds are :mod:`parinfo.records.field_marks`'s, the reading
:mod:`parinfo.records.reading`'s (its errors' words :mod:`parinfo.records.reading_errors`'s); it names them all.
"""
from __future__ import annotations

import enum
import json
import math
from collections.abc import Mapping
from typing import Any

from parinfo.records.field_marks import (
    ALONE,
    EMPTY_IS_NONE,
    FIELDS,
    FLATTEN,
    LOCAL,
    MAX_COUNT,
    OMIT_EMPTY,
    OMIT_NONE,
    REQUIRED,
    SIZED,
    Bound,
    Count,
    above,
    among,
    at_most,
    between,
    doc,
    fields as record_fields,
    key,
    matching,
)
from parinfo.records.reading import load
from parinfo.records.source import Source
from parinfo.records.unknown import Unknown

__all__ = ["ALONE", "EMPTY_IS_NONE", "FLATTEN", "LOCAL", "MAX_COUNT", "OMIT_EMPTY", "OMIT_NONE", "REQUIRED", "Bound",
           "Count", "above", "among", "at_most", "between", "doc", "dump", "dumps", "key", "load", "matching"]

_PLAIN = frozenset({str, int, float, bool, type(None)})


def dump(value: Any) -> Any:
    """``value`` as JSON-ready data (records field by field, honouring their metadata and hooks)."""
    cls = type(value)
    if cls in _PLAIN:
        return value
    if cls is Source:
        return value.to_json()
    if cls is Unknown:
        return str(value)
    if isinstance(value, enum.Enum):
        return value.value
    fields = FIELDS.get(cls) or (record_fields(cls) if hasattr(cls, "__dataclass_fields__") else None)
    if fields is not None:
        if getattr(cls, "_json_array", False):
            return [dump(getattr(value, name)) for name, f in fields if not f.metadata.get("local")]
        out: dict[str, Any] = {}
        for name, f in fields:
            item = getattr(value, name)
            meta = f.metadata
            if meta:
                if meta.get("local") or (item is None and (meta.get("omit_none") or meta.get("alone"))):
                    continue
                if meta.get("alone"):
                    out = {meta.get("key", name): dump(item)}
                    break
                if meta.get("omit_empty") and (item is None or (isinstance(item, SIZED) and not item)):
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
