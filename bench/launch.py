"""Requests per second of a TorchScript model served by two instances: plain, under torch's ``run_cpu``
launcher, and under ``parinfo apply`` with the same choices. Goal: parinfo >= run_cpu.

    python bench/launch.py [--rounds 5] [--seconds 5] [--quick] [--json PATH]

Each instance runs bench/_launch_server.py: the TorchScript tutorial's ensemble of bidirectional LSTMs
(``torch.jit.fork`` of every member, and of each member's forward LSTM), serving a fixed in-process
queue of requests. Every instance loads and warms its model, then all start serving at one moment for
``--seconds``; an arm's figure is the sum of its instances' requests per second. The arms:

- plain: two copies of ``python server.py``, unpinned, nothing preloaded;
- run_cpu: ``python -m torch.backends.xeon.run_cpu --ninstances 2 --enable-jemalloc`` with its own
  OpenMP choice (Intel's libiomp5 when it finds it, else torch's libgomp);
- parinfo: ``parinfo apply PROFILE -- python server.py``, PROFILE saying ``allocator: jemalloc``,
  the same OpenMP runtime (``openmp: intel``, or ``default`` when run_cpu would get torch's libgomp)
  and ``instances: {count: 2}``.

Both launchers preload the same files. run_cpu looks for ``libjemalloc.so`` and ``libiomp5.so`` only in
``$CONDA_PREFIX/lib``, ``$VIRTUAL_ENV/lib``, ``~/.local/lib``, ``/usr/local/lib``, ``/usr/local/lib64``,
``/usr/lib`` and ``/usr/lib64``, not in Debian's multiarch folder nor in this Python's prefix; the bench
gives it the files parinfo found the way its documentation allows: a temporary folder with
``lib/libjemalloc.so`` and ``lib/libiomp5.so`` linked to them, passed as ``VIRTUAL_ENV``. Each instance
reports the allocator and OpenMP runtime mapped in its /proc/self/maps, its CPUs and torch's counts;
the bench prints them and stops with an error when an arm did not have what it claims.

Both launchers pin each instance to its CPUs only, with no memory binding: run_cpu runs with
``--disable-numactl`` (it then uses ``taskset``). To compare with memory bound to the instance's
NUMA node, delete the ``--disable-numactl`` line of RUN_CPU_ARGS (run_cpu then runs each instance under
``numactl -C CPUS -m NODE``; add ``--node_id N`` there for one node) and add ``"memory": "local"`` to
PROFILE: one line each. Everything else (counts, ``KMP_AFFINITY``, ``MALLOC_CONF``) is each
launcher's own default, printed per arm.

Rounds are interleaved (the arms' order rotates each round). The machine's usable parallelism is
measured at the start and at the end; a run where it is low was taken on a busy machine, and its
figures are marked as not to be quoted.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from _machine import report_machine  # bench/ is on sys.path when run as a script

HERE = os.path.dirname(os.path.abspath(__file__))
SERVER = os.path.join(HERE, "_launch_server.py")
INSTANCES = 2
READY_TIMEOUT_S = 180.0

RUN_CPU_ARGS = [
    "--ninstances", str(INSTANCES),
    "--enable-jemalloc",
    "--disable-numactl",  # CPUs only (taskset); delete for numactl -C CPUS -m NODE (with "memory": "local")
]
PROFILE: dict[str, object] = {
    "version": 1,
    "name": "bench-launch",
    "description": "bench/launch.py: the same choices as run_cpu",
    "allocator": "jemalloc",
    "openmp": "intel",  # replaced by "default" when Intel's runtime is not installed (run_cpu's fallback)
    "instances": {"count": INSTANCES},
}
#: Variables that would change what a launcher sets (both respect values already set), or how the
#: instances run: the arms start from an environment without them.
CLEARED_PREFIXES = ("OMP_", "KMP_", "MKL_", "OPENBLAS_", "BLIS_", "NUMEXPR_", "GOMP_", "PARINFO_", "_PARINFO",
                    "TORCHELASTIC_")
CLEARED = {"LD_PRELOAD", "MALLOC_CONF", "VIRTUAL_ENV", "CONDA_PREFIX", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
           "TCMALLOC_RELEASE_RATE"}


class BenchError(Exception):
    """The bench cannot go on: the message says what and where."""


@dataclass
class Files:
    """The libraries both launchers preload (real paths), and the OpenMP word of the profile."""

    jemalloc: str
    iomp: str | None

    @property
    def openmp(self) -> str:
        return "intel" if self.iomp else "default"


@dataclass
class Arm:
    name: str
    start: Callable[[list[str], dict[str, str]], list[subprocess.Popen]]
    env: dict[str, str]
    pinned: bool
    preloads: bool
    facts: list[dict] = field(default_factory=list)
    rates: list[float] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------
# what the launchers are given


def find_files() -> Files:
    """The jemalloc and Intel OpenMP files parinfo finds (the same search as ``allocator: jemalloc``)."""
    from parinfo.process import preload

    je = preload.locate_allocator(preload.allocator("jemalloc"))
    if je.path is None:
        raise BenchError("jemalloc is not installed (apt-get install libjemalloc2, or conda install jemalloc)")
    iomp = preload.locate_runtime(preload.openmp_runtime("intel")).path
    return Files(os.path.realpath(je.path), os.path.realpath(iomp) if iomp else None)


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in CLEARED and not k.startswith(CLEARED_PREFIXES)}


def run_cpu_prefix(tmp: str, files: Files) -> str:
    """A folder run_cpu searches as ``$VIRTUAL_ENV``, holding links to the files parinfo found."""
    prefix = os.path.join(tmp, "run_cpu_prefix")
    os.makedirs(os.path.join(prefix, "lib"))
    os.symlink(files.jemalloc, os.path.join(prefix, "lib", "libjemalloc.so"))
    if files.iomp:
        os.symlink(files.iomp, os.path.join(prefix, "lib", "libiomp5.so"))
    return prefix


def write_profile(tmp: str, files: Files) -> str:
    import yaml

    profile = {**PROFILE, "openmp": files.openmp}
    path = os.path.join(tmp, "bench-launch.yaml")
    with open(path, "w", encoding="utf-8") as fh:
        yaml.safe_dump(profile, fh, sort_keys=False)
    return path


def parinfo_plan(path: str) -> list[tuple[str, str, str]]:
    """(key, choice, real path) of each library parinfo's plan preloads."""
    import parinfo

    plan = parinfo.resolve_profile(path)
    return [(p.key, p.choice, os.path.realpath(p.path)) for p in plan.preload if p.path]


