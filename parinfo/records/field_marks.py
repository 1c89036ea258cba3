"""What a record's fields say about their JSON, for :mod:`parinfo.records.convert`: the field metadata
(:data:`OMIT_NONE`, :data:`REQUIRED`, :func:`key`...), the bounds of ``typing.Annotated``
(:func:`at_most`, :func:`between`, :data:`Count`), and a record's fields, once per class.
"""
from __future__ import annotations

import dataclasses
import itertools
import types
from collections.abc import Mapping
from typing import Annotated, Any

from parinfo.errors import RecordError

#: What a reader gives for a value it does not accept.
NOTHING = object()


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
        """What was read, cut (a text) or refused (a number out of bounds: NOTHING)."""
        if isinstance(got, str):
            return got if self.most is None else got[:self.most]
        number = isinstance(got, (int, float)) and not isinstance(got, bool)
        if number and ((self.low is not None and got < self.low) or (self.high is not None and got > self.high)):
            return NOTHING
        return got

    def check(self, got: Any) -> None:
        """A strict reading's check: a RecordError for what the lenient one cuts or refuses."""
        if self.most is not None and isinstance(got, SIZED) and len(got) > self.most:
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


#: The largest thread count believed from another process (threads of one pool).
MAX_COUNT = 1 << 16
#: A count of threads read from another process: 1 to MAX_COUNT, else unknown.
Count = Annotated[int, between(1, MAX_COUNT)]
SIZED = (str, list, tuple, dict, set, frozenset)


FIELDS: dict[type, tuple[tuple[str, dataclasses.Field[Any]], ...]] = {}


def fields(cls: type) -> tuple[tuple[str, dataclasses.Field[Any]], ...]:
    """(name, field) of a record's fields, ClassVar and InitVar pseudo-fields left out; once per class."""
    got = FIELDS[cls] = tuple((f.name, f) for f in dataclasses.fields(cls))
    return got
