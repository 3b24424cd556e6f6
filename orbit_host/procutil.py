"""Linux process helpers: prctl via ctypes, quiet signalling, and /proc child lists.

Used by the supervisor's pool, the template and the children. Nothing here blocks except the
bounded /proc reads. Every signal helper returns False instead of raising when the target is
already gone, because every caller races with processes that exit on their own.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
from collections.abc import Callable

__all__ = [
    "child_pids",
    "close_fds_except",
    "descendant_pids",
    "kill_pid",
    "kill_tree",
    "killpg",
    "set_batch_scheduling",
    "set_child_subreaper",
    "set_parent_death_signal",
    "usage",
]

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
# A process tree larger than this is not something a handler should build; the bound keeps a
# fork bomb from turning a kill into an endless walk.
_MAX_TREE = 4096

_libc: ctypes.CDLL | None = None


def prctl(option: int, arg: int) -> None:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    if _libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({option}) failed: {os.strerror(err)}")


def set_parent_death_signal(sig: int) -> None:
    """Ask the kernel to send ``sig`` to this process when the thread that forked it dies."""
    prctl(_PR_SET_PDEATHSIG, int(sig))


def set_child_subreaper() -> None:
    """Make orphaned descendants re-parent to this process instead of init."""
    prctl(_PR_SET_CHILD_SUBREAPER, 1)


def set_batch_scheduling() -> bool:
    """Put this process (and what it starts) under SCHED_BATCH: the kernel then never lets
    it preempt a process that woke it, so a child handed a task over its socket leaves the
    supervisor's event loop running (lease renewals, kills, the next dispatch) instead of
    taking its CPU at once; CPU-heavy handlers are what SCHED_BATCH is for. False where the
    policy is refused (the child then runs under the default policy)."""
    try:
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    except (OSError, AttributeError):
        return False
    return True


def killpg(pgid: int, sig: int = signal.SIGKILL) -> bool:
    """Signal a whole process group; False if no such group (or not ours to signal)."""
    if pgid <= 1:
        raise ValueError(f"refusing to signal process group {pgid}")
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def kill_pid(pid: int, sig: int = signal.SIGKILL) -> bool:
    """Signal one process; False if it is already gone."""
    if pid <= 1:
        raise ValueError(f"refusing to signal pid {pid}")
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def kill_tree(pid: int, also: Callable[[], object] | None = None) -> None:
    """SIGKILL a child and everything it started: its process group (a child leads its own),
    the child itself in case a handler moved it to another group, ``also`` (the child's
    cgroup.kill, which reaches what left the group at once), then every descendant still
    found below it (those that left the group). Signal first, look after: the /proc walk
    runs only once the group is already dying."""
    killpg(pid)
    kill_pid(pid)
    if also is not None:
        also()
    hasten_exit(pid)
    for victim in descendant_pids(pid):
        kill_pid(victim)


_may_renice = True  # until the kernel refuses: raising a priority needs CAP_SYS_NICE


def hasten_exit(pgid: int) -> None:
    """Give a SIGKILLed child's group this process's own nice value back.

    A killed process tears itself down on the CPU, at its own priority: a child niced below
    the supervisor, on busy cores, can take a hundred milliseconds or more to be gone
    (docs/benchmarks.md, "Kills measured from outside"). Lowering a nice value needs CAP_SYS_NICE
    (root, or the capability given to the supervisor); without it the first refusal ends
    the attempts and the child exits at its own pace, as before."""
    global _may_renice
    if not _may_renice:
        return
    try:
        ours = os.getpriority(os.PRIO_PROCESS, 0)
        os.setpriority(os.PRIO_PGRP, pgid, ours)
        os.setpriority(os.PRIO_PROCESS, pgid, ours)  # in case it left its group
    except ProcessLookupError:
        pass
    except PermissionError:
        _may_renice = False


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def usage(pid: int) -> tuple[int | None, int | None]:
    """(CPU ms, peak RSS bytes) of ``pid`` itself, from /proc, or None for what cannot be
    read (gone, or its memory already torn down). Cheap enough to call right after a
    SIGKILL, before the kernel has finished the process."""
    cpu_ms = peak = None
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
        # Fields after the command (which may hold spaces): utime and stime are 14 and 15.
        fields = stat[stat.rindex(b")") + 2:].split()
        cpu_ms = (int(fields[11]) + int(fields[12])) * 1000 // _CLOCK_TICKS
        with open(f"/proc/{pid}/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"VmHWM:"):
                    peak = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    return cpu_ms, peak


def child_pids(pid: int) -> list[int]:
    """Direct children of ``pid`` (all its threads), from /proc; [] if it is gone."""
    out: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as fh:
                out.extend(int(x) for x in fh.read().split())
        except OSError:
            continue
    return out


def descendant_pids(pid: int) -> list[int]:
    """Every descendant of ``pid`` (breadth first, at most a few thousand), not ``pid``."""
    found: list[int] = []
    seen = {pid}
    frontier = [pid]
    while frontier and len(found) < _MAX_TREE:
        nxt: list[int] = []
        for parent in frontier:
            for child in child_pids(parent):
                if child not in seen:
                    seen.add(child)
                    found.append(child)
                    nxt.append(child)
        frontier = nxt
    return found


def close_fds_except(keep: set[int]) -> None:
    """Close every open descriptor of this process except stdio and ``keep``."""
    keep = keep | {0, 1, 2}
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        fds = list(range(3, 1024))
    for fd in fds:
        if fd not in keep:
            with contextlib.suppress(OSError):
                os.close(fd)
