"""`import parinfo` (and inspecting) changes nothing in the process."""
from __future__ import annotations

import pytest
from conftest import clean_env, run_json

SNAPSHOT = """
import json, os, sys, threading
def snap():
    import threadpoolctl
    return {
        "env": dict(os.environ),
        "threads": threading.active_count(),
        "os_threads": len(os.listdir("/proc/self/task")),
        "pools": [(p["filepath"], p["num_threads"]) for p in threadpoolctl.threadpool_info()],
    }
"""


def test_import_parinfo_changes_no_variable_thread_or_count():
    code = SNAPSHOT + """
import numpy
os.environ.pop("KMP_DUPLICATE_LIB_OK", None)
before = snap()
os.environ.pop("KMP_DUPLICATE_LIB_OK", None)  # threadpoolctl's own import set it: not ours to judge
before["env"].pop("KMP_DUPLICATE_LIB_OK", None)
import parinfo
after = snap()
after["env"].pop("KMP_DUPLICATE_LIB_OK", None)
print(json.dumps({"same": before == after, "torch": "torch" in sys.modules}))
"""
    out = run_json(code)
    assert out == {"same": True, "torch": False}


def test_inspecting_changes_nothing_and_undoes_threadpoolctl_variable():
    code = """
import json, os, sys, threading
import numpy
before_env = dict(os.environ)
tasks = len(os.listdir("/proc/self/task"))
import parinfo
r = parinfo.inspect()
text = parinfo.parallel_info()
import threadpoolctl
pools = [(p["filepath"], p["num_threads"]) for p in threadpoolctl.threadpool_info()]
print(json.dumps({"env_same": dict(os.environ) == before_env,
                  "kmp": "KMP_DUPLICATE_LIB_OK" in os.environ,
                  "tasks_same": len(os.listdir("/proc/self/task")) == tasks,
                  "report_pools": [(p.filepath, p.num_threads) for p in r.pools
                                   if p.seen_by == "threadpoolctl"],
                  "pools": pools, "torch": "torch" in sys.modules}))
"""
    out = run_json(code)
    assert out["env_same"] and not out["kmp"] and out["tasks_same"] and not out["torch"]
    assert sorted(map(tuple, out["report_pools"])) == sorted(map(tuple, out["pools"]))


def test_user_set_kmp_duplicate_lib_ok_is_kept():
    code = """
import json, os
import parinfo
parinfo.inspect(imports=[])
print(json.dumps(os.environ.get("KMP_DUPLICATE_LIB_OK")))
"""
    assert run_json(code, env=clean_env(KMP_DUPLICATE_LIB_OK="FALSE")) == "FALSE"


@pytest.mark.parametrize("name", ["numpy", "threadpoolctl", "psutil", "yaml", "typer", "rich", "cpuinfo",
                                  "torch"])
def test_import_parinfo_loads_no_heavy_module(name):
    out = run_json(f"import json, sys, parinfo; print(json.dumps({name!r} in sys.modules))")
    assert out is False
