"""Validated supervisor options with the ranges of docs/supervisor.md "Options" (one place
for every bound)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from orbit_wire.errors import ErrorCode, OrbitError
from orbit_wire.ids import is_id
from orbit_wire.labels import parse_labels
from orbit_wire.limits import MAX_CAPACITY

from . import defaults

WORKERS_RANGE = (1, MAX_CAPACITY)
SHUTDOWN_TIMEOUT_RANGE = (0.001, 300.0)
RECONNECT_MIN_DELAY_FLOOR = 0.01
RECONNECT_MAX_DELAY_CEILING = 30.0
CHILD_NICE_RANGE = (0, 19)
CHILD_MEMORY_MAX_RANGE = (1 << 20, 2**50)  # bytes a child's cgroup may hold
CHILD_CPU_MAX_RANGE = (0.01, 1024.0)  # CPUs a child's cgroup may use


class OptionError(OrbitError, ValueError):
    """An option outside its allowed range (BAD_REQUEST); the message names the option and
    the range. A ValueError too, as a bad argument to ``Supervisor(...)`` always was."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.BAD_REQUEST, message)


class QueueOutOfScope(OrbitError, ValueError):
    """A queue to serve that the worker credential may not consume (PERMISSION_DENIED),
    found before anything starts; the message names the queue and the credential's scope.
    A ValueError too, like every bad argument to ``Supervisor(...)``."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.PERMISSION_DENIED, message)


def check_queue_scope(queue_ids: tuple[str, ...], credential_id: str,
                      scope: tuple[str, ...]) -> None:
    """Raise QueueOutOfScope for the first queue the credential's file does not list (a file
    that lists none is left to the server, whose hello checks every queue anyway)."""
    if not scope:
        return
    for queue_id in queue_ids:
        if queue_id not in scope:
            raise QueueOutOfScope(
                f"queue {queue_id} is not in the scope of credential {credential_id} (it "
                f"may consume: {', '.join(scope)}); create a credential for that queue, or "
                f"leave the queue out")


@dataclass(frozen=True, slots=True)
class SupervisorOptions:
    """``queue_ids``: the queues served, one session each over the same children."""

    queue_ids: tuple[str, ...]
    workers: int = defaults.WORKERS
    shutdown_timeout: float = defaults.SHUTDOWN_TIMEOUT
    reconnect_min_delay: float = defaults.RECONNECT_MIN_DELAY
    reconnect_max_delay: float = defaults.RECONNECT_MAX_DELAY
    max_tasks_per_child: int | None = None
    max_memory_per_child: int | None = None
    # Per-child control groups (docs/supervisor.md, "Child limits"): bytes and CPUs.
    child_memory_max: int | None = None
    child_cpu_max: float | None = None
    child_nice: int = defaults.CHILD_NICE
    prefetch: int = 0  # attempts started ahead of a free child, 0 to workers
    grants: bool = True  # ask for leases granted with the dispatch (docs/protocol.md)
    # Record the first line of a handler exception's message (docs/security.md).
    report_exception_messages: bool = False
    # What this host offers (``--label gpu=a100``), sorted pairs; sent in every hello.
    labels: tuple[tuple[str, str], ...] = ()

    @property
    def queue_id(self) -> str:
        """The first queue served (the only one, usually)."""
        return self.queue_ids[0]

    def __post_init__(self) -> None:
        if not self.queue_ids:
            raise OptionError("at least one queue is needed")
        for queue_id in self.queue_ids:
            if not is_id(queue_id):
                raise OptionError("queue must be a 32-character lowercase hex queue ID, got "
                                  f"{queue_id!r}")
        if len(set(self.queue_ids)) != len(self.queue_ids):
            raise OptionError("a queue is named twice")
        _int_in("workers", self.workers, *WORKERS_RANGE)
        _float_in("shutdown_timeout", self.shutdown_timeout, *SHUTDOWN_TIMEOUT_RANGE)
        _float_in("reconnect_min_delay", self.reconnect_min_delay, RECONNECT_MIN_DELAY_FLOOR,
                  RECONNECT_MAX_DELAY_CEILING)
        _float_in("reconnect_max_delay", self.reconnect_max_delay, self.reconnect_min_delay,
                  RECONNECT_MAX_DELAY_CEILING)
        _int_in("child_nice", self.child_nice, *CHILD_NICE_RANGE)
        _int_in("prefetch", self.prefetch, 0, self.workers)
        if self.max_tasks_per_child is not None:
            _int_in("max_tasks_per_child", self.max_tasks_per_child, 1, 2**31)
        if self.max_memory_per_child is not None:
            _int_in("max_memory_per_child", self.max_memory_per_child, 1 << 20, 2**50)
        if self.child_memory_max is not None:
            _int_in("child_memory_max", self.child_memory_max, *CHILD_MEMORY_MAX_RANGE)
        if self.child_cpu_max is not None:
            ok = isinstance(self.child_cpu_max, int | float) and not isinstance(
                self.child_cpu_max, bool) and math.isfinite(float(self.child_cpu_max))
            lo, hi = CHILD_CPU_MAX_RANGE
            if not ok or not lo <= float(self.child_cpu_max) <= hi:
                raise OptionError(f"child_cpu_max must be a number of CPUs in [{lo:g}, "
                                  f"{hi:g}], got {self.child_cpu_max!r}")
        try:
            parse_labels(f"{k}={v}" for k, v in self.labels)
        except OrbitError as exc:
            raise OptionError(exc.message) from None
        if len(self.queue_ids) > self.workers:
            # Each queue keeps a child of its own (docs/supervisor.md, "Several queues").
            raise OptionError(f"workers must be at least the number of queues "
                              f"({len(self.queue_ids)}), got {self.workers}")


def _int_in(name: str, value: object, lo: int, hi: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise OptionError(f"{name} must be an integer in [{lo}, {hi}], got {value!r}")


def _float_in(name: str, value: object, lo: float, hi: float) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not math.isfinite(float(value)) or not lo <= float(value) <= hi:  # type: ignore[arg-type]
        raise OptionError(f"{name} must be a number of seconds in [{lo:g}, {hi:g}], got {value!r}")


_SIZE_RE = re.compile(r"\s*(\d+)\s*([KMGT]?)(i?B)?\s*", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str) -> int:
    """Parse a byte size such as ``536870912``, ``512M``, ``512MiB`` or ``2G`` (powers of 1024)."""
    match = _SIZE_RE.fullmatch(text)
    if match is None:
        raise OptionError(f"{text!r} is not a size (use bytes or a K/M/G/T suffix, e.g. 512M)")
    return int(match.group(1)) * _SIZE_UNITS[match.group(2).upper()]
