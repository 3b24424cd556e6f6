"""The session's outbound operations: the queue, the request in flight, batch building (pure).

The session decides *what* to send (a start, a renewal, a finish, a claim, the drain or
the resume) and *when*; the outbox keeps the order and the bookkeeping:

- queued operations by msg_id, in queue order (a dict: both order and lookup by msg_id);
- at most one request in flight, with the first send time of each of its operations;
- a batch is the first queued operations that fit one request: at most ``max_batch`` of
  them, renewals first (leases must not wait behind a long queue), and at most
  MAX_OUTPUT_BYTES_PER_REQUEST of results and details, so the frame stays under the
  server's limit however large the results (always at least one operation);
- after a lost connection the in-flight starts, renewals, finishes and claims go back to
  the front of the queue with their msg_ids (the server's receipts make a resend safe);
  the resume and the drain belong to one connection and are dropped;
- msg_ids (``m1``, ``m2``, ...) are unique for the instance's lifetime, because the
  instance ID itself is never reused; request ids count up per instance the same way.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from msgspec.structs import replace

from orbit_wire.frames import (
    ClaimOp,
    DeclineOp,
    DrainOp,
    FinishOp,
    Op,
    RenewOp,
    Report,
    Request,
    StartOp,
)
from orbit_wire.jsonvalue import utf8_len
from orbit_wire.limits import MAX_OUTPUT_BYTES_PER_REQUEST

__all__ = ["InFlight", "Outbox", "Pending"]

# What a lost connection sends again; the others (resume, drain) are per connection.
_RESENT = StartOp | RenewOp | FinishOp | ClaimOp | DeclineOp


@dataclass(slots=True)
class Pending:
    """A queued or in-flight operation; ``sent_at`` is its FIRST send (kept on resends)."""

    op: Op
    sent_at: float | None = None


@dataclass(slots=True)
class InFlight:
    request_id: int
    ops: list[Pending]
    sent_at: float


def _output_bytes(op: Op) -> int:
    """An upper bound of what a finish's result and details add to a request frame: they
    travel as JSON strings, and escaping at most doubles their UTF-8 bytes."""
    if not isinstance(op, FinishOp):
        return 0
    return 2 * sum(utf8_len(text) for text in (op.result_json, op.details_json) if text)


class Outbox:
    """Queue with ``queue``/``queue_first``, take a batch with ``take_batch``, send it with
    ``send`` (one request at a time), and end it with ``answered`` when its response
    arrives, or with ``connection_lost`` / ``abandon``."""

    __slots__ = ("_inflight", "_next_msg", "_next_request_id", "_queued")

    def __init__(self) -> None:
        self._queued: dict[str, Pending] = {}  # msg_id -> op, in queue order
        self._inflight: InFlight | None = None
        self._next_request_id = 1
        self._next_msg = 1

    # ------------------------------------------------------------------ queries

    @property
    def has_queued(self) -> bool:
        return bool(self._queued)

    @property
    def in_flight(self) -> InFlight | None:
        return self._inflight

    @property
    def idle(self) -> bool:
        """Nothing queued and nothing in flight."""
        return not self._queued and self._inflight is None

    def queued_ops(self) -> tuple[Op, ...]:
        """The queued operations, in queue order (for tests and tools: it copies)."""
        return tuple(p.op for p in self._queued.values())

    def in_flight_ops(self) -> tuple[Op, ...]:
        """The operations of the request in flight, or () (for tests and tools)."""
        return () if self._inflight is None else tuple(p.op for p in self._inflight.ops)

    def queued_msg_ids(self) -> Iterator[str]:
        """The msg_ids of the queued operations, in queue order (a live view)."""
        return iter(self._queued)

    def only_starts_and_finishes(self) -> bool:
        """Whether every queued operation is a start or a finish (what may be held)."""
        return all(isinstance(p.op, StartOp | FinishOp) for p in self._queued.values())

    def start_was_sent(self, attempt_id: str) -> bool:
        """Whether the start of ``attempt_id`` went out at least once: still queued but
        never sent is False; not queued any more (in flight, or answered) is True."""
        for pending in self._queued.values():
            if isinstance(pending.op, StartOp) and pending.op.attempt_id == attempt_id:
                return pending.sent_at is not None
        return True

    # ------------------------------------------------------------------ changes

    def new_msg_id(self) -> str:
        msg_id = f"m{self._next_msg}"
        self._next_msg += 1
        return msg_id

    def queue(self, op: Op, sent_at: float | None = None) -> None:
        """Queue ``op`` last; ``sent_at``: its first send, when it is sent again."""
        self._queued[op.msg_id] = Pending(op, sent_at)

    def queue_first(self, pending: Pending) -> None:
        """Put ``pending`` back at the front (it was taken but did not fit the request)."""
        self._queued = {pending.op.msg_id: pending, **self._queued}

    def replace_unsent_report(self, msg_id: str, report: Report) -> bool:
        """Give the queued finish ``msg_id`` another report, if it was never sent (once
        sent, the server's receipt answers any resend with what the first send said)."""
        pending = self._queued.get(msg_id)
        if pending is None or pending.sent_at is not None or not isinstance(pending.op,
                                                                            FinishOp):
            return False
        pending.op = replace(pending.op, report=report)
        return True

    def drop_ops_of(self, attempt_id: str) -> None:
        """Unqueue the start and renewals of ``attempt_id`` (its finish stays)."""
        for msg_id, pending in list(self._queued.items()):
            op = pending.op
            if isinstance(op, StartOp | RenewOp) and op.attempt_id == attempt_id:
                del self._queued[msg_id]

    def keep_only_reports(self) -> None:
        """Unqueue every operation but the finishes and the declines (the run is ending:
        only what ends an attempt on the server goes out)."""
        self._queued = {msg_id: p for msg_id, p in self._queued.items()
                        if isinstance(p.op, FinishOp | DeclineOp)}

    def take_batch(self, max_batch: int) -> list[Pending]:
        """Unqueue and return what the next request carries (see the module docstring)."""
        queued = sorted(self._queued.values(), key=lambda p: not isinstance(p.op, RenewOp))
        batch: list[Pending] = []
        size = 0
        for pending in queued[:max_batch]:
            size += _output_bytes(pending.op)
            if batch and size > MAX_OUTPUT_BYTES_PER_REQUEST:
                break
            batch.append(pending)
        for pending in batch:
            del self._queued[pending.op.msg_id]
        return batch

    def send(self, batch: list[Pending], now: float) -> Request:
        """The request carrying ``batch``, now in flight; an operation sent for the first
        time gets ``sent_at = now``. Only with nothing in flight."""
        assert self._inflight is None, "one request in flight at a time"
        for pending in batch:
            if pending.sent_at is None:
                pending.sent_at = now
        request = Request(self._next_request_id, tuple(p.op for p in batch))
        self._next_request_id += 1
        self._inflight = InFlight(request.id, batch, now)
        return request

    def answered(self) -> InFlight:
        """The request in flight was answered: it is no longer in flight."""
        inflight = self._inflight
        assert inflight is not None
        self._inflight = None
        return inflight

    def abandon(self) -> None:
        """Forget the request in flight (the session ended; nothing will answer it)."""
        self._inflight = None

    def connection_lost(self) -> None:
        """Requeue the in-flight operations that are sent again, at the front, and drop
        the queued drain: the next connection starts with its resume."""
        inflight, self._inflight = self._inflight, None
        if inflight is not None:
            kept = {p.op.msg_id: p for p in inflight.ops if isinstance(p.op, _RESENT)}
            self._queued = {**kept, **self._queued}
        for pending in list(self._queued.values()):
            if isinstance(pending.op, DrainOp):
                del self._queued[pending.op.msg_id]
