"""live_threads: the OS threads of a process, by name."""
from __future__ import annotations

import subprocess
import sys
import threading

from parinfo.machine.procfs import Proc
from parinfo.process.threads import live_threads
from parinfo.records.convert import dump


def test_counts_this_process_threads_and_follows_a_new_one():
    import psutil

    before = dump(live_threads())
    assert before["count"] == psutil.Process().num_threads() == len(before["threads"])
    assert before["source"]["text"] == "/proc/self/task"
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        during = dump(live_threads())
        assert during["count"] == before["count"] + 1
        assert all(isinstance(x["tid"], int) and isinstance(x["name"], str) for x in during["threads"])
    finally:
        stop.set()
        t.join()


def test_reads_another_process_by_pid():
    proc = subprocess.Popen([sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(30)"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"  # exec'd: its name is no longer the parent's
        out = dump(live_threads(Proc.of(proc.pid)))
        assert out["count"] >= 1
        assert out["threads"][0]["tid"] == proc.pid
        with open(f"/proc/{proc.pid}/comm") as fh:  # the interpreter's file name: python, python3, ...
            assert out["threads"][0]["name"] == fh.read().strip()
    finally:
        proc.kill()
        proc.wait()


def test_a_missing_process_is_unknown_not_a_crash():
    out = dump(live_threads(Proc.of(2**22 + 12345)))
    assert isinstance(out["count"], str) and out["count"].startswith("unknown (")
    assert out["threads"] == []
