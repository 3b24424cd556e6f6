"""Per-slot control groups for the children (``--child-memory-max``, ``--child-cpu-max``).

Which hierarchy holds which limit is cgroup_plan.py's choice; this module reads the host,
makes the groups and writes to them. The layout, below our own group on each hierarchy:

    <own>/orbit-<pid>/slot-<n>      one group per pool slot, made once at start (a second
                                    pool of the same process: orbit-<pid>.<n>); every
                                    child of the slot is moved in when forked, so a group
                                    is never made per task
    <own>/supervisor                (v2 with controllers only) the leaf the supervisor and
                                    its template move into: v2 lets no process stay in a
                                    group that hands controllers to its children

The supervisor places each child itself, writing the pid the template reported into the
slot's ``cgroup.procs`` before the slot is ever handed a task: it owns the groups (the
child may run as another user, which could not write there), and a child runs no handler
code before it is given a task. A kill writes the slot's v2 ``cgroup.kill``, which the
kernel applies to every process in the group at once, a setsid grandchild included. An
OOM kill is read from the slot's own counter (memory.events or memory.oom_control), before
and after. The groups are removed at close, once the children are reaped, and groups left
by an earlier run whose supervisor is gone are removed at start.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import re

from orbit_host.logs import fields

from .cgroup_plan import (
    CPU_PERIOD_US,
    CgroupPlan,
    HostCgroups,
    Mode,
    choose,
    cpu_quota_us,
    oom_kills,
    own_dir,
    parse_mounts,
    parse_proc_cgroup,
)

__all__ = ["ChildCgroups", "probe_host"]

_LEAF = "supervisor"
# orbit-<pid>, orbit-<pid>.<n> (a second pool of one process), orbit-probe-<pid>.
_BASE_RE = re.compile(r"orbit-(?:probe-)?(\d+)(?:\.\d+)?")
_instances = itertools.count()


def _read(path: str) -> str:
    with open(path) as fh:
        return fh.read()


def _write(path: str, value: str) -> None:
    with open(path, "w") as fh:
        fh.write(value)


def probe_host() -> HostCgroups:
    """What this host offers the supervisor (nothing where /proc cannot be read)."""
    try:
        groups = parse_proc_cgroup(_read("/proc/self/cgroup"))
        mounts = parse_mounts(_read("/proc/self/mountinfo"))
    except OSError:
        return HostCgroups()
    v2_dir = None
    if "" in mounts and "" in groups:
        v2_dir = own_dir(mounts[""], groups[""])
        if v2_dir is not None and os.path.basename(v2_dir) == _LEAF:
            v2_dir = os.path.dirname(v2_dir)  # an earlier move: its parent is ours
    v2_writable = v2_dir is not None and _v2_ours(v2_dir)
    controllers: frozenset[str] = frozenset()
    if v2_dir is not None:
        with contextlib.suppress(OSError):
            controllers = frozenset(_read(os.path.join(v2_dir, "cgroup.controllers")).split())
    memory_dir = _v1_dir(mounts, groups, "memory", "memory.limit_in_bytes")
    cpu_dir = _v1_dir(mounts, groups, "cpu", "cpu.cfs_quota_us")
    return HostCgroups(
        v2_dir=v2_dir, v2_writable=v2_writable, v2_controllers=controllers,
        v2_kill=v2_dir is not None and _has_kill(v2_dir, v2_writable),
        # Every group but the root has cgroup.type (Linux 4.14+).
        v2_root=v2_dir is not None and not os.path.exists(os.path.join(v2_dir, "cgroup.type")),
        v1_memory_dir=memory_dir,
        v1_memsw=memory_dir is not None and os.path.exists(
            os.path.join(memory_dir, "memory.memsw.limit_in_bytes")),
        v1_cpu_dir=cpu_dir)


def _v2_ours(v2_dir: str) -> bool:
    """Whether we may make groups below our v2 group: writable, and under systemd delegated
    to us (systemd 251+ marks such a group with a ``delegate`` attribute; an undelegated
    group is systemd's to move and remove, root or not)."""
    if not (os.access(v2_dir, os.W_OK)
            and os.access(os.path.join(v2_dir, "cgroup.procs"), os.W_OK)):
        return False
    if not os.path.isdir("/run/systemd/system"):
        return True  # no systemd manages the tree
    for attr in ("trusted.delegate", "user.delegate"):
        try:
            if os.getxattr(v2_dir, attr).strip() in (b"1", b"yes", b"true"):
                return True
        except OSError:
            continue
    return False


def _has_kill(v2_dir: str, writable: bool) -> bool:
    """Whether groups below ``v2_dir`` have cgroup.kill (Linux 5.14+). The root group has
    none of its own: there a group made and removed at once tells."""
    if os.path.exists(os.path.join(v2_dir, "cgroup.kill")):
        return True
    if not writable:
        return False
    probe = os.path.join(v2_dir, f"orbit-probe-{os.getpid()}")
    try:
        os.mkdir(probe)
    except OSError:
        return False
    try:
        return os.path.exists(os.path.join(probe, "cgroup.kill"))
    finally:
        with contextlib.suppress(OSError):
            os.rmdir(probe)


def _v1_dir(mounts: dict[str, tuple[str, str]], groups: dict[str, str], controller: str,
            control_file: str) -> str | None:
    if controller not in mounts or controller not in groups:
        return None
    path = own_dir(mounts[controller], groups[controller])
    if path is None or not os.path.exists(os.path.join(path, control_file)):
        return None
    return path if os.access(path, os.W_OK) else None


class ChildCgroups:
    """The slots' groups on each hierarchy the plan uses; ``open`` makes them."""

    def __init__(self, plan: CgroupPlan, host: HostCgroups, size: int,
                 logger: logging.Logger) -> None:
        self.plan = plan
        self._host = host
        self._size = size
        self._log = logger
        self._bases: dict[str, str] = {}  # "v2", "memory", "cpu" → <own>/orbit-<pid>
        self._oom_seen = [0] * size  # each slot's OOM count at its last look

    @classmethod
    def open(cls, memory_max: int | None, cpu_max: float | None, size: int,
             logger: logging.Logger, host: HostCgroups | None = None) -> ChildCgroups:
        """Choose the plan, make the groups and say which limits are in force (one line).
        A group that cannot be made falls back to the RSS watch, said in the same line."""
        host = probe_host() if host is None else host
        plan = choose(host, memory_max, cpu_max)
        groups = cls(plan, host, size, logger)
        if plan.uses_cgroups:
            try:
                groups._make()
            except OSError as exc:
                groups.close()
                logger.warning("cannot make the children's cgroups (%s); falling back", exc,
                               extra=fields("child_cgroups_failed", error=str(exc)))
                plan = choose(HostCgroups(), memory_max, cpu_max)
                groups = cls(plan, HostCgroups(), size, logger)
        if plan.mode is not Mode.NONE or plan.cpu_max is not None:
            logger.info("%s", plan.describe(), extra=fields(
                "child_limits", mode=plan.mode.value, memory=plan.memory, cpu=plan.cpu,
                kill_v2=plan.kill_v2, memory_max=memory_max, cpu_max=cpu_max,
                groups=sorted(groups._bases.values())))
        return groups

    # ------------------------------------------------------------------ at start and close

    def _make(self) -> None:
        plan, host = self.plan, self._host
        nth = next(_instances)
        name = f"orbit-{os.getpid()}" + (f".{nth}" if nth else "")
        if plan.kill_v2 or plan.v2_controllers:
            assert host.v2_dir is not None
            if plan.v2_controllers:
                self._enter_leaf(host.v2_dir, plan.v2_controllers)
            self._bases["v2"] = self._base(host.v2_dir, name)
            if plan.v2_controllers:
                _enable(self._bases["v2"], plan.v2_controllers)
        if plan.memory == "v1":
            assert host.v1_memory_dir is not None
            self._bases["memory"] = self._base(host.v1_memory_dir, name)
        if plan.cpu == "v1":
            assert host.v1_cpu_dir is not None
            self._bases["cpu"] = self._base(host.v1_cpu_dir, name)
        for index in range(self._size):
            for kind, base in self._bases.items():
                path = os.path.join(base, f"slot-{index}")
                os.makedirs(path, exist_ok=True)
                self._limit(kind, path)
            self._oom_seen[index] = self._oom_count(index) or 0

    def _base(self, own: str, name: str) -> str:
        _remove_leftovers(own, self._log)
        base = os.path.join(own, name)
        os.makedirs(base, exist_ok=True)
        return base

    def _enter_leaf(self, own: str, controllers: tuple[str, ...]) -> None:
        """v2: move every process of our group into its leaf, then delegate the controllers
        to its children (the kernel refuses the second while the first is not done)."""
        leaf = os.path.join(own, _LEAF)
        os.makedirs(leaf, exist_ok=True)
        for pid in _read(os.path.join(own, "cgroup.procs")).split():
            with contextlib.suppress(ProcessLookupError):
                _write(os.path.join(leaf, "cgroup.procs"), pid)
        _enable(own, controllers)

    def _limit(self, kind: str, path: str) -> None:
        plan = self.plan
        if kind == "v2":
            if plan.memory == "v2" and plan.memory_max is not None:
                _write(os.path.join(path, "memory.max"), str(plan.memory_max))
                _try_write(os.path.join(path, "memory.swap.max"), "0")
                # One OOM kill takes the whole slot: no half-killed process tree.
                _try_write(os.path.join(path, "memory.oom.group"), "1")
            if plan.cpu == "v2" and plan.cpu_max is not None:
                _write(os.path.join(path, "cpu.max"),
                       f"{cpu_quota_us(plan.cpu_max)} {CPU_PERIOD_US}")
        elif kind == "memory" and plan.memory_max is not None:
            # memsw bounds memory plus swap; it must stay >= the memory limit, so it goes
            # second (and first when lowering a leftover group's limit).
            _try_write(os.path.join(path, "memory.memsw.limit_in_bytes"), str(plan.memory_max))
            _write(os.path.join(path, "memory.limit_in_bytes"), str(plan.memory_max))
            if plan.memsw:
                _write(os.path.join(path, "memory.memsw.limit_in_bytes"), str(plan.memory_max))
        elif kind == "cpu" and plan.cpu_max is not None:
            _write(os.path.join(path, "cpu.cfs_period_us"), str(CPU_PERIOD_US))
            _write(os.path.join(path, "cpu.cfs_quota_us"), str(cpu_quota_us(plan.cpu_max)))

    def close(self) -> bool:
        """Remove the groups; False if one still holds a process (it is kept, and removed
        by the next call)."""
        left = {kind: base for kind, base in self._bases.items() if not _remove_tree(base)}
        done = not left
        self._bases = left
        return done

    async def aclose(self, *, tries: int = 40, pause_s: float = 0.025) -> None:
        """At the end, once the children are reaped: whatever still lingers in a slot's v2
        group is killed, then the groups are removed, trying for up to a second while the
        last exits finish; a group left is said in the log."""
        for index in range(self._size):
            self.kill(index)
        for _ in range(tries):
            if self.close():
                return
            await asyncio.sleep(pause_s)
        for base in self._bases.values():
            self._log.warning("could not remove cgroup %s", base,
                              extra=fields("child_cgroup_left", path=base))

    # ------------------------------------------------------------------ per child

    def slot_dirs(self, index: int) -> list[str]:
        """The groups of slot ``index`` (for tests and tools)."""
        return [os.path.join(base, f"slot-{index}") for base in self._bases.values()]

    def slot_dir(self, index: int, kind: str) -> str | None:
        """Slot ``index``'s group on one hierarchy: "v2", "memory" or "cpu" (v1)."""
        base = self._bases.get(kind)
        return None if base is None else os.path.join(base, f"slot-{index}")

    def place(self, index: int, pid: int) -> None:
        """Move ``pid`` (a fresh child) into slot ``index``'s groups; a child already gone
        or a group that refuses is logged, not raised (the child then runs unconfined)."""
        for path in self.slot_dirs(index):
            try:
                _write(os.path.join(path, "cgroup.procs"), str(pid))
            except ProcessLookupError:
                return
            except OSError as exc:
                self._log.warning("could not move child %s into %s: %s", pid, path, exc,
                                  extra=fields("child_cgroup_refused", pid=pid, path=path))

    def kill(self, index: int) -> bool:
        """SIGKILL every process in slot ``index``'s v2 group at once (cgroup.kill)."""
        base = self._bases.get("v2")
        if base is None or not self.plan.kill_v2:
            return False
        try:
            _write(os.path.join(base, f"slot-{index}", "cgroup.kill"), "1")
        except OSError:
            return False
        return True

    def oom_kills_since(self, index: int) -> int:
        """OOM kills the kernel counted in slot ``index``'s memory group since the last
        look (0 where the memory limit is not a cgroup's)."""
        count = self._oom_count(index)
        if count is None:
            return 0
        seen, self._oom_seen[index] = self._oom_seen[index], count
        return max(0, count - seen)

    def _oom_count(self, index: int) -> int | None:
        if self.plan.memory == "v2" and "v2" in self._bases:
            path = os.path.join(self._bases["v2"], f"slot-{index}", "memory.events")
        elif self.plan.memory == "v1" and "memory" in self._bases:
            path = os.path.join(self._bases["memory"], f"slot-{index}", "memory.oom_control")
        else:
            return None
        try:
            return oom_kills(_read(path))
        except OSError:
            return None


def _enable(path: str, controllers: tuple[str, ...]) -> None:
    _write(os.path.join(path, "cgroup.subtree_control"),
           " ".join(f"+{name}" for name in controllers))


def _try_write(path: str, value: str) -> None:
    with contextlib.suppress(OSError):
        _write(path, value)


def _remove_tree(path: str) -> bool:
    """rmdir a group and its child groups, deepest first (a cgroup directory holds only
    the kernel's files, which go with it). False if one is still in use or left."""
    if not os.path.isdir(path):
        return True
    ok = True
    with contextlib.suppress(OSError):
        for entry in os.scandir(path):
            if entry.is_dir(follow_symlinks=False):
                ok = _remove_tree(entry.path) and ok
    try:
        os.rmdir(path)
    except FileNotFoundError:
        pass
    except OSError:
        return False
    return ok


def _remove_leftovers(own: str, log: logging.Logger) -> None:
    """Groups ``orbit-<pid>`` of an earlier run whose supervisor is gone: removed when
    empty (a group that still holds a process is left alone and said)."""
    try:
        entries = list(os.scandir(own))
    except OSError:
        return
    for entry in entries:
        match = _BASE_RE.fullmatch(entry.name)
        if match is None or not entry.is_dir(follow_symlinks=False):
            continue
        pid = int(match.group(1))
        if pid == os.getpid() or os.path.exists(f"/proc/{pid}"):
            continue
        if _remove_tree(entry.path):
            log.info("removed cgroup %s left by an earlier run", entry.path,
                     extra=fields("child_cgroup_leftover", path=entry.path, removed=True))
        else:
            log.warning("cgroup %s left by an earlier run is still in use", entry.path,
                        extra=fields("child_cgroup_leftover", path=entry.path, removed=False))
