"""The per-thread report (the ``teams`` section) and its findings: hand-made rows here, real
processes below (each worker's count read in that worker against what the report says of it)."""
from __future__ import annotations

import json

import pytest
from conftest import clean_env, run_py
from profile_machines import machine

from parinfo.diagnostics.model import Report
from parinfo.diagnostics.thread_rules import limit_not_in_workers, shared_pool_callers, teams_oversubscribed
from parinfo.process.pools import PoolRow
from parinfo.process.setter import Outcome
from parinfo.process.setting_row import SettingRow
from parinfo.process.thread_teams import LEGEND, PyThread, ThreadTeams, Why, build
from parinfo.records.source import Source, library_default, run_time

GOMP = "/site/sklearn.libs/libgomp-1.so"
OPENBLAS = "/site/numpy.libs/libscipy_openblas64_-2.so"
TORCH_GOMP = "/site/torch/lib/libgomp.so.1"


def _pools() -> list[PoolRow]:
    return [PoolRow("libgomp", "openmp", "openmp", GOMP, "libgomp", num_threads=1),
            PoolRow("openblas", "blas", "openblas", OPENBLAS, "libscipy_openblas", num_threads=2,
                    threading_layer="pthreads")]


def _rows(gomp: int = 1, gomp_source: Source | None = None, blas: int = 2) -> list[SettingRow]:
    return [SettingRow("parinfo intra-op", 2, library_default("usable cores"), own=True),
            SettingRow("libgomp", gomp, gomp_source or run_time("an API call"), expected_from_env=2, filepath=GOMP),
            SettingRow("openblas", blas, library_default("2 CPUs in affinity"), expected_from_env=2,
                       filepath=OPENBLAS)]


def _threads(*workers: PyThread) -> list[PyThread]:
    return [PyThread("MainThread", 100), *workers]


def _worker(name: str, tid: int, limits: tuple[Outcome, ...] = (), how: str | None = None) -> PyThread:
    return PyThread(name, tid, "concurrent.futures", how, limits)


def test_each_cell_says_how_its_count_is_known() -> None:
    limited = (Outcome("libgomp", GOMP, 1, 1, 2, "thread"),)
    teams = build(_rows(), _pools(), _threads(_worker("w0", 101), _worker("w1", 102, limited, "worker")), 100)
    assert [c.pool for c in teams.columns] == ["libgomp", "openblas"]  # parinfo's own rows have no column
    assert [(c.scope, c.shared) for c in teams.columns] == [("thread", False), ("process", True)]
    here, plain, limited_worker = teams.threads
    assert here.here and [(c.count, c.why, c.exact) for c in here.cells] == [(1, Why.HERE, True), (2, Why.HERE, True)]
    gomp, blas = plain.cells
    assert (gomp.count, gomp.why, gomp.exact) == (2, Why.DEFAULT, False)
    assert "predicted" in gomp.source.text and "not seen here" in gomp.source.text
    assert (blas.count, blas.why, blas.exact) == (2, Why.PROCESS, True)
    assert (limited_worker.team("libgomp"), limited_worker.cells[0].why) == (1, Why.SET_IN_THREAD)
    assert limited_worker.limited_by == "parinfo.worker_initializer"
    assert "set in that thread by parinfo.worker_initializer" in limited_worker.cells[0].source.text


def test_torch_and_its_own_openmp_are_unknown_in_other_threads_once_a_count_was_set_at_run_time() -> None:
    rows = [SettingRow("libgomp", 1, run_time("x"), expected_from_env=2, filepath=TORCH_GOMP),
            SettingRow("torch intra-op", 1, run_time("torch.set_num_threads"), expected_from_env=2)]
    pools = [PoolRow("libgomp", "openmp", "openmp", TORCH_GOMP, "libgomp", num_threads=1)]
    teams = build(rows, pools, _threads(_worker("w0", 101)), 100)
    cells = teams.threads[1].cells
    assert [(c.pool, c.count, c.why) for c in cells] == [("libgomp", None, Why.UNKNOWN),
                                                         ("torch intra-op", None, Why.UNKNOWN)]
    assert "torch.set_num_threads" in cells[1].source.text
    # nobody set torch: its default (2) is predicted for another thread
    rows = [SettingRow("torch intra-op", 2, library_default("physical cores"), expected_from_env=2)]
    teams = build(rows, [], _threads(_worker("w0", 101)), 100)
    assert (teams.threads[1].cells[0].count, teams.threads[1].cells[0].why) == (2, Why.DEFAULT)


