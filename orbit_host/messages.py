"""Every message between the supervisor, its template process and its children, as Structs.

Two channels carry them, both JSON objects with a kind ``t``:

    child channel (framing.py: length-prefixed frames on one stream socket per child;
    every frame carries ``g``, the child's generation, and a frame of another generation
    is ignored by both ends)
        supervisor → child   RunTask    t=run    {a, task_id, epoch, attempt_number,
                                                  capability, payload, deadline_at_ms,
                                                  idempotency, checkpoint?, parents?}
                             CancelTask t=cancel {a}   cooperative stop for the attempt
                             LeaveChild t=exit         leave the loop (recycling)
        child → supervisor   ChildReady t=ready  {pid}
                             TaskDone   t=done   {a, outcome, code, retryable, result_json,
                                                  details_json, cpu_ms, peak_rss_bytes}
                             ProgressNote t=progress {a, fraction?, details_json?}

    template control socket (SOCK_SEQPACKET, one JSON object per packet)
        template → supervisor  HandlersLoaded   t=caps       {caps: [[h, hv, pv], ...],
                                                              pol?: [{capability, policy}]}
                               HandlersRejected t=spec_error {message}  (then exit 2)
                               ChildForked      t=forked     {g, pid}
                               ChildReaped      t=reaped     {g, pid, exit_code | signal,
                                                              cpu_ms, peak_rss_bytes}
        supervisor → template  ForkChild        t=fork {g} + the child's socket (SCM_RIGHTS)
                               StopTemplate     t=exit      kill everything and leave

Each message is a frozen Struct tagged on ``t``: its fields, in order, are the object's keys
(``generation`` is ``g``, ``attempt_id`` is ``a``; None is left out), and a capability
travels as the triple ``[handler, handler_version, payload_version]``. ``to_wire()`` gives
the JSON object of a message; the ``decode_*`` functions take a decoded object from one
direction of one channel, check it against that direction's union of Structs in one pass
(``msgspec.convert``) and return its message, or raise ``MalformedMessage``. A child is
untrusted: ``TaskDone`` keeps its answer's fields as sent, and the supervisor checks them
against the value rules (orbit_supervisor/outcomes.py).
"""

from __future__ import annotations

import functools
from typing import Any

import msgspec
from msgspec import Struct

from orbit_wire.errors import ErrorCode, ProtocolError
from orbit_wire.model import Capability
from orbit_wire.policy import CapabilityPolicy

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
    "ProgressNote",
    "RunTask",
    "StopTemplate",
    "TaskDone",
    "decode_for_child",
    "decode_for_template",
    "decode_from_child",
    "decode_from_template",
    "opt_int",
]

class MalformedMessage(ProtocolError):
    """An object that is not a well-formed message of its channel and direction: the peer
    process broke the pipe's contract (BAD_FRAME)."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.BAD_FRAME, message)


def opt_int(value: Any) -> int | None:
    """An integer field as sent, or None when it is absent or not an integer."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class _Message(Struct, frozen=True, omit_defaults=True, tag_field="t"):
    def to_wire(self) -> dict[str, Any]:
        """The JSON object of this message, as its channel carries it."""
        keys, tag, optional, triples = _layout(type(self))
        out = dict(zip(keys, (tag, *msgspec.structs.astuple(self)), strict=True))
        for key in optional:
            if out[key] is None:
                del out[key]
        for key in triples:
            out[key] = _triple(out[key])
        if type(self) is HandlersLoaded and self.policies is not None:
            out["pol"] = msgspec.to_builtins(self.policies)
        return out


@functools.cache
def _layout(kind: type[_Message]) -> tuple[tuple[str, ...], str, tuple[str, ...],
                                           tuple[str, ...]]:
    """A message class's keys in order (``t`` first), its tag, the keys left out when None,
    and the keys holding capabilities."""
    fields = msgspec.structs.fields(kind)
    return (("t", *(f.encode_name for f in fields)), str(kind.__struct_config__.tag),
            tuple(f.encode_name for f in fields if not f.required),
            tuple(f.encode_name for f in fields
                  if f.type in (Capability, tuple[Capability, ...])))


def _triple(value: Capability | tuple[Capability, ...]) -> list[Any]:
    if isinstance(value, tuple):
        return [_triple(cap) for cap in value]
    return [value.handler, value.handler_version, value.payload_version]


# --------------------------------------------------------------------------- child channel


class RunTask(_Message, frozen=True, tag="run"):
    generation: int = msgspec.field(name="g")
    attempt_id: str = msgspec.field(name="a")
    task_id: str
    epoch: int
    attempt_number: int
    capability: Capability
    payload: Any  # a parsed JSON value
    deadline_at_ms: int  # the task's total deadline, wall-clock ms (informational)
    idempotency: str
    # The previous attempt's last progress details (``execution.checkpoint``); None: none.
    checkpoint: Any = None
    # A workflow node's parents in declared order (``execution.parents``): a list of
    # objects {key, task_id, state, result?, code?, details?}; None: not a workflow node.
    parents: Any = None


class CancelTask(_Message, frozen=True, tag="cancel"):
    generation: int = msgspec.field(name="g")
    attempt_id: str = msgspec.field(name="a")


class LeaveChild(_Message, frozen=True, tag="exit"):
    generation: int = msgspec.field(name="g")


class ChildReady(_Message, frozen=True, tag="ready"):
    generation: int = msgspec.field(name="g")
    pid: int


