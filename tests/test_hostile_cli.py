"""Hostile command lines and outputs: one line and exit 2, never a traceback; --export safe to eval."""
from __future__ import annotations

import io
import os
import subprocess
import sys
import tempfile
from unittest import mock

import pytest
from conftest import clean_env, run_cli
from hypothesis import HealthCheck, given, settings, strategies as st

EVIL_NAMES = [
    "evil\ntouch INJECTED\n",
    "evil$(touch INJECTED)",
    "evil`touch INJECTED`",
    "evil'; touch INJECTED; '",
    'evil"; touch INJECTED; "',
    "evil\r\x1b[2J",
]


@pytest.mark.parametrize("stem", EVIL_NAMES)
def test_export_is_safe_to_eval_whatever_the_file_name(tmp_path, stem):
    path = tmp_path / f"{stem}.yaml"
    path.write_text("version: 1\nname: plain\nintra_op: 1\n")
    env = clean_env(PARINFO=f"{sys.executable} -m parinfo", P=str(path))
    proc = subprocess.run(["bash", "-c", 'eval "$($PARINFO apply "$P" --export)" && echo "$PARINFO_PROFILE"'],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "INJECTED").exists()
    assert proc.stdout.strip() == "plain"


def test_export_comments_hold_no_control_characters(tmp_path):
    path = tmp_path / "a\x1b[31mb\u202e.yaml"
    path.write_text("version: 1\nintra_op: 1\n")
    out = run_cli("apply", str(path), "--export").stdout
    comments = [line for line in out.splitlines() if line.startswith("#")]
    assert comments and not any("\x1b" in c or "\u202e" in c for c in comments)
    assert "\\x1b" in comments[0]


@pytest.mark.parametrize("value", ["²", "①", "٣", "9" * 5000, "0x10", "-1", "0", "1.5", ""])
def test_bad_instances_values_are_one_line(value):
    for args in (["--instances", value], [f"--instances={value}"]):
        proc = run_cli("apply", "latency", *args, "--", sys.executable, "-c", "print('ran')")
        assert proc.returncode == 2, proc.stderr
        assert "ran" not in proc.stdout and "Traceback" not in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and "--instances" in proc.stderr


@pytest.mark.parametrize("command", [[""], ["", "x"]])
def test_an_empty_command_name_is_a_usage_error(command):
    proc = run_cli("apply", "latency", "--", *command)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "empty name" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_a_nul_in_the_command_is_refused_in_process():
    from parinfo.errors import UsageError
    from parinfo.launch.run import run_plan
    from parinfo.profiles.loading import resolve_profile

    with pytest.raises(UsageError, match="NUL"):
        run_plan(resolve_profile("latency"), ["a\0b"], replace=False)


@pytest.mark.parametrize("args", [["show"], ["show", "--json"], ["apply", "latency"],
                                  ["apply", "latency", "--export"], ["profiles"]])
@pytest.mark.parametrize("target", ["closed", "full"])
def test_a_closed_or_full_stdout_is_one_line_and_exit_2(args, target):
    redirect = ">&-" if target == "closed" else ">/dev/full"
    cmd = " ".join([sys.executable, "-m", "parinfo", *args]) + " " + redirect
    proc = subprocess.run(["bash", "-c", cmd], env=clean_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert "output" in proc.stderr


def test_a_reader_that_goes_away_is_not_an_error():
    cmd = f"{sys.executable} -m parinfo show | head -c 10 >/dev/null"
    proc = subprocess.run(["bash", "-c", cmd], env=clean_env(), capture_output=True, text=True, timeout=60)
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr


def test_version_and_program_name():
    proc = run_cli("--version")
    assert proc.returncode == 0 and proc.stdout.startswith("parinfo 0.")
    assert "python -m parinfo" in run_cli("--help").stdout


# A fuzz over argument lists built from real option names and hostile values. Runs main() in this
# process and fails on any exception but SystemExit. ``apply PROFILE WORD`` takes WORD as a command to
# run: PATH is emptied so none can be found (126/127, the codes of a command that cannot start).
OPTIONS = ["show", "apply", "profiles", "--json", "--export", "--check", "--check=error", "--format",
           "torch", "json", "rich", "-i", "--import", "--instances", "--force", "--torch", "--help",
           "latency", "single-thread", "container", "nosuch"]
HOSTILE = st.one_of(st.sampled_from(OPTIONS), st.text(max_size=12),
                    st.sampled_from(["²", "①", "\x00", "\x1b[2J", "-", "--", "9" * 5000, "/proc/kmsg",
                                     "/dev/zero", "=", "--instances=", "--format="]))


_EMPTY_PATH = tempfile.mkdtemp(prefix="parinfo-empty-path-")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(HOSTILE, max_size=5).filter(lambda a: "--" not in a and (not a or a[0] != "tune")))
def test_fuzzed_arguments_never_raise(args):
    from contextlib import redirect_stderr, redirect_stdout

    from parinfo.cli import main

    out, err = io.StringIO(), io.StringIO()
    with mock.patch.dict(os.environ, {"PATH": _EMPTY_PATH}), redirect_stdout(out), redirect_stderr(err), \
            pytest.raises(SystemExit) as info:
        main(args)
    assert info.value.code in (0, 1, 2, 126, 127), (args, err.getvalue())
    if info.value.code in (2, 126, 127) and err.getvalue():
        assert len(err.getvalue().strip().splitlines()) == 1, (args, err.getvalue())


