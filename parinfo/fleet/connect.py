"""Reaching a cluster: check its address, find out at once whether anything answers there, and
connect with every step bounded by one timeout and the client closed on every failure.

- The address is checked here first (scheme, host, port 1-65535), so a malformed one is one line
  at once, before Dask or Ray sees it.
- A plain TCP connect comes next: Dask retries a refused connection until its timeout ends and
  Ray's GCS client retries for minutes, so "connection refused" is said here, in milliseconds.
- Dask's ``Client()`` bounds the TCP connect but not the handshake that follows, and a constructor
  that raises leaves a half-made client whose ``__del__`` waits 30 s at exit and prints a traceback.
  So the client object is made first, connected in a thread that is waited for up to the deadline,
  and closed on every failure (which also drops its connection).
- Ray's ``ray.init`` blocks in its own code for minutes against a port that does not answer
  gRPC. So the port is first asked to open an HTTP/2 connection (gRPC runs over HTTP/2; a server
  answers the client's preface with a SETTINGS frame, RFC 9113 section 3.4) within the deadline,
  and ``ray.init`` is called only when it does. The greeting is a fixed 33 bytes and the answer a
  9-byte frame header, so it is written here: Ray's core installs no HTTP/2 or gRPC Python package.

Errors are :class:`~parinfo.errors.ConnectError`: one line naming the address and what to do.
"""
from __future__ import annotations

import math
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import parinfo.machine.checks as checks
from parinfo.errors import ConnectError, UsageError
from parinfo.records.record import record
from parinfo.safe_text import shorten

#: How long reaching a cluster may take unless told otherwise.
CONNECT_TIMEOUT_S = 15.0
#: The longest connect timeout accepted.
MAX_TIMEOUT_S = 3600.0
#: Dask's schemes that reach a scheduler over a network (``inproc`` and ``ucx`` are not offered).
DASK_SCHEMES = ("tcp", "tls", "ws", "wss")
DASK_EXAMPLE = "tcp://127.0.0.1:8786"
RAY_EXAMPLE = "127.0.0.1:6379 or ray://127.0.0.1:10001"
#: What an HTTP/2 client sends first: the connection preface and an empty SETTINGS frame.
_H2_HELLO = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes(3) + b"\x04" + bytes(5)
_H2_SETTINGS = 0x4
_H2_FRAME_HEADER = 9


@record(frozen=True)
class Address:
    """A checked cluster address: ``text`` as given, and the host and port it names."""

    kind: str  # "Dask scheduler" or "Ray"
    text: str
    scheme: str
    host: str
    port: int

    def fail(self, what: str, fix: str) -> ConnectError:
        return ConnectError(f"{self.kind} {shorten(self.text, 80)}: {what} ({fix})")


