"""Fleet edges: a cluster address that never answers, answers garbage, refuses or is malformed ends
with one line on stderr and exit code 2, in time (refused or malformed within 2 s, silent or garbage
within the connect timeout), and nothing else is printed at exit. The servers are threads of this
test listening on 127.0.0.1, closed in a ``finally``; the CLI runs in a subprocess."""
from __future__ import annotations

import contextlib
import importlib.util
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest
from conftest import clean_env

from parinfo.errors import ConnectError, UsageError
from parinfo.fleet import connect

pytestmark = [pytest.mark.timeout(300), pytest.mark.once]  # once: .ci/run runs these on its first Python only

#: Start-up of a CLI subprocess on a busy machine (typer, then distributed or ray imported).
SLACK_S = 10.0
#: The issue's bound for a refused or malformed address.
AT_ONCE_S = 2.0
#: The --timeout the silent and garbage cases run under.
TIMEOUT_S = 3.0
HAS_DASK = importlib.util.find_spec("distributed") is not None
HAS_RAY = importlib.util.find_spec("ray") is not None
#: Bytes that no Dask or Ray client can take for its protocol (a length prefix of exabytes, then HTTP/1).
GARBAGE = b"HTTP/1.1 400 garbage\r\n\r\n\x00\xff\xfe" * 4


