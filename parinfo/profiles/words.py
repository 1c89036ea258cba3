"""The profile language's words and limits: its version, the largest count, the keys of
``libraries`` and ``instances``, the words of ``affinity``, ``memory`` and ``instances.cpus``, the
names a count expression may use, the variables the count keys set, and the patterns the schema
publishes. :mod:`parinfo.profiles.grammar` declares the language with them.
"""

from parinfo.process.libraries import LIBRARY_VARS, POOL_VARS, RUNTIME_VARS, profile_keys

VERSION = 1
MAX_COUNT = 4096

LIBRARIES = profile_keys()  # blas, openmp, mkl, torch, numexpr, onnxruntime... (from the library registry)
INSTANCE_KEYS = ("count", "per_numa_node", "cores_per_instance", "cpus", "cross_numa", "nodes")
#: What each instance is pinned to: one CPU of each of its cores, or every CPU (SMT siblings) of them.
INSTANCE_CPUS = ("physical_cores", "logical_cpus")
#: Where each launched program's (each instance's) memory comes from: the NUMA nodes of its CPUs
#: (bound, or interleaved over them), or wherever the kernel's default policy puts it.
MEMORY_WORDS = ("local", "interleave", "none")
AFFINITY_WORDS = ("none", "compact", "spread")
#: Which threads a limit that holds per thread is put into: the thread that applies the profile (and
#: parinfo's own workers), or also every thread the program starts from then on.
THREADS_WORDS = ("caller", "every")
#: How idle pool threads wait between regions, for every runtime at once: sleep at once (passive),
#: spin until the next region (active), or each runtime's own default.
WAIT_WORDS = ("passive", "active", "default")

# Facts a count expression may name. The instance names are only meaningful with ``instances``;
# without it they are 1 and the usable physical cores.
FACT_NAMES = ("usable_cpus", "usable_physical_cores", "physical_cores", "logical_cpus", "numa_nodes",
              "cores_per_numa_node", "pod_cpus")
INSTANCE_NAMES = ("instances", "cores_per_instance")

# Variables that the plan derives from the counts; the profile sets them through the count keys.
DERIVED_VARS: dict[str, str] = {
    RUNTIME_VARS[0]: "intra_op",
    RUNTIME_VARS[1]: "inter_op",
    **{var: f"libraries.{lib}" for lib, names in LIBRARY_VARS.items() for var in names},
    **POOL_VARS,
}

CPU_LIST_PATTERN = r"^\s*[0-9]+(\s*-\s*[0-9]+)?(\s*,\s*[0-9]+(\s*-\s*[0-9]+)?)*\s*$"
EXPR_PATTERN = r"^(?=.*[A-Za-z0-9_)])(?:[A-Za-z0-9_+*(), \t-]|//)+$"
VAR_NAME_PATTERN = r"^[A-Z][A-Z0-9_]*$"


