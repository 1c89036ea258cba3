"""Advisories: library versions known to give wrong results under concurrent callers, one table.

Each :class:`Advisory` is a known-bad version range of one library (its registry name: the
``library`` of a pool row), where it matters the copy's owner (numpy's wheel ships its own OpenBLAS,
fixed by a numpy release), the threading layer and the machine's architecture, the trigger that
makes it bite (:class:`Trigger`), the upstream reference, the first fixed version and the exact
upgrade that brings it. Ranges are half-open, ``[first_bad, fixed)``, compared as versions
(:func:`version_key`: "0.3.31.188.0" > "0.3.31" > "0.3.4"), never as strings; ``first_bad`` None
means every earlier version. A scipy-openblas build (numpy's and scipy's wheels) reports its own
four- or five-part version ("0.3.30.0.7"), so a row about numpy's copy is bounded by the build
that numpy release ships.

The rule that reads this table over a report is
:func:`parinfo.diagnostics.advisory_rules.known_bad_versions`.

Keeping it current: a row is added only with an upstream source for each fact (the issue or pull
request that shows the bug, the release notes or build pin that ship the fix); a fact that cannot
be confirmed keeps the row out. When upstream ships a fix for a row, set ``fixed`` and ``upgrade``
from the release notes (for numpy's copy: the numpy release whose wheels pin the fixed
scipy-openblas build); tests/test_advisories.py checks every row's shape, and its real-wheel test
checks the numpy#29391 row against numpy 2.3.0's wheel.
"""
from __future__ import annotations

import enum
import re

from parinfo.process import libraries as reg
from parinfo.records.record import record


class Trigger(str, enum.Enum):
    """What makes a known-bad version give wrong results, as the report can tell it."""

    CALLERS = "two or more Python threads calling it at once"
    OWN_THREADS = "its own pool running more than one thread"

    def __str__(self) -> str:
        return self.value


@record(frozen=True)
class Advisory:
    """One known-bad version range of a library, with its citation, its fix and what triggers it.

    ``owners``: the packages whose copy the row is about (a pool row's ``owner``), empty for any;
    ``not_owners``: owners another row covers. ``layer`` and ``arch``: the threading layer (pool
    row) and machine architecture (``uname -m``) it needs, None for any. ``min_threads``: the
    library's own count from which the trigger shows (numpy#29391 needs 3 OpenBLAS threads).
    ``references``: the upstream issue first, then the pull requests, build pins and release notes
    about it and its fix (numpy#30816's OpenBLAS PR#5642 was closed and its twin PR#5643 reverted by
    PR#5690: cited as the issue cites it, not as the fix)."""

    library: str
    first_bad: str | None
    fixed: str
    trigger: Trigger
    what: str
    references: tuple[str, ...]
    upgrade: str
    owners: tuple[str, ...] = ()
    not_owners: tuple[str, ...] = ()
    layer: str | None = None
    arch: str | None = None
    min_threads: int = 2

    @property
    def reference(self) -> str:
        return self.references[0]

    def covers(self, version: str | None, owner: str | None, layer: str | None, arch: str | None) -> bool:
        """Whether a copy of version ``version`` shipped by ``owner``, built with ``layer``, on a machine
        of ``arch`` is in this row (an unknown layer or arch does not rule it out; an unknown version does)."""
        key = version_key(version)
        if key is None or (self.owners and owner not in self.owners) or owner in self.not_owners:
            return False
        if self.layer is not None and layer is not None and layer != self.layer:
            return False
        if self.arch is not None and arch is not None and arch != self.arch:
            return False
        low = version_key(self.first_bad)
        high = version_key(self.fixed)
        return (low is None or key >= low) and high is not None and key < high


_NUMBERS = re.compile(r"\d+(?:\.\d+)*")


def version_key(version: str | None) -> tuple[int, ...] | None:
    """The numeric parts of a version for comparing ("0.3.30.0.7" -> (0, 3, 30, 0, 7); "0.3.29.dev"
    -> (0, 3, 29)), trailing zeros dropped so that "0.3.31.0" equals "0.3.31"; None when it has none."""
    if not version:
        return None
    found = _NUMBERS.search(version)
    if found is None:
        return None
    parts = [int(p) for p in found.group().split(".")]
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


_OPENBLAS_ELSEWHERE = "upgrade the package that ships this copy to one built with OpenBLAS {v} or later"
#: The stopgap for the rows that need 3 or more OpenBLAS threads: its own variable, from the registry.
_AT_MOST_2 = f"until then {reg.family(reg.OpenBLAS).precedence[0]}=2 or less avoids it"

