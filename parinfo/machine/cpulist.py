"""The kernel's CPU list syntax ("0-3,8"), read and written in one place."""
from __future__ import annotations

from collections.abc import Iterable

MAX_CPU_ID = 65535  # far above any kernel's NR_CPUS; guards against "0-999999999"


def parse_cpu_list(text: str) -> list[int]:
    """Parse "0-3,8" into [0, 1, 2, 3, 8]; raise ValueError naming the bad part."""
    if not text.strip():
        raise ValueError("empty CPU list")
    cpus: set[int] = set()
    for part in (p.strip() for p in text.split(",")):
        lo, sep, hi = part.partition("-")
        try:
            a = int(lo)
            b = int(hi) if sep else a
        except ValueError:
            raise ValueError(f"{part!r} is not a CPU number or range like 0-3") from None
        if a < 0 or b < 0:
            raise ValueError(f"{part!r}: CPU numbers start at 0")
        if b < a:
            raise ValueError(f"{part!r}: range runs backwards")
        if b > MAX_CPU_ID:
            raise ValueError(f"{part!r}: CPU number is too large")
        cpus.update(range(a, b + 1))
    return sorted(cpus)


def format_cpu_list(cpus: Iterable[int] | None) -> str:
    """[0, 1, 2, 5] -> "0-2,5"; an empty or missing list -> "none"."""
    ordered = sorted(set(cpus or ()))
    if not ordered:
        return "none"
    out: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        out.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(out)
