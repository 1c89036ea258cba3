"""Parsers that turn option values into numbers through :mod:`parinfo.machine.checks`, for typer options
and the plain command-line reading (parinfo.cli.options).

typer's own ``int`` and ``float`` take whatever Python's ``int()`` and ``float()`` take: "٣" (an
Arabic-Indic three), "1_000", " 5 ", "nan", "inf". Options declared with these parsers take ASCII
digits only, bounded in length and range, and a bad value is the checks' one line (exit 2).
parinfo.machine.checks is imported on the first value checked, not with this module: declaring an option
costs a plain ``parinfo show`` nothing.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: The widest count any option takes here; the command's own checks then judge the value.
MAX_COUNT = 1_000_000


def whole(option: str, low: int = 0, high: int = MAX_COUNT) -> Callable[[Any], int]:
    """A parser of ``option``'s value as a whole number from ``low`` to ``high``."""
    def integer(value: Any) -> int:
        import parinfo.machine.checks as checks

        return checks.integer(value, option, low, high)

    return integer


def seconds(option: str, low: float = 0.0, high: float = 3600.0) -> Callable[[Any], float]:
    """A parser of ``option``'s value as seconds from ``low`` to ``high``."""
    def seconds(value: Any) -> float:
        import parinfo.machine.checks as checks

        return checks.seconds(value, option, low, high)

    return seconds


def pid(value: Any) -> int:
    """A parser of ``--pid``."""
    import parinfo.machine.checks as checks

    return checks.pid(value, "--pid")


def watch_interval(value: Any) -> float:
    """A parser of ``watch``'s ``--interval``: seconds within the sampler's own bounds."""
    from parinfo.watching.sample import check_interval

    return check_interval(value, "--interval")


def attach_timeout(value: Any) -> float:
    """A parser of ``--timeout`` (attach): seconds from 0.1 to the most an attach may wait."""
    import parinfo.machine.checks as checks
    from parinfo.outside.attach import MAX_TIMEOUT

    return checks.seconds(value, "--timeout", 0.1, MAX_TIMEOUT)
