"""The profile language (version 1), declared once: every key with the rule that checks it.

Each rule both checks a value (for :mod:`parinfo.profiles.validation`) and describes itself as JSON
Schema (for :mod:`parinfo.profiles.schema`, which writes profile.schema.json), so the validator and
the published schema cannot drift apart. A schema cannot judge everything (expression names,
per-variable values, other files, the machine); the rules check those too, and say so.
"""
from __future__ import annotations

from parinfo.machine.rounding import ROUNDINGS
from parinfo.process.preload import OPENMP_WORDS
from parinfo.profiles.key_rules import Affinity, AllocatorRule, Instances
from parinfo.profiles.value_rules import Checker, Choice, Count, Counts, Env, Rule, Text, Version
from parinfo.profiles.words import (
    AFFINITY_WORDS,
    DERIVED_VARS,
    FACT_NAMES,
    INSTANCE_CPUS,
    INSTANCE_KEYS,
    INSTANCE_NAMES,
    LIBRARIES,
    MAX_COUNT,
    MEMORY_WORDS,
    THREADS_WORDS,
    VERSION,
    WAIT_WORDS,
)

__all__ = ["AFFINITY_WORDS", "DERIVED_VARS", "FACT_NAMES", "INSTANCE_CPUS", "INSTANCE_KEYS", "INSTANCE_NAMES",
           "LANGUAGE", "LIBRARIES", "MAX_COUNT", "MEMORY_WORDS", "THREADS_WORDS", "TOP_KEYS", "VERSION", "WAIT_WORDS",
           "Affinity", "AllocatorRule", "Checker", "Choice", "Count", "Counts", "Env", "Instances", "Rule", "Text",
           "Version"]

_COUNT_NAMES = (*FACT_NAMES, *INSTANCE_NAMES)

#: The language: every top-level key, in the order the validator checks them.
LANGUAGE: dict[str, Rule] = {
    "version": Version("The profile language version; always 1."),
    "name": Text(80, one_line=True, empty=("'name' must be one non-empty line", "write e.g. 'name: my-server'")),
    "description": Text(2000),
    "extends": Text(1000, "A shipped profile name, or a path relative to this file (./base.yaml).",
                    empty=("'extends' is empty", "name a shipped profile or a path")),
    "intra_op": Count(_COUNT_NAMES, "Threads inside one op (parallel_for, BLAS, OpenMP)."),
    "inter_op": Count(_COUNT_NAMES, "Ops run at once by the inter-op pool (fork/wait)."),
    "libraries": Counts(LIBRARIES, _COUNT_NAMES, "Per-library counts; each defaults to intra_op."),
    "env": Env("Extra thread variables (see `parinfo show`). A count that has a key (libraries.openmp, "
               "libraries.blas, ...) is set through that key, not here."),
    "affinity": Affinity("none (inherit), compact, spread, or the CPUs to run on."),
    "allocator": AllocatorRule("The malloc preloaded into a launched program: jemalloc, tcmalloc, auto (the best "
                               "installed) or default (the C library's); or {name: jemalloc, conf: MALLOC_CONF}."),
    "openmp": Choice(OPENMP_WORDS, "The OpenMP runtime preloaded to serve every omp_* call of a launched program: "
                                   "intel, gnu, llvm, or default (whatever the program's libraries load)."),
    "instances": Instances("Pinned processes to split the usable cores between (parinfo apply P -- COMMAND)."),
    "memory": Choice(MEMORY_WORDS, "Bind each launched program's (each instance's) memory to the NUMA nodes of its "
                                   "CPUs (local), spread it over them (interleave), or leave the kernel's default "
                                   "(none, the default)."),
    "quota_rounding": Choice(ROUNDINGS, "How a fractional CPU quota counts in usable_cpus: floor (the default: "
                                        "never throttled), ceil (uses the fraction) or nearest."),
    "threads": Choice(THREADS_WORDS, "Which threads get the limits that hold per thread (OpenMP, torch, numba, "
                                     "MKL's local call): caller (the default: the thread that applies the profile, "
                                     "and parinfo's own workers) or every (also each thread the program starts "
                                     "from then on: thread pools, executors, plain threading.Thread)."),
    "wait_policy": Choice(WAIT_WORDS, "How idle pool threads wait between regions, for every runtime at once: passive "
                                      "(they sleep at once, through each runtime's own setting; under a CPU quota "
                                      "spinning threads spend it), active (spin until the next region) or default "
                                      "(each runtime's own). A variable written under 'env' wins."),
}
TOP_KEYS = tuple(LANGUAGE)
