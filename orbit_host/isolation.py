"""Keeping a worker's secrets out of its handlers' reach (docs/security.md).

In the supervisor parent, at start: ``set_not_dumpable`` (its /proc/<pid>/environ and mem
become unreadable to processes of the same user, handlers included) and
``scrub_environment`` (secret-bearing variables leave ``os.environ`` AND the initial
environment block the kernel shows in /proc/<pid>/environ).

For the template and its children: ``ChildIsolation`` travels as template arguments; the
template drops to the child user and applies the address-space and descriptor limits
before it imports any handler code, and each child applies the CPU limit after its fork
(so the long-lived template never accumulates toward it).
"""

from __future__ import annotations

import ctypes
import os
import pwd
import re
import resource
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .procutil import prctl

_PR_SET_DUMPABLE = 4
# Orbit's own settings that name or hold a secret (the credentials file among them).
_SECRET_HINT = re.compile(r"CREDENTIAL|SECRET|TOKEN|PASSWORD|KEY")


def is_secret_variable(name: str) -> bool:
    return name.startswith("ORBIT_") and bool(_SECRET_HINT.search(name))


def secret_variables(env: Mapping[str, str]) -> list[str]:
    return [name for name in env if is_secret_variable(name)]


def set_not_dumpable() -> None:
    """prctl(PR_SET_DUMPABLE, 0): no process of the same user may ptrace this one or read
    its /proc/<pid>/mem and environ (root with CAP_SYS_PTRACE still can: use a child user)."""
    prctl(_PR_SET_DUMPABLE, 0)


def scrub_environment(names: Iterable[str]) -> None:
    """Remove ``names`` from this process's environment, and overwrite their text in the
    initial environment block (what /proc/<pid>/environ shows; ``unsetenv`` alone leaves
    it there). Removed first, so no ``environ`` pointer refers to the bytes zeroed."""
    wanted = {name for name in names}
    for name in wanted:
        os.environ.pop(name, None)
    start, end = _initial_environment_block()
    if not start or end <= start:
        return
    block = ctypes.string_at(start, end - start)
    offset = 0
    for entry in block.split(b"\0"):
        name = entry.partition(b"=")[0].decode(errors="replace")
        if name in wanted and entry:
            ctypes.memset(start + offset, 0, len(entry))
        offset += len(entry) + 1


def _initial_environment_block() -> tuple[int, int]:
    """(env_start, env_end) from /proc/self/stat (fields 50 and 51, proc(5))."""
    with open("/proc/self/stat", "rb") as fh:
        stat = fh.read()
    fields = stat[stat.rindex(b")") + 2:].split()  # fields[0] is field 3
    return int(fields[47]), int(fields[48])


@dataclass(frozen=True, slots=True)
class ChildIsolation:
    """What the template applies before handler code runs. None: not applied."""

    uid: int | None = None
    gid: int | None = None
    rlimit_as: int | None = None  # bytes of address space, per process
    rlimit_cpu: int | None = None  # CPU seconds, per child
    nofile: int | None = None  # open descriptors, per process

    def to_args(self) -> list[str]:
        out: list[str] = []
        for flag, value in (("--child-uid", self.uid), ("--child-gid", self.gid),
                            ("--rlimit-as", self.rlimit_as), ("--rlimit-cpu", self.rlimit_cpu),
                            ("--nofile", self.nofile)):
            if value is not None:
                out += [flag, str(value)]
        return out

    def enter_template(self) -> None:
        """In the template, before importing handlers: the user, then the inherited limits."""
        if self.uid is not None:
            gid = self.gid if self.gid is not None else pwd.getpwuid(self.uid).pw_gid
            os.setgroups([])
            os.setgid(gid)
            os.setuid(self.uid)
            if os.getuid() != self.uid or os.geteuid() != self.uid:
                raise OSError(f"could not switch to uid {self.uid}")
        if self.rlimit_as is not None:
            resource.setrlimit(resource.RLIMIT_AS, (self.rlimit_as, self.rlimit_as))
        if self.nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (self.nofile, self.nofile))

    def enter_child(self) -> None:
        """In each child after its fork: the CPU limit (its CPU time starts at zero)."""
        if self.rlimit_cpu is not None:
            resource.setrlimit(resource.RLIMIT_CPU, (self.rlimit_cpu, self.rlimit_cpu))


def resolve_user(spec: str) -> tuple[int, int]:
    """``name`` or ``uid`` or ``uid:gid`` → (uid, gid); KeyError/ValueError when unknown."""
    user, _, group = spec.partition(":")
    if user.isdigit():
        uid = int(user)
        gid = int(group) if group else pwd.getpwuid(uid).pw_gid
        return uid, gid
    entry = pwd.getpwnam(user)
    return entry.pw_uid, int(group) if group else entry.pw_gid
