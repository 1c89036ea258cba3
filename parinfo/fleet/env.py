"""Launch-time snippets that put a profile in force in every worker before any import.

Neither Dask nor Ray is imported: the snippets are plain data, resolved on this machine (the
Ray set-up hook resolves the profile again on each worker's own machine).
"""
from __future__ import annotations

import os
from typing import Any, TypedDict

from parinfo.fleet import probe
from parinfo.process.libraries import role_var
from parinfo.process.outer import PARINFO_SET_VAR
from parinfo.safe_text import plural

#: The import path Ray calls in each new worker process (a function, never a lambda: it pickles by name).
RAY_HOOK = "parinfo.fleet.ray_hook.setup"
#: The profile document the Ray hook resolves, as JSON.
PROFILE_DOC_VAR = "_PARINFO_FLEET_PROFILE"


class RayRuntimeEnv(TypedDict):
    """The part of a Ray ``runtime_env`` parinfo fills: the worker's start-up variables and the
    set-up hook Ray imports by path in each new worker."""

    env_vars: dict[str, str]
    worker_process_setup_hook: str


def ray_runtime_env(profile: Any) -> RayRuntimeEnv:
    """A Ray ``runtime_env``: the profile's variables (resolved here, so they are in every worker's
    start-up environment, where Ray's own OMP_NUM_THREADS default leaves them alone) and a set-up
    hook, named by import path, that resolves the profile on the worker's machine and applies it.
    A bad profile raises ProfileError here, before Ray sees it."""
    from parinfo.profiles.loading import resolve_profile

    document = probe.profile_document(profile)
    plan = resolve_profile(document.body)
    env = {name: str(value) for name, value in plan.env_without_preload.items()}
    profile_var = role_var("profile")
    ours = ",".join(sorted([*env, profile_var, PROFILE_DOC_VAR]))
    env.update({profile_var: plan.name, PARINFO_SET_VAR: ours,
                PROFILE_DOC_VAR: document.to_json()})
    return {"env_vars": env, "worker_process_setup_hook": RAY_HOOK}


def dask_config(profile: Any) -> str:
    """The Dask configuration (YAML) that puts a profile's variables in every worker's start-up
    environment (``distributed.nanny.pre-spawn-environ``), resolved on this machine."""
    from parinfo.profiles.loading import resolve_profile

    plan = resolve_profile(probe.profile_document(profile).body)
    lines = [f"# parinfo profile {plan.name}, resolved on this machine ({plural(os.cpu_count() or '?', 'CPU')} seen "
             "by the OS,",
             f"# intra_op {plan.intra_op.value}: {plan.intra_op.why}). Put it in ~/.config/dask/distributed.yaml.",
             "# A variable already set in a nanny's own environment wins over this configuration.",
             "distributed:", "  nanny:", "    pre-spawn-environ:"]
    what = {"allocator": "malloc", "openmp": "OpenMP runtime"}
    lines[2:2] = [f"# {p.key} {p.choice} is not carried (nor its variables): a worker's {what.get(p.key, p.key)} is "
                  "chosen when its process starts; start the workers under parinfo apply PROFILE -- dask worker ..."
                  for p in plan.preload if p.path]
    lines += [f'      {name}: "{value}"' for name, value in sorted(plan.env_without_preload.items())]
    return "\n".join(lines)
