"""Issue 40 item 1: the advisories table (known-bad library versions, each with its citation and the
upgrade that fixes it) and the known-bad-version rule: a warning where the report shows the
trigger, info where it does not, nothing on a fixed version; and the numpy#29391 row against numpy
2.3.0's real wheel (OpenBLAS 0.3.29)."""
from __future__ import annotations

import fcntl
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, clean_env

from parinfo.diagnostics import process_rules
from parinfo.diagnostics.model import Report
from parinfo.process import libraries as reg
from parinfo.process.advisories import ADVISORIES, Trigger, version_key

REFERENCE = re.compile(r"^[\w.-]+( PR)?#\d+$")  # numpy#29391, OpenBLAS PR#5838
LAYERS = {"pthreads", "openmp", "disabled"}  # threadpoolctl's OpenBLAS threading layers


def test_the_table_has_ten_rows_each_cited_with_a_fix():
    assert len(ADVISORIES) >= 10
    for a in ADVISORIES:
        assert reg.find(a.library) is not None, a
        assert REFERENCE.match(a.reference), a.reference  # an upstream issue or pull request first
        assert all(ref.strip() for ref in a.references)
        assert version_key(a.fixed) is not None, a
        assert a.first_bad is None or version_key(a.first_bad) < version_key(a.fixed), a
        assert a.upgrade.strip() and a.what.strip()
        assert a.layer is None or a.layer in LAYERS
        assert a.arch in (None, "aarch64", "x86_64")
        assert isinstance(a.trigger, Trigger) and a.min_threads >= 1
        assert not set(a.owners) & set(a.not_owners)


def test_rows_of_one_bug_split_by_owner_do_not_overlap():
    """A bug fixed by a numpy release for numpy's copy and by an OpenBLAS release elsewhere has two
    rows: the generic one leaves numpy's copy to the other."""
    by_ref: dict[str, list] = {}
    for a in ADVISORIES:
        by_ref.setdefault(a.reference, []).append(a)
    for rows in by_ref.values():
        owned = [a for a in rows if a.owners]
        for a in rows:
            if not a.owners:
                assert all(set(o.owners) <= set(a.not_owners) for o in owned), rows


@pytest.mark.parametrize(("low", "high"), [("0.3.4", "0.3.31"), ("0.3.31", "0.3.31.188.0"), ("0.3.30", "0.3.30.0.7"),
                                           ("0.3.29.dev", "0.3.30"), ("0.3.9", "0.3.10")])
def test_versions_compare_as_versions_not_strings(low, high):
    assert version_key(low) < version_key(high)
    assert version_key("0.3.31.0") == version_key("0.3.31")
    assert version_key("unknown") is None and version_key(None) is None


def report(version="0.3.29", owner="numpy", count=4, python_threads=3, arch="x86_64", layer="pthreads",
           workers=0) -> Report:
    pool = {"library": "openblas", "user_api": "blas", "internal_api": "openblas", "prefix": "libscipy_openblas",
            "filepath": f"/venv/site-packages/{owner}.libs/libscipy_openblas64_.so", "version": version,
            "num_threads": count, "threading_layer": layer, "owner": owner}
    threads = [{"name": "MainThread", "native_id": 1, "here": True}]
    threads += [{"name": f"ThreadPoolExecutor-0_{i}", "native_id": 2 + i, "worker": "ThreadPoolExecutor-0"}
                for i in range(workers)]
    sections = {"machine": {"usable_cpus": 8, "usable_physical_cores": 8, "affinity": list(range(8)),
                            "logical_cpus": 8},
                "cpu": {"arch": arch}, "pools": [pool],
                "backend": {"python": {"free_threaded_build": False, "python_threads": python_threads}},
                "teams": {"columns": [{"pool": "openblas", "scope": "process", "shared": True}],
                          "threads": threads} if workers else {}}
    return Report.from_dict(sections)


def advisories(r: Report, ref: str) -> list:
    return [f for f in process_rules.diagnose(r) if f.id == "known-bad-version" and f"({ref})" in f.message]


