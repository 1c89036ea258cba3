"""Run each report-truth scenario in a fresh process and print parinfo's claim beside ground truth.

    python bench/ground_truth.py

Ground truth comes from outside parinfo: threadpoolctl, torch's getters, os.cpu_count(), /proc and the
Intel/LLVM OpenMP registration file in /dev/shm. A scenario whose libraries are missing prints "skipped".
No timing is taken. Exit status 1 when a scenario disagrees.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

from openmp_pair import libiomp, libomp, loader  # noqa: E402

_OUT = "\nprint('RESULT ' + json.dumps({'claim': str(claim), 'truth': str(truth), 'agree': bool(agree)}))\n"

SCENARIOS: list[tuple[str, str, dict[str, str], tuple[str, ...]]] = [
    ("Intel+LLVM OpenMP, Intel first: report, no runtime initialised",
     loader(("iomp", "omp")) + "import json, glob, os, parinfo\nr = parinfo.inspect()\n"
     "claim = sorted(f.id for f in r.findings if f.severity == 'error')\n"
     "truth = 'registered' if glob.glob(f'/dev/shm/__KMP_REGISTERED_LIB_{os.getpid()}_*') else 'none registered'\n"
     "agree = 'openmp-intel-llvm' in claim and truth == 'none registered'", {}, ("pair",)),
    ("Intel+LLVM OpenMP, LLVM first, KMP_DUPLICATE_LIB_OK=TRUE",
     loader(("omp", "iomp")) + "import json, glob, os, parinfo\nr = parinfo.inspect()\n"
     "claim = sorted(f'{f.id}:{f.severity}' for f in r.findings if f.severity == 'error')\n"
     "truth = 'registered' if glob.glob(f'/dev/shm/__KMP_REGISTERED_LIB_{os.getpid()}_*') else 'none registered'\n"
     "agree = 'openmp-intel-llvm:error' in claim and 'kmp-duplicate-lib-ok:error' in claim "
     "and truth == 'none registered'", {"KMP_DUPLICATE_LIB_OK": "TRUE"}, ("pair",)),
    ("OPENBLAS_NUM_THREADS=1 set before `import numpy`",
     "import json, os\nos.environ['OPENBLAS_NUM_THREADS'] = '1'\nimport numpy, threadpoolctl, parinfo\n"
     "r = parinfo.inspect()\nids = [f.id for f in r.findings]\n"
     "claim = ([s.count for s in r.settings if s.library == 'openblas'], 'variable-after-load' in ids)\n"
     "truth = [p['num_threads'] for p in threadpoolctl.threadpool_info() if p['internal_api'] == 'openblas']\n"
     "agree = claim == (truth, False)", {}, ("numpy",)),
    ("OPENBLAS_NUM_THREADS=1 set after `import numpy`",
     "import json, os, numpy, threadpoolctl, parinfo\nos.environ['OPENBLAS_NUM_THREADS'] = '1'\n"
     "r = parinfo.inspect()\nf = [f.message for f in r.findings if f.id == 'variable-after-load']\n"
     "truth = [p['num_threads'] for p in threadpoolctl.threadpool_info() if p['internal_api'] == 'openblas']\n"
     "claim = f[0] if f else 'no finding'\n"
     "agree = (truth == [1] and not f) or (bool(f) and f'runs {truth[0]}, not 1' in claim)", {}, ("numpy",)),
    ("parinfo.apply('single-thread') after `import numpy`",
     "import json, numpy, threadpoolctl, parinfo\nparinfo.apply('single-thread')\nr = parinfo.inspect()\n"
     "claim = ([s.count for s in r.settings if s.library == 'openblas'], "
     "'variable-after-load' in [f.id for f in r.findings])\n"
     "truth = [p['num_threads'] for p in threadpoolctl.threadpool_info() if p['internal_api'] == 'openblas']\n"
     "agree = claim == (truth, False)", {}, ("numpy",)),
    ("numpy + scikit-learn: KMP_DUPLICATE_LIB_OK and --check",
     "import json, os, sklearn, parinfo\nr = parinfo.inspect(imports=['numpy'])\n"
     "claim = [(f.id, f.severity) for f in r.findings if f.severity != 'info'] or 'no warning'\n"
     "kmp = [f.message for f in r.findings if f.id == 'kmp-duplicate-lib-ok']\n"
     "truth = f\"KMP_DUPLICATE_LIB_OK={os.environ.get('KMP_DUPLICATE_LIB_OK')} after `import sklearn`\"\n"
     "agree = claim == 'no warning' and bool(kmp) and 'scikit-learn' in kmp[0]", {}, ("numpy", "sklearn")),
    ("numpy + scipy: every OpenBLAS copy listed",
     "import json, numpy, scipy.linalg, threadpoolctl, parinfo\nr = parinfo.inspect()\n"
     "claim = sorted(f'{p.library} [{p.owner}]={p.num_threads}' for p in r.pools)\n"
     "truth = sorted(f\"{p['internal_api']} {p['filepath'].split('/')[-2]}={p['num_threads']}\" "
     "for p in threadpoolctl.threadpool_info())\n"
     "agree = len(claim) == len(truth)", {}, ("numpy", "scipy")),
    ("bare `import torch`: oversubscribed-interop severity",
     "import json, torch, parinfo\nr = parinfo.inspect()\n"
     "claim = [(f.id, f.severity) for f in r.findings if f.id == 'oversubscribed-interop'] or 'no finding'\n"
     "import os\ntruth = 'PTThreadPool threads: ' + str(sum(open(f'/proc/self/task/{t}/comm').read().strip() "
     "== 'PTThreadPool' for t in os.listdir('/proc/self/task')))\n"
     "agree = truth.endswith(': 0') == (claim == 'no finding' or claim[0][1] == 'info')", {}, ("torch",)),
    ("torch.set_num_threads(1): its libgomp's source",
     "import json, torch, threadpoolctl, parinfo\ntorch.set_num_threads(1)\nr = parinfo.inspect()\n"
     "rows = [(s.count, s.source) for s in r.settings if s.library == 'libgomp' and s.owner == 'torch']\n"
     "claim = rows[0] if rows else 'no row'\n"
     "truth = [p['num_threads'] for p in threadpoolctl.threadpool_info() if p['user_api'] == 'openmp' "
     "and 'torch' in p['filepath']]\n"
     "agree = bool(rows) and rows[0][0] == truth[0] and 'run time' in rows[0][1]", {}, ("torch",)),
    ("PYTHON_CPU_COUNT=1",
     "import json, os, parinfo\nr = parinfo.inspect()\n"
     "claim = next(x.readers for x in r.environment if x.name == 'PYTHON_CPU_COUNT')\n"
     "truth = f'os.cpu_count() = {os.cpu_count()}'\n"
     "agree = ('python' in claim) == (os.cpu_count() == 1)", {"PYTHON_CPU_COUNT": "1"}, ()),
    ("OMP_NUM_THREADS=\u0663 (Arabic-Indic three)",
     "import json, os, ctypes, parinfo\nr = parinfo.inspect()\n"
     "claim = next(x.valid for x in r.environment if x.name == 'OMP_NUM_THREADS')\n"
     "truth = 'libc strtol() gives %d' % ctypes.CDLL(None).strtol(os.environ['OMP_NUM_THREADS'].encode(), None, 10)\n"
     "agree = claim is False", {"OMP_NUM_THREADS": "\u0663"}, ()),
    ("in-process inspect() starts no thread, imports nothing",
     "import json, os, sys, parinfo\nn = len(os.listdir('/proc/self/task'))\nr = parinfo.inspect()\n"
     "claim = r.probes.imported or 'imported nothing'\n"
     "truth = f\"threads {n} -> {len(os.listdir('/proc/self/task'))}, numpy imported: {'numpy' in sys.modules}\"\n"
     "agree = claim == 'imported nothing' and truth.endswith('False') and f'{n} -> {n}' in truth", {}, ()),
    ("`parinfo.runtime.info()` right after `import parinfo`",
     "import json, parinfo\nclaim = parinfo.runtime.info()['backend']\n"
     "from parinfo import runtime\ntruth = runtime.info()['backend']\nagree = claim == truth", {}, ()),
    ("NUMEXPR_NUM_THREADS=8 above NUMEXPR_MAX_THREADS=4",
     "import json, numexpr, parinfo\nr = parinfo.inspect()\n"
     "row = [s for s in r.settings if s.library == 'numexpr'][0]\n"
     "claim = (row.count, 'count-refused' in [f.id for f in r.findings])\n"
     "truth = numexpr.get_num_threads()\nagree = claim == (truth, True)",
     {"NUMEXPR_NUM_THREADS": "8", "NUMEXPR_MAX_THREADS": "4"}, ("numexpr",)),
    ("parinfo.apply('single-thread') from another thread, libgomp loaded",
     "import json, threading, sklearn, threadpoolctl, parinfo\nout = {}\n"
     "t = threading.Thread(target=lambda: out.update(parinfo.apply('single-thread')))\nt.start(); t.join()\n"
     "gap = [line for line in out['not_in_force'] if 'openmp' in line.lower()]\n"
     "claim = 'main thread said not reached' if any('MainThread' in g for g in gap) else gap\n"
     "truth = [p['num_threads'] for p in threadpoolctl.threadpool_info() if p['user_api'] == 'openmp']\n"
     "agree = claim == 'main thread said not reached' and any(n != 1 for n in truth)",
     {}, ("sklearn",)),
    ("parinfo apply latency --instances 2: each instance's counts",
     "import json, subprocess, sys\n"
     "probe = \"import os; print(len(os.sched_getaffinity(0)), os.environ['OMP_NUM_THREADS'], "
     "os.environ['PARINFO_NUM_THREADS'])\"\n"
     "p = subprocess.run([sys.executable, '-m', 'parinfo', 'apply', 'latency', '--instances', '2', '--', "
     "sys.executable, '-c', probe], capture_output=True, text=True)\n"
     "rows = sorted(line.split()[1:] for line in p.stdout.splitlines())\n"
     "claim = [f'omp {r[1]}, intra {r[2]}' for r in rows]\ntruth = [f'{r[0]} CPU(s)' for r in rows]\n"
     "agree = len(rows) == 2 and all(int(r[1]) <= int(r[0]) and int(r[2]) <= int(r[0]) for r in rows)",
     {}, ()),
    ("program sets its own torch inter-op count under parinfo apply latency",
     "import json, subprocess, sys\n"
     "prog = \"import os, torch; torch.set_num_interop_threads(2); print(torch.get_num_interop_threads(), "
     "flush=True); os._exit(0)\"\n"
     "p = subprocess.run([sys.executable, '-m', 'parinfo', 'apply', 'latency', '--', sys.executable, '-c', prog], "
     "capture_output=True, text=True)\n"
     "claim = [line for line in p.stderr.splitlines() if 'inter-op' in line][:1]\n"
     "truth = f'exit {p.returncode}, torch.get_num_interop_threads() = {p.stdout.strip()}'\n"
     "agree = p.returncode == 0 and bool(claim) and claim[0].split('stay ')[1].split()[0] == p.stdout.strip()",
     {}, ("torch",)),
]


def _available(needs: tuple[str, ...]) -> bool:
    import importlib.util

    for need in needs:
        if need == "pair":
            if libiomp() is None or libomp() is None:
                return False
        elif importlib.util.find_spec(need) is None:
            return False
    return True


def run(code: str, extra_env: dict[str, str]) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMP_", "KMP_", "MKL_", "OPENBLAS_"))}
    env.update(extra_env)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(HERE, ".."), env.get("PYTHONPATH", "")])
    try:
        proc = subprocess.run([sys.executable, "-c", code + _OUT], env=env, capture_output=True, text=True,
                              timeout=120)
    except subprocess.TimeoutExpired:
        return {"claim": "-", "truth": "hung (120 s)", "agree": False}
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return {"claim": "-", "truth": f"exit {proc.returncode}: {proc.stderr.strip()[-200:]}", "agree": False}


def main() -> int:
    rows = []
    for name, code, extra_env, needs in SCENARIOS:
        if not _available(needs):
            rows.append((name, "skipped", f"needs {', '.join(needs)}", "-"))
            continue
        out = run(code, extra_env)
        rows.append((name, out["claim"], out["truth"], "yes" if out["agree"] else "NO"))
    print("| scenario | parinfo's claim | ground truth | agree |")
    print("|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(str(c).replace("|", "/") for c in row) + " |")
    return 1 if any(r[3] == "NO" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
