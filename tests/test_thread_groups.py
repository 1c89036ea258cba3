"""Thread groups: one rule (parinfo.process.threads.thread_group), and one real process whose threads
``show``, ``host`` and ``watch`` group the same way."""
from __future__ import annotations

import sys
from collections import Counter

import pytest
from conftest import start_target, stop_target

import parinfo
import parinfo.host
from parinfo.diagnostics.sections import threads as threads_section
from parinfo.process.threads import thread_group
from parinfo.watching.sample import watch


@pytest.mark.parametrize(("name", "group"), [
    ("pool-1", "pool-*"), ("pool-12", "pool-*"), ("pool_7", "pool_*"), ("pool", "pool"),
    ("parinfo-intraop-3", "parinfo-intraop-*"), ("parinfo-interop-12", "parinfo-interop-*"),
    ("ThreadPoolExecutor-0_1", "ThreadPoolExecutor-*"), ("OMP worker #2", "OMP worker #*"),
    ("kworker/0:1", "kworker/*"), ("python", "python"), ("python3", "python3"), ("PTThreadPool", "PTThreadPool"),
    ("1234", "1234"), ("-3", "-3"), ("", ""),
])
def test_names_differing_by_a_trailing_worker_number_are_one_group(name, group):
    assert thread_group(name) == group


# Four threads named pool-1..pool-4 by the kernel (their comm), as a pool that names its workers does.
POOL = """
import json, os, sys, threading
stop = threading.Event()
named = threading.Barrier(5)

def worker():
    with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as f:
        f.write(threading.current_thread().name)
    named.wait()
    stop.wait()

for i in range(1, 5):
    threading.Thread(target=worker, name=f"pool-{i}", daemon=True).start()
named.wait()
print(json.dumps(os.getpid()), flush=True)
sys.stdin.readline()
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_show_host_and_watch_group_one_process_alike():
    proc, pid = start_target(POOL)
    try:
        listing = threads_section(parinfo.inspect(pid=pid)).rows[0].cells[1]
        shown = Counter()
        for item in listing.split(", "):
            name, _, count = item.rpartition(" x")
            shown[name if name else item] += int(count) if name else 1
        (host,) = [p for p in parinfo.host.scan(interval=0).processes if p.pid == pid]
        hosted = Counter({g.name: g.threads for g in host.groups})
        (sample,) = watch(pid, interval=0.1, count=1)
        watched = {g.name: g.threads for g in sample.groups if g.name != "main thread"}
    finally:
        stop_target(proc)
    assert shown["pool-*"] == 4 and sum(shown.values()) == 5  # and the main thread
    assert hosted == shown
    assert watched == {"pool-*": 4}
