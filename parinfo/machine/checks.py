"""Values a user gives (a CLI argument or an API argument) checked the same way everywhere.

Each check takes the value as given (text from the command line, or whatever an API caller
passed), refuses it with one :class:`BadValue` line (what, the value escaped, why, how to fix), and
returns it converted. The CLI and the Python API call the same checks, so a mistake reads the same
in both and never reaches ``int()``, a resolver or a file walk unchecked:

- numbers are ASCII digits only (``str.isdigit`` also takes "²" and "٣") and bounded in length
  before they are converted (a 5,000-digit string is refused, not handed to ``int``);
- a user must exist (a passwd entry, or a uid that owns a process now);
- a cgroup is normalised and resolved inside the hierarchy parinfo reads (:mod:`parinfo.machine.cgroup`);
- a host is a well-formed IP address or DNS name before any resolver sees it.
"""
from __future__ import annotations

import math
import re
from typing import Any

from parinfo.errors import UsageError
from parinfo.safe_text import shorten

#: The longest text taken anywhere a path or a name is expected (PATH_MAX).
MAX_TEXT = 4096
#: The highest pid Linux can give (PID_MAX_LIMIT on 64-bit).
PID_MAX = 1 << 22
#: The highest uid (uid_t is 32 bits; 2**32 - 1 means "no uid").
UID_MAX = (1 << 32) - 2
#: The longest user name Linux allows (LOGIN_NAME_MAX).
MAX_USER = 256
PORT_RANGE = "the port must be a number from 1 to 65535"

_DECIMAL = re.compile(r"(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]{1,3})?")
_LABEL = re.compile(r"(?!-)[A-Za-z0-9_-]{1,63}(?<!-)")
_SCOPE = re.compile(r"[A-Za-z0-9_.:-]{1,15}")  # an interface name (IFNAMSIZ - 1) or index


class BadValue(UsageError):
    """A value refused by a check: ``what`` (the option or argument) ``value``: ``reason`` (``fix``).

    ``reason`` alone is for callers that say the line in their own words (a cluster address);
    ``out_of_range`` says a number was refused only for lying outside its bounds, not for its form."""

    def __init__(self, what: str, value: Any, reason: str, fix: str, *, out_of_range: bool = False) -> None:
        self.what, self.value, self.reason, self.fix = what, value, reason, fix
        self.out_of_range = out_of_range
        super().__init__(f"{what} {shown(value)}: {reason} ({fix})")


def _out_of_range(what: str, value: Any, bounds: str, fix: str) -> BadValue:
    """The refusal of a well-formed number outside ``bounds`` ("1-65535")."""
    return BadValue(what, value, f"out of range ({bounds})", fix, out_of_range=True)


def shown(value: Any, limit: int = 60) -> str:
    """``value`` as an error line shows it: escaped for a terminal and cut to ``limit`` characters
    (text as it is, anything else as its repr)."""
    return shorten(value if isinstance(value, str) else repr(value), limit)


def _text(value: Any, what: str, fix: str, limit: int = MAX_TEXT) -> str:
    if not isinstance(value, str):
        raise BadValue(what, value, f"not text but {type(value).__name__}", fix)
    if len(value) > limit:
        raise BadValue(what, value, f"longer than {limit} characters", fix)
    if "\0" in value:
        raise BadValue(what, value, "holds a NUL character", fix)
    return value


def integer(value: Any, what: str, low: int, high: int, fix: str = "") -> int:
    """``value`` (an int, or text of ASCII digits) as an int from ``low`` to ``high``."""
    fix = fix or f"give a whole number from {low} to {high}"
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    else:
        text = _text(value, what, fix, 64)
        if not (text.isascii() and text.isdigit()):
            raise BadValue(what, value, "not a whole number (ASCII digits only)", fix)
        if len(text.lstrip("0")) > len(str(high)):
            raise _out_of_range(what, value, f"{low}-{high}", fix)
        number = int(text)
    if not low <= number <= high:
        raise _out_of_range(what, value, f"{low}-{high}", fix)
    return number


def seconds(value: Any, what: str, low: float, high: float, fix: str = "") -> float:
    """``value`` (a number, or decimal text in ASCII) as finite seconds from ``low`` to ``high``."""
    fix = fix or f"give seconds from {low:g} to {high:g}"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    else:
        text = _text(value, what, fix, 32)
        if not _DECIMAL.fullmatch(text):
            raise BadValue(what, value, "not a number of seconds (ASCII digits, e.g. 0.5)", fix)
        number = float(text)
    if not (math.isfinite(number) and low <= number <= high):
        raise _out_of_range(what, value, f"{low:g}-{high:g}", fix)
    return number


def pid(value: Any, what: str = "--pid") -> int:
    """A process id: 1 to the highest pid Linux gives."""
    return integer(value, what, 1, PID_MAX, f"give a process id from 1 to {PID_MAX}, e.g. from ps")


def port(value: Any, what: str, fix: str) -> int:
    """A TCP port, 1-65535; ``fix`` says what the whole argument looks like."""
    if value == "":
        raise BadValue(what, value, f"the port is missing; {PORT_RANGE}", fix)
    try:
        return integer(value, what, 1, 65535, fix)
    except BadValue as exc:
        word = "is out of range" if exc.out_of_range else "is not a number"
        raise BadValue(what, value, f"port {shown(value, 20)} {word}; {PORT_RANGE}", fix) from None


