"""`parinfo k8s snippet`: what a Deployment's container needs to run with a profile's counts.

The counts are resolved by the profile resolver on a pod of the shape given (``--cpu-request``,
``--cpu-limit``) on a node like this machine (:func:`parinfo.machine.pod_cpus.pod_shaped`), so the
``container`` profile's ``pod_cpus`` takes the limit, else the request, else the node, as it would
in the pod. The output is YAML that goes into a container of the pod template
(``spec.template.spec.containers[]``): its ``resources`` and one of

- ``env``: the plan's variables with the counts resolved here (the default);
- ``env`` with the counts from the downward API (``--downward-api``): ``limits.cpu`` rounded up to
  a whole CPU by the kubelet, said in a comment;
- ``command``: ``parinfo apply PROFILE -- COMMAND`` (``--command``), which resolves the profile in
  the pod itself, on the node it lands on; parinfo must be in the image.
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Optional

import typer

if TYPE_CHECKING:
    from parinfo.machine.topology import MachineFacts
    from parinfo.profiles.plan import Plan

_SPEC = "spec.template.spec.containers[]"


def snippet(
    profile: str = typer.Option("container", "--profile", metavar="PROFILE",
                                help="The profile whose counts the pod runs with (a name or a path)."),
    cpu_request: Optional[str] = typer.Option(None, "--cpu-request", metavar="QUANTITY",
                                              help="The container's CPU request: 500m, 2, 1.5 (none: no request)."),
    cpu_limit: Optional[str] = typer.Option(None, "--cpu-limit", metavar="QUANTITY",
                                            help="The container's CPU limit (none: no limit)."),
    downward_api: bool = typer.Option(False, "--downward-api",
                                      help="Take the counts from limits.cpu through the downward API (rounded up "
                                           "to a whole CPU by the kubelet)."),
    command: Optional[str] = typer.Option(None, "--command", metavar="COMMAND",
                                          help="Start COMMAND under `parinfo apply PROFILE --` instead (counts "
                                               "resolved in the pod; parinfo in the image)."),
) -> int:
    """Print the YAML (resources, env or command) a Deployment's container needs for a profile's counts."""
    from parinfo.errors import UsageError
    from parinfo.machine.pod_cpus import millicores

    request = 0 if cpu_request is None else millicores(cpu_request, "--cpu-request")
    limit = None if cpu_limit is None else millicores(cpu_limit, "--cpu-limit", least=1)
    if limit is not None and request > limit:
        raise UsageError(f"--cpu-request {cpu_request} is more than --cpu-limit {cpu_limit} (Kubernetes refuses a "
                         "request above the limit)")
    if downward_api and command is not None:
        raise UsageError("--downward-api and --command cannot be used together (pick one way to set the counts)")
    typer.echo(snippet_text(profile, request, limit, downward_api=downward_api, command=command), nl=False)
    return 0


def snippet_text(profile: str, request: int, limit: int | None, *, downward_api: bool = False,
                 command: str | None = None, facts: MachineFacts | None = None) -> str:
    """The snippet for ``profile`` in a pod asking for ``request`` millicores under ``limit``
    millicores (None: none), on a node whose facts are ``facts`` (default: this machine's)."""
    from parinfo.machine.pod_cpus import of_facts, pod_shaped
    from parinfo.machine.topology import machine_facts
    from parinfo.profiles.loading import as_profile
    from parinfo.profiles.resolve import resolve
    from parinfo.records.source import argument

    prof = as_profile(profile)
    node = machine_facts() if facts is None else facts
    shaped = pod_shaped(node, request, None if limit is None else limit / 1000,
                        argument("--cpu-request", f"--cpu-request {_quantity(request or None)}"),
                        argument("--cpu-limit", f"--cpu-limit {_quantity(limit)}"))
    plan = resolve(prof, shaped)
    lines = _header(plan, request, limit, len(shaped.affinity), str(of_facts(shaped)[1]))
    lines += _resources(request, limit)
    if command is not None:
        lines += _command(plan, profile, command)
    else:
        lines += _env(plan, downward_api, limit)
    return "\n".join(lines) + "\n"


def _quantity(millicores: int | None) -> str:
    from parinfo.machine.pod_cpus import quantity

    return "none" if millicores is None else quantity(millicores)


def _comment(text: str) -> str:
    from parinfo.safe_text import escape_controls

    return "# " + escape_controls(text)


def _header(plan: Plan, request: int, limit: int | None, cpus: int, why: str) -> list[str]:
    shape = f"CPU request {_quantity(request or None)} and limit {_quantity(limit)}"
    lines = [_comment(f"parinfo profile {plan.name} ({plan.origin}) in a pod with {shape}, on a node like this "
                      f"machine ({cpus} CPUs)"),
             _comment(f"intra_op {plan.intra_op.value}: {plan.intra_op.why}"),
             _comment(f"inter_op {plan.inter_op.value}: {plan.inter_op.why}")]
    if "pod_cpus" not in plan.intra_op.why:
        lines.append(_comment(f"pod_cpus here: {why}"))
    if plan.affinity is not None or len(plan.instances) > 1 or plan.preload_paths or plan.memory != "none":
        lines.append(_comment("affinity, instances, preloaded libraries and memory policy are not carried by "
                              f"variables: use --command (parinfo apply {plan.name} -- COMMAND in the pod)"))
    lines.append(_comment(f"put these keys in the container ({_SPEC})"))
    return lines


def _resources(request: int, limit: int | None) -> list[str]:
    """The container's ``resources`` for the shape the counts were resolved for."""
    if request == 0 and limit is None:
        return [_comment("no request and no limit: a BestEffort pod (if no other container asks for any)"),
                "resources: {}"]
    lines = ["resources:"]
    if request:
        lines += ["  requests:", f"    cpu: {json.dumps(_quantity(request))}"]
    if limit is not None:
        lines += ["  limits:", f"    cpu: {json.dumps(_quantity(limit))}"]
    return lines


def _variables(plan: Plan) -> dict[str, str]:
    """The plan's variables as a launch sets them: the profile's name and which ones parinfo set."""
    from parinfo.process.libraries import role_var
    from parinfo.process.outer import PARINFO_SET_VAR

    env = {name: str(value) for name, value in plan.env_without_preload.items()}
    profile_var = role_var("profile")
    env.update({profile_var: plan.name, PARINFO_SET_VAR: ",".join(sorted([*env, profile_var]))})
    return env


def _env(plan: Plan, downward_api: bool, limit: int | None) -> list[str]:
    from parinfo.profiles.grammar import DERIVED_VARS

    lines = ["env:"]
    counted = {var for var, owner in DERIVED_VARS.items() if _follows_intra(plan, owner)} if downward_api else set()
    if counted:
        lines += [_comment("the counts below come from limits.cpu through the downward API: the kubelet rounds it up "
                           "to a whole CPU (250m gives 1, 1500m gives 2, where parinfo counts "
                           f"{plan.intra_op.value} for this pod), and with no limit it gives the node's allocatable "
                           "CPUs" + ("" if limit is not None else " (this pod has no limit)"))]
    for name, value in _variables(plan).items():
        lines.append(f"- name: {json.dumps(name)}")
        if name in counted:
            lines += ["  valueFrom:", "    resourceFieldRef:", "      resource: limits.cpu", '      divisor: "1"']
        else:
            lines.append(f"  value: {json.dumps(value)}")
    return lines


def _follows_intra(plan: Plan, owner: str) -> bool:
    """Whether the variable of count ``owner`` ("intra_op", "libraries.blas") takes the intra-op count."""
    if owner == "intra_op":
        return True
    setting = plan.libraries.get(owner.split(".")[-1])
    return setting is not None and setting.why.startswith("follows intra_op")


def _command(plan: Plan, profile: str, command: str) -> list[str]:
    import shlex

    from parinfo.errors import UsageError

    try:
        words = shlex.split(command)
    except ValueError as exc:
        raise UsageError(f"--command: {exc} (quote it as a shell would)") from None
    if not words:
        raise UsageError("--command is empty: give the program to start, e.g. --command 'python serve.py'")
    return [_comment(f"parinfo resolves {plan.name} in the pod itself, on the node it lands on (here it would set "
                     f"intra_op {plan.intra_op.value}); the image needs parinfo"),
            f"command: {json.dumps(['parinfo', 'apply', profile, '--', *words])}"]