#: Every advisory, newest bug first. Rows about numpy's own copy come before the generic row for
#: the same bug, which names numpy in ``not_owners``. The lock-sharding rows (numpy#31618,
#: OpenBLAS#5836) start at 0.3.4, the release that first serialized level-3 calls from several
#: callers (its release notes) with the per-file locks PR#5838 unified; before it the numpy#11046
#: row holds.
ADVISORIES: tuple[Advisory, ...] = (
    Advisory("openblas", "0.3.4", "0.3.33.112.0", Trigger.CALLERS,
             "np.dot and matmul on non-contiguous arrays can return another thread's numbers when threads "
             "call them at once (seen on a free-threaded 3.14t)",
             ("numpy#31618", "numpy PR#31704", "OpenBLAS PR#5838"),
             "pip install 'numpy>=2.5.3' (its wheels ship OpenBLAS 0.3.34, which has the fix; numpy 2.5 needs "
             "Python 3.12 or later), or call BLAS from one thread at a time",
             owners=("numpy",)),
    Advisory("openblas", "0.3.4", "0.3.34", Trigger.CALLERS,
             "level-3 BLAS calls of different kernels made at once from several threads each take their own "
             "lock, so they overlap and can corrupt each other's results",
             ("OpenBLAS#5836", "OpenBLAS PR#5838", "OpenBLAS 0.3.34 release notes"),
             _OPENBLAS_ELSEWHERE.format(v="0.3.34"), not_owners=("numpy",)),
    Advisory("openblas", None, "0.3.34", Trigger.CALLERS,
             "data races in the thread server and the level-3 driver when threads call it at once with more "
             "than 2 OpenBLAS threads (found with ThreadSanitizer after PR#5838)",
             ("OpenBLAS PR#5844", "OpenBLAS 0.3.34 release notes"),
             "for numpy's copy: pip install 'numpy>=2.5.3' (its wheels ship OpenBLAS 0.3.34); else "
             + _OPENBLAS_ELSEWHERE.format(v="0.3.34"), min_threads=3),
    Advisory("openblas", "0.3.31", "0.3.31.188.0", Trigger.OWN_THREADS,
             "multithreaded SGEMM returns wrong results on Arm (found on Neoverse V2)",
             ("numpy#30816", "OpenBLAS PR#5642", "numpy PR#30973", "numpy-release PR#38", "numpy 2.4.4 release notes"),
             "pip install 'numpy>=2.4.4' (its wheels ship scipy-openblas 0.3.31.188.0, which has the fix)",
             owners=("numpy",), arch="aarch64"),
    Advisory("openblas", "0.3.31", "0.3.32", Trigger.OWN_THREADS,
             "multithreaded SGEMM returns wrong results on Arm (found on Neoverse V2)",
             ("numpy#30816", "OpenBLAS PR#5642", "numpy-release PR#38 (the fix is v0.3.31-188, before 0.3.32)"),
             _OPENBLAS_ELSEWHERE.format(v="0.3.32"), not_owners=("numpy",), arch="aarch64"),
    Advisory("openblas", "0.3.28", "0.3.30.0.7", Trigger.CALLERS,
             "np.dot with a transposed argument can return another thread's result when threads call it at "
             "once with 3 or more OpenBLAS threads",
             ("numpy#29391", "numpy PR#30049", "numpy PR#30129", "numpy-release PR#22"),
             "pip install 'numpy>=2.3.5' (its wheels ship scipy-openblas 0.3.30.0.7, patched for this); "
             + _AT_MOST_2,
             owners=("numpy",), min_threads=3),
    Advisory("openblas", "0.3.28", "0.3.31", Trigger.CALLERS,
             "GEMM partitioning from OpenBLAS PR#4741 races between threads that call at once with 3 or more "
             "OpenBLAS threads and can return another thread's result",
             ("numpy#29391", "OpenBLAS PR#5516", "OpenBLAS 0.3.31 release notes"),
             _OPENBLAS_ELSEWHERE.format(v="0.3.31") + "; " + _AT_MOST_2,
             not_owners=("numpy",), min_threads=3),
    Advisory("openblas", None, "0.3.7", Trigger.CALLERS,
             "a build without threading (USE_THREAD=0) called from several threads at once returns wrong "
             "results: 0.3.7 added USE_LOCKING=1 for such builds",
             ("OpenBLAS#2126", "OpenBLAS#1755", "OpenBLAS 0.3.7 release notes"),
             "use OpenBLAS 0.3.7 or later built with USE_LOCKING=1 (or a threaded build), or call it from one "
             "thread at a time", layer="disabled", min_threads=1),
    Advisory("openblas", None, "0.3.4", Trigger.CALLERS,
             "np.dot (dgemm) from several threads at once returns wrong results: level-3 calls from several "
             "callers were not serialized before 0.3.4",
             ("numpy#11046", "OpenBLAS#1844", "OpenBLAS 0.3.4 release notes"),
             "pip install -U numpy (numpy 2.0 and later ship OpenBLAS 0.3.27 or later: numpy PR#27144), or "
             "upgrade this copy's package to one built with OpenBLAS 0.3.4 or later", layer="pthreads"),
    Advisory("openblas", None, "0.3.0", Trigger.CALLERS,
             "an OpenMP build called from several threads at once races in its thread server "
             "(blas_server_omp.c) and can return wrong results",
             ("OpenBLAS PR#1536", "OpenBLAS 0.3.0 release notes"),
             _OPENBLAS_ELSEWHERE.format(v="0.3.0"), layer="openmp"),
)


def for_library(library: str) -> tuple[Advisory, ...]:
    """The advisories of one library (a registry name, as a pool row's ``library``)."""
    return tuple(a for a in ADVISORIES if a.library == library)
