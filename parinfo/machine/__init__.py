"""Machine facts as this process sees them: CPUs, cores, affinity, cgroup quota, CPU identity.

Read from procfs and sysfs (the root is overridable, so tests use fake trees), psutil and, lazily,
py-cpuinfo. Nothing here knows about libraries or thread pools. Beside them, the checks of every value a
user gives (:mod:`parinfo.machine.checks`), which resolve a cgroup in the hierarchy read here.
"""
