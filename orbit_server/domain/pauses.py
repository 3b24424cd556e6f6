"""Paused dispatch (docs/flow-control.md "Pause and resume"): which capabilities of a queue
start no new attempts. Pure.

A pause names a queue and optionally a handler, and with a handler optionally its version;
"" stands for "every" in the stored key, so the rows of a queue, a capability and a
capability version share one primary key. ``PauseSet`` answers, for a claim, which of a
worker's capabilities are still served, and for a PENDING task, the pause it waits for.
An empty set answers at once: nothing is paused costs one truthiness check.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from orbit_wire.errors import ErrorCode, OrbitError
from orbit_wire.model import Capability
from orbit_wire.names import is_name

# The waiting fact of a PENDING task whose capability is paused.
PAUSED: Final = "PAUSED"
MAX_PAUSE_REASON: Final = 1024


@dataclass(frozen=True, slots=True)
class PauseKey:
    """What a pause covers: ``handler`` None pauses the queue, ``handler_version`` None
    every version of the handler."""

    queue_id: str
    handler: str | None = None
    handler_version: str | None = None

    @property
    def scope(self) -> str:
        if self.handler is None:
            return "queue"
        return "capability" if self.handler_version is None else "capability_version"

    def covers(self, cap: Capability) -> bool:
        return self.handler is None or (
            cap.handler == self.handler
            and (self.handler_version is None or cap.handler_version == self.handler_version))

    def stored(self) -> tuple[str, str, str]:
        """The row key: "" for "every"."""
        return self.queue_id, self.handler or "", self.handler_version or ""

    @staticmethod
    def of_row(row: Mapping[Any, Any]) -> PauseKey:
        return PauseKey(str(row["queue_id"]), row["handler"] or None,
                        row["handler_version"] or None)


def pause_key(queue_id: str, handler: str | None, handler_version: str | None) -> PauseKey:
    """A checked key: names within the name rules, a version only with a handler
    (BAD_REQUEST naming the field otherwise)."""
    if handler is not None and not is_name(handler):
        raise OrbitError(ErrorCode.BAD_REQUEST, "handler must be a handler name")
    if handler_version is not None:
        if handler is None:
            raise OrbitError(ErrorCode.BAD_REQUEST, "handler_version needs a handler")
        if not is_name(handler_version):
            raise OrbitError(ErrorCode.BAD_REQUEST,
                             "handler_version must be a handler version name")
    return PauseKey(queue_id, handler, handler_version)


def check_pause_reason(reason: object, required: bool) -> str | None:
    """A pause needs a reason (who paused and why is the audit); a resume may give one."""
    if reason is None or reason == "":
        if required:
            raise OrbitError(ErrorCode.BAD_REQUEST, "reason is required: say why")
        return None
    if not isinstance(reason, str) or len(reason) > MAX_PAUSE_REASON:
        raise OrbitError(ErrorCode.BAD_REQUEST,
                         f"reason must be a string of at most {MAX_PAUSE_REASON} chars")
    return reason


@dataclass(frozen=True, slots=True)
class Pause:
    key: PauseKey
    reason: str
    paused_by: str
    paused_at_ms: int

    def view(self) -> dict[str, Any]:
        return {"queue_id": self.key.queue_id, "scope": self.key.scope,
                "handler": self.key.handler, "handler_version": self.key.handler_version,
                "reason": self.reason, "paused_by": self.paused_by,
                "paused_at_ms": self.paused_at_ms}

    @staticmethod
    def of_row(row: Mapping[Any, Any]) -> Pause:
        return Pause(PauseKey.of_row(row), str(row["reason"]), str(row["paused_by"]),
                     int(row["paused_at_ms"]))


class PauseSet:
    """The pauses in force, by queue (immutable once built)."""

    __slots__ = ("_by_queue",)

    def __init__(self, pauses: Iterable[Pause] = ()) -> None:
        by_queue: dict[str, list[Pause]] = {}
        for pause in pauses:
            by_queue.setdefault(pause.key.queue_id, []).append(pause)
        self._by_queue = by_queue

    def __bool__(self) -> bool:
        return bool(self._by_queue)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PauseSet) and self.keys() == other.keys()

    __hash__ = None  # type: ignore[assignment]

    def keys(self) -> set[PauseKey]:
        return {p.key for pauses in self._by_queue.values() for p in pauses}

    def of_queue(self, queue_id: str) -> list[Pause]:
        return list(self._by_queue.get(queue_id, ()))

    def pause_of(self, queue_id: str, cap: Capability) -> Pause | None:
        """The pause that holds ``cap`` in ``queue_id`` (the widest first), or None."""
        pauses = self._by_queue.get(queue_id)
        if not pauses:
            return None
        held = [p for p in pauses if p.key.covers(cap)]
        if not held:
            return None
        return min(held, key=lambda p: (p.key.handler is not None,
                                        p.key.handler_version is not None))

    def served(self, queue_id: str, caps: Sequence[Capability]) -> Sequence[Capability]:
        """Those of ``caps`` no pause holds in ``queue_id`` (``caps`` itself when none
        does)."""
        pauses = self._by_queue.get(queue_id)
        if not pauses:
            return caps
        kept = tuple(c for c in caps if not any(p.key.covers(c) for p in pauses))
        return caps if len(kept) == len(caps) else kept


def paused_fact(pause: Pause, cap: Capability, created_at_ms: int) -> dict[str, Any]:
    """The ``waiting`` fact of a PENDING task held by ``pause``."""
    return {"reason": PAUSED, "capability": cap.to_dict(),
            "since": max(created_at_ms, pause.paused_at_ms),
            "pause": {"scope": pause.key.scope, "reason": pause.reason,
                      "paused_by": pause.paused_by}}