def make_arms(tmp: str, files: Files, profile: str, log: str) -> list[Arm]:
    env = clean_env()
    run_cpu_env = {**env, "VIRTUAL_ENV": run_cpu_prefix(tmp, files)}

    def popen(cmd: list[str], env: dict[str, str]) -> subprocess.Popen:
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(f"$ {' '.join(cmd)}\n")
            fh.flush()
            return subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT,
                                    start_new_session=True)

    def plain(server: list[str], env: dict[str, str]) -> list[subprocess.Popen]:
        return [popen([sys.executable, *server], env) for _ in range(INSTANCES)]

    def run_cpu(server: list[str], env: dict[str, str]) -> list[subprocess.Popen]:
        return [popen([sys.executable, "-m", "torch.backends.xeon.run_cpu", *RUN_CPU_ARGS, *server], env)]

    def parinfo_arm(server: list[str], env: dict[str, str]) -> list[subprocess.Popen]:
        return [popen([sys.executable, "-m", "parinfo", "apply", profile, "--", sys.executable, *server], env)]

    return [Arm("plain", plain, env, pinned=False, preloads=False),
            Arm("run_cpu", run_cpu, run_cpu_env, pinned=True, preloads=True),
            Arm("parinfo", parinfo_arm, env, pinned=True, preloads=True)]


# ---------------------------------------------------------------------------------------------
# one run of one arm


def _listing(folder: str, prefix: str) -> list[str]:
    return sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.startswith(prefix)
                  and not n.endswith(".tmp"))


