"""Profiles: the YAML language, its resolution on a machine, and applying it.

Applied in this process (through the runtime), to a launched program (environment, affinity and a
start-up hook) or to N pinned instances, each resolved on its own CPUs.
"""
