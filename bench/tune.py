"""Does the adaptive tune pick as well as an exhaustive sweep, for less time?

Each round, on the matmul workload (the reference's 1024x1024 matmul), in the same run:
  1. `parinfo.tune()` with its adaptive search (measures some counts, skips others),
  2. an exhaustive sweep (`exhaustive=True, confirm=False`: every count measured once) over the
     same counts: the anchor.
The tune's chosen count is then looked up in the sweep: its median time over the sweep's best median
is the quality ratio (goal: <= 1.05). The tune's total time over the sweep's is the cost ratio.
Prints each round and the median of the rounds; exits 1 if the median quality ratio misses the goal.

    python bench/tune.py [--rounds 3] [--max N] [--framework numpy|torch] [--size 1024] [--repeats 5]

By default the counts go to twice the usable CPUs (at least 4) so the search has oversubscribed
points to rule out even on a small machine.
"""
from __future__ import annotations

import argparse
import statistics
import sys

from _machine import report_machine  # bench/ is on sys.path when run as a script

GOAL = 1.05


def main(argv: list[str] | None = None) -> int:
    import parinfo
    from parinfo.machine.topology import machine_facts
    from parinfo.tuning.measure import noise_check

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max", type=int, default=None, help="most threads (default 2 x usable CPUs, >= 4)")
    ap.add_argument("--framework", default="numpy", choices=["numpy", "torch"])
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    report_machine()

    facts = machine_facts()
    cap = args.max or max(4, 2 * facts.usable_cpus)
    print(f"machine: {facts.usable_cpus} usable CPUs ({facts.usable_physical_cores} physical cores); "
          f"counts 1..{cap}; matmul {args.size}x{args.size} ({args.framework}); {args.rounds} rounds")
    for note in noise_check(facts.usable_cpus):
        print(f"noise: {note}")

    kw = dict(framework=args.framework, size=args.size, max_threads=cap, repeats=args.repeats,
              check_noise=False, facts=facts)
    quality, cost = [], []
    for i in range(args.rounds):
        # alternate which runs first so slow drift of the machine does not favour one side
        if i % 2 == 0:
            tuned = parinfo.tune("matmul", **kw)
            sweep = parinfo.tune("matmul", exhaustive=True, confirm=False, **kw)
        else:
            sweep = parinfo.tune("matmul", exhaustive=True, confirm=False, **kw)
            tuned = parinfo.tune("matmul", **kw)
        chosen = tuned.best
        sweep_best = sweep.best
        chosen_in_sweep = sweep.search.stats[chosen].median
        best_in_sweep = min(s.median for s in sweep.search.stats.values())
        q = chosen_in_sweep / best_in_sweep
        c = tuned.total_time_s / sweep.total_time_s
        quality.append(q)
        cost.append(c)
        curve = ", ".join(f"{p.intra}: {s.median * 1e3:.2f}" for p, s in sweep.measured)
        print(f"round {i + 1}: tune chose {chosen.intra} ({tuned.best_stats.median * 1e3:.2f} ms in the tune; "
              f"{chosen_in_sweep * 1e3:.2f} ms in the sweep), sweep best {sweep_best.intra} "
              f"({best_in_sweep * 1e3:.2f} ms); ratio {q:.3f}")
        print(f"         tune measured {len(tuned.search.stats)}/{len(tuned.search.candidates)} counts "
              f"in {tuned.total_time_s:.2f} s (skipped: {tuned.skipped_summary()}); sweep "
              f"{len(sweep.search.stats)} counts in {sweep.total_time_s:.2f} s; time ratio {c:.2f}")
        print(f"         sweep curve (ms): {curve}")
    qm, cm = statistics.median(quality), statistics.median(cost)
    verdict = "OK" if qm <= GOAL else "MISSED"
    print(f"median quality ratio (chosen / best of exhaustive sweep): {qm:.3f} (goal <= {GOAL}) {verdict}")
    print(f"median time ratio (tune / exhaustive sweep): {cm:.2f}")
    return 0 if qm <= GOAL else 1


if __name__ == "__main__":
    sys.exit(main())
