"""A strict reading's errors, in words, for :mod:`parinfo.records.reading`: a hint named (``int or null``),
the key a wrong one may mean, a value of the wrong type, a union none of whose members takes a value,
a source that is not one; and the shape of a hint (its origin and arguments), worked out once.
"""
from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from typing import Any

from parinfo.errors import RecordError
from parinfo.records.field_marks import NOTHING
from parinfo.records.source import Kind, Source

SHAPES: dict[Any, tuple[Any, tuple[Any, ...]]] = {}


def shape(hint: Any) -> tuple[Any, tuple[Any, ...]]:
    """(origin, args) of a hint, worked out once per hint."""
    try:
        return SHAPES[hint]
    except KeyError:
        got = SHAPES[hint] = (typing.get_origin(hint), typing.get_args(hint))
        return got
    except TypeError:  # an unhashable hint
        return typing.get_origin(hint), typing.get_args(hint)


def meant(name: str, known: frozenset[str]) -> str:
    """`` (did you mean KEY?)`` for the known key closest to ``name``, or ""."""
    import difflib  # only when an error is said: 2 ms at start-up otherwise

    close = difflib.get_close_matches(name, sorted(known), n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def refuse(strict: bool, why: str) -> Any:
    """NOTHING, or, ``strict``, the error ``why``."""
    if strict:
        raise RecordError(why)
    return NOTHING


def wrong(hint: Any, value: Any) -> Any:
    """A strict reading's error for a value of the wrong type (a lenient one's is NOTHING, given
    where it is found: no call on that path)."""
    shown = "null" if value is None else type(value).__name__
    raise RecordError(f"expected {named(hint)}, not {shown}", of_type=True)


def named(hint: Any) -> str:
    """A hint in words for an error: ``int``, ``list``, ``int or null``."""
    origin, args = shape(hint)
    if origin is typing.Annotated:
        return named(args[0])
    if origin in (typing.Union, types.UnionType):
        return " or ".join("null" if a is type(None) else named(a) for a in args)
    if origin is not None:
        return "a JSON object" if origin in (dict, Mapping) else "a JSON array"
    if isinstance(hint, type) and hasattr(hint, "__dataclass_fields__"):
        return f"{hint.__name__} (an object)"
    return getattr(hint, "__name__", str(hint))


def union_error(hint: Any, errors: list[RecordError], value: Any) -> Any:
    """The error of a value no member of a union takes: that of the member it went furthest into (a
    record's bad key, a refused value), else that of a value of none of its types."""
    deepest = max(errors, key=lambda e: (len(e.parts), not e.of_type))
    if deepest.parts or not deepest.of_type:
        raise deepest
    return wrong(hint, value)


SOURCE_KEYS = frozenset({"kind", "detail", "text", "when"})
SOURCE_KINDS = frozenset(k.value for k in Kind)


def strict_source(value: Any, source: Source | None) -> None:
    """A strict reading's check of a source: the object ``Source.to_json`` writes (or a version 1 text)."""
    if isinstance(value, Mapping):
        odd = [str(k) for k in value if k not in SOURCE_KEYS]
        if odd:
            raise RecordError(f"unknown key{meant(odd[0], SOURCE_KEYS)}", (odd[0],))
        kind = value.get("kind")
        if kind not in SOURCE_KINDS:
            raise RecordError(f"{kind!r} is not a source kind", ("kind",))
    if source is None:
        wrong(Source, value)
