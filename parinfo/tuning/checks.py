"""Checking a tune's count options (``--min``, ``--repeats``, ``--size``...): one line naming the option.

Shared by the options (:mod:`parinfo.tuning.options`) and the built-in workloads
(:mod:`parinfo.tuning.workloads`), which check their own ``--size``.
"""
from __future__ import annotations

from typing import Any

from parinfo.errors import UsageError


def check_int(name: str, value: Any, lo: int = 1) -> int:
    """``value`` as a count of at least ``lo``; UsageError naming the option otherwise."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"{name} must be an integer, got {value!r}")
    if value < lo:
        raise UsageError(f"{name} must be at least {lo}, got {value}")
    return value