@contextlib.contextmanager
def fake_server(mode: str) -> Iterator[int]:
    """A TCP server on 127.0.0.1 that accepts and then stays silent, speaks ``GARBAGE``, or closes
    each connection at once. Yields its port; everything is closed when the block ends."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()
    accepted: list[socket.socket] = []

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except (TimeoutError, OSError):
                continue
            if mode == "close":
                conn.close()
                continue
            accepted.append(conn)
            if mode == "garbage":
                with contextlib.suppress(OSError):
                    conn.sendall(GARBAGE)

    thread = threading.Thread(target=serve, name=f"fake-{mode}-server", daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        listener.close()
        for conn in accepted:
            conn.close()


def free_port() -> int:
    """A port on 127.0.0.1 that nobody listens on (bound, then released, never listened on)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_fleet(option: str, address: str, *extra: str) -> tuple[subprocess.CompletedProcess, float]:
    cmd = [sys.executable, "-m", "parinfo", "fleet", "show", option, address, *extra]
    start = time.monotonic()
    proc = subprocess.run(cmd, env=clean_env(RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0"), capture_output=True,
                          text=True, timeout=120)
    return proc, time.monotonic() - start


def assert_one_line(proc: subprocess.CompletedProcess, address: str, *words: str) -> str:
    """Exit 2, nothing on stdout, exactly one line on stderr naming ``address`` and ``words``."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    line = lines[0]
    assert line.startswith("parinfo: error: ") and address in line, line
    for word in words:
        assert word in line, (word, line)
    assert "Traceback" not in line
    return line


MALFORMED = [
    ("foo", "port is missing"),
    ("tcp://", "host is missing"),
    ("tcp://127.0.0.1:99999", "port 99999 is out of range"),
    ("tcp://127.0.0.1:", "port is missing"),
    ("udp://127.0.0.1:1", "unknown scheme 'udp'"),
    ("tcp://a..b:1", "not a valid host name"),
    ("tcp://-a.b:1", "not a valid host name"),
    ("tcp://127.0.0.1:²", "port ² is not a number"),
    ("tcp://[fe80::1%a b]:1", "scope"),
]
RAY_MALFORMED = [
    ("foo", "port is missing"),
    ("ray://", "host is missing"),
    ("127.0.0.1:99999", "port 99999 is out of range"),
    ("ray://127.0.0.1:", "port is missing"),
    ("udp://127.0.0.1:1", "unknown scheme 'udp'"),
    ("local", "never start one"),
    ("a..b:1", "not a valid host name"),
    ("ray://a..b:1", "not a valid host name"),
]


# --- the address checks, in process -----------------------------------------------------------

@pytest.mark.parametrize("address, why", MALFORMED)
def test_malformed_dask_address_is_refused_before_dask_sees_it(address, why):
    with pytest.raises(ConnectError, match=re.escape("e.g. tcp://127.0.0.1:8786")) as info:
        connect.dask_address(address)
    assert why in str(info.value) and address in str(info.value)


@pytest.mark.parametrize("address, why", RAY_MALFORMED)
def test_malformed_ray_address_is_refused_before_ray_sees_it(address, why):
    with pytest.raises(ConnectError) as info:
        connect.ray_address(address)
    assert why in str(info.value) and address in str(info.value)


@pytest.mark.parametrize("address, host, port", [
    ("tcp://127.0.0.1:8786", "127.0.0.1", 8786),
    ("127.0.0.1:8786", "127.0.0.1", 8786),
    ("tls://[::1]:1", "::1", 1),
    ("ws://sched.example:65535", "sched.example", 65535),
])
def test_good_dask_addresses_are_kept(address, host, port):
    where = connect.dask_address(address)
    assert (where.host, where.port, where.text) == (host, port, address)


def test_ray_auto_is_left_to_ray_and_host_port_is_checked():
    assert connect.ray_address("auto") is None
    where = connect.ray_address("ray://127.0.0.1:10001")
    assert (where.scheme, where.host, where.port) == ("ray", "127.0.0.1", 10001)


@pytest.mark.parametrize("value", [0, -1, "nan", "inf", "abc", 3601])
def test_bad_timeout_is_one_usage_error(value):
    with pytest.raises(UsageError, match="give seconds above 0"):
        connect.connect_timeout(value)


def test_a_connect_error_is_a_usage_error_so_callers_catching_either_work():
    assert issubclass(ConnectError, UsageError)


# --- the Python API against real sockets ------------------------------------------------------

def test_refused_is_said_at_once_by_the_api():
    port = free_port()
    start = time.monotonic()
    with pytest.raises(ConnectError, match=re.escape(f"127.0.0.1:{port}: connection refused")):
        connect.check_ray(f"127.0.0.1:{port}", timeout=30)
    assert time.monotonic() - start < AT_ONCE_S


@pytest.mark.parametrize("mode, says", [("silent", "no answer within 2 s"),
                                        ("garbage", "not as Ray"),
                                        ("close", "closed the connection")])
def test_ray_check_tells_silent_garbage_and_closing_servers_apart(mode, says):
    with fake_server(mode) as port:
        start = time.monotonic()
        with pytest.raises(ConnectError, match=says):
            connect.check_ray(f"127.0.0.1:{port}", timeout=2)
        assert time.monotonic() - start < 2 + AT_ONCE_S


@pytest.mark.skipif(not HAS_DASK, reason="distributed is not installed")
@pytest.mark.parametrize("mode, says", [("silent", "no answer within 2 s"),
                                        ("garbage", "did not answer as a Dask scheduler"),
                                        ("close", "without answering as a Dask scheduler")])
def test_dask_api_raises_and_leaves_no_connection_or_thread(mode, says):
    import psutil

    with fake_server(mode) as port:
        threads_before = set(threading.enumerate())
        start = time.monotonic()
        with pytest.raises(ConnectError, match=says):
            connect.connect_dask(f"tcp://127.0.0.1:{port}", timeout=2)
        assert time.monotonic() - start < 2 + AT_ONCE_S
        deadline = time.monotonic() + 5
        while True:  # the client's connection is closed and its loop thread ends
            ours = [c for c in psutil.Process().net_connections("tcp")
                    if c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED]
            extra = [t for t in set(threading.enumerate()) - threads_before if t.is_alive()]
            if (not ours and not extra) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert ours == [] and extra == []


# --- the CLI in a subprocess ------------------------------------------------------------------

@pytest.mark.parametrize("address, why", MALFORMED)
def test_cli_malformed_dask_address_is_one_line_at_once(address, why):
    proc, took = run_fleet("--dask", address)
    assert_one_line(proc, address, why, "e.g. tcp://127.0.0.1:8786")
    assert took < AT_ONCE_S + SLACK_S


@pytest.mark.parametrize("address, why", RAY_MALFORMED)
def test_cli_malformed_ray_address_is_one_line_at_once(address, why):
    proc, took = run_fleet("--ray", address)
    assert_one_line(proc, address, why)
    assert took < AT_ONCE_S + SLACK_S


@pytest.mark.parametrize("option, scheme", [
    pytest.param("--dask", "tcp://", marks=pytest.mark.skipif(not HAS_DASK, reason="distributed is not installed")),
    pytest.param("--ray", "", marks=pytest.mark.skipif(not HAS_RAY, reason="ray is not installed")),
    pytest.param("--ray", "ray://", marks=pytest.mark.skipif(not HAS_RAY, reason="ray is not installed")),
])
def test_cli_refused_is_one_line_at_once_even_with_a_long_timeout(option, scheme):
    address = f"{scheme}127.0.0.1:{free_port()}"
    proc, took = run_fleet(option, address, "--timeout", "60")
    assert_one_line(proc, address, "connection refused", "start it, or check the host and port")
    assert took < AT_ONCE_S + SLACK_S


@pytest.mark.parametrize("option, scheme, mode, says", [
    pytest.param("--dask", "tcp://", "silent", f"no answer within {TIMEOUT_S:g} s",
                 marks=pytest.mark.skipif(not HAS_DASK, reason="distributed is not installed")),
    pytest.param("--dask", "tcp://", "garbage", "did not answer as a Dask scheduler",
                 marks=pytest.mark.skipif(not HAS_DASK, reason="distributed is not installed")),
    pytest.param("--ray", "", "silent", f"no answer within {TIMEOUT_S:g} s",
                 marks=pytest.mark.skipif(not HAS_RAY, reason="ray is not installed")),
    pytest.param("--ray", "", "garbage", "not as Ray",
                 marks=pytest.mark.skipif(not HAS_RAY, reason="ray is not installed")),
    pytest.param("--ray", "ray://", "silent", f"no answer within {TIMEOUT_S:g} s",
                 marks=pytest.mark.skipif(not HAS_RAY, reason="ray is not installed")),
    pytest.param("--ray", "ray://", "garbage", "not as Ray",
                 marks=pytest.mark.skipif(not HAS_RAY, reason="ray is not installed")),
])
def test_cli_silent_or_garbage_server_is_one_line_within_the_timeout(option, scheme, mode, says):
    with fake_server(mode) as port:
        address = f"{scheme}127.0.0.1:{port}"
        proc, took = run_fleet(option, address, "--timeout", f"{TIMEOUT_S:g}")
    line = assert_one_line(proc, address, says)
    if mode == "silent":
        assert "--timeout" in line
        assert took >= TIMEOUT_S  # it waited the time it was given ...
    assert took < TIMEOUT_S + SLACK_S  # ... and no longer: no hang in the handshake or at exit


@pytest.mark.skipif(not HAS_DASK, reason="distributed is not installed")
def test_cli_silent_server_ends_within_the_default_timeout():
    with fake_server("silent") as port:
        address = f"tcp://127.0.0.1:{port}"
        proc, took = run_fleet("--dask", address)
    assert_one_line(proc, address, f"no answer within {connect.CONNECT_TIMEOUT_S:g} s")
    assert connect.CONNECT_TIMEOUT_S <= took < connect.CONNECT_TIMEOUT_S + SLACK_S


@pytest.mark.parametrize("value", ["0", "-1", "nan", "abc"])
def test_cli_bad_timeout_is_one_line(value):
    proc, took = run_fleet("--dask", f"tcp://127.0.0.1:{free_port()}", f"--timeout={value}")
    assert_one_line(proc, "", "--timeout")
    assert took < AT_ONCE_S + SLACK_S


@pytest.mark.skipif(not HAS_DASK, reason="distributed is not installed")
def test_cli_apply_has_the_same_edges():
    with fake_server("garbage") as port:
        address = f"tcp://127.0.0.1:{port}"
        cmd = [sys.executable, "-m", "parinfo", "fleet", "apply", "single-thread", "--dask", address,
               "--timeout", f"{TIMEOUT_S:g}"]
        proc = subprocess.run(cmd, env=clean_env(), capture_output=True, text=True, timeout=120)
    assert_one_line(proc, address, "did not answer as a Dask scheduler")


@pytest.mark.parametrize("address", ["tcp://a..b:1", "tcp://" + "a" * 64 + ".com:1",
                                     "tcp://" + "\u00e9" * 60 + ".com:1"])
def test_cli_apply_refuses_a_malformed_host_before_a_resolver_sees_it(address):
    cmd = [sys.executable, "-m", "parinfo", "fleet", "apply", "single-thread", "--dask", address]
    proc = subprocess.run(cmd, env=clean_env(), capture_output=True, text=True, timeout=120)
    line = assert_one_line(proc, "", "host name", "e.g. tcp://127.0.0.1:8786")
    assert "UnicodeError" not in line and "idna" not in line


def test_a_host_name_fit_for_a_resolver_is_kept():
    assert connect.dask_address("tcp://sched-1.example_x.org.:8786").host == "sched-1.example_x.org."
    assert connect.dask_address("tcp://b\u00fccher.example:1").host == "b\u00fccher.example"
    assert connect.ray_address("[fe80::1%eth0]:6379").host == "fe80::1%eth0"


def test_cli_an_address_with_control_characters_is_escaped_in_its_line():
    proc, _ = run_fleet("--dask", "tcp://[fe80::1%eth0\x1b[2J]:1")
    line = assert_one_line(proc, "tcp://[fe80::1%eth0\\x1b[2J]:1", "scope")
    assert "\x1b" not in line


@pytest.mark.parametrize("option", ["--dask", "--ray"])
def test_cli_a_5000_digit_port_is_one_short_line(option):
    proc, _ = run_fleet(option, "127.0.0.1:" + "9" * 5000)
    line = assert_one_line(proc, "127.0.0.1:999", "longer than 300 characters")
    assert len(line) < 300