def test_numpy_29391_is_a_warning_with_two_calling_threads_and_the_upgrade():
    [f] = advisories(report(workers=2), "numpy#29391")
    assert f.severity == "warning"
    assert "OpenBLAS 0.3.29 (numpy's copy)" in f.message and "2 threads of a thread pool" in f.why
    assert f.fix.startswith("pip install 'numpy>=2.3.5'")
    [f] = advisories(report(python_threads=None, workers=2), "numpy#29391")  # the teams section alone says it
    assert f.severity == "warning" and "2 threads of a thread pool" in f.why


def test_python_threads_of_no_thread_pool_leave_the_trigger_unknown():
    """Other Python threads (a notebook's, a test runner's timer) may never call BLAS: info, saying so."""
    [f] = advisories(report(), "numpy#29391")
    assert f.severity == "info" and "not known here: 3 live Python threads, none of them a thread pool's" in f.why


def test_numpy_29391_is_info_without_its_trigger():
    [alone] = advisories(report(python_threads=1), "numpy#29391")
    assert alone.severity == "info" and "not triggered now: 1 live Python thread" in alone.why
    [narrow] = advisories(report(count=2), "numpy#29391")  # 2 OpenBLAS threads: it needs 3
    assert narrow.severity == "info" and "it shows from 3" in narrow.why
    [unread] = advisories(report(python_threads=None), "numpy#29391")
    assert unread.severity == "info" and "could not be read" in unread.why


def test_no_advisory_on_a_fixed_version():
    assert advisories(report(version="0.3.30.0.7"), "numpy#29391") == []  # numpy 2.3.5's patched build
    assert advisories(report(version="0.3.31", owner="system"), "numpy#29391") == []
    assert [f for f in process_rules.diagnose(report(version="0.3.34.106.0")) if f.id == "known-bad-version"] == []


def test_another_owners_copy_gets_the_openblas_upgrade_not_numpys():
    [f] = advisories(report(owner="system"), "numpy#29391")
    assert "OpenBLAS 0.3.31 or later" in f.fix and "numpy" not in f.fix.split(";")[0]


def test_an_arm_only_row_needs_arm_and_its_own_threads():
    [f] = advisories(report(version="0.3.31.22.0", arch="aarch64", python_threads=1), "numpy#30816")
    assert f.severity == "warning" and f.fix.startswith("pip install 'numpy>=2.4.4'")
    assert advisories(report(version="0.3.31.22.0", arch="x86_64"), "numpy#30816") == []
    [one] = advisories(report(version="0.3.31.22.0", arch="aarch64", count=1), "numpy#30816")
    assert one.severity == "info"


def test_a_layer_bound_row_skips_other_layers():
    assert advisories(report(version="0.2.20", layer="openmp"), "numpy#11046") == []
    assert advisories(report(version="0.2.20", layer="pthreads"), "numpy#11046")


# The real wheel: numpy 2.3.0 ships OpenBLAS 0.3.29 (checked with threadpoolctl in the process).
OLD_NUMPY = "numpy==2.3.0"
_PROBE = """
import json, sys, threading
from concurrent.futures import ThreadPoolExecutor
import numpy as np, threadpoolctl
import parinfo
threadpoolctl.threadpool_limits(4)  # numpy#29391 needs 3+ OpenBLAS threads; a small machine defaults lower
release = threading.Event()
def work(i):
    a = np.ones((100_000, 3)) * i
    ok = bool((np.dot(a, np.eye(3).T) == i).all())
    release.wait(60)
    return ok
pool = ThreadPoolExecutor(2) if sys.argv[1] == "threads" else None
futures = [pool.submit(work, i) for i in range(2)] if pool else []
while pool is not None and len(threading.enumerate()) < 3:
    threading.Event().wait(0.01)
found = [{"severity": str(f.severity), "message": f.message, "why": f.why, "fix": f.fix}
         for f in parinfo.inspect().findings if f.id == "known-bad-version"]
release.set()
blas = [i for i in threadpoolctl.threadpool_info() if i["internal_api"] == "openblas"]
print(json.dumps({"numpy": np.__version__, "openblas": blas[0]["version"], "findings": found}))
"""


