"""The Ray worker set-up hook: apply the profile that :func:`parinfo.fleet.ray_runtime_env` carries.

Ray calls :func:`setup` once in each new worker process, before its first task. A hook that
raises kills the worker and the driver sees only WorkerCrashedError, so a failure here is one line
on the worker's stderr (Ray relays it to the driver's log) and the worker goes on without it.
"""
from __future__ import annotations

import os
import sys


def setup() -> None:
    """Resolve the carried profile on this worker's machine and apply it in this process."""
    from parinfo.errors import ParinfoError
    from parinfo.fleet.env import PROFILE_DOC_VAR
    from parinfo.fleet.probe import ProfileDocument
    from parinfo.profiles.applying import apply

    raw = os.environ.get(PROFILE_DOC_VAR)
    if not raw:
        print(f"parinfo: {PROFILE_DOC_VAR} is not set: no profile to apply in this Ray worker", file=sys.stderr)
        return
    try:
        done = apply(ProfileDocument.from_json(raw).resolve_here())
    except ParinfoError as exc:
        print(f"parinfo: profile not applied in Ray worker {os.getpid()}: {exc}", file=sys.stderr)
        return
    except (ValueError, KeyError, TypeError) as exc:
        print(f"parinfo: {PROFILE_DOC_VAR} is not a profile parinfo wrote: {exc}", file=sys.stderr)
        return
    for line in done.not_in_force:
        print(f"parinfo: Ray worker {os.getpid()}: not in force: {line}", file=sys.stderr)