def test_the_matrix_marks_predicted_and_unknown_counts() -> None:
    teams = build(_rows(), _pools(), _threads(_worker("ThreadPoolExecutor-0_0", 101)), 100)
    head, rows = teams.matrix()
    assert head == ("thread", "libgomp", "openblas")
    assert rows == [("MainThread (here)", "1", "2"), ("ThreadPoolExecutor-0_0 [concurrent.futures]", "2*", "2")]
    assert "predicted" in LEGEND


def _report(teams: ThreadTeams, usable: int = 2) -> Report:
    return Report(machine=machine(usable), teams=teams)


def test_a_limit_set_here_that_the_workers_do_not_get_is_a_finding() -> None:
    teams = build(_rows(), _pools(), _threads(_worker("w0", 101), _worker("w1", 102)), 100)
    (found,) = limit_not_in_workers(_report(teams))
    assert found.id == "limit-not-in-workers" and found.severity == "warning"
    assert "2 threads of a thread pool (w0, w1): libgomp 1 here, 2 there" in found.message
    assert "parinfo.worker_initializer(1)" in found.fix
    # the same limit in the workers too: nothing to say
    limited = (Outcome("libgomp", GOMP, 1, 1, 2, "thread"),)
    teams = build(_rows(), _pools(), _threads(_worker("w0", 101, limited, "worker")), 100)
    assert limit_not_in_workers(_report(teams)) == []


def test_one_shared_pool_called_by_several_workers_is_said_once_its_count_is_above_one() -> None:
    teams = build(_rows(gomp=2, gomp_source=library_default("x")), _pools(),
                  _threads(_worker("w0", 101), _worker("w1", 102)), 100)
    (found,) = shared_pool_callers(_report(teams))
    assert found.id == "shared-pool-callers" and "one pool of 2 threads" in found.message
    assert "OpenMP build" in found.fix
    teams = build(_rows(blas=1), _pools(), _threads(_worker("w0", 101), _worker("w1", 102)), 100)
    assert shared_pool_callers(_report(teams)) == []
    teams = build(_rows(), _pools(), _threads(_worker("w0", 101)), 100)
    assert shared_pool_callers(_report(teams)) == []  # one caller: nothing shared


def test_the_teams_of_every_calling_thread_add_up() -> None:
    teams = build(_rows(gomp=2, gomp_source=library_default("x")), _pools(),
                  _threads(_worker("w0", 101), _worker("w1", 102)), 100)
    (found,) = teams_oversubscribed(_report(teams, usable=4))
    assert "3 calling threads" in found.message and "2 + 2 + 2 = 6 threads" in found.message
    assert teams_oversubscribed(_report(teams, usable=6)) == []


def test_the_section_travels_through_json() -> None:
    teams = build(_rows(), _pools(), _threads(_worker("w0", 101)), 100)
    payload = _report(teams).to_dict()
    back = Report.from_dict(json.loads(json.dumps(payload)))
    assert back.teams == teams
    assert Report.from_dict({**payload, "teams": {}}).teams is None


@pytest.mark.timeout(120)
def test_threadpool_limits_in_main_leaves_the_workers_team_and_parinfos_initializer_reaches_them() -> None:
    """The issue's case (numpy's OpenBLAS, scikit-learn's libgomp): threadpool_limits(1) in the main
    thread, a ThreadPoolExecutor(2): the report gives each worker's libgomp team (2) and the
    finding; with parinfo.worker_initializer(1) each worker reads 1 and the report says it."""
    pytest.importorskip("sklearn")
    proc = run_py("""
import json
from concurrent.futures import ThreadPoolExecutor
import numpy, sklearn.utils._openmp_helpers, threadpoolctl
import parinfo
from parinfo.process import scope_probe as sp
pools = sp.readers()
def cells(report):
    return {t.name: {f"{c.pool}:{(c.filepath or '').rsplit('/', 1)[-1]}": [c.count, c.exact] for c in t.cells}
            for t in report.teams.workers}
result = {}
for name, init in (("threadpool_limits", None), ("initializer", parinfo.worker_initializer(1))):
    kept = threadpoolctl.threadpool_limits(1) if init is None else None
    with ThreadPoolExecutor(2, initializer=init) as ex:
        read = sp.read_in_workers(ex, 2, pools)
        report = parinfo.inspect()
        result[name] = {"read": read, "report": cells(report), "findings": [f.id for f in report.findings]}
    if kept is not None:
        kept.restore_original_limits()
print(json.dumps(result))
""", env=clean_env(), timeout=110)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    for case, want_gomp in (("threadpool_limits", 2), ("initializer", 1)):
        read, said = out[case]["read"], out[case]["report"]
        assert set(read) == set(said), case
        for thread, counts in read.items():
            for key, count in counts.items():  # key: "libgomp:libgomp-....so"
                assert said[thread][key][0] == count, (case, thread, key)
            gomp = [c for k, c in counts.items() if k.startswith("libgomp:")]
            assert gomp == [want_gomp], (case, thread)
    assert "limit-not-in-workers" in out["threadpool_limits"]["findings"]
    assert "limit-not-in-workers" not in out["initializer"]["findings"]
    assert all(exact for t in out["initializer"]["report"].values() for _, exact in t.values())


