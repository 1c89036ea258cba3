"""``parinfo tune --json``: every key of a tune's result, in order, for results built here by hand.

The expected objects below are written out key by key from the figures of each result (not taken
from the code that writes them), so a change to the JSON form shows here as a failing test.
"""
from __future__ import annotations

import json

import pytest

from parinfo.tuning.choices import ChoiceSearch
from parinfo.tuning.measure import Settings
from parinfo.tuning.outcome import MachineSummary
from parinfo.tuning.result import TuneResult
from parinfo.tuning.search import Point, SearchResult, Stats
from parinfo.tuning.workloads import Command, Ensemble, Matmul

MACHINE = MachineSummary("Test CPU (x86_64, avx2)", 8, 4, 6, 3, "0-5")
MACHINE_JSON = {"cpu_model": "Test CPU (x86_64, avx2)", "logical_cpus": 8, "physical_cores": 4, "usable_cpus": 6,
                "usable_physical_cores": 3, "affinity": "0-5"}


def figures(lo: float, mid: float, hi: float, number: int = 1) -> dict[str, object]:
    """What the JSON says of three samples ``(lo, hi, mid)``: below four samples the quartiles are
    the extremes, and the spread is the range over the median."""
    return {"median_s": mid, "q1_s": lo, "q3_s": hi, "min_s": lo, "max_s": hi, "spread": (hi - lo) / mid,
            "repeats": 3, "number": number, "samples_s": [lo, hi, mid]}


def three(lo: float, mid: float, hi: float, number: int = 1) -> Stats:
    return Stats((lo, hi, mid), number)


def latency_result() -> TuneResult:
    """Intra-op counts alone, a skipped count, a noisy point, notes, noise and an allocator trial."""
    p1, p2, p4, p8 = Point(1), Point(2), Point(4), Point(8)
    search = SearchResult(candidates=[p1, p2, p4, p8], order=[p2, p1, p4],
                          stats={p1: three(0.004, 0.005, 0.006), p2: three(0.002, 0.003, 0.004, 2),
                                 p4: three(0.0025, 0.0031, 0.0030)},
                          best=p2, skipped={p8: "more threads than the 6 usable CPUs"}, confirmed=[p2, p4])
    allocator = ChoiceSearch("allocator", p2, {}, {"default": three(0.002, 0.003, 0.004),
                                                   "jemalloc": three(0.001, 0.002, 0.003)},
                             {"default": {"preloaded": {}}, "jemalloc": {"preloaded": {"/j.so": True}}},
                             fastest="jemalloc", kept="jemalloc", why="jemalloc beat default beyond the noise")
    return TuneResult(spec=Matmul(framework="numpy", size=256), workload="matmul 256x256 float32 (numpy @)",
                      objective="latency", mode="subprocess", pairs=False, concurrent=False, machine=MACHINE,
                      search=search, settings=Settings(warmup=1, repeats=3, min_time=0.01, timeout=30.0),
                      in_force={p1: {"intra_op": 1}, p2: {"intra_op": 2}}, noise=["load average 3.5 on 6 CPUs"],
                      notes=["4 intra-op asked, 3 in force"], choices=[allocator], started="2026-01-02T03:04:05",
                      total_time_s=12.5)


def latency_json() -> dict[str, object]:
    def at(n: int) -> dict[str, object]:
        return {"intra_op": n, "inter_op": 1, "label": str(n)}

    return {
        "workload": "matmul 256x256 float32 (numpy @)",
        "spec": {"kind": "matmul", "framework": "numpy", "size": 256},
        "objective": "latency", "mode": "subprocess", "axis": "intra-op threads", "unit": "s per call",
        "machine": MACHINE_JSON,
        "settings": {"warmup": 1, "repeats": 3, "min_time_s": 0.01},
        "candidates": 4,
        "points": [
            {**at(1), **figures(0.004, 0.005, 0.006), "per_second": 1.0 / 0.005, "order": 2, "noisy": True,
             "confirmed": False, "in_force": {"intra_op": 1}},
            {**at(2), **figures(0.002, 0.003, 0.004, 2), "per_second": 1.0 / 0.003, "order": 1, "noisy": True,
             "confirmed": True, "in_force": {"intra_op": 2}},
            {**at(4), **figures(0.0025, 0.0030, 0.0031) | {"samples_s": [0.0025, 0.0030, 0.0031]},
             "per_second": 1.0 / 0.0030, "order": 3, "noisy": True, "confirmed": True, "in_force": None},
        ],
        "best": {**at(2), **figures(0.002, 0.003, 0.004, 2)},
        "counts": {"intra_op": 2, "inter_op": 1},
        "skipped": [{**at(8), "reason": "more threads than the 6 usable CPUs"}],
        "noise": ["load average 3.5 on 6 CPUs"],
        "notes": ["4 intra-op asked, 3 in force"],
        "choices": [{"key": "allocator", "intra_op": 2, "inter_op": 1, "with": {}, "fastest": "jemalloc",
                     "kept": "jemalloc", "written": True, "why": "jemalloc beat default beyond the noise",
                     "trials": [{"choice": "default", **figures(0.002, 0.003, 0.004), "in_force": {"preloaded": {}}},
                                {"choice": "jemalloc", **figures(0.001, 0.002, 0.003),
                                 "in_force": {"preloaded": {"/j.so": True}}}]}],
        "started": "2026-01-02T03:04:05",
        "total_time_s": 12.5,
    }


