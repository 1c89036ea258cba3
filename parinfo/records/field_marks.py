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
#: Field metadata: while the field is set, the record's JSON is this key alone (a record that could not
#: be read says only why); left out while it is None.
ALONE: Mapping[str, Any] = types.MappingProxyType({"alone": True})
#: Field metadata: an empty JSON object in this field is read as None (a section not gathered).
EMPTY_IS_NONE: Mapping[str, Any] = types.MappingProxyType({"empty_none": True})


def key(name: str) -> Mapping[str, Any]:
    """Field metadata: the field travels under the JSON key ``name``."""
    return types.MappingProxyType({"key": name})


def doc(text: str) -> Mapping[str, Any]:
    """Field metadata: what the field means to a reader of the JSON (its ``description`` in the schema)."""
    return types.MappingProxyType({"doc": text})


class Bound:
    """A bound on a value read (the metadata of ``typing.Annotated``; made by :func:`at_most`,
    :func:`between`, :func:`above`, :func:`among` or :func:`matching`)."""

    __slots__ = ("choices", "high", "low", "low_open", "most", "pattern")

    def __init__(self, most: int | None = None, low: float | None = None, high: float | None = None, *,
                 low_open: bool = False, choices: tuple[str, ...] | None = None, pattern: str | None = None) -> None:
        self.most, self.low, self.high, self.low_open = most, low, high, low_open
        self.choices, self.pattern = choices, pattern

    def __repr__(self) -> str:
        return (f"Bound(most={self.most}, low={self.low}, high={self.high}, low_open={self.low_open}, "
                f"choices={self.choices}, pattern={self.pattern})")

    def _refuses(self, got: Any) -> str | None:
        """Why ``got`` is outside this bound (a number out of range, a text not among its choices or
        not matching its pattern), or None."""
        if isinstance(got, (int, float)) and not isinstance(got, bool):
            low, high = self.low, self.high
            if (low is not None and (got <= low if self.low_open else got < low)) or (high is not None and got > high):
                return f"{got} is out of its bounds {'(' if self.low_open else ''}{low}..{high}"
        elif isinstance(got, str):
            if self.choices is not None and got not in self.choices:
                return f"{got!r} is not one of {', '.join(map(repr, self.choices))}"
            if self.pattern is not None:
                import re  # only where a record reads a text with a pattern

                if re.search(self.pattern, got) is None:
                    return f"{got!r} does not match {self.pattern}"
        return None

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
        """What was read, cut (a text) or refused (out of bounds: NOTHING)."""
        if self._refuses(got) is not None:
            return NOTHING
        if isinstance(got, str) and self.most is not None:
            return got[:self.most]
        return got

    def check(self, got: Any) -> None:
        """A strict reading's check: a RecordError for what the lenient one cuts or refuses."""
        if self.most is not None and isinstance(got, SIZED) and len(got) > self.most:
            raise RecordError(f"{len(got)} long, more than its bound {self.most}")
        why = self._refuses(got)
        if why is not None:
            raise RecordError(why)


def at_most(n: int) -> Bound:
    """``Annotated`` metadata: a text is cut at ``n`` characters; a list, tuple, set or mapping is read
    from its first ``n`` items."""
    return Bound(most=n)


def between(low: float | None = None, high: float | None = None) -> Bound:
    """``Annotated`` metadata: a number below ``low`` or above ``high`` is odd."""
    return Bound(low=low, high=high)


def above(low: float) -> Bound:
    """``Annotated`` metadata: a number at or below ``low`` is odd."""
    return Bound(low=low, low_open=True)


def among(*choices: str) -> Bound:
    """``Annotated`` metadata: a text that is none of ``choices`` is odd."""
    return Bound(choices=choices)


def matching(pattern: str) -> Bound:
    """``Annotated`` metadata: a text in which the regular expression ``pattern`` finds nothing is odd (as
    JSON Schema's ``pattern``: anchor it with ``^...$`` to match the whole)."""
    return Bound(pattern=pattern)


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
