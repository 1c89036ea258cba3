"""Live evidence: what a process's threads do over time (CPU use per thread group, runnable threads
against usable CPUs, cgroup throttling, CPU pressure), sampled from /proc and the cgroup files.

The folder is ``watching/`` because ``parinfo.watch`` is a public function that a same-named
subpackage would shadow.
"""