def _ours(pid: int, folder: str) -> bool:
    """Whether ``pid`` is still an instance of this run (its command line names the run's folder)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return folder.encode() in fh.read().split(b"\0")
    except OSError:
        return False


def _stop(procs: list[subprocess.Popen], folder: str) -> None:
    """Stop what a failed run started: the launchers (each in its own session), then any instance
    that wrote its ready file and still runs."""
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
    for path in _listing(folder, "ready-"):
        pid = int(path.rsplit("-", 1)[1])
        if _ours(pid, folder):
            os.kill(pid, signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _tail(log: str, lines: int = 15) -> str:
    with open(log, encoding="utf-8", errors="replace") as fh:
        return "".join(fh.readlines()[-lines:])


def run_once(arm: Arm, server_args: list[str], seconds: float, tmp: str, log: str) -> list[dict]:
    folder = tempfile.mkdtemp(prefix=f"{arm.name}-", dir=tmp)
    procs = arm.start([SERVER, folder, *server_args], arm.env)
    done = False
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while len(_listing(folder, "ready-")) < INSTANCES:
            if any(p.poll() is not None for p in procs) or time.monotonic() > deadline:
                raise BenchError(f"{arm.name}: {len(_listing(folder, 'ready-'))} of {INSTANCES} instances became "
                                 f"ready; the launcher's output ends:\n{_tail(log)}")
            time.sleep(0.02)
        with open(os.path.join(folder, "go.tmp"), "w", encoding="utf-8") as fh:
            json.dump({"start": time.time() + 0.1}, fh)
        os.replace(os.path.join(folder, "go.tmp"), os.path.join(folder, "go"))
        for proc in procs:
            try:
                proc.wait(seconds + 120)
            except subprocess.TimeoutExpired:
                raise BenchError(f"{arm.name}: still running {seconds + 120:.0f} s after the start; the "
                                 f"launcher's output ends:\n{_tail(log)}") from None
        codes = [p.returncode for p in procs]
        results = _listing(folder, "result-")
        if any(codes) or len(results) != INSTANCES:
            raise BenchError(f"{arm.name}: exit codes {codes}, {len(results)} of {INSTANCES} results; the "
                             f"launcher's output ends:\n{_tail(log)}")
        out = []
        for path in results:
            with open(path, encoding="utf-8") as fh:
                out.append(json.load(fh))
        done = True
        return out
    finally:
        if not done:
            _stop(procs, folder)


# ---------------------------------------------------------------------------------------------
# what each arm held


def _is(path: str, prefix: str | tuple[str, ...]) -> bool:
    return os.path.basename(path).startswith(prefix)


def check(arm: Arm, results: list[dict], files: Files, usable: list[int]) -> None:
    """Raise BenchError unless every instance of ``arm`` held what the arm claims."""
    problems = []
    cpu_sets = [r["affinity_start"] for r in results]
    for i, r in enumerate(results):
        libs = r["libs"]
        mallocs = [p for p in libs if _is(p, ("libjemalloc", "libtcmalloc"))]
        iomp = [p for p in libs if _is(p, "libiomp5")]
        want_malloc = [files.jemalloc] if arm.preloads else []
        want_iomp = [files.iomp] if arm.preloads and files.iomp else []
        if mallocs != want_malloc:
            problems.append(f"instance {i}: malloc {mallocs or 'glibc'}, expected {want_malloc or 'glibc'}")
        if iomp != want_iomp:
            problems.append(f"instance {i}: Intel OpenMP {iomp or 'not loaded'}, expected {want_iomp or 'not loaded'}")
        if arm.preloads:
            if r["malloc_from"] != files.jemalloc:
                problems.append(f"instance {i}: malloc calls reach {r['malloc_from']}, not {files.jemalloc}")
            if files.iomp and r["omp_from"] != files.iomp:
                problems.append(f"instance {i}: omp_* calls reach {r['omp_from']}, not {files.iomp}")
            if "MALLOC_CONF" not in r["env"]:
                problems.append(f"instance {i}: no MALLOC_CONF")
        elif r["malloc_from"] is None or _is(r["malloc_from"], ("libjemalloc", "libtcmalloc")):
            problems.append(f"instance {i}: malloc calls reach {r['malloc_from']}, expected the C library's")
        if r["requests"] < 1 or r["checksum"] != r["checksum"]:
            problems.append(f"instance {i}: served {r['requests']} requests, checksum {r['checksum']}")
    if arm.pinned:
        flat = [c for cpus in cpu_sets for c in cpus]
        if len(flat) != len(set(flat)) or any(not cpus or cpus == usable for cpus in cpu_sets):
            problems.append(f"instances not pinned to disjoint CPUs: {cpu_sets}")
    elif any(cpus != usable for cpus in cpu_sets):
        problems.append(f"instances pinned ({cpu_sets}), expected all usable CPUs {usable}")
    if problems:
        raise BenchError(f"{arm.name} did not have what it claims: " + "; ".join(problems))


def describe(results: list[dict]) -> list[str]:
    """One line per instance: what it held."""
    lines = []
    for i, r in enumerate(results):
        libs = r["libs"]
        others = [p for p in libs if p not in (r["malloc_from"], r["omp_from"])]
        also = f" (also mapped: {', '.join(others)})" if others else ""
        env = " ".join(f"{k}={v}" for k, v in sorted(r["env"].items()) if k not in ("LD_PRELOAD", "PARINFO_PRELOAD"))
        lines.append(f"    [{i}] CPUs {r['affinity_start']} (main thread at end {r['affinity_end']}); "
                     f"malloc from {r['malloc_from']}; omp_* from {r['omp_from']}"
                     f"{also}; torch intra-op {r['torch_threads']}, inter-op "
                     f"{r['torch_interop_threads']}; {r['os_threads']} OS threads; {env or 'no launcher variables'}")
    return lines


def differences(a: dict, b: dict) -> list[str]:
    """What two instances (run_cpu's, parinfo's) held differently, besides the launchers' own marks."""
    skip = ("LD_PRELOAD", "PARINFO_PRELOAD", "PARINFO_INSTANCE")
    out = [f"{k}: {a['env'].get(k, 'unset')} vs {b['env'].get(k, 'unset')}"
           for k in sorted(set(a["env"]) | set(b["env"])) if k not in skip and a["env"].get(k) != b["env"].get(k)]
    out += [f"torch {what}: {a[k]} vs {b[k]}" for k, what in (("torch_threads", "intra-op threads"),
                                                              ("torch_interop_threads", "inter-op threads"))
            if a[k] != b[k]]
    return out