class TaskDone(_Message, frozen=True, tag="done"):
    """A child's answer for one attempt. ``outcome`` is SUCCEEDED, FAILED or UNKNOWN as
    sent; the other answer fields are kept as sent for the supervisor to check."""

    generation: int = msgspec.field(name="g")
    attempt_id: Any = msgspec.field(default=None, name="a")
    outcome: Any = None
    code: Any = None
    retryable: Any = None
    result_json: Any = None
    details_json: Any = None
    cpu_ms: int | None = None
    peak_rss_bytes: int | None = None
    # The first line of the message of the exception that ended the handler (at most
    # EXCEPTION_MESSAGE_MAX_BYTES); the supervisor records it only when told to.
    exception_message: Any = None


class ProgressNote(_Message, frozen=True, tag="progress"):
    """A handler's progress (``execution.progress``), as the child sent it: the supervisor
    checks it (fraction in [0, 1], details by the value rules) and keeps only the latest."""

    generation: int = msgspec.field(name="g")
    attempt_id: Any = msgspec.field(default=None, name="a")
    fraction: Any = None
    details_json: Any = None


def decode_for_child(obj: dict[str, Any]) -> RunTask | CancelTask | LeaveChild:
    """A frame the supervisor sent to a child; MalformedMessage if it is not one."""
    if isinstance(obj, dict) and isinstance(obj.get("capability"), list):
        obj = {**obj, "capability": _named(obj["capability"])}
    message: RunTask | CancelTask | LeaveChild = _convert(obj, _FOR_CHILD)
    return message


def decode_from_child(obj: dict[str, Any]) -> ChildReady | TaskDone | ProgressNote:
    """A frame a child sent; MalformedMessage if it is not one. Rusage that is not an
    integer is left out rather than refused: the answer beside it still counts."""
    message: ChildReady | TaskDone | ProgressNote = _convert(
        _lenient(obj, "cpu_ms", "peak_rss_bytes"), _FROM_CHILD)
    return message


# --------------------------------------------------------------------------- template control


class HandlersLoaded(_Message, frozen=True, tag="caps"):
    capabilities: tuple[Capability, ...] = msgspec.field(name="caps")
    # The policies the handlers' TaskTypes declare (only those that declare one).
    policies: tuple[CapabilityPolicy, ...] | None = msgspec.field(default=None, name="pol")


class HandlersRejected(_Message, frozen=True, tag="spec_error"):
    message: str  # one line, no traceback


class ChildForked(_Message, frozen=True, tag="forked"):
    generation: int = msgspec.field(name="g")
    pid: int


class ChildReaped(_Message, frozen=True, tag="reaped"):
    """A child is gone: its exit code or the signal that ended it, and its rusage."""

    generation: int = msgspec.field(name="g")
    pid: int
    exit_code: int | None = None
    signal: int | None = None
    cpu_ms: int | None = None
    peak_rss_bytes: int | None = None


class ForkChild(_Message, frozen=True, tag="fork"):
    """Fork a child of ``generation``; the child's socket travels with the message, and its
    output pipe after it when the supervisor captures children's output."""

    generation: int = msgspec.field(name="g")


class StopTemplate(_Message, frozen=True, tag="exit"):
    pass


def decode_from_template(obj: Any) -> HandlersLoaded | HandlersRejected | ChildForked | ChildReaped:
    """A control message the template sent; MalformedMessage if it is not one."""
    if isinstance(obj, dict) and isinstance(obj.get("caps"), list):
        obj = {**obj, "caps": [_named(c) for c in obj["caps"]]}
    message: HandlersLoaded | HandlersRejected | ChildForked | ChildReaped = _convert(
        _lenient(obj, "exit_code", "signal", "cpu_ms", "peak_rss_bytes"), _FROM_TEMPLATE)
    return message


def decode_for_template(obj: Any) -> ForkChild | StopTemplate:
    """A control message the supervisor sent to the template; MalformedMessage if not one."""
    message: ForkChild | StopTemplate = _convert(obj, _FOR_TEMPLATE)
    return message


# --------------------------------------------------------------------------- decoding

def _convert(obj: Any, kinds: dict[Any, type[_Message]]) -> Any:
    """``obj`` as the message its tag names among ``kinds``, checked in one pass."""
    kind = kinds.get(obj.get("t")) if isinstance(obj, dict) else None
    if kind is None:
        raise MalformedMessage(f"{_tag_of(obj)!r} is not a message of this channel")
    try:
        return msgspec.convert(obj, kind)
    except msgspec.ValidationError as exc:
        raise MalformedMessage(str(exc)) from None


def _tag_of(obj: Any) -> Any:
    return obj.get("t") if isinstance(obj, dict) else type(obj).__name__


def _by_tag(*kinds: type[_Message]) -> dict[Any, type[_Message]]:
    return {str(kind.__struct_config__.tag): kind for kind in kinds}


def _named(triple: Any) -> Any:
    """A capability triple as the object its Struct field reads (anything else as it is,
    for the conversion to refuse)."""
    if isinstance(triple, list) and len(triple) == 3:
        return {"handler": triple[0], "handler_version": triple[1],
                "payload_version": triple[2]}
    return triple


def _lenient(obj: Any, *keys: str) -> Any:
    """``obj`` with the integer fields ``keys`` left out where they are not integers."""
    if not isinstance(obj, dict):
        return obj
    for key in keys:  # once per child answer: no generator while every field is fine
        value = obj.get(key)
        if value is not None and opt_int(value) is None:
            return {k: v for k, v in obj.items() if k not in keys or opt_int(v) is not None}
    return obj


# Each direction of each channel: the messages it may carry, by tag. (Converting to the
# union of them directly costs three times as much: msgspec studies a union on every call.)
_FOR_CHILD = _by_tag(RunTask, CancelTask, LeaveChild)
_FROM_CHILD = _by_tag(ChildReady, TaskDone, ProgressNote)
_FROM_TEMPLATE = _by_tag(HandlersLoaded, HandlersRejected, ChildForked, ChildReaped)
_FOR_TEMPLATE = _by_tag(ForkChild, StopTemplate)
