"""parinfo's pool threads carry their names at OS level: ground truth is /proc/PID/task/*/comm."""
from __future__ import annotations

import sys

import pytest
from conftest import run_json

from parinfo.runtime.threadname import os_name

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


@pytest.mark.parametrize("name, comm", [
    ("parinfo-intra-3", "parinfo-intra-3"),
    ("parinfo-interop-3", "parinfo-inter-3"),
    ("parinfo-intra-12", "parinfo-intr-12"),
    ("parinfo-interop-123", "parinfo-int-123"),
    ("a-very-long-thread-name", "a-very-long-thr"),
])
def test_os_name_keeps_the_number_within_15_characters(name, comm):
    assert os_name(name) == comm and len(comm) <= 15


def test_pool_threads_are_named_in_proc():
    out = run_json("""
import json, os, threading, time
import parinfo
parinfo.set_num_threads(3)
parinfo.set_num_interop_threads(2)
barrier = threading.Barrier(3)
fs = [parinfo.fork(barrier.wait) for _ in range(2)]
barrier.wait()
[parinfo.wait(f) for f in fs]
parinfo.parallel_for(0, 3, 1, lambda a, b: time.sleep(0.05))
threads = {t.native_id: t.name for t in threading.enumerate() if t.name.startswith("parinfo-")}
comm = {}
for tid in os.listdir(f"/proc/{os.getpid()}/task"):
    with open(f"/proc/{os.getpid()}/task/{tid}/comm") as f:
        comm[int(tid)] = f.read().strip()
print(json.dumps({"pid": os.getpid(), "threads": {str(k): v for k, v in threads.items()},
                  "comm": {str(k): v for k, v in comm.items()}}))
""")
    threads, comm = out["threads"], out["comm"]
    names = sorted(threads.values())
    assert names == ["parinfo-interop-0", "parinfo-interop-1", "parinfo-intra-1", "parinfo-intra-2"]
    for tid, name in threads.items():
        assert comm[tid] == os_name(name)
    assert sorted(comm[t] for t in threads) == ["parinfo-inter-0", "parinfo-inter-1",
                                                  "parinfo-intra-1", "parinfo-intra-2"]
    main = str(out["pid"])  # the process's other threads keep their own names
    assert not comm[main].startswith("parinfo-")
