"""Counts in force read from another process's memory (parinfo.outside.inforce), checked against
the library's own getter run inside that process (threadpoolctl, or the OpenBLAS getter through
ctypes): real numpy/scipy processes at different counts, one limited after import, under taskset,
of another user, in another mount and pid namespace, with its library file deleted."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, clean_env, run_cli, start_target, stop_target

import parinfo.host
from parinfo.machine.procfs import Proc
from parinfo.outside import inforce
from parinfo.outside.inforce import IN_FORCE, PERMISSION, counts_in_force, mapped_files
from parinfo.process import elfcount
from parinfo.process.tasks import ProcessGone
from parinfo.records.source import Source, SourceKind

pytest.importorskip("numpy")
pytest.importorskip("scipy")
pytest.importorskip("threadpoolctl")

# The target reports what threadpoolctl sees inside it, then waits for a line on stdin.
TARGET = """
import json, sys
import numpy, scipy.linalg, threadpoolctl
limit = int(sys.argv[1])
if limit:
    threadpoolctl.threadpool_limits(limit)   # after import: no environment variable says it
print(json.dumps({i["filepath"]: i["num_threads"] for i in threadpoolctl.threadpool_info()
                  if i["internal_api"] == "openblas"}), flush=True)
sys.stdin.readline()
"""

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def _by_file(rows: list[inforce.CountInForce]) -> dict[str, inforce.CountInForce]:
    return {os.path.realpath(r.path): r for r in rows}


@pytest.mark.parametrize(("limit", "launch", "taskset"), [
    (0, {}, False),                               # the default: its CPUs
    (1, {}, False),                               # limited after import
    (3, {"OPENBLAS_NUM_THREADS": "1"}, False),    # launched with 1, raised to 3 after import
    (0, {}, True),                                # taskset -c 0
], ids=["default", "limited-after-import", "raised-after-launch", "taskset"])
def test_count_read_from_memory_is_threadpoolctls_inside(limit, launch, taskset):
    if taskset and shutil.which("taskset") is None:
        pytest.skip("taskset is not installed")
    proc, truth = start_target(TARGET, str(limit), env=clean_env(**launch),
                         prefix=["taskset", "-c", "0"] if taskset else None)
    try:
        assert isinstance(truth, dict) and len(truth) == 2  # numpy's and scipy's OpenBLAS
        rows = _by_file(counts_in_force(Proc.of(proc.pid)))
        for path, expected in truth.items():
            row = rows[os.path.realpath(path)]
            assert (row.library, row.count, row.source) == ("openblas", expected, IN_FORCE), row
        if limit:
            assert set(truth.values()) == {limit}
        elif taskset:
            assert set(truth.values()) == {1}
        else:
            assert set(truth.values()) == {len(os.sched_getaffinity(0))}
    finally:
        stop_target(proc)


def test_the_target_is_not_stopped_and_a_second_read_hits_the_cache(monkeypatch):
    proc, _ = start_target(TARGET, "1")
    try:
        first = counts_in_force(Proc.of(proc.pid))
        parsed = []
        real = elfcount.locate
        monkeypatch.setattr(elfcount, "locate", lambda fd, spec: parsed.append(fd) or real(fd, spec))
        assert counts_in_force(Proc.of(proc.pid)) == first and parsed == []
        with open(f"/proc/{proc.pid}/stat") as fh:
            assert fh.read().rsplit(")", 1)[1].split()[0] in "RS"  # neither stopped (T) nor traced (t)
        assert proc.poll() is None
    finally:
        stop_target(proc)


@ROOT_ONLY
def test_process_of_another_user_is_read_by_root_and_refused_to_a_third():
    proc, truth = start_target(TARGET, "1", prefix=NOBODY, env=clean_env(HOME="/tmp"))
    try:
        rows = _by_file(counts_in_force(Proc.of(proc.pid)))
        assert {rows[os.path.realpath(p)].count for p in truth} == {1}
        # daemon (uid 1) may read neither nobody's maps nor its memory
        with open(f"/proc/{proc.pid}/maps") as fh:
            maps = fh.read()
        probe = ("import json, sys; from parinfo.records.convert import dump; "
                 "from parinfo.outside.inforce import counts_in_force\nfrom parinfo.machine.procfs import Proc\n"
                 "from parinfo.process.tasks import NoAccess\n"
                 "pid, maps = int(sys.argv[1]), sys.stdin.read()\n"
                 "try:\n    counts_in_force(Proc.of(pid))\nexcept NoAccess as e:\n    refused = str(e)\n"
                 "rows = [dump(r) for r in counts_in_force(Proc.of(pid), maps)]\n"
                 "print(json.dumps({'refused': refused, 'rows': rows}))")
        out = subprocess.run(["setpriv", "--reuid=1", "--regid=1", "--clear-groups", sys.executable, "-c", probe,
                              str(proc.pid)], input=maps, capture_output=True, text=True, timeout=60,
                             env=clean_env(PYTHONPATH=str(REPO), HOME="/tmp"))
        assert out.returncode == 0, out.stderr
        got = json.loads(out.stdout)
        assert "run parinfo as the process's user or as root" in got["refused"]
        assert len(got["rows"]) == 2
        assert all(r["count"] is None and r["source"]["text"] == f"unknown ({PERMISSION})" for r in got["rows"])
    finally:
        stop_target(proc)


# A process that loads a copy of scipy's OpenBLAS by hand, sets it to 1 through the copy's own setter
# and reports the copy's own getter.
COPY = """
import ctypes, json, sys
lib = ctypes.CDLL(sys.argv[1])
setter = getattr(lib, "scipy_openblas_set_num_threads", None) or lib.openblas_set_num_threads
getter = getattr(lib, "scipy_openblas_get_num_threads", None) or lib.openblas_get_num_threads
setter(1)
print(json.dumps({"pid": __import__("os").getpid(), "count": getter()}), flush=True)
sys.stdin.readline()
"""


def _scipy_openblas() -> Path:
    import scipy

    libs = Path(scipy.__file__).resolve().parent.parent / "scipy.libs"
    found = sorted(libs.glob("libscipy_openblas*.so*"))
    if not found:
        pytest.skip("this scipy ships no OpenBLAS of its own")
    return found[0]


def _copy_beside_its_needs(src: Path, folder: Path, name: str) -> Path:
    """Copy ``src`` as ``folder/name`` with the libraries it needs (its RPATH is $ORIGIN)."""
    for other in src.parent.iterdir():
        if other != src:
            shutil.copy(other, folder / other.name)
    shutil.copy(src, folder / name)
    return folder / name


def test_library_file_deleted_after_load_is_read_through_map_files(tmp_path):
    copy = _copy_beside_its_needs(_scipy_openblas(), tmp_path, "libopenblas_copy.so")
    proc, truth = start_target(COPY, str(copy))
    try:
        copy.unlink()
        rows = counts_in_force(Proc.of(proc.pid))
        assert [(r.path, r.count, r.source) for r in rows] == [(str(copy), truth["count"], IN_FORCE)]
        assert truth["count"] == 1
    finally:
        stop_target(proc)


def test_a_file_without_the_count_variable_is_unknown_with_why(tmp_path):
    import importlib.util

    spec = importlib.util.find_spec("torch")  # found, not imported: only its libgomp file is wanted
    gomp = Path(spec.origin).parent / "lib" / "libgomp.so.1" if spec and spec.origin else None
    if gomp is None or not gomp.exists():
        pytest.skip("no libgomp beside torch")
    fake = tmp_path / "libopenblas_not_really.so"
    shutil.copy(gomp, fake)
    proc, _ = start_target("import ctypes, sys; ctypes.CDLL(sys.argv[1]); print('{}', flush=True); "
                           "sys.stdin.readline()", str(fake))
    try:
        (row,) = counts_in_force(Proc.of(proc.pid))
        assert row.count is None and row.source.kind is SourceKind.UNKNOWN
        assert row.source.detail.startswith("the file exports none of openblas_get_num_threads")
    finally:
        stop_target(proc)


@ROOT_ONLY
@pytest.mark.skipif(shutil.which("unshare") is None, reason="unshare is not installed")
def test_process_in_another_mount_and_pid_namespace_is_read_as_it_sees_its_files():
    import tempfile

    inside = Path(tempfile.mkdtemp(prefix="parinfo-ns-"))  # empty here; a tmpfs with the library inside
    inside.chmod(0o755)
    src = _scipy_openblas()
    script = (f"mount -t tmpfs -o mode=755 none {inside} && cp {src.parent}/* {inside}/ && "
              f"cp {src} {inside}/libopenblas_ns.so && exec {' '.join(NOBODY)} {sys.executable} -c '{COPY}' "
              f"{inside}/libopenblas_ns.so")
    proc = subprocess.Popen(["unshare", "--mount", "--pid", "--fork", "--propagation", "private", "sh", "-c", script],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=clean_env(HOME="/tmp"))
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if not line:
            pytest.skip(f"cannot make namespaces here: {proc.stderr.read() if proc.stderr else ''}")
        truth = json.loads(line)
        from parinfo.outside.remote import children

        target = children(Proc.of(proc.pid))[-1]  # unshare -> (forked) python, pid 1 inside its namespace
        assert truth["pid"] != target.pid and not (inside / "libopenblas_ns.so").exists()
        expected = [(f"{inside}/libopenblas_ns.so", truth["count"], IN_FORCE)]
        # root opens the mapped file through /proc/PID/map_files
        assert [(r.path, r.count, r.source) for r in counts_in_force(target)] == expected
        # the process's own user may not use map_files: it goes through /proc/PID/root
        probe = ("import json, sys; from parinfo.outside.inforce import counts_in_force\n"
                 "from parinfo.machine.procfs import Proc\n"
                 "rows = counts_in_force(Proc.of(int(sys.argv[1])))\n"
                 "print(json.dumps([[r.path, r.count, r.source.to_json()] for r in rows]))")
        out = subprocess.run([*NOBODY, sys.executable, "-c", probe, str(target.pid)], capture_output=True, text=True,
                             timeout=60, env=clean_env(PYTHONPATH=str(REPO), HOME="/tmp"))
        assert out.returncode == 0, out.stderr
        assert [(r[0], r[1], Source.from_json(r[2])) for r in json.loads(out.stdout)] == expected
    finally:
        stop_target(proc)
        shutil.rmtree(inside, ignore_errors=True)


def test_a_pid_that_names_no_process_raises_gone():
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    with pytest.raises(ProcessGone):
        counts_in_force(Proc.of(int(dead.stdout)))


def test_a_process_that_exits_during_the_read_raises_gone():
    proc, _ = start_target(TARGET, "0")
    with open(f"/proc/{proc.pid}/maps") as fh:
        maps = fh.read()
    stop_target(proc)
    time.sleep(0.1)
    with pytest.raises(ProcessGone):
        counts_in_force(Proc.of(proc.pid), maps)  # maps read while it lived; its memory is gone


def test_maps_text_gives_each_file_once_with_its_load_base():
    text = """\