def throughput_result() -> TuneResult:
    """Concurrent requests x intra-op counts of a command; a point timed at zero has no rate."""
    a, b = Point(1, 2), Point(2, 1)
    search = SearchResult(candidates=[a, b], order=[a, b],
                          stats={a: Stats((0.0,)), b: Stats((0.5, 0.25, 0.75))}, best=b)
    return TuneResult(spec=Command(framework="torch", command=("python", "-c", "pass")),
                      workload="command python -c pass", objective="throughput", mode="command", pairs=True,
                      concurrent=True, machine=MACHINE, search=search, settings=Settings(),
                      in_force={a: [1, 2]}, started="s", total_time_s=0.0)


def throughput_json() -> dict[str, object]:
    half = {"median_s": 0.5, "q1_s": 0.25, "q3_s": 0.75, "min_s": 0.25, "max_s": 0.75, "spread": 1.0,
            "repeats": 3, "number": 1, "samples_s": [0.5, 0.25, 0.75]}
    zero = {"median_s": 0.0, "q1_s": 0.0, "q3_s": 0.0, "min_s": 0.0, "max_s": 0.0, "spread": 0.0, "repeats": 1,
            "number": 1, "samples_s": [0.0]}
    return {
        "workload": "command python -c pass",
        "spec": {"kind": "command", "command": ["python", "-c", "pass"], "framework": "torch"},
        "objective": "throughput", "mode": "command", "axis": "requests x intra-op threads",
        "unit": "s per request", "machine": MACHINE_JSON,
        "settings": {"warmup": 1, "repeats": 5, "min_time_s": 0.05},
        "candidates": 2,
        "points": [
            {"intra_op": 2, "inter_op": 1, "label": "1x2", **half, "per_second": 2.0, "order": 2, "noisy": True,
             "confirmed": False, "in_force": None},
            {"intra_op": 1, "inter_op": 2, "label": "2x1", **zero, "per_second": None, "order": 1, "noisy": False,
             "confirmed": False, "in_force": [1, 2]},
        ],
        "best": {"intra_op": 2, "inter_op": 1, "label": "1x2", **half},
        "counts": {"intra_op": 2, "inter_op": 1},
        "skipped": [], "noise": [], "notes": [], "choices": [], "started": "s", "total_time_s": 0.0,
    }


def pairs_result() -> TuneResult:
    """Inter-op x intra-op pairs of the ensemble, several skipped, two keys' trials (one kept default)."""
    a, b = Point(2, 1), Point(1, 2)
    search = SearchResult(candidates=[a, b, Point(4, 2), Point(2, 4)], order=[a, b],
                          stats={a: three(0.01, 0.011, 0.012), b: three(0.02, 0.021, 0.022)}, best=a,
                          skipped={Point(4, 2): "8 threads, 6 usable", Point(2, 4): "8 threads, 6 usable"})
    allocator = ChoiceSearch("allocator", a, {}, {"default": three(0.01, 0.011, 0.012)}, {"default": None},
                             why="only default was asked")
    openmp = ChoiceSearch("openmp", a, {"allocator": "default"}, {"default": three(0.01, 0.011, 0.012),
                                                                  "intel": three(0.009, 0.0105, 0.013)},
                          {}, fastest="intel", why="intel within the noise of default")
    return TuneResult(spec=Ensemble(framework="torch"), workload="ensemble", objective="latency", mode="in-process",
                      pairs=True, concurrent=False, machine=MACHINE, search=search, settings=Settings(2, 4, 0.0),
                      noise=["a", "b"], choices=[allocator, openmp], started="t", total_time_s=3.25)


def pairs_json() -> dict[str, object]:
    def at(inter: int, intra: int) -> dict[str, object]:
        return {"intra_op": intra, "inter_op": inter, "label": f"{inter}x{intra}"}

    return {
        "workload": "ensemble", "spec": {"kind": "ensemble", "framework": "torch"}, "objective": "latency",
        "mode": "in-process", "axis": "inter-op x intra-op threads", "unit": "s per call", "machine": MACHINE_JSON,
        "settings": {"warmup": 2, "repeats": 4, "min_time_s": 0.0}, "candidates": 4,
        "points": [
            {**at(1, 2), **figures(0.01, 0.011, 0.012), "per_second": 1.0 / 0.011, "order": 1, "noisy": True,
             "confirmed": False, "in_force": None},
            {**at(2, 1), **figures(0.02, 0.021, 0.022), "per_second": 1.0 / 0.021, "order": 2, "noisy": False,
             "confirmed": False, "in_force": None},
        ],
        "best": {**at(1, 2), **figures(0.01, 0.011, 0.012)},
        "counts": {"intra_op": 2, "inter_op": 1},
        "skipped": [{**at(2, 4), "reason": "8 threads, 6 usable"}, {**at(4, 2), "reason": "8 threads, 6 usable"}],
        "noise": ["a", "b"], "notes": [],
        "choices": [
            {"key": "allocator", "intra_op": 2, "inter_op": 1, "with": {}, "fastest": "default", "kept": "default",
             "written": False, "why": "only default was asked",
             "trials": [{"choice": "default", **figures(0.01, 0.011, 0.012), "in_force": None}]},
            {"key": "openmp", "intra_op": 2, "inter_op": 1, "with": {"allocator": "default"}, "fastest": "intel",
             "kept": "default", "written": False, "why": "intel within the noise of default",
             "trials": [{"choice": "default", **figures(0.01, 0.011, 0.012), "in_force": None},
                        {"choice": "intel", **figures(0.009, 0.0105, 0.013), "in_force": None}]},
        ],
        "started": "t", "total_time_s": 3.25,
    }


@pytest.mark.parametrize(("result", "expected"), [(latency_result, latency_json), (throughput_result, throughput_json),
                                                  (pairs_result, pairs_json)])
def test_the_json_of_a_tune_says_every_figure_in_order(result, expected):
    got = result().to_dict()
    # the printed text, key order included, is what a reader of --json sees
    assert json.dumps(got, indent=2) == json.dumps(expected(), indent=2)
