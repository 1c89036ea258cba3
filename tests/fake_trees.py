"""Build fake procfs/sysfs/cgroup trees under a test's tmp_path, for machine_facts(root=...) and
cpu_identity(root=...).

    root = (FakeMachine(tmp_path)
            .cpus(56, smt=2, sockets=2, numa=2)
            .cgroup_v2("/a/b", cpu_max={"/a": "50000 100000", "/a/b": "max 100000"})
            .affinity([0, 1])
            .build())

Nothing is written until build(); the raw edits (file, directory, remove) are applied last, so they
override what the builder generated. Each FakeMachine gets its own fresh directory under tmp_path.
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from parinfo.machine.cpulist import format_cpu_list

_CPU = "sys/devices/system/cpu"


class FakeMachine:
    """A fluent builder of a fake machine's /proc, /sys and cgroup files."""

    def __init__(self, tmp_path: Path | str) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="machine-", dir=tmp_path))
        self._files: dict[str, str] = {}
        self._edits: list[tuple[str, str, str | None]] = []  # (kind, rel, content)
        self._online: list[int] = []
        self._affinity: list[int] | None = None
        self._mounts: list[str] = ["22 1 0:21 / / rw,relatime - ext4 /dev/vda1 rw"]
        self._cgroup_lines: list[str] = []
        self._pids: list[int] = []
        self._next_mount = 30

    # --- CPUs -------------------------------------------------------------------------------------
    def cpus(self, n: int, *, smt: int = 1, sockets: int = 1, numa: int | None = None,
             offline: tuple[int, ...] | list[int] = ()) -> FakeMachine:
        """``n`` logical CPUs numbered like Linux on x86 servers: the first thread of every core,
        then the second threads. ``numa`` nodes (default: one per socket) split the cores evenly."""
        numa = sockets if numa is None else numa
        cores = n // smt
        if n % smt or cores % sockets or cores % numa:
            raise ValueError("n must split evenly into smt threads, sockets and numa nodes")
        per_socket = cores // sockets
        per_node = cores // numa
        layout = []
        for cpu in range(n):
            core = cpu % cores
            siblings = [core + t * cores for t in range(smt)]
            layout.append((cpu, core // per_socket, core % per_socket, siblings, core // per_node))
        return self._write_cpus(layout, offline, smt_possible=smt > 1)

    def hybrid(self, p_cores: int, e_cores: int, *, p_smt: int = 2) -> FakeMachine:
        """An Intel hybrid CPU: P-cores with SMT (siblings numbered next to each other) first,
        then single-threaded E-cores; the kernel's cpu_core/cpu_atom PMUs list each type."""
        layout = []
        cpu = 0
        for core in range(p_cores):
            siblings = list(range(cpu, cpu + p_smt))
            for _ in range(p_smt):
                layout.append((cpu, 0, core * 4, siblings, 0))
                cpu += 1
        p_cpus = list(range(cpu))
        for core in range(e_cores):
            layout.append((cpu, 0, p_cores * 4 + core, [cpu], 0))
            cpu += 1
        self._files["sys/devices/cpu_core/cpus"] = format_cpu_list(p_cpus)
        self._files["sys/devices/cpu_atom/cpus"] = format_cpu_list(range(len(p_cpus), cpu))
        return self._write_cpus(layout, (), smt_possible=p_smt > 1)

    def capacities(self, caps: dict[int, int]) -> FakeMachine:
        """Per-CPU ``cpu_capacity`` (ARM big.LITTLE exposes different values per core type)."""
        for cpu, cap in caps.items():
            self._files[f"{_CPU}/cpu{cpu}/cpu_capacity"] = str(cap)
        return self

    def _write_cpus(self, layout, offline, *, smt_possible: bool) -> FakeMachine:
        offline = set(offline)
        online = [c for c, *_ in layout if c not in offline]
        self._online = online
        nodes: dict[int, list[int]] = {}
        for cpu, socket, core_id, siblings, node in layout:
            nodes.setdefault(node, [])
            if cpu in offline:
                continue
            nodes[node].append(cpu)
            sib = format_cpu_list([s for s in siblings if s not in offline])
            base = f"{_CPU}/cpu{cpu}/topology"
            self._files[f"{base}/physical_package_id"] = str(socket)
            self._files[f"{base}/die_id"] = "0"
            self._files[f"{base}/core_id"] = str(core_id)
            self._files[f"{base}/core_cpus_list"] = sib
            self._files[f"{base}/thread_siblings_list"] = sib
        self._files[f"{_CPU}/online"] = format_cpu_list(online)
        self._files[f"{_CPU}/present"] = format_cpu_list([c for c, *_ in layout])
        self._files[f"{_CPU}/possible"] = format_cpu_list([c for c, *_ in layout])
        active = smt_possible and any(len([s for s in sib if s not in offline]) > 1 for *_, sib, _n in layout)
        self._files[f"{_CPU}/smt/active"] = "1" if active else "0"
        for node, cpus in nodes.items():
            self._files[f"sys/devices/system/node/node{node}/cpulist"] = format_cpu_list(cpus)
        return self

    # --- process ----------------------------------------------------------------------------------
    def affinity(self, cpus: list[int] | tuple[int, ...]) -> FakeMachine:
        """The process's Cpus_allowed_list (default: every online CPU)."""
        self._affinity = list(cpus)
        return self

    def also_pid(self, pid: int) -> FakeMachine:
        """Give process ``pid`` the same status and cgroup files as proc/self."""
        self._pids.append(pid)
        return self

    # --- cgroups ----------------------------------------------------------------------------------
    def cgroup_v2(self, path: str = "/", *, cpu_max: dict[str, str] | None = None,
                  cpuset: dict[str, str] | None = None, mount_root: str = "/",
                  mount_point: str = "/sys/fs/cgroup") -> FakeMachine:
        """The process in v2 cgroup ``path``; ``cpu_max``/``cpuset`` map cgroup paths (relative to
        the hierarchy root, like ``path``) to the content of cpu.max / cpuset.cpus.effective."""
        self._cgroup_lines.append(f"0::{path}")
        self._mount(mount_root, mount_point, "cgroup2", "cgroup2", "rw,nsdelegate")
        base = mount_point.strip("/")
        self._files[f"{base}/cgroup.controllers"] = "cpuset cpu io memory pids"
        self._cgroup_dirs(base, mount_root, path)
        for cg, text in (cpu_max or {}).items():
            self._files[_in_mount(base, mount_root, cg, "cpu.max")] = text
        for cg, text in (cpuset or {}).items():
            self._files[_in_mount(base, mount_root, cg, "cpuset.cpus.effective")] = text
        return self

    def cgroup_v1(self, path: str = "/", *, quota: dict[str, tuple[int, int]] | None = None,
                  cpuset: dict[str, str] | None = None, mount_root: str = "/",
                  cpu_mount: str = "/sys/fs/cgroup/cpu,cpuacct",
                  cpuset_mount: str = "/sys/fs/cgroup/cpuset") -> FakeMachine:
        """The process in v1 cgroup ``path`` of the cpu,cpuacct and cpuset hierarchies; ``quota`` maps
        cgroup paths to (cfs_quota_us, cfs_period_us), ``cpuset`` to the content of cpuset.cpus."""
        self._cgroup_lines.extend([f"4:cpuset:{path}", f"3:cpu,cpuacct:{path}", f"2:memory:{path}"])
        self._mount(mount_root, cpu_mount, "cgroup", "cgroup", "rw,cpu,cpuacct")
        self._mount(mount_root, cpuset_mount, "cgroup", "cgroup", "rw,cpuset")
        cpu_base, set_base = cpu_mount.strip("/"), cpuset_mount.strip("/")
        self._cgroup_dirs(cpu_base, mount_root, path)
        self._cgroup_dirs(set_base, mount_root, path)
        for cg, (q, p) in (quota or {}).items():
            self._files[_in_mount(cpu_base, mount_root, cg, "cpu.cfs_quota_us")] = str(q)
            self._files[_in_mount(cpu_base, mount_root, cg, "cpu.cfs_period_us")] = str(p)
        for cg, text in (cpuset or {}).items():
            self._files[_in_mount(set_base, mount_root, cg, "cpuset.cpus")] = text
        return self

    def _mount(self, root: str, point: str, fstype: str, source: str, opts: str) -> None:
        self._next_mount += 1
        self._mounts.append(f"{self._next_mount} 22 0:{self._next_mount} {root} {point} "
                            f"rw,nosuid,nodev,noexec,relatime - {fstype} {source} {opts}")

    def _cgroup_dirs(self, base: str, mount_root: str, path: str) -> None:
        leaf = _in_mount(base, mount_root, path, "")
        if leaf is not None:
            self._edits.insert(0, ("mkdir", leaf.rstrip("/"), None))

    # --- CPU identity -----------------------------------------------------------------------------
    def cpuinfo(self, text: str) -> FakeMachine:
        """The content of /proc/cpuinfo."""
        self._files["proc/cpuinfo"] = text
        return self

    def caches(self, sizes: dict[str, str], cpu: int = 0) -> FakeMachine:
        """Caches of ``cpu`` by name ("L1d", "L1i", "L2", "L3") with sysfs sizes ("48K")."""
        types = {"d": "Data", "i": "Instruction"}
        for i, (name, size) in enumerate(sizes.items()):
            base = f"{_CPU}/cpu{cpu}/cache/index{i}"
            self._files[f"{base}/level"] = name[1]
            self._files[f"{base}/type"] = types.get(name[2:], "Unified")
            self._files[f"{base}/size"] = size
        return self

    def boot_id(self, text: str) -> FakeMachine:
        self._files["proc/sys/kernel/random/boot_id"] = text
        return self

    # --- raw edits ----------------------------------------------------------------------------------
    def file(self, rel: str, content: str) -> FakeMachine:
        """Write ``content`` to ``rel`` (garbage, empty files...), after everything else."""
        self._edits.append(("file", rel.lstrip("/"), content))
        return self

    def directory(self, rel: str) -> FakeMachine:
        """Put a directory where a file is expected (reads then fail like an unreadable file)."""
        self._edits.append(("dir", rel.lstrip("/"), None))
        return self

    def remove(self, rel: str) -> FakeMachine:
        """Delete a generated file or directory."""
        self._edits.append(("remove", rel.lstrip("/"), None))
        return self

    def build(self) -> str:
        """Write the tree; return its root directory as a string."""
        files = dict(self._files)
        if self._online or self._affinity is not None:
            allowed = self._affinity if self._affinity is not None else self._online
            files["proc/self/status"] = (f"Name:\tpython\nPid:\t4242\nThreads:\t1\n"
                                         f"Cpus_allowed_list:\t{format_cpu_list(allowed)}\n")
        files["proc/self/mountinfo"] = "\n".join(self._mounts) + "\n"
        if self._cgroup_lines:
            files["proc/self/cgroup"] = "\n".join(self._cgroup_lines) + "\n"
        for pid in self._pids:
            for name in ("status", "cgroup"):
                if f"proc/self/{name}" in files:
                    files[f"proc/{pid}/{name}"] = files[f"proc/self/{name}"]
        for rel, content in files.items():
            _write(self.root / rel, content)
        for kind, rel, content in self._edits:
            target = self.root / rel
            if kind == "mkdir":
                target.mkdir(parents=True, exist_ok=True)
            elif kind == "file":
                _remove(target)
                _write(target, content or "")
            elif kind == "dir":
                _remove(target)
                target.mkdir(parents=True)
            else:
                _remove(target)
        return str(self.root)


def _in_mount(base: str, mount_root: str, cgroup: str, name: str) -> str:
    """Where cgroup ``cgroup``'s file ``name`` lies under a mount of ``mount_root`` at ``base``."""
    mroot = mount_root.rstrip("/")
    if mroot and (cgroup == mroot or cgroup.startswith(mroot + "/")):
        cgroup = cgroup[len(mroot):]
    parts = [p for p in (base, cgroup.strip("/"), name) if p]
    return "/".join(parts)


def _write(path: Path, content: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content if content.endswith("\n") or not content else content + "\n")


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
