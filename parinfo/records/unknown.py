"""A fact parinfo could not read, as a value: :class:`Unknown` carries the reason, and its words are
"unknown (reason)" only where it is shown.

A reader returns ``X | Unknown`` instead of ``X | str``, so a caller decides with ``isinstance``,
never by reading parinfo's own English.
"""
from __future__ import annotations

from typing import TypeVar

_T = TypeVar("_T")


def describe(exc: BaseException) -> str:
    """"ExceptionType: message" (or just the type when the message is empty)."""
    detail = str(exc).strip()
    return f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__


def because(exc: BaseException) -> str:
    """"unknown (ExceptionType: message)" for an error met while reading a fact."""
    return f"unknown ({describe(exc)})"


def in_words(value: _T | Unknown) -> _T | str:
    """``value`` for a record field that keeps the report's words: an Unknown as "unknown (why)",
    anything else as it is."""
    return str(value) if isinstance(value, Unknown) else value


def unknown(why: str) -> str:
    """The words of a value that could not be read: ``unknown (why)``."""
    return f"unknown ({why})"


class Unknown:
    """A value that could not be read, and why (``why`` is the reason alone, without "unknown")."""

    __slots__ = ("why",)

    def __init__(self, why: str) -> None:
        self.why = why

    @classmethod
    def of(cls, exc: BaseException) -> Unknown:
        """The unknown value left by an error met while reading it."""
        return cls(describe(exc))

    @classmethod
    def from_words(cls, text: str) -> Unknown:
        """The value whose words a report carries, read back at the JSON edge (the one place that
        reads them): "unknown (why)" is Unknown(why); other text (another program's) is the reason."""
        if text.startswith("unknown (") and text.endswith(")"):
            return cls(text[len("unknown ("):-1])
        return cls(text)

    def __str__(self) -> str:
        return f"unknown ({self.why})"

    def __repr__(self) -> str:
        return f"Unknown({self.why!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Unknown) and other.why == self.why

    def __hash__(self) -> int:
        return hash(("Unknown", self.why))