def uid(value: Any, what: str = "--user") -> int:
    """The uid of a user given by name or number (text, or an int from the Python API): one with a
    passwd entry, or a uid that owns a process now (containers run uids that have no name)."""
    import pwd

    fix = "give a user name or a numeric uid, e.g. --user nobody or --user 1000"
    if isinstance(value, int) and not isinstance(value, bool):  # the Python API's uid
        number = integer(value, what, 0, UID_MAX, fix)
    else:
        text = _text(value, what, fix, MAX_USER)
        try:
            return pwd.getpwnam(text).pw_uid
        except KeyError:
            pass
        if not (text.isascii() and text.isdigit()):
            raise BadValue(what, value, "no such user", fix)
        number = integer(text, what, 0, UID_MAX, fix)
    try:
        pwd.getpwuid(number)
        return number
    except KeyError:
        if _owns_a_process(number):
            return number
    raise BadValue(what, value, "no such user (no passwd entry, and no process runs as this uid)", fix)


def _owns_a_process(number: int) -> bool:
    from parinfo.machine.procfs import Proc, pids

    try:
        found = pids()
    except UsageError:
        return False
    for pid in found:
        try:
            if Proc.of(pid).uid() == number:
                return True
        except UsageError:
            continue
    return False


def cgroup(value: Any, what: str = "--cgroup") -> str:
    """A cgroup as /proc/PID/cgroup names it in the hierarchy parinfo reads (the v1 cpu controller's,
    else v2), from that form or its directory under a cgroup mount: ``.`` and ``..`` and repeated
    slashes are resolved, and a path that climbs above the root, lies in another hierarchy or names
    no cgroup is refused."""
    from parinfo.machine.cgroup import locate_cgroup

    fix = ("give the cgroup as /proc/PID/cgroup shows it, e.g. /system.slice/app.service, "
           "or its directory under /sys/fs/cgroup")
    text = _text(value, what, fix).strip()
    if not text:
        raise BadValue(what, value, "empty", fix)
    parts: list[str] = []
    for part in text.split("/"):
        if part == "..":
            if not parts:
                raise BadValue(what, value, "'..' climbs above the root of the cgroup tree", fix)
            parts.pop()
        elif part not in ("", "."):
            parts.append(part)
    found, why = locate_cgroup("/" + "/".join(parts))
    if found is None:
        raise BadValue(what, value, why, fix)
    return found


def ip_address(value: Any, what: str, fix: str) -> str | None:
    """``value`` when it is an IP address (IPv6 with an optional interface scope after ``%``); None
    when it is not an address at all; BadValue for an address with a malformed scope."""
    import ipaddress

    text = _text(value, what, fix)
    if len(text) > 64:
        return None
    address, percent, scope = text.partition("%")
    try:
        ipaddress.ip_address(address)
    except ValueError:
        return None
    if percent and (":" not in address or not _SCOPE.fullmatch(scope)):
        raise BadValue(what, value, "the scope after % must be an interface name or index "
                                    "(and only an IPv6 address has one)", fix)
    return text


def host(value: Any, what: str, fix: str) -> str:
    """A host name or IP address fit for a resolver: an IP address (see :func:`ip_address`), or a
    DNS name of letters, digits, ``-`` and ``_`` in labels of 1-63 characters, at most 253 in all
    (an internationalised name must encode to one)."""
    text = _text(value, what, fix, 253)
    if ip_address(text, what, fix) is not None:
        return text
    name = text
    if not text.isascii():
        try:
            name = text.encode("idna").decode("ascii")
        except UnicodeError:
            raise BadValue(what, value, "not a valid host name", fix) from None
    labels = name[:-1].split(".") if name.endswith(".") else name.split(".")
    if len(name) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        raise BadValue(what, value, "not a valid host name (labels of letters, digits and -, "
                                    "1-63 characters each, separated by single dots)", fix)
    return text


def listen_address(value: Any, what: str = "--serve") -> tuple[str, int]:
    """``HOST:PORT``, ``[IPV6]:PORT``, ``:PORT`` or ``PORT`` to listen on -> (IP address or
    localhost, port); the host defaults to 127.0.0.1. A name other than localhost is refused: a
    server binds an address, and a name may resolve to a public one."""
    fix = f"give HOST:PORT, e.g. {what} 127.0.0.1:9464"
    text = _text(value, what, fix, 300)
    if text.startswith("["):
        host_text, close, rest = text[1:].rpartition("]")
        if not close or not rest.startswith(":"):
            raise BadValue(what, value, "an IPv6 address goes in [ ] followed by :PORT", fix)
        port_text = rest[1:]
    else:
        host_text, _, port_text = text.rpartition(":")
    try:
        number = port(port_text, what, fix)
        if host_text in ("", "localhost"):
            return host_text or "127.0.0.1", number
        if ip_address(host_text, what, fix) is None:
            raise BadValue(what, value, f"'{shown(host_text, 40)}' is not an IP address", fix)
    except BadValue as exc:
        raise BadValue(what, value, exc.reason, fix) from None
    return host_text, number
