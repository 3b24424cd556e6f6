"""Every message between the supervisor, its template process and its children, as classes.

Two channels carry them, both JSON objects with a kind ``t``:

    child channel (framing.py: length-prefixed frames on one stream socket per child;
    every frame carries ``g``, the child's generation, and a frame of another generation
    is ignored by both ends)
        supervisor → child   RunTask    t=run    {a, task_id, epoch, attempt_number,
                                                  capability, payload, deadline_at_ms,
                                                  idempotency}
                             CancelTask t=cancel {a}   cooperative stop for the attempt
                             LeaveChild t=exit         leave the loop (recycling)
        child → supervisor   ChildReady t=ready  {pid}
                             TaskDone   t=done   {a, outcome, code, retryable, result_json,
                                                  details_json, cpu_ms, peak_rss_bytes}

    template control socket (SOCK_SEQPACKET, one JSON object per packet)
        template → supervisor  HandlersLoaded   t=caps       {caps: [[h, hv, pv], ...]}
                               HandlersRejected t=spec_error {message}  (then exit 2)
                               ChildForked      t=forked     {g, pid}
                               ChildReaped      t=reaped     {g, pid, exit_code | signal,
                                                              cpu_ms, peak_rss_bytes}
        supervisor → template  ForkChild        t=fork {g} + the child's socket (SCM_RIGHTS)
                               StopTemplate     t=exit      kill everything and leave

``to_wire()`` gives the JSON object of a message; the ``decode_*`` functions take a decoded
object from one direction of one channel and return its message, or raise
``MalformedMessage``. A child is untrusted: ``TaskDone`` keeps its answer's fields as sent,
and the supervisor checks them against the value rules (orbit_supervisor/outcomes.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orbit_wire.model import Capability

__all__ = [
    "CancelTask",
    "ChildForked",
    "ChildReady",
    "ChildReaped",
    "ForkChild",
    "HandlersLoaded",
    "HandlersRejected",
    "LeaveChild",
    "MalformedMessage",
    "RunTask",
    "StopTemplate",
    "TaskDone",
    "decode_for_child",
    "decode_for_template",
    "decode_from_child",
    "decode_from_template",
    "opt_int",
]


class MalformedMessage(ValueError):
    """An object that is not a well-formed message of its channel and direction."""


def opt_int(value: Any) -> int | None:
    """An integer field as sent, or None when it is absent or not an integer."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _int(obj: dict[str, Any], key: str) -> int:
    value = obj.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise MalformedMessage(f"{key} must be an integer")
    return value


def _str(obj: dict[str, Any], key: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str):
        raise MalformedMessage(f"{key} must be a string")
    return value


def _triple(value: Any) -> Capability:
    if not isinstance(value, list | tuple) or len(value) != 3:
        raise MalformedMessage("a capability must be [handler, handler_version, payload_version]")
    return Capability(str(value[0]), str(value[1]), str(value[2]))


# --------------------------------------------------------------------------- child channel


@dataclass(frozen=True, slots=True)
class RunTask:
    generation: int
    attempt_id: str
    task_id: str
    epoch: int
    attempt_number: int
    capability: Capability
    payload: Any  # a parsed JSON value
    deadline_at_ms: int  # the task's total deadline, wall-clock ms (informational)
    idempotency: str

    def to_wire(self) -> dict[str, Any]:
        cap = self.capability
        return {
            "t": "run", "g": self.generation, "a": self.attempt_id, "task_id": self.task_id,
            "epoch": self.epoch, "attempt_number": self.attempt_number,
            "capability": [cap.handler, cap.handler_version, cap.payload_version],
            "payload": self.payload, "deadline_at_ms": self.deadline_at_ms,
            "idempotency": self.idempotency,
        }


@dataclass(frozen=True, slots=True)
class CancelTask:
    generation: int
    attempt_id: str

    def to_wire(self) -> dict[str, Any]:
        return {"t": "cancel", "g": self.generation, "a": self.attempt_id}


@dataclass(frozen=True, slots=True)
class LeaveChild:
    generation: int

    def to_wire(self) -> dict[str, Any]:
        return {"t": "exit", "g": self.generation}


@dataclass(frozen=True, slots=True)
class ChildReady:
    generation: int
    pid: int

    def to_wire(self) -> dict[str, Any]:
        return {"t": "ready", "g": self.generation, "pid": self.pid}


