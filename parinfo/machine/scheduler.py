"""The CPUs a batch scheduler allocated to this job (Slurm), read from the job's environment.

Slurm tells a job how many CPUs it was given through its environment, whether or not it also binds
the job's tasks to those CPUs (that takes ``--cpu-bind`` and a task plugin). A job that is not bound
sees the whole node in its affinity mask and in ``os.cpu_count()``, so every library that sizes its
pool from either starts one thread per node CPU. The allocation is a bound on the usable CPUs like
the cgroup quota; this module is the one place that knows the scheduler's variable names.

Inside a job (``SLURM_JOB_ID`` set) the count comes from the first of these that is valid:

- ``SLURM_CPUS_PER_TASK``: ``--cpus-per-task``, the CPUs of one task (set only with that option);
- ``SLURM_CPUS_ON_NODE``: the CPUs allocated to the job on this node;
- ``SLURM_JOB_CPUS_PER_NODE``: the CPUs on each node of the allocation, as
  ``CPU_count[(xnumber_of_nodes)][,CPU_count[(xnumber_of_nodes)] ...]`` (``"72(x2),36"``): the
  first node's count is taken (the batch script runs on the first node).

A variable that holds garbage is reported in ``invalid`` and skipped, never raised.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import field

from parinfo.records.record import record
from parinfo.records.source import NO_LIMIT, Source, variable

JOB_VAR = "SLURM_JOB_ID"
#: The count variables, in the order they are tried.
COUNT_VARS = ("SLURM_CPUS_PER_TASK", "SLURM_CPUS_ON_NODE", "SLURM_JOB_CPUS_PER_NODE")
#: Every scheduler variable that bears on the usable CPUs (what ``environ`` readers must keep).
VARIABLES = (JOB_VAR, *COUNT_VARS)
BIND_FIX = "srun --cpu-bind=cores"

_COUNT = re.compile(r"^[0-9]{1,7}$")
_PER_NODE = re.compile(r"^([0-9]{1,7})(\(x[0-9]{1,7}\))?$")


@record(frozen=True)
class Allocation:
    """A scheduler's CPU allocation: ``cpus`` (None outside a job, or when no count is valid), the
    ``source`` that gave it ("Slurm job 123: SLURM_CPUS_PER_TASK=4", or "none"), the ``job`` id,
    and ``invalid``: {variable: why} for each scheduler variable whose value was garbage."""

    cpus: int | None = None
    source: Source = NO_LIMIT
    job: str | None = None
    invalid: dict[str, str] = field(default_factory=dict)


def _count(name: str, value: str) -> int:
    """One variable's CPU count; ValueError (with the reason) for garbage."""
    text = value.strip()
    if name == "SLURM_JOB_CPUS_PER_NODE":
        first = text.split(",", 1)[0].strip()
        m = _PER_NODE.match(first)
        if m is None or not all(_PER_NODE.match(part.strip()) for part in text.split(",")):
            raise ValueError(f"{value!r} is not a list of CPU counts such as '24(x2),12'")
        n = int(m.group(1))
    else:
        if not _COUNT.match(text):
            raise ValueError(f"{value!r} is not a positive integer")
        n = int(text)
    if n < 1:
        raise ValueError(f"{value!r} is not a positive integer")
    return n


def allocation(environ: Mapping[str, str]) -> Allocation:
    """The Slurm allocation that ``environ`` describes (see the module docstring for the order)."""
    job = environ.get(JOB_VAR)
    if job is None:
        return Allocation()
    invalid: dict[str, str] = {}
    job_text = job.strip()
    if not _COUNT.match(job_text):
        invalid[JOB_VAR] = f"{job!r} is not a job id (digits)"
        job_text = ""
    for name in COUNT_VARS:
        value = environ.get(name)
        if value is None:
            continue
        try:
            n = _count(name, value)
        except ValueError as exc:
            invalid[name] = str(exc)
            continue
        where = f"Slurm job {job_text}" if job_text else "Slurm job"
        return Allocation(n, variable(name, value.strip(), f"{where}: {name}={value.strip()}"), job_text or None,
                          invalid)
    return Allocation(None, NO_LIMIT, job_text or None, invalid)