def _old_numpy_dir() -> Path:
    """numpy 2.3.0's wheel unpacked once under the tests' cache (a folder named site-packages, so the
    pool's owner reads numpy); skipped, in one line, where pip cannot fetch it."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from cache_dir import cache

    root = cache()
    target = root / f"numpy-2.3.0-py{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / "numpy" / "__init__.py").exists():
            done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                                   "--no-deps", "--only-binary=:all:", "--target", str(target), OLD_NUMPY],
                                  capture_output=True, text=True, timeout=600)
            if done.returncode != 0:
                last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
                pytest.skip(f"pip cannot fetch {OLD_NUMPY}: {last[0]}")
    return target


def _probe(how: str, site: Path | None) -> dict:
    path = f"{site}:{REPO}" if site is not None else str(REPO)
    done = subprocess.run([sys.executable, "-c", _PROBE, how], env=clean_env(PYTHONPATH=path),
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _ref(result: dict, ref: str) -> list[dict]:
    return [f for f in result["findings"] if f"({ref})" in f["message"]]


@pytest.mark.wheels
def test_numpy_230_with_two_calling_threads_gets_numpy_29391_as_a_warning():
    result = _probe("threads", _old_numpy_dir())
    assert (result["numpy"], result["openblas"]) == ("2.3.0", "0.3.29")
    [f] = _ref(result, "numpy#29391")
    assert f["severity"] == "warning", f
    assert "pip install 'numpy>=2.3.5'" in f["fix"]


@pytest.mark.wheels
def test_numpy_230_single_threaded_gets_numpy_29391_as_info():
    result = _probe("alone", _old_numpy_dir())
    [f] = _ref(result, "numpy#29391")
    assert f["severity"] == "info", f


@pytest.mark.wheels
def test_the_current_numpy_gets_no_numpy_29391():
    result = _probe("threads", None)
    assert version_key(result["openblas"]) >= version_key("0.3.31")
    assert _ref(result, "numpy#29391") == []


# A process read from outside: its pool rows carry the version its OpenBLAS file states, the one
# threadpoolctl reads inside; the advisories are those the table gives that copy (info: its calling
# threads cannot be read from outside).
_TARGET = """
import json, os, sys, threadpoolctl, numpy
blas = [i for i in threadpoolctl.threadpool_info() if i["internal_api"] == "openblas"][0]
print(json.dumps({"version": blas["version"], "filepath": blas["filepath"], "arch": os.uname().machine}), flush=True)
sys.stdin.read()
"""


def _expected(truth: dict) -> set[str]:
    return {a.reference for a in ADVISORIES if a.covers(truth["version"], "numpy", None, truth["arch"])}


def test_show_pid_reads_the_version_from_outside_and_gives_its_advisories():
    from conftest import run_cli, start_target, stop_target

    proc, truth = start_target(_TARGET)
    try:
        out = run_cli("show", "--pid", str(proc.pid), "--json")
    finally:
        stop_target(proc)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    [row] = [p for p in report["pools"] if p["filepath"] == truth["filepath"]]
    assert row["version"] == truth["version"]
    found = [f for f in report["findings"] if f["id"] == "known-bad-version"]
    assert _refs([f["message"] for f in found]) == _expected(truth)
    assert all(f["severity"] == "info" for f in found)  # its calling threads: not readable from outside


def _refs(messages: list[str]) -> set[str]:
    return {re.search(r"known-bad version \(([^()]+#\d+)\)", m).group(1) for m in messages}


def test_host_names_the_process_that_loads_a_known_bad_version():
    from conftest import start_target, stop_target

    from parinfo.host.judging import CgroupInfo, advisories
    from parinfo.host.model import HostProcess, PoolCount
    from parinfo.machine.procfs import Proc
    from parinfo.records.source import unknown

    proc, truth = start_target(_TARGET)
    try:
        pool = PoolCount("openblas", truth["filepath"], "numpy", None, unknown("not read"))
        member = HostProcess(proc.pid, 0, "python", "python", "me", "/", "/", 2, 2, pools=[pool])
        found = advisories("the machine", [member], CgroupInfo("/", "/", None, None, 2, Proc.of(proc.pid), 0.0))
    finally:
        stop_target(proc)
    assert _refs([f.message for f in found]) == _expected(truth)
    assert all(f.message.startswith(f"the machine: pid {proc.pid} loads OpenBLAS {truth['version']}") for f in found)


def test_the_pytest_header_says_each_advisory_of_the_numpy_the_tests_import(tmp_path):
    from conftest import start_target, stop_target

    proc, truth = start_target(_TARGET)  # this numpy's OpenBLAS, as threadpoolctl reads it inside
    stop_target(proc)
    test = "import numpy\n\n\ndef test_x():\n    assert numpy.ones(2).sum() == 2\n"
    (tmp_path / "test_uses_numpy.py").write_text(test)
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "parinfo.pytest_plugin", "-p", "no:cacheprovider",
                           "--co", str(tmp_path)], cwd=tmp_path, env=clean_env(PYTHONPATH=str(REPO)),
                          capture_output=True, text=True, timeout=120)
    lines = [line for line in done.stdout.splitlines() if line.startswith("parinfo: info: known-bad-version:")]
    assert _refs(lines) == _expected(truth), done.stdout
    assert all("; fix: " in line for line in lines)


@pytest.mark.parametrize(("text", "version"), [(b"OpenBLAS 0.3.21.dev DYNAMIC_ARCH NO_AFFINITY", "0.3.21.dev"),
                                               (b"OpenBLAS 0.3.31.188.0 DYNAMIC_ARCH", "0.3.31.188.0"),
                                               (b"no version text here", None)])
def test_the_version_is_read_from_the_file_without_loading_it(tmp_path, text, version):
    from parinfo.process.file_version import version_in_file

    lib = tmp_path / "libopenblas.so.0"
    lib.write_bytes(b"\x7fELF" + b"\x00" * 4096 + text + b"\x00" * 64)
    assert version_in_file(str(lib), "openblas") == version
    assert version_in_file(str(tmp_path / "gone.so"), "openblas") is None
    assert version_in_file(str(lib), "libgomp") is None  # no version text the registry knows of in its file


def test_a_hostile_file_costs_bounded_work_and_never_a_crash(tmp_path, monkeypatch):
    """The file may be another user's: its version text is found across the pieces it is read in,
    kept to 40 characters, and a file past the size bound, or a FIFO in its place, is not read."""
    import os

    from parinfo.process import file_version

    monkeypatch.setattr(file_version, "CHUNK", 64)
    lib = tmp_path / "libopenblas.so.0"
    lib.write_bytes(b"\x00" * 60 + b"OpenBLAS 0.3.29 DYNAMIC_ARCH" + b"\x00" * 200)  # the marker spans two pieces
    assert file_version.version_in_file(str(lib), "openblas") == "0.3.29"
    long = tmp_path / "liblong.so"
    long.write_bytes(b"OpenBLAS 0.3." + b"9" * 500)
    found = file_version.version_in_file(str(long), "openblas")
    assert found is not None and found.startswith("0.3.9") and len(found) == len("0.3") + 40
    monkeypatch.setattr(file_version, "MAX_FILE", 1024)
    big = tmp_path / "libbig.so"
    with open(big, "wb") as fh:
        fh.truncate(1 << 30)  # sparse: 1 GiB claimed
    assert file_version.version_in_file(str(big), "openblas") is None
    fifo = tmp_path / "libfifo.so"
    os.mkfifo(fifo)
    assert file_version.version_in_file(str(fifo), "openblas") is None