@dataclass(frozen=True, slots=True)
class TaskDone:
    """A child's answer for one attempt. ``outcome`` is SUCCEEDED, FAILED or UNKNOWN as
    sent; the other answer fields are kept as sent for the supervisor to check."""

    generation: int
    attempt_id: Any
    outcome: Any
    code: Any = None
    retryable: Any = None
    result_json: Any = None
    details_json: Any = None
    cpu_ms: int | None = None
    peak_rss_bytes: int | None = None

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"t": "done", "g": self.generation, "a": self.attempt_id,
                               "outcome": self.outcome}
        for key in ("code", "retryable", "result_json", "details_json", "cpu_ms",
                    "peak_rss_bytes"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        return out


def decode_for_child(obj: dict[str, Any]) -> RunTask | CancelTask | LeaveChild:
    """A frame the supervisor sent to a child; MalformedMessage if it is not one."""
    kind = obj.get("t")
    generation = _int(obj, "g")
    if kind == "run":
        try:
            return RunTask(
                generation=generation, attempt_id=_str(obj, "a"),
                task_id=str(obj["task_id"]), epoch=int(obj["epoch"]),
                attempt_number=int(obj["attempt_number"]),
                capability=_triple(obj.get("capability")), payload=obj.get("payload"),
                deadline_at_ms=int(obj["deadline_at_ms"]),
                idempotency=str(obj["idempotency"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise MalformedMessage(f"malformed run frame: {type(exc).__name__}") from None
    if kind == "cancel":
        return CancelTask(generation, str(obj.get("a")))
    if kind == "exit":
        return LeaveChild(generation)
    raise MalformedMessage(f"{kind!r} is not a message for a child")


def decode_from_child(obj: dict[str, Any]) -> ChildReady | TaskDone:
    """A frame a child sent; MalformedMessage if it is not one."""
    kind = obj.get("t")
    generation = _int(obj, "g")
    if kind == "ready":
        return ChildReady(generation, _int(obj, "pid"))
    if kind == "done":
        return TaskDone(
            generation=generation, attempt_id=obj.get("a"), outcome=obj.get("outcome"),
            code=obj.get("code"), retryable=obj.get("retryable"),
            result_json=obj.get("result_json"), details_json=obj.get("details_json"),
            cpu_ms=opt_int(obj.get("cpu_ms")), peak_rss_bytes=opt_int(obj.get("peak_rss_bytes")),
        )
    raise MalformedMessage(f"{kind!r} is not a message from a child")


# --------------------------------------------------------------------------- template control


@dataclass(frozen=True, slots=True)
class HandlersLoaded:
    capabilities: tuple[Capability, ...]

    def to_wire(self) -> dict[str, Any]:
        return {"t": "caps", "caps": [[c.handler, c.handler_version, c.payload_version]
                                      for c in self.capabilities]}


@dataclass(frozen=True, slots=True)
class HandlersRejected:
    message: str  # one line, no traceback

    def to_wire(self) -> dict[str, Any]:
        return {"t": "spec_error", "message": self.message}


@dataclass(frozen=True, slots=True)
class ChildForked:
    generation: int
    pid: int

    def to_wire(self) -> dict[str, Any]:
        return {"t": "forked", "g": self.generation, "pid": self.pid}


@dataclass(frozen=True, slots=True)
class ChildReaped:
    """A child is gone: its exit code or the signal that ended it, and its rusage."""

    generation: int
    pid: int
    exit_code: int | None = None
    signal: int | None = None
    cpu_ms: int | None = None
    peak_rss_bytes: int | None = None

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"t": "reaped", "g": self.generation, "pid": self.pid}
        for key in ("exit_code", "signal", "cpu_ms", "peak_rss_bytes"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        return out


@dataclass(frozen=True, slots=True)
class ForkChild:
    """Fork a child of ``generation``; the child's socket travels with the message, and its
    output pipe after it when the supervisor captures children's output."""

    generation: int

    def to_wire(self) -> dict[str, Any]:
        return {"t": "fork", "g": self.generation}


@dataclass(frozen=True, slots=True)
class StopTemplate:
    def to_wire(self) -> dict[str, Any]:
        return {"t": "exit"}


def decode_from_template(obj: Any) -> HandlersLoaded | HandlersRejected | ChildForked | ChildReaped:
    """A control message the template sent; MalformedMessage if it is not one."""
    if not isinstance(obj, dict):
        raise MalformedMessage("a control message must be a JSON object")
    kind = obj.get("t")
    if kind == "reaped":
        return ChildReaped(_int(obj, "g"), _int(obj, "pid"), opt_int(obj.get("exit_code")),
                           opt_int(obj.get("signal")), opt_int(obj.get("cpu_ms")),
                           opt_int(obj.get("peak_rss_bytes")))
    if kind == "forked":
        return ChildForked(_int(obj, "g"), _int(obj, "pid"))
    if kind == "caps":
        caps = obj.get("caps")
        if not isinstance(caps, list):
            raise MalformedMessage("caps must be a list")
        return HandlersLoaded(tuple(_triple(c) for c in caps))
    if kind == "spec_error":
        return HandlersRejected(str(obj.get("message")))
    raise MalformedMessage(f"{kind!r} is not a message from the template")


def decode_for_template(obj: Any) -> ForkChild | StopTemplate:
    """A control message the supervisor sent to the template; MalformedMessage if not one."""
    if not isinstance(obj, dict):
        raise MalformedMessage("a control message must be a JSON object")
    kind = obj.get("t")
    if kind == "fork":
        return ForkChild(_int(obj, "g"))
    if kind == "exit":
        return StopTemplate()
    raise MalformedMessage(f"{kind!r} is not a message for the template")
