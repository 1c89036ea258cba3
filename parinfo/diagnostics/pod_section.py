"""The words of the report's ``pod`` section (:func:`parinfo.diagnostics.sections.pod` lays them
out): where the process sits in the kubelet's tree, its request, limits and cpuset, each with where
it was read, and the CPUs that leaves (parinfo's count and each runtime's)."""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from parinfo.machine.cpulist import format_cpu_list
from parinfo.records.unknown import Unknown
from parinfo.safe_text import escape_controls

if TYPE_CHECKING:
    from parinfo.machine.pod import PodFacts
    from parinfo.records.source import Source


def _value(value: Any, shown: Callable[[Any], str], source: Source) -> str:
    """A value with where it came from: ``unknown (why)``, ``none (file)`` or ``VALUE (file)``."""
    if isinstance(value, Unknown):
        return str(value)
    if value is None:
        return str(source)
    return f"{shown(value)} ({source})"


def _cpus(value: float) -> str:
    return f"{value:g} CPU{'s' if value != 1 else ''}"


def pod_rows(p: PodFacts) -> list[tuple[str, str]]:
    """(label, text) of each fact of the pod section."""
    who = "/".join(x for x in (p.namespace, p.name) if x) or "name unknown"
    container = p.container_id or ("none: the process is in the pod's cgroup" if p.container_cgroup is None
                                   else str(p.container_source))
    rows = [("pod", f"{who} (uid {p.pod_uid}; {p.driver} driver, cgroup {p.cgroup_version})"),
            ("QoS class", f"{p.qos} ({p.qos_source})"),
            ("container", container + (f" ({p.runtime})" if p.runtime and p.container_id else "")),
            ("request", _value(p.request_millicores, lambda m: f"{m}m", p.request_source)),
            ("pod request", _value(p.pod_request_millicores, lambda m: f"{m}m", p.pod_request_source)),
            ("limit", _value(p.limit, _cpus, p.limit_source)),
            ("pod limit", _value(p.pod_limit, _cpus, p.pod_limit_source)),
            ("cpuset", _value(p.cpuset, lambda c: format_cpu_list(list(c)), p.cpuset_source)),
            ("usable CPUs", f"{p.usable_cpus} ({p.usable_rule})")]
    if p.pod_cpus is not None:
        rows.append(("pod CPUs", f"{p.pod_cpus} ({p.pod_cpus_source})"))
    if p.usable_by_rule:
        rows.append(("by runtime", ", ".join(f"{k} {v}" for k, v in p.usable_by_rule.items())))
    if p.name is None:
        rows.append(("name", str(p.name_source)))
    if p.namespace is None:
        rows.append(("namespace", str(p.namespace_source)))
    return [(label, escape_controls(text)) for label, text in rows]