def connect_timeout(value: Any) -> float:
    """``value`` as a connect timeout in seconds: a finite number above 0, at most an hour."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    if not (0 < seconds <= MAX_TIMEOUT_S):  # also false for nan
        raise UsageError(f"connect timeout {shorten(str(value), 30)}: give seconds above 0 and at most "
                         f"{MAX_TIMEOUT_S:g}, e.g. --timeout 30")
    return seconds


def _split(kind: str, text: str, scheme: str, rest: str, example: str) -> Address:
    """Host and port of ``scheme://rest``, checked (:mod:`parinfo.machine.checks`) before any resolver sees
    them: a well-formed host, a port 1-65535, nothing else."""
    fix = f"give HOST:PORT, e.g. {example}"

    def bad(what: str) -> ConnectError:
        return ConnectError(f"{kind} {shorten(text, 80)}: {what} ({fix})")

    if len(text) > 300:
        raise bad("longer than 300 characters")
    try:
        parts = urlsplit(f"{scheme}://{rest}")
    except ValueError as exc:  # unbalanced [ ], or a bracketed host that is no IPv6 address
        raise bad("a [ in the host is not closed" if "[" in rest and "]" not in rest
                  else f"not an address: {shorten(str(exc), 60)}") from None
    if parts.path or parts.query or parts.fragment or "@" in parts.netloc:
        raise bad("only a host and a port may follow the scheme")
    hostinfo = parts.netloc.rpartition("]")[2] if parts.netloc.startswith("[") else parts.netloc
    if ":" not in hostinfo:
        raise bad("the port is missing" if parts.netloc else "the host is missing")
    port_text = hostinfo.rpartition(":")[2]
    if not parts.hostname:
        raise bad("the host is missing")
    try:
        port = checks.port(port_text, kind, fix)
        host = checks.host(parts.hostname, kind, fix)
    except checks.BadValue as exc:
        raise bad(exc.reason) from None
    return Address(kind, text, scheme, host, port)


def dask_address(text: str) -> Address:
    """A Dask scheduler's address checked: ``[SCHEME://]HOST:PORT`` with a scheme Dask reaches over a
    network (tcp when none is given)."""
    kind = "Dask scheduler"
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "tcp", text
    if scheme not in DASK_SCHEMES:
        raise ConnectError(f"{kind} {shorten(text, 80)}: unknown scheme {shorten(scheme, 20)!r} "
                           f"(use {', '.join(s + '://' for s in DASK_SCHEMES)}, e.g. {DASK_EXAMPLE})")
    return _split(kind, text, scheme, rest, DASK_EXAMPLE)


def ray_address(text: str) -> Address | None:
    """A Ray address checked: ``HOST:PORT`` (the head's GCS) or ``ray://HOST:PORT`` (Ray Client); None
    for ``auto`` (the cluster ``ray start`` recorded on this machine, or RAY_ADDRESS)."""
    kind = "Ray"
    if text == "auto":
        return None
    if text == "local":
        raise ConnectError(f"{kind} local: fleet commands read a running cluster and never start one "
                           f"(give its address, e.g. {RAY_EXAMPLE}, or auto)")
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "", text
    elif scheme != "ray":
        raise ConnectError(f"{kind} {shorten(text, 80)}: unknown scheme {shorten(scheme, 20)!r} "
                           f"(give HOST:PORT or ray://HOST:PORT, e.g. {RAY_EXAMPLE})")
    return _split(kind, text, scheme or "gcs", rest, RAY_EXAMPLE)


def _left(deadline: float) -> float:
    return max(deadline - time.monotonic(), 0.0)


def _reach(where: Address, deadline: float, limit: float) -> socket.socket:
    """A TCP connection to ``where``, or the one-line reason there is none (refused at once)."""
    try:
        return socket.create_connection((where.host, where.port), timeout=max(_left(deadline), 0.001))
    except ConnectionRefusedError:
        raise where.fail(f"connection refused: nothing listens on port {where.port}",
                         "start it, or check the host and port") from None
    except socket.gaierror as exc:
        raise where.fail(f"cannot resolve host {shorten(where.host, 60)!r}: {exc.strerror or exc}",
                         "check the host name") from None
    except TimeoutError:
        raise _silent(where, limit) from None
    except OSError as exc:
        raise where.fail(f"cannot connect: {shorten(exc.strerror or str(exc), 80)}",
                         "check the host, port and network") from None


def _silent(where: Address, limit: float) -> ConnectError:
    return where.fail(f"no answer within {limit:g} s",
                      "check that it is the right address and that the cluster is up, "
                      "or allow more time with --timeout")


def _not_cluster(where: Address, what: str) -> ConnectError:
    example = DASK_EXAMPLE if where.kind.startswith("Dask") else RAY_EXAMPLE
    return where.fail(what, f"check that this is the cluster's address, e.g. {example}")


def connect_dask(address: str, timeout: float = CONNECT_TIMEOUT_S) -> Any:
    """A ``distributed.Client`` connected to the scheduler at ``address`` within ``timeout`` seconds,
    or ConnectError: malformed or refused at once, silent or not speaking Dask's protocol within
    the timeout. The client is closed on every failure; the caller closes a returned one."""
    where = dask_address(address)
    limit = connect_timeout(timeout)
    deadline = time.monotonic() + limit
    _reach(where, deadline, limit).close()
    try:
        from distributed import Client
    except ImportError:
        raise UsageError("--dask needs distributed: pip install 'parinfo[dask]'") from None
    # Made first and connected in a thread, so that it can be closed whatever the constructor does.
    client = Client.__new__(Client)
    failed: list[BaseException] = []

    connect: Callable[..., None] = Client.__init__  # distributed leaves it unannotated

    def run() -> None:
        try:
            connect(client, address, timeout=max(_left(deadline), 0.1), set_as_default=False)
        except BaseException as exc:  # reported by the waiting thread
            failed.append(exc)

    thread = threading.Thread(target=run, name="parinfo-dask-connect", daemon=True)
    thread.start()
    thread.join(_left(deadline))
    timed_out = thread.is_alive()  # before closing, which ends the connecting thread
    if not timed_out and not failed:
        return client
    close_dask(client)
    if timed_out or isinstance(failed[0], TimeoutError):
        raise _silent(where, limit)
    exc = failed[0]
    if isinstance(exc, ConnectionError) or type(exc).__name__ == "CommClosedError":
        raise _not_cluster(where, "it closed the connection without answering as a Dask scheduler")
    raise _not_cluster(where, f"it did not answer as a Dask scheduler "
                              f"({type(exc).__name__}: {shorten(str(exc), 80)})")


def close_dask(client: Any, timeout: float = 5.0) -> None:
    """Close ``client`` (its connection too), whatever state a failed connect left it in."""
    try:
        client.close(timeout=timeout)
    except Exception:  # a half-made client: nothing more can be closed
        pass
    # A client whose own failed start closed it is "closed" already, and close() then returns
    # before stopping its IO loop thread: stop it here, or each failed connect leaves one running.
    runner = getattr(client, "_loop_runner", None)
    if runner is not None and runner.is_started():
        runner.stop()


def _speaks_http2(where: Address, sock: socket.socket, deadline: float, limit: float) -> None:
    """Raise unless the server on ``sock`` answers an HTTP/2 preface with a SETTINGS frame in time."""
    try:
        sock.settimeout(max(_left(deadline), 0.001))
        sock.sendall(_H2_HELLO)
        header = b""
        while len(header) < _H2_FRAME_HEADER:
            sock.settimeout(max(_left(deadline), 0.001))
            chunk = sock.recv(_H2_FRAME_HEADER - len(header))
            if not chunk:
                raise ConnectionResetError
            header += chunk
    except TimeoutError:
        raise _silent(where, limit) from None
    except ConnectionError:  # closed or reset before a whole frame came
        raise _not_cluster(where, "it closed the connection without answering as Ray (gRPC)") from None
    except OSError as exc:
        raise _not_cluster(where, f"the connection failed: {shorten(exc.strerror or str(exc), 60)}") from None
    stream = int.from_bytes(header[5:9], "big") & 0x7FFFFFFF
    if header[3] != _H2_SETTINGS or header[4] & 0x1 or stream != 0:
        raise _not_cluster(where, "it answered, but not as Ray (gRPC over HTTP/2)")


def check_ray(address: str, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """Raise ConnectError unless a gRPC server answers at the Ray ``address`` within ``timeout``:
    malformed or refused at once, silent or garbage within the timeout. ``auto`` is resolved as Ray
    resolves it (RAY_ADDRESS, or the cluster ``ray start`` recorded) when it can be."""
    where = ray_address(address)
    limit = connect_timeout(timeout)
    if where is None:
        where = _resolve_auto()
        if where is None:  # Ray says why when ray.init runs
            return
    deadline = time.monotonic() + limit
    sock = _reach(where, deadline, limit)
    try:
        if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
            return  # TLS comes before HTTP/2 there: the TCP connect is all that can be checked
        _speaks_http2(where, sock, deadline, limit)
    finally:
        sock.close()


def _resolve_auto() -> Address | None:
    try:
        from ray._private.services import canonicalize_bootstrap_address
    except ImportError:
        return None
    try:
        resolved = canonicalize_bootstrap_address("auto")
    except Exception:  # none found, or several: ray.init says which
        return None
    return ray_address(resolved) if resolved else None


def connect_ray(address: str, timeout: float = CONNECT_TIMEOUT_S) -> Any:
    """The ``ray`` module connected to the cluster at ``address`` (see :func:`check_ray`), or
    ConnectError; Ray is shut down again on every failure. The caller calls ``ray.shutdown()``."""
    check_ray(address, timeout)
    try:
        import ray
    except ImportError:
        raise UsageError("--ray needs ray: pip install 'parinfo[ray]'") from None
    try:
        ray.init(address=address, include_dashboard=False, configure_logging=False, log_to_driver=False)
    except Exception as exc:  # Ray raises ConnectionError, RuntimeError, ValueError...
        try:
            ray.shutdown()
        except Exception:  # nothing was started
            pass
        raise ConnectError(f"Ray {shorten(address, 80)}: cannot connect: {shorten(str(exc), 120)}") from None
    return ray


__all__ = ["CONNECT_TIMEOUT_S", "Address", "check_ray", "close_dask", "connect_dask", "connect_ray",
           "connect_timeout", "dask_address", "ray_address"]
