"""Which control groups hold a supervisor's children, and what is written to them (pure).

``choose`` takes what the host offers (``HostCgroups``, read by cgroups.py) and the limits
asked for (``--child-memory-max``, ``--child-cpu-max``) and returns a ``CgroupPlan``: each
limit on cgroup v2 where our own v2 group is writable (delegated) and has the controller,
else on cgroup v1's controller where that hierarchy is writable, else the memory limit
falls back to the RSS watch (memory.py) and a CPU limit is not applied. Kills go through
each slot's v2 ``cgroup.kill`` wherever v2 is writable, even when the limits sit on v1
(a hybrid host). The parsers read the kernel's files: /proc/self/cgroup,
/proc/self/mountinfo, memory.events (v2) and memory.oom_control (v1).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "CPU_PERIOD_US",
    "CgroupPlan",
    "HostCgroups",
    "Mode",
    "choose",
    "cpu_quota_us",
    "oom_kills",
    "own_dir",
    "parse_mounts",
    "parse_proc_cgroup",
]

CPU_PERIOD_US = 100_000  # the CFS period both versions use by default


class Mode(StrEnum):
    """What holds the children to their limits (the start line names it)."""

    V2 = "cgroup-v2"
    V1 = "cgroup-v1"
    RSS = "rss-watch"  # no writable cgroup for the memory limit: today's sampling
    NONE = "none"  # no limit asked for


@dataclass(frozen=True, slots=True)
class HostCgroups:
    """What this host offers, as seen from the supervisor's own process.

    ``v2_dir``: our own cgroup v2 directory, None without a v2 mount; ``v2_writable``: we
    may create groups below it (delegated); ``v2_controllers``: its cgroup.controllers;
    ``v2_kill``: cgroup.kill exists; ``v2_root``: it is the host's root group, whose
    processes (every process of the host, kernel threads among them) cannot move into a
    leaf, so it hands no controller down (groups for cgroup.kill need none).
    ``v1_memory_dir`` / ``v1_cpu_dir``: our own group of that v1 controller when writable,
    else None; ``v1_memsw``: the memsw files exist."""

    v2_dir: str | None = None
    v2_writable: bool = False
    v2_controllers: frozenset[str] = frozenset()
    v2_kill: bool = False
    v2_root: bool = False
    v1_memory_dir: str | None = None
    v1_memsw: bool = False
    v1_cpu_dir: str | None = None


@dataclass(frozen=True, slots=True)
class CgroupPlan:
    """Where each limit goes ("v2", "v1" or None) and whether kills use cgroup.kill.

    ``v2_controllers``: what our v2 group must enable for its children (then the supervisor
    moves into a leaf of its own: v2 allows no process in a group that delegates a
    controller). ``rss_limit``: the memory limit the RSS watch enforces instead."""

    mode: Mode
    memory_max: int | None = None
    cpu_max: float | None = None
    memory: str | None = None
    cpu: str | None = None
    memsw: bool = False
    kill_v2: bool = False
    rss_limit: int | None = None

    @property
    def v2_controllers(self) -> tuple[str, ...]:
        return tuple(name for name, where in (("memory", self.memory), ("cpu", self.cpu))
                     if where == "v2")

    @property
    def uses_cgroups(self) -> bool:
        return self.memory is not None or self.cpu is not None or self.kill_v2

    def describe(self) -> str:
        """The one line said at start."""
        parts: list[str] = []
        if self.memory_max is not None:
            if self.memory == "v2":
                parts.append(f"memory.max {self.memory_max} bytes (cgroup v2)")
            elif self.memory == "v1":
                swap = " with swap (memsw)" if self.memsw else ""
                parts.append(f"memory.limit_in_bytes {self.memory_max} bytes{swap} "
                             "(cgroup v1)")
            else:
                parts.append(f"RSS watch at {self.memory_max} bytes (no writable memory "
                             "cgroup)")
        if self.cpu_max is not None:
            if self.cpu == "v2":
                parts.append(f"cpu.max {self.cpu_max:g} CPUs (cgroup v2)")
            elif self.cpu == "v1":
                parts.append(f"cpu.cfs_quota_us {self.cpu_max:g} CPUs (cgroup v1)")
            else:
                parts.append(f"no CPU limit applied ({self.cpu_max:g} CPUs asked; no "
                             "writable cpu cgroup)")
        if self.kill_v2:
            parts.append("kills through cgroup.kill")
        elif self.uses_cgroups:
            parts.append("kills through the process group (no cgroup.kill)")
        return f"child limits: {self.mode.value}: " + "; ".join(parts)


def choose(host: HostCgroups, memory_max: int | None, cpu_max: float | None) -> CgroupPlan:
    """The plan for these limits on this host (see the module's docstring)."""
    if memory_max is None and cpu_max is None:
        return CgroupPlan(Mode.NONE)
    v2 = host.v2_dir is not None and host.v2_writable
    v2_limits = v2 and not host.v2_root
    memory = cpu = None
    if memory_max is not None:
        if v2_limits and "memory" in host.v2_controllers:
            memory = "v2"
        elif host.v1_memory_dir is not None:
            memory = "v1"
    if cpu_max is not None:
        if v2_limits and "cpu" in host.v2_controllers:
            cpu = "v2"
        elif host.v1_cpu_dir is not None:
            cpu = "v1"
    placed = memory if memory_max is not None else cpu
    if placed == "v2":
        mode = Mode.V2
    elif placed == "v1":
        mode = Mode.V1
    else:
        mode = Mode.RSS if memory_max is not None else Mode.NONE
    kill_v2 = v2 and host.v2_kill  # even when the limits found no group of their own
    return CgroupPlan(mode, memory_max=memory_max, cpu_max=cpu_max, memory=memory, cpu=cpu,
                      memsw=memory == "v1" and host.v1_memsw, kill_v2=kill_v2,
                      rss_limit=memory_max if memory is None else None)


def cpu_quota_us(cpus: float, period_us: int = CPU_PERIOD_US) -> int:
    """Microseconds of CPU per period for ``cpus`` CPUs (at least the kernel's 1 ms)."""
    return max(1000, round(cpus * period_us))


def parse_proc_cgroup(text: str) -> dict[str, str]:
    """/proc/<pid>/cgroup: controller → path; cgroup v2's line under ""."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, names, path = parts
        for name in names.split(",") if names else [""]:
            out[name.removeprefix("name=") if name.startswith("name=") else name] = path
    return out


def parse_mounts(text: str) -> dict[str, tuple[str, str]]:
    """/proc/self/mountinfo: controller → (mount point, root of the mount); cgroup v2's
    mount under ""."""
    out: dict[str, tuple[str, str]] = {}
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields = left.split()
        tail = right.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        root, point = _unescape(fields[3]), _unescape(fields[4])
        if tail[0] == "cgroup2":
            out.setdefault("", (point, root))
        elif tail[0] == "cgroup":
            for opt in tail[2].split(","):
                if opt in ("memory", "cpu"):
                    out.setdefault(opt, (point, root))
    return out


def own_dir(mount: tuple[str, str], path: str) -> str | None:
    """The directory of our group ``path`` under a mount of that hierarchy (None if the
    mount shows another part of it)."""
    point, root = mount
    if root != "/":
        if path != root and not path.startswith(root.rstrip("/") + "/"):
            return None
        path = path[len(root):] or "/"
    return point.rstrip("/") + ("" if path == "/" else path) or "/"


def oom_kills(text: str) -> int | None:
    """The ``oom_kill`` count of memory.events (v2) or memory.oom_control (v1)."""
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field