7f0000000000-7f0000001000 r--p 00001000 08:01 42 /lib/libopenblas.so.0
7f0000001000-7f0000003000 r--p 00000000 08:01 42 /lib/libopenblas.so.0
7f0000003000-7f0000004000 r-xp 00002000 08:01 42 /lib/libopenblas.so.0
7f0000010000-7f0000011000 r--p 00000000 00:05 77 /tmp/libgone.so (deleted)
7f0000020000-7f0000021000 rw-p 00000000 00:00 0 [heap]
7f0000030000-7f0000031000 rw-p 00000000 00:00 0
"""
    found = mapped_files(text)
    assert [(m.path, m.start, m.end, m.inode, m.deleted) for m in found] == [
        ("/lib/libopenblas.so.0", 0x7F0000001000, 0x7F0000003000, 42, False),
        ("/tmp/libgone.so", 0x7F0000010000, 0x7F0000011000, 77, True)]


@ROOT_ONLY
def test_no_access_to_maps_raises_no_access():
    probe = ("import sys; from parinfo.outside.inforce import counts_in_force\n"
             "from parinfo.machine.procfs import Proc\n"
             "from parinfo.process.tasks import NoAccess\n"
             "try:\n    counts_in_force(Proc.of(1))\nexcept NoAccess as e:\n    print('refused:', e)")
    out = subprocess.run([*NOBODY, sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                         env=clean_env(PYTHONPATH=str(REPO), HOME="/tmp"))
    assert out.stdout.startswith("refused: cannot read /proc/1/maps of pid 1"), out


# ---------------------------------------------------------------------------------------------
# Every reader (counts_in_force, show --pid, the host scan) against threadpoolctl inside the target:
# the current numpy, and a numpy whose OpenBLAS file was deleted or replaced after load

LIMITED = """
import json, sys
import numpy, threadpoolctl
threadpoolctl.threadpool_limits(1)
print(json.dumps({i["filepath"]: i["num_threads"] for i in threadpoolctl.threadpool_info()
                  if i["internal_api"] == "openblas"}), flush=True)
