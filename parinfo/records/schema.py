"""The JSON Schema of a record's JSON, generated from its declaration: the field annotations (types,
``| None``, lists, mappings, nested records, ``Literal`` and enums, the bounds of ``Annotated``), the
field metadata of :mod:`parinfo.records.field_marks` (keys, omitted and flattened fields, ``doc``)
and what a record's class says of its hooks (:mod:`parinfo.records.convert`): the keys its
``_json_out`` adds (``_json_extra``, with their types) and, for a hook that writes a record in
several shapes, the keys every shape holds (``_json_always``).

The schema says what :func:`~parinfo.records.convert.load` reads strictly: a key it does not know is
refused (``additionalProperties: false``), a bound is a ``minimum``, ``maximum``, ``maxLength`` or
``maxItems``. A key is required when the record always writes it. Each record is a ``$defs`` entry
named by its class. Nothing here runs at start-up: only the schema's writer and its test import it.
"""
from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Mapping
from typing import Any

from parinfo.records.field_marks import Bound, fields as record_fields
from parinfo.records.reading import _hints, _record_type
from parinfo.records.unknown import Unknown

#: A JSON Schema object (the JSON edge: what is written to the schema file).
Schema = dict[str, Any]

_PLAIN = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}


class SchemaMaker:
    """Makes the schema of one top record, gathering the records it holds in ``defs``."""

    def __init__(self) -> None:
        self.defs: dict[str, Schema] = {}
        self._named: dict[str, type] = {}

    def top(self, cls: type, **head: Any) -> Schema:
        """The schema of ``cls`` as a whole document: ``head`` ($id, title, description) first, then the
        record's own object, then the ``$defs`` of the records inside it."""
        body = self.record(cls)
        out = {"$schema": "https://json-schema.org/draft/2020-12/schema", **head, **body}
        if self.defs:
            out["$defs"] = dict(sorted(self.defs.items()))
        return out

    def hint(self, hint: Any) -> Schema:
        """The schema of a value of type ``hint``."""
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        if hint in _PLAIN:
            return {"type": _PLAIN[hint]}
        if hint is Any or hint is object:
            return {}
        if origin is typing.Annotated:
            return self._bounded(args[0], [b for b in args[1:] if isinstance(b, Bound)])
        if origin in (typing.Union, types.UnionType):
            return self._union(args)
        if origin is typing.Literal:
            return {"const": args[0]} if len(args) == 1 else {"enum": list(args)}
        if origin in (list, tuple, set, frozenset) or hint in (list, tuple):
            return self._items(origin, args)
        if origin in (dict, Mapping) or hint is dict:
            return self._mapping(args)
        if isinstance(hint, type) and issubclass(hint, enum.Enum):
            return {"enum": [m.value for m in hint]}
        if hint is Unknown:  # written as its words
            return {"type": "string", "pattern": "^unknown \\("}
        if isinstance(hint, type) and _record_type(hint) is hint:
            return {"$ref": f"#/$defs/{self._define(hint)}"}
        raise TypeError(f"no JSON Schema for {hint!r}")

    def record(self, cls: type) -> Schema:
        """The object (or, for a ``_json_array`` record, the array) a record is written as."""
        properties, required = self._properties(cls)
        if getattr(cls, "_json_array", False):
            items = list(properties.values())
            return {"type": "array", "prefixItems": items, "minItems": len(items), "maxItems": len(items)}
        always = getattr(cls, "_json_always", None)
        if always is not None:
            required = [k for k in required if k in always]
        alone = [meta.get("key", name) for name, f in record_fields(cls) if (meta := f.metadata).get("alone")]
        if alone:  # its JSON is that key alone while it is set: two shapes
            alone_key = alone[0]
            rest = {k: v for k, v in properties.items() if k != alone_key}
            return {"anyOf": [_object({alone_key: properties[alone_key]}, [alone_key]), _object(rest, required)]}
        return _object(properties, required)

    def _properties(self, cls: type) -> tuple[Schema, list[str]]:
        """The properties of a record's object, in the order it writes them, and the keys always written."""
        hints = _hints(cls)
        properties: Schema = {}
        required: list[str] = []
        for name, f in record_fields(cls):
            meta = f.metadata
            if meta.get("local"):
                continue
            hint = hints.get(name, Any)
            if meta.get("flatten"):
                inner = _record_type(hint)
                if inner is None:
                    raise TypeError(f"{cls.__name__}.{name}: only a record is flattened")
                more, always = self._properties(inner)
                properties.update(more)
                required += always
                continue
            json_key = meta.get("key", name)
            shown = self.hint(hint)
            if meta.get("empty_none"):
                shown = {"anyOf": [*shown.get("anyOf", [shown]), {"type": "object", "maxProperties": 0}]}
            if "doc" in meta:
                shown = {**shown, "description": meta["doc"]}
            properties[json_key] = shown
            if not (meta.get("omit_none") or meta.get("omit_empty") or meta.get("alone")):
                required.append(json_key)
        for json_key, hint in dict(getattr(cls, "_json_extra", {})).items():
            properties[json_key] = self.hint(hint)
            required.append(json_key)
        return properties, required

    def _define(self, cls: type) -> str:
        name = cls.__name__
        known = self._named.get(name)
        if known is None:
            self._named[name] = cls
            self.defs[name] = {}  # taken before its fields are read: a record may hold itself
            self.defs[name] = self.record(cls)
        elif known is not cls:
            raise TypeError(f"two records named {name}: {known.__module__} and {cls.__module__}")
        return name

    def _union(self, args: tuple[Any, ...]) -> Schema:
        members = [self.hint(a) for a in args]
        if all(set(m) == {"type"} for m in members):
            kinds: list[str] = []
            for m in members:
                kinds += m["type"] if isinstance(m["type"], list) else [m["type"]]
            return {"type": kinds}
        null = {"type": "null"}
        if null in members and len(members) == 2:
            other = next(m for m in members if m != null)
            if isinstance(other.get("type"), str) and "$ref" not in other:
                merged = {**other, "type": [other["type"], "null"]}
                if "enum" in merged:
                    merged["enum"] = [*merged["enum"], None]
                return merged
        return {"anyOf": members}

    def _items(self, origin: Any, args: tuple[Any, ...]) -> Schema:
        if origin is tuple and args and args[-1] is not Ellipsis:  # a fixed-length tuple
            return {"type": "array", "prefixItems": [self.hint(a) for a in args],
                    "minItems": len(args), "maxItems": len(args)}
        return {"type": "array", "items": self.hint(args[0] if args else Any)}

    def _mapping(self, args: tuple[Any, ...]) -> Schema:
        out: Schema = {"type": "object"}
        if len(args) == 2:
            names = self.hint(args[0])
            if set(names) - {"type"}:
                out["propertyNames"] = names
            out["additionalProperties"] = self.hint(args[1])
        return out

    def _bounded(self, hint: Any, bounds: list[Bound]) -> Schema:
        out = self.hint(hint)
        target = out
        if "anyOf" in out:  # a bound applies to the member it can bound
            target = next((m for m in out["anyOf"] if m.get("type") != "null"), out)
        kind = target.get("type")
        kind = next((k for k in kind if k != "null"), None) if isinstance(kind, list) else kind
        for b in bounds:
            if b.most is not None:
                word = {"string": "maxLength", "array": "maxItems", "object": "maxProperties"}.get(str(kind))
                if word is None:
                    raise TypeError(f"at_most({b.most}) bounds a text, list or mapping, not {hint!r}")
                target[word] = b.most
            if b.low is not None:
                target["exclusiveMinimum" if b.low_open else "minimum"] = b.low
            if b.high is not None:
                target["maximum"] = b.high
            if b.choices is not None:
                target["enum"] = [*b.choices, *([None] if "null" in (target.get("type") or ()) else [])]
            if b.pattern is not None:
                target["pattern"] = b.pattern
        return out


def _object(properties: Schema, required: list[str]) -> Schema:
    """A JSON object of these properties and no other, the ``required`` ones always there."""
    out: Schema = {"type": "object"}
    if required:
        out["required"] = required
    out["properties"] = properties
    out["additionalProperties"] = False
    return out


def record_schema(cls: type, **head: Any) -> Schema:
    """The JSON Schema (draft 2020-12) of ``cls``'s JSON, ``head`` ($id, title, description) first."""
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a record")
    return SchemaMaker().top(cls, **head)