ESCAPES = "\x1b[31m\x1b]0;title\x07\x1b[2J\r\u202e"


@pytest.mark.parametrize("fmt", ["rich", "torch"])
def test_show_never_prints_control_characters_from_the_environment(fmt):
    proc = run_cli("show", "--format", fmt, env=clean_env(OMP_PLACES="x" + ESCAPES, KMP_AFFINITY=ESCAPES))
    assert proc.returncode == 0, proc.stderr
    for ch in "\x1b\x07\r\u202e":
        assert ch not in proc.stdout
    assert "\\x1b" in proc.stdout


def test_apply_never_prints_control_characters_from_a_profile(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text('version: 1\nenv:\n  OMP_PLACES: "a\\e[2Jb"\n')
    proc = run_cli("apply", str(path))
    # Refused when the profile is read (env values are printable ASCII); the message escapes it.
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "\x1b" not in proc.stdout + proc.stderr


def test_check_takes_a_level():
    env = clean_env(OMP_NUM_THREADS="abc")  # an invalid variable: a warning
    assert run_cli("show", "--check", "-i", "none", env=env).returncode == 1
    assert run_cli("show", "--check=warning", "-i", "none", env=env).returncode == 1
    assert run_cli("show", "--check=error", "-i", "none", env=env).returncode == 0
    proc = run_cli("show", "--check=loud", "-i", "none")
    assert proc.returncode == 2 and "--check=loud" in proc.stderr


def test_json_and_torch_format_conflict():
    proc = run_cli("show", "--json", "--format", "torch")
    assert proc.returncode == 2 and "pick one" in proc.stderr


def test_a_huge_count_is_shown_valid_but_capped_with_what_runs():
    import json

    huge = "99999999999999999999"
    proc = run_cli("show", "-i", "none", env=clean_env(PARINFO_NUM_THREADS=huge))
    assert proc.returncode == 0, proc.stderr
    assert f"PARINFO_NUM_THREADS={huge}" in proc.stdout and "valid, capped:" in proc.stdout
    report = json.loads(run_cli("show", "--json", "-i", "none", env=clean_env(PARINFO_NUM_THREADS=huge)).stdout)
    ceiling = report["runtime"]["pool_ceiling"]
    row = next(r for r in report["settings"] if r["library"] == "parinfo intra-op")
    assert row["capped_to"] == ceiling == 4 * os.cpu_count()
    found = {f["id"]: f for f in report["findings"]}
    assert f"at most {ceiling} threads run" in found["count-above-ceiling"]["message"]
    assert f"uses {ceiling} threads" in found["count-above-usable"]["message"]


# --- every argument checked the same way (parinfo.machine.checks) ---------------------------------------

ESC = "\x1b]0;PWND\x07\x1b[2J"


def _other_hierarchy() -> str | None:
    """A directory of a cgroup hierarchy parinfo does not group processes by, when one is mounted."""
    from parinfo.machine.cgroup import _mounts, cpu_hierarchy

    with open("/proc/self/mountinfo") as fh:
        mounts = _mounts(fh.read())
    cpu = cpu_hierarchy(mounts)
    others = [m for m in mounts if cpu is not None and (m.v2, m.controllers) != (cpu.v2, cpu.controllers)]
    return "/" + others[0].point if others else None


def _cpu_mount() -> str | None:
    from parinfo.machine.cgroup import _mounts, cpu_hierarchy

    with open("/proc/self/mountinfo") as fh:
        cpu = cpu_hierarchy(_mounts(fh.read()))
    return None if cpu is None or cpu.root != "/" else "/" + cpu.point


def assert_refused(proc: subprocess.CompletedProcess, *words: str) -> str:
    """Exit 2, one line on stderr naming ``words``, no traceback, no control character."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert not any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in lines[0]), lines[0]
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


BAD_ARGUMENTS = [
    (["host", "--once", "--user", "²"], ["--user", "no such user"]),
    (["host", "--once", "--user", "9" * 5000], ["--user", "longer than"]),
    (["host", "--once", "--user", "99999999999999999999"], ["--user", "out of range"]),
    (["host", "--once", "--cgroup", ".."], ["--cgroup", "climbs above the root"]),
    (["host", "--once", "--cgroup", "/.."], ["--cgroup", "climbs above the root"]),
    (["host", "--once", "--cgroup", "/no/such/cgroup"], ["--cgroup", "no such cgroup"]),
    (["host", "--once", "--interval", "٣"], ["--interval", "not a number"]),
    (["host", "--once", "--interval", "nan"], ["--interval"]),
    (["host", "--serve", "127.0.0.1:²"], ["--serve 127.0.0.1:²", "port ² is not a number"]),
    (["host", "--serve", "127.0.0.1:" + "9" * 5000], ["--serve", "longer than"]),
    (["watch", "--serve", "127.0.0.1:²"], ["--serve 127.0.0.1:²", "port ² is not a number"]),
    (["watch", "--serve", "[fe80::1%" + ESC + "]:9464"], ["--serve", "\\x1b", "scope"]),
    (["show", "--pid", "٣"], ["--pid", "ASCII digits only"]),
    (["show", "--pid", "9" * 30], ["--pid", "out of range"]),
    (["watch", "--once", "--pid", "٣"], ["--pid", "ASCII digits only"]),
    (["show", "--check=" + ESC], ["--check=\\x1b]0;PWND\\x07\\x1b[2J", "not a level"]),
    (["tune", "--size", "٣"], ["--size", "ASCII digits only"]),
    (["tune", "--write", "/no/such\x1b[2J/t.yaml"], ["--write /no/such\\x1b[2J/t.yaml", "does not exist"]),
    (["tune", "--plot", "/tmp/p\x1b[2J.txt"], ["--plot /tmp/p\\x1b[2J.txt", ".svg or .png"]),
    (["tune", "--objective", ESC], ["--objective '\\x1b]0;PWND"]),
    (["fleet", "show", "--dask", "tcp://127.0.0.1:1", "--timeout", "٣"], ["--timeout", "not a number"]),
]


@pytest.mark.parametrize("args, words", BAD_ARGUMENTS, ids=[" ".join(a)[:40] for a, _ in BAD_ARGUMENTS])
def test_a_bad_argument_is_one_escaped_line_and_exit_2(args, words):
    if "--serve" in args:
        pytest.importorskip("prometheus_client")
    assert_refused(run_cli(*args), *words)


def test_a_cgroup_of_another_hierarchy_is_one_line_and_exit_2():
    other = _other_hierarchy()
    if other is None:
        pytest.skip("one cgroup hierarchy only is mounted here")
    assert_refused(run_cli("host", "--once", "--interval", "0", "--cgroup", other), "--cgroup", "hierarchy")


def test_a_cgroup_directory_is_normalised():
    import json

    mount = _cpu_mount()
    if mount is None:
        pytest.skip("no cpu cgroup hierarchy mounted from its root here")
    proc = run_cli("host", "--once", "--json", "--all", "--interval", "0", "--cgroup", mount + "/./")
    assert proc.returncode == 0, proc.stderr
    assert os.getpid() in {p["pid"] for p in json.loads(proc.stdout)["processes"]}


@pytest.mark.parametrize("call, words", [
    (lambda h: h.scan(user=-1), "out of range"),
    (lambda h: h.scan(user=True), "not text but bool"),
    (lambda h: h.scan(user="99999999999999999999"), "out of range"),
    (lambda h: h.scan(user="no-such-user-here"), "no such user"),
    (lambda h: h.scan(cgroup=5), "not text but int"),
    (lambda h: h.scan(cgroup=".."), "climbs above the root"),
    (lambda h: h.scan(interval=float("nan")), "out of range"),
])
def test_the_api_raises_usage_error_for_the_same_mistakes(call, words):
    import parinfo.host
    from parinfo.errors import UsageError

    with pytest.raises(UsageError, match=words):
        call(parinfo.host)


@pytest.mark.parametrize("pid", ["٣", True, -5, 10 ** 30, "9" * 5000])
def test_inspect_refuses_a_bad_pid(pid):
    import parinfo
    from parinfo.errors import UsageError

    with pytest.raises(UsageError, match="pid"):
        parinfo.inspect(pid=pid)


@pytest.mark.parametrize("check, value", [
    ("integer", "²"), ("integer", "٣"), ("integer", "9" * 5000), ("integer", " 5"), ("integer", "1_0"),
    ("seconds", "nan"), ("seconds", "inf"), ("seconds", "1e999"), ("seconds", "٣"), ("seconds", "-1"),
    ("port", "0"), ("port", "65536"), ("port", ""), ("host", "a..b"), ("host", "-a.b"), ("host", "a" * 64),
    ("host", "fe80::1%\x1b"), ("host", "\u2488.com"), ("listen", "example.org:1"), ("listen", "[::1"),
])
def test_checks_refuse_with_one_escaped_line(check, value):
    from parinfo.machine import checks

    call = {"integer": lambda v: checks.integer(v, "--n", 0, 10), "seconds": lambda v: checks.seconds(v, "--s", 0, 10),
            "port": lambda v: checks.port(v, "--p", "fix"), "host": lambda v: checks.host(v, "--h", "fix"),
            "listen": lambda v: checks.listen_address(v)}[check]
    with pytest.raises(checks.BadValue) as info:
        call(value)
    text = str(info.value)
    assert "\n" not in text and "\x1b" not in text and len(text) < 400


@pytest.mark.parametrize("value, expected", [
    ("9464", ("127.0.0.1", 9464)), (":9464", ("127.0.0.1", 9464)), ("[::1]:1", ("::1", 1)),
    ("::1:1", ("::1", 1)), ("localhost:65535", ("localhost", 65535)), ("0.0.0.0:80", ("0.0.0.0", 80)),
])
def test_listen_addresses_are_kept(value, expected):
    from parinfo.machine.checks import listen_address

    assert listen_address(value) == expected


# --- everything shown escaped for where it goes ---------------------------------------------------

#: A child that names itself with control characters (PR_SET_NAME), loads OpenBLAS and waits.
HOSTILE_CHILD = """
import ctypes, sys
import numpy
name = sys.argv[1].encode()
ctypes.CDLL(None, use_errno=True).prctl(15, ctypes.c_char_p(name), 0, 0, 0)
print(open('/proc/self/comm', 'rb').read().hex(), flush=True)
sys.stdin.read()
"""


@pytest.fixture
def hostile_child():
    proc = subprocess.Popen([sys.executable, "-c", HOSTILE_CHILD, ESC], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=clean_env(OPENBLAS_NUM_THREADS="2"))
    try:
        comm = bytes.fromhex(proc.stdout.readline().strip() or "00")
        assert b"\x1b" in comm, comm
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=10)


def _label_values(body: str) -> list[str]:
    """Every label value of a Prometheus text exposition, unescaped as a scraper reads it."""
    import re

    values = []
    for line in body.splitlines():
        if line.startswith("#") or "{" not in line:
            continue
        labels = line[line.index("{") + 1:line.rindex("}")]
        for raw in re.findall(r'="((?:[^"\\]|\\.)*)"', labels):
            values.append(re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), raw))
    return values


def _no_controls(values: list[str]) -> None:
    bad = [v for v in values if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in v)]
    assert bad == []


def _one_scrape(*args: str) -> str:
    """The body of one scrape of ``parinfo ARGS --serve`` on 127.0.0.1, the server stopped cleanly."""
    from prometheus_server import scrape, serve, stop

    server, port = serve(*args)
    try:
        body = scrape(port)
    finally:
        code, err = stop(server)
    assert code == 0 and "Traceback" not in err, err
    return body


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", ["host", "watch"])
def test_served_label_values_hold_no_control_characters(hostile_child, command):
    pytest.importorskip("prometheus_client")

    args = ["host"] if command == "host" else ["watch", "--pid", str(hostile_child.pid)]
    body = _one_scrape(*args)
    values = _label_values(body)
    assert values and "\x1b" not in body and "\x07" not in body
    _no_controls(values)
    if command == "host":
        assert "\\x1b]0;PWND\\x07\\x1b[2J" in values, [v for v in values if "PWND" in v]
    else:
        assert str(hostile_child.pid) in values


@pytest.mark.timeout(120)
def test_host_table_json_and_html_escape_a_hostile_name(hostile_child):
    import json

    from parinfo.host.scanner import Scanner

    table = run_cli("host", "--once", "--all", "--interval", "0").stdout
    assert "\x1b" not in table and "\x07" not in table and f"{hostile_child.pid} " in table
    payload = run_cli("host", "--once", "--json", "--interval", "0").stdout
    assert "\x1b" not in payload
    (row,) = [p for p in json.loads(payload)["processes"] if p["pid"] == hostile_child.pid]
    assert row["name"] == ESC  # JSON carries the name as it is, escaped by JSON itself
    report = Scanner().scan()
    html = report._repr_html_()
    assert "\x1b" not in html and "\x07" not in html


@pytest.fixture
def hostile_cgroup(hostile_child):
    """A real cgroup named with control characters, with a CPU quota, holding ``hostile_child``."""
    from real_cgroup import quota_cgroup

    with quota_cgroup(0.5, f"-{ESC}") as made:
        if isinstance(made, str):
            pytest.skip(f"cannot make a cgroup named with control characters: {made}")
        cg, _ = made
        (cg / "cgroup.procs").write_text(str(hostile_child.pid))
        try:
            yield cg
        finally:
            hostile_child.kill()
            hostile_child.wait(timeout=10)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", ["host", "watch"])
def test_a_cgroup_named_with_control_characters_is_escaped_in_label_values(hostile_child, hostile_cgroup, command):
    pytest.importorskip("prometheus_client")

    args = (["host", "--cgroup", str(hostile_cgroup)] if command == "host"
            else ["watch", "--pid", str(hostile_child.pid)])
    values = _label_values(_one_scrape(*args))
    _no_controls(values)
    assert any(v.endswith("\\x1b]0;PWND\\x07\\x1b[2J") for v in values), values


# --- /metrics?name[]=... ------------------------------------------------------------------------

def _get(port: int, query: str) -> tuple[int, str]:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics?{query}", timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", ["host", "watch"])
def test_a_name_filter_selects_families_and_one_that_selects_nothing_is_a_400(command):
    pytest.importorskip("prometheus_client")
    from prometheus_server import serve, stop

    server, port = serve(command)
    try:
        status, body = _get(port, "name[]=parinfo_usable_cpus")
        assert status == 200 and "parinfo_usable_cpus" in body
        assert {line.split()[2] for line in body.splitlines() if line.startswith("# TYPE")} == {"parinfo_usable_cpus"}
        status, body = _get(port, "name[]=parinfo_cpu_throttled_periods_total&name[]=nosuch")
        assert status == 200 and "# TYPE parinfo_cpu_throttled_periods_total counter" in body
        for query in ("name[]=", "name[]=nosuch", "name%5B%5D=no%1Bsuch"):
            status, body = _get(port, query)
            assert status == 400, (query, body)
            assert len(body.strip().splitlines()) == 1 and "parinfo_usable_cpus" in body and "\x1b" not in body
        status, body = _get(port, "")
        assert status == 200 and "# TYPE parinfo_findings gauge" in body
    finally:
        code, err = stop(server)
    assert code == 0 and "Traceback" not in err, err