sys.stdin.readline()
"""


def _every_reader_says(pid: int, truth: dict[str, int]) -> None:
    """counts_in_force, `show --pid --json` and parinfo.host.scan() give each OpenBLAS of ``pid``
    the count threadpoolctl reported inside it, as in force."""
    def plain(path: str) -> str:
        return os.path.realpath(path.removesuffix(" (deleted)"))

    want = {plain(p): n for p, n in truth.items()}
    assert want and set(want.values()) == {1}
    assert {plain(r.path): (r.count, r.source) for r in counts_in_force(Proc.of(pid))} == {p: (n, IN_FORCE)
                                                                                   for p, n in want.items()}
    report = json.loads(run_cli("show", "--pid", str(pid), "--json").stdout)
    shown = {plain(p["filepath"]): (p["num_threads"], p["count_source"]) for p in report["pools"]
             if p["library"] == "openblas"}
    assert shown == {p: (n, IN_FORCE.to_json()) for p, n in want.items()}, report["pools"]
    (row,) = [p for p in parinfo.host.scan(interval=0).processes if p.pid == pid]
    scanned = {plain(c.path): (c.count, c.in_force) for c in row.pools if c.library == "openblas"}
    assert scanned == {p: (n, True) for p, n in want.items()}, row.pools


def test_numpy_2_5_count_is_read_where_its_build_keeps_it(numpy25_python):
    proc, truth = start_target(LIMITED, env=clean_env(OPENBLAS_NUM_THREADS="2"), python=numpy25_python)
    try:
        _every_reader_says(proc.pid, truth)
    finally:
        stop_target(proc)


def test_numpy_2_4_count_is_read_by_every_reader():
    proc, truth = start_target(LIMITED, env=clean_env(OPENBLAS_NUM_THREADS="2"))
    try:
        _every_reader_says(proc.pid, truth)
    finally:
        stop_target(proc)


@pytest.fixture(scope="module")
def numpy_copy(tmp_path_factory) -> Path:
    """A copy of this environment's numpy (and its bundled libraries) that a test may delete from."""
    import numpy

    site = Path(numpy.__file__).resolve().parent.parent
    if not (site / "numpy.libs").is_dir():
        pytest.skip("this numpy bundles no OpenBLAS of its own")
    folder = tmp_path_factory.mktemp("numpy-copy")
    shutil.copytree(site / "numpy", folder / "numpy", ignore=shutil.ignore_patterns("tests", "__pycache__"))
    return folder


@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_a_numpy_whose_openblas_was_deleted_or_replaced_after_load_is_read_right(numpy_copy, tmp_path, how):
    import numpy

    folder = tmp_path / "site"
    shutil.copytree(numpy_copy, folder, symlinks=True)
    shutil.copytree(Path(numpy.__file__).resolve().parent.parent / "numpy.libs", folder / "numpy.libs")
    (lib,) = (folder / "numpy.libs").glob("lib*openblas*.so*")
    proc, truth = start_target(LIMITED, env=clean_env(OPENBLAS_NUM_THREADS="2", PYTHONPATH=str(folder)))
    try:
        assert [os.path.realpath(p) for p in truth] == [str(lib)]
        if how == "deleted":  # what pip uninstall does
            lib.unlink()
        else:  # what pip install -U does: a new file renamed over the old one
            shutil.copy(lib, tmp_path / "new.so")
            os.replace(tmp_path / "new.so", lib)
        with open(f"/proc/{proc.pid}/maps") as fh:
            assert f"{lib} (deleted)" in fh.read()
        _every_reader_says(proc.pid, truth)
    finally:
        stop_target(proc)
