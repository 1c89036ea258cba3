"""A pod's CPU request read back from the weight the kubelet gave its cgroup.

The kubelet turns a request of ``m`` millicores into cgroup v1 ``cpu.shares`` by ``MilliCPUToShares``
(``m * 1024 // 1000``, at least 2: a container without a request gets 2, at most 262144), and on
cgroup v2 turns those shares into ``cpu.weight`` by ``1 + ((shares - 2) * 9999) // 262142``. Both
round down, so a weight names a range of requests: shares lose less than a millicore (every request
above 2m comes back exactly), a weight about 26 millicores. :func:`request_of` gives that range and,
as the request, the roundest number of millicores in it (a multiple of 1000, else 500, 250, 100, 50,
25, 10, 5, 1): requests are written as round numbers, so a 500m request comes back as 500m from the
weight 20, which any request from 490m to 514m would give. An OCI runtime that turns shares into
a weight by another formula (newer runc and crun do for the container's cgroup) gives a weight
this does not invert; the range is then the kubelet's reading, not the runtime's. The most shares
(262144, and the weight 10000) stand for 256000m or more and read as 256000m.
"""
from __future__ import annotations

MIN_SHARES, MAX_SHARES = 2, 262144
MIN_WEIGHT, MAX_WEIGHT = 1, 10000
_STEPS = (1000, 500, 250, 100, 50, 25, 10, 5, 1)


def shares_of(millicores: int) -> int:
    """The cpu.shares the kubelet writes for a request of ``millicores`` (MilliCPUToShares)."""
    return min(MAX_SHARES, max(MIN_SHARES, millicores * 1024 // 1000))


def weight_of(shares: int) -> int:
    """The cpu.weight the kubelet writes for ``shares`` on cgroup v2."""
    return 1 + ((shares - 2) * 9999) // 262142


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _shares_range(weight: int) -> tuple[int, int]:
    """The shares that give ``weight``: the least, and the last before the next weight's least."""
    def least(w: int) -> int:
        return 2 + _ceil_div((w - 1) * 262142, 9999)
    return least(weight), min(MAX_SHARES, least(weight + 1) - 1)


def _millicores_range(low: int, high: int) -> tuple[int, int]:
    """The requests whose shares lie from ``low`` to ``high`` (0 for the kubelet's minimum, 2)."""
    first = 0 if low <= MIN_SHARES else _ceil_div(low * 1000, 1024)
    return first, _ceil_div((high + 1) * 1000, 1024) - 1


def roundest(low: int, high: int) -> int:
    """The roundest whole number from ``low`` to ``high`` (``low`` when the range is empty)."""
    for step in _STEPS:
        candidate = _ceil_div(low, step) * step
        if candidate <= high:
            return candidate
    return low


def request_of(value: int, weight: bool) -> tuple[int, int, int] | None:
    """(the request in millicores, the least and the most it may be) for cgroup v1 ``cpu.shares``
    (``weight`` False) or v2 ``cpu.weight`` (True) ``value``; None when the kubelet never writes
    it (outside 2..262144 shares, 1..10000 weight). The request is rounded (see the module)."""
    if weight:
        if not MIN_WEIGHT <= value <= MAX_WEIGHT:
            return None
        low, high = _millicores_range(*_shares_range(value))
    else:
        if not MIN_SHARES <= value <= MAX_SHARES:
            return None
        low, high = _millicores_range(value, value)
    return roundest(low, high), low, max(low, high)
