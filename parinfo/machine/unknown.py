"""The one wording of a fact parinfo could not read: "unknown (reason)"."""
from __future__ import annotations


def describe(exc: BaseException) -> str:
    """"ExceptionType: message" (or just the type when the message is empty)."""
    detail = str(exc).strip()
    return f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__


def because(exc: BaseException) -> str:
    """"unknown (ExceptionType: message)" for an error met while reading a fact."""
    return f"unknown ({describe(exc)})"


def unknown(why: str) -> str:
    """The words of a value that could not be read: ``unknown (why)``."""
    return f"unknown ({why})"
