"""One serving instance for bench/launch.py: the TorchScript tutorial's ensemble of bidirectional LSTMs
(``torch.jit.fork`` inside the model), serving requests from a fixed in-process queue.

    python bench/_launch_server.py DIR [--seconds 5] [--size 20,16,128] [--models 4] [--requests 16]

It loads and warms the model, writes ``DIR/ready-PID``, waits for ``DIR/go`` (the wall-clock time at
which every instance starts), serves for ``--seconds``, then writes ``DIR/result-PID.json``: its
requests per second and what it held (CPU affinity, the allocator and OpenMP runtime mapped in
/proc/self/maps, the variables the launchers set, torch's counts). It imports no parinfo: every arm
runs the same program, whoever launched it.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import deque

#: Basename prefixes of the mapped files worth reporting: mallocs and OpenMP runtimes.
LIBS = ("libjemalloc", "libtcmalloc", "libiomp5", "libgomp", "libomp")
#: The variables the launchers set or read.
VARS = ("LD_PRELOAD", "MALLOC_CONF", "KMP_AFFINITY", "KMP_BLOCKTIME", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
        "OMP_PROC_BIND", "PARINFO_INSTANCE", "PARINFO_PRELOAD")
GO_TIMEOUT_S = 300.0


def mapped_libs() -> list[str]:
    """Real paths of the mallocs and OpenMP runtimes mapped in this process."""
    found: dict[str, None] = {}
    with open("/proc/self/maps", encoding="utf-8", errors="replace") as fh:
        for line in fh:
            parts = line.split(None, 5)
            if len(parts) == 6 and parts[5].startswith("/"):
                path = parts[5].strip()
                if os.path.basename(path).startswith(LIBS):
                    found[os.path.realpath(path)] = None
    return list(found)


def serving(symbol: str) -> str | None:
    """Real path of the library whose ``symbol`` this process's calls reach (the dynamic loader's global
    lookup, as for any call: a preloaded library comes first), or None."""
    import ctypes

    class DlInfo(ctypes.Structure):
        _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                    ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]

    process = ctypes.CDLL(None)
    try:
        addr = ctypes.cast(getattr(process, symbol), ctypes.c_void_p)
    except AttributeError:
        return None
    info = DlInfo()
    if not process.dladdr(addr, ctypes.byref(info)) or not info.dli_fname:
        return None
    return os.path.realpath(os.fsdecode(info.dli_fname))


def threads() -> int:
    with open("/proc/self/status", encoding="utf-8") as fh:
        for line in fh:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return 0


def build(size: tuple[int, int, int], models: int):  # -> torch.jit.ScriptModule
    """The tutorial's final model: each member forks its forward LSTM beside the backward one, and the
    ensemble forks every member."""
    import torch

    channels = size[2]

    class BidirectionalRecurrentLSTM(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.cell_f = torch.nn.LSTM(input_size=channels, hidden_size=channels)
            self.cell_b = torch.nn.LSTM(input_size=channels, hidden_size=channels)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            future_f = torch.jit.fork(self.cell_f, x)
            output_b, _ = self.cell_b(torch.flip(x, dims=[0]))
            output_b_rev = torch.flip(output_b, dims=[0])
            output_f, _ = torch.jit.wait(future_f)
            return torch.cat((output_f, output_b_rev), dim=2)

    class LSTMEnsemble(torch.nn.Module):
        def __init__(self, n_models: int) -> None:
            super().__init__()
            self.models = torch.nn.ModuleList([BidirectionalRecurrentLSTM() for _ in range(n_models)])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            futures = [torch.jit.fork(model, x) for model in self.models]
            return torch.stack([torch.jit.wait(f) for f in futures]).sum(dim=0)

    torch.manual_seed(0)
    return torch.jit.script(LSTMEnsemble(models).eval())


def write_json(path: str, data: dict) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh)
    os.replace(tmp, path)


def wait_for_go(folder: str) -> float:
    """The start time the bench wrote to ``folder/go`` (it appears once every instance is ready)."""
    go = os.path.join(folder, "go")
    deadline = time.monotonic() + GO_TIMEOUT_S
    while not os.path.exists(go):
        if time.monotonic() > deadline:
            raise SystemExit(f"_launch_server: no {go} after {GO_TIMEOUT_S:.0f} s")
        time.sleep(0.005)
    with open(go, encoding="utf-8") as fh:
        return float(json.load(fh)["start"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--size", default="20,16,128", help="time steps, batch, channels")
    parser.add_argument("--models", type=int, default=4)
    parser.add_argument("--requests", type=int, default=16, help="distinct requests in the queue")
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    t, b, c = (int(v) for v in args.size.split(","))
    affinity_start = sorted(os.sched_getaffinity(0))

    import torch

    model = build((t, b, c), args.models)
    gen = torch.Generator().manual_seed(1)
    queue = deque(torch.rand(t, b, c, generator=gen) for _ in range(args.requests))
    with torch.inference_mode():
        for _ in range(args.warmup):
            model(queue[0])
        pid = os.getpid()
        write_json(os.path.join(args.dir, f"ready-{pid}"), {"pid": pid})
        start_at = wait_for_go(args.dir)
        time.sleep(max(0.0, start_at - time.time()))
        served = 0
        t0 = time.perf_counter()
        end = t0 + args.seconds
        while True:
            request = queue.popleft()
            out = model(request)
            queue.append(request)
            served += 1
            now = time.perf_counter()
            if now >= end:
                break
        elapsed = now - t0
        checksum = float(out.sum())
    write_json(os.path.join(args.dir, f"result-{pid}.json"), {
        "pid": pid,
        "requests": served,
        "seconds": elapsed,
        "rate": served / elapsed,
        "checksum": checksum,
        "affinity_start": affinity_start,
        "affinity_end": sorted(os.sched_getaffinity(0)),
        "libs": mapped_libs(),
        "malloc_from": serving("malloc"),
        "omp_from": serving("omp_get_max_threads"),
        "env": {k: os.environ[k] for k in VARS if k in os.environ},
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "os_threads": threads(),
        "python": sys.executable,
    })
    # Leave without the exit-time destructors: with Intel's OpenMP runtime preloaded, torch (2.13 here)
    # sometimes aborts in them ("terminate called without an active exception", exit 134), whoever
    # launched it. The figures are written; the exit is not what this bench measures.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