# ---------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 5; --quick 1)")
    parser.add_argument("--seconds", type=float, default=None, help="serving time per run (default 5; --quick 1)")
    parser.add_argument("--quick", action="store_true", help="a small model, one short round: a smoke test")
    parser.add_argument("--json", metavar="PATH", help="also write the figures and facts as JSON")
    args = parser.parse_args()
    rounds = args.rounds if args.rounds is not None else (1 if args.quick else 5)
    seconds = args.seconds if args.seconds is not None else (1.0 if args.quick else 5.0)
    size = "10,8,64" if args.quick else "20,16,128"
    if rounds < 1 or seconds <= 0:
        raise SystemExit("bench/launch.py: --rounds must be >= 1 and --seconds > 0")
    try:
        import torch  # noqa: F401  (the model's library: needed by every arm)
    except ImportError:
        print("bench/launch.py: torch is not installed (pip install torch)", file=sys.stderr)
        raise SystemExit(2) from None

    quiet_start = report_machine()
    usable = sorted(os.sched_getaffinity(0))
    try:
        files = find_files()
    except BenchError as err:
        print(f"bench/launch.py: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    server_args = ["--seconds", str(seconds), "--size", size]
    print(f"model: the TorchScript tutorial's ensemble of 4 bidirectional LSTMs (jit.fork), time steps, batch, "
          f"channels = {size}; {INSTANCES} instances; {seconds:g} s of serving per run; {rounds} round(s)")
    with tempfile.TemporaryDirectory(prefix="bench-launch-") as tmp:
        log = os.path.join(tmp, "launchers.log")
        open(log, "w").close()
        profile = write_profile(tmp, files)
        arms = make_arms(tmp, files, profile, log)
        prefix = arms[1].env["VIRTUAL_ENV"]
        for key, choice, path in parinfo_plan(profile):
            print(f"parinfo preloads {key} {choice}: {path}")
        print(f"run_cpu preloads through VIRTUAL_ENV={prefix}: " + ", ".join(
            f"lib/{n} -> {os.path.realpath(os.path.join(prefix, 'lib', n))}" for n in sorted(os.listdir(
                os.path.join(prefix, "lib")))))
        try:
            for rnd in range(rounds):
                order = arms[rnd % len(arms):] + arms[:rnd % len(arms)]
                for arm in order:
                    results = run_once(arm, server_args, seconds, tmp, log)
                    check(arm, results, files, usable)
                    arm.facts = arm.facts or results
                    arm.rates.append(sum(r["rate"] for r in results))
                print(f"round {rnd + 1}: " + "  ".join(f"{a.name} {a.rates[-1]:.1f}" for a in arms) + " requests/s",
                      flush=True)
        except BenchError as err:
            print(f"bench/launch.py: {err}", file=sys.stderr)
            raise SystemExit(1) from None
    quiet = report_machine() and quiet_start
    for arm in arms:
        print(f"{arm.name}: verified")
        for line in describe(arm.facts):
            print(line)
    by = {a.name: a for a in arms}
    for line in differences(by["run_cpu"].facts[0], by["parinfo"].facts[0]):
        print(f"run_cpu and parinfo differ: {line}")
    plain = statistics.median(by["plain"].rates)
    print(f"{'arm':10} {'median req/s':>13} {'min':>8} {'max':>8} {'vs plain':>9}")
    for arm in arms:
        med = statistics.median(arm.rates)
        print(f"{arm.name:10} {med:13.1f} {min(arm.rates):8.1f} {max(arm.rates):8.1f} {med / plain:9.3f}")
    paired = [p / r for p, r in zip(by["parinfo"].rates, by["run_cpu"].rates, strict=True)]
    ratio = statistics.median(paired)
    note = "" if quiet else "  BUSY machine: not to be quoted"
    print(f"parinfo / run_cpu: {ratio:.3f} (median of per-round ratios {', '.join(f'{x:.3f}' for x in paired)}; "
          f"goal >= 1.0): {'met' if ratio >= 1.0 else 'NOT met'}{note}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"quiet": quiet, "rounds": rounds, "seconds": seconds, "size": size,
                       "files": {"jemalloc": files.jemalloc, "iomp": files.iomp},
                       "arms": {a.name: {"rates": a.rates, "facts": a.facts} for a in arms},
                       "parinfo_over_run_cpu": ratio}, fh, indent=1)


if __name__ == "__main__":
    main()