def test_torchs_own_record_tells_a_set_count_from_an_openmp_limit_alone() -> None:
    rows = [SettingRow("torch intra-op", 1, run_time("torch.set_num_threads"), expected_from_env=2)]
    worker = _threads(_worker("w0", 101))
    never = build(rows, [], worker, 100, torch_last=None).threads[1].cells[0]
    assert (never.count, never.why, never.exact) == (2, Why.DEFAULT, False)  # threadpool_limits in main only
    assert "never called" in never.source.text
    set_3 = build(rows, [], worker, 100, torch_last=3).threads[1].cells[0]
    assert set_3.count is None and "torch.set_num_threads(3) was called" in set_3.source.text
    same = build(rows, [], worker, 100, torch_last=2).threads[1].cells[0]
    assert same.count == 2  # set to its default: the same either way


def test_a_variable_is_found_in_a_library_file_and_garbage_is_a_reason(tmp_path) -> None:
    import os

    import crafted_elf

    from parinfo.process.elfcount import variable

    lib = crafted_elf.build(tmp_path, "libopenblas.so", "-DLOCAL")
    fd = os.open(lib, os.O_RDONLY)
    try:
        place = variable(fd, "blas_cpu_number", 4)
        assert place.missing is None and place.variable is not None and place.holds(place.variable, 4)
        assert "not a 8-byte" in (variable(fd, "blas_cpu_number", 8).missing or "")
        assert "does not name" in (variable(fd, "no_such_name", 4).missing or "")
        assert "beyond the 1 parinfo reads" in (variable(fd, "blas_cpu_number", 4, max_entries=1).missing or "")
    finally:
        os.close(fd)
    junk = tmp_path / "junk.so"
    junk.write_bytes(b"\x7fELF" + os.urandom(4000))
    fd = os.open(junk, os.O_RDONLY)
    try:
        assert variable(fd, "blas_cpu_number", 4).missing
    finally:
        os.close(fd)


@pytest.mark.torch
@pytest.mark.timeout(180)
def test_with_torch_the_workers_team_under_threadpool_limits_in_main_is_reported_and_found() -> None:
    """The issue's case as it is filed (torch and numpy): threadpool_limits(1) in the main thread,
    a ThreadPoolExecutor(2) whose workers ran torch ops: each worker's torch and OpenMP count (2, read
    there) is what the report says, and the finding names torch; torch's own record says
    torch.set_num_threads was never called, then the count a thread set."""
    proc = run_py("""
import json, threading
from concurrent.futures import ThreadPoolExecutor
import numpy, threadpoolctl, torch
import parinfo
from parinfo.process import scope_probe as sp
from parinfo.process.torch_last_set import last_set_count
pools = sp.readers()
ex = ThreadPoolExecutor(2)
list(ex.map(lambda _: torch.ones(64, 64) @ torch.ones(64, 64), range(4)))
kept = threadpoolctl.threadpool_limits(1)
read = sp.read_in_workers(ex, 2, pools)
report = parinfo.inspect()
said = {t.name: {c.pool: [c.count, c.exact] for c in t.cells} for t in report.teams.workers}
found = [f.message for f in report.findings if f.id == "limit-not-in-workers"]
never = last_set_count()
kept.restore_original_limits()
t = threading.Thread(target=torch.set_num_threads, args=(3,)); t.start(); t.join()
print(json.dumps({"read": read, "said": said, "found": found, "never": never, "after": last_set_count()}))
ex.shutdown()
""", env=clean_env(), timeout=170)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["never"] is None and out["after"] == 3
    assert set(out["read"]) == set(out["said"])
    for thread, counts in out["read"].items():
        assert counts["torch"] == out["said"][thread]["torch intra-op"][0] == 2, thread
        gomp = [c for k, c in counts.items() if k.startswith("libgomp:")]
        assert gomp == [out["said"][thread]["libgomp"][0]] == [2], thread
    (message,) = out["found"]
    assert "torch intra-op 1 here, 2 there" in message
