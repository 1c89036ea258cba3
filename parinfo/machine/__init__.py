"""Machine facts as this process sees them: CPUs, cores, affinity, cgroup quota, CPU identity.

Read from procfs and sysfs (the root is overridable, so tests use fake trees), psutil and, lazily,
py-cpuinfo. Nothing here knows about libraries or thread pools.
"""
