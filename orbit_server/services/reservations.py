"""Reserving tasks for a worker inside a caller's transaction, and the ``Reservation`` frames
it receives. Shared by the worker protocol (``reserve``, ``claim``) and by a submit that
claims for a waiting worker in its own transaction (``submit_and_reserve``).

One SELECT (``store.claims.claimable_rows``; in a fair queue one range per key value,
``fair_dispatch``), then the records are changed in the caller's ``UnitOfWork``, which
writes tasks, attempts and audit rows with one executemany each.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from msgspec import Raw

from orbit_wire.frames import Reservation
from orbit_wire.ids import new_id
from orbit_wire.jsonvalue import utf8_len
from orbit_wire.limits import MAX_PAYLOAD_BYTES_PER_FRAME
from orbit_wire.model import IDEMPOTENCY_OF, AttemptState, Capability, TaskState

from .. import domain
from ..auth import secret_opens
from ..store import claims
from ..store.instances import holds_connection
from ..store.rows import UnitOfWork
from . import fair_dispatch, flow
from .binding import WorkerBinding, worker_actor
from .credential_table import CredentialTable
from .effects import Effects
from .fair_table import FairTable
from .limit_table import LimitTable

# A reserved task: its record, its new RESERVED attempt and the task row it was read from.
Reserved = tuple[domain.TaskRec, domain.AttemptRec, Mapping[str, Any]]


class Reservations(list[Reservation]):
    """The reservations one call made; ``more`` when a frame's payload budget, not the
    queue, ended them (the dispatcher then claims again instead of waiting for work);
    ``drained`` when the claim saw that no other task was claimable (more credit alone
    would find nothing: the dispatcher waits for a hint that work arrived)."""

    more: bool = False
    drained: bool = False
    # When a task a rate held may start (None: none was held by a rate): the caller
    # schedules a wake-up of the queue then (flow control, docs/flow-control.md).
    wake_at_ms: int | None = None
    effects: Effects | None = None  # what the reserving transaction did besides (a pass's)


def reserve_for(uow: UnitOfWork, binding: WorkerBinding, count: int,
                effects: Effects, credentials: CredentialTable,
                limits: LimitTable | None = None, fair: FairTable | None = None
                ) -> Reservations:
    """Reserve up to ``count`` tasks in ``uow``, as the reservations a worker receives; for
    a binding with grants each is also started (``domain.grant``, its lease in the
    reservation), once the instance's row shows the connection still holds it (a hello of
    the same instance elsewhere takes it over, and a grant must not go to the replaced
    connection; on MySQL the row lock orders the two). The caller flushes ``uow`` in the
    same transaction."""
    if binding.grants and not (
            holds_connection(uow.conn, binding.instance_id, binding.connected_at_ms,
                             binding.replica)
            and credential_holds(credentials, uow.conn, binding, uow.now_ms)):
        return Reservations()
    # On SQLite (one writer) one more row tells whether the queue is drained; on a shared
    # database that row would be locked, and skipped by another replica's claim, so a claim
    # that filled its count asks the index, without locks, whether anything is left.
    probe = uow.conn.dialect.name == "sqlite"
    made, more, _used, drained, wake, left = _reserve(
        uow, binding, count, MAX_PAYLOAD_BYTES_PER_FRAME, probe, limits, fair)
    if not probe and not more:
        taken = set(uow.moved_from_pending())
        # A claim that read a range to its end and came short is drained; otherwise only
        # the index says (a fair queue's numbered tasks included).
        short = len(made) < count and not left
        numbered = fair is not None and fair.key_name(uow.conn, binding.queue_id,
                                                      uow.now_ms) is not None
        drained = short or not (
            claims.labelled_left(uow.conn, binding.queue_id, binding.capabilities,
                                 binding.labels, uow.now_ms, taken, numbered)
            if binding.labels else
            claims.any_left(uow.conn, binding.queue_id, binding.capabilities, uow.now_ms,
                            taken, numbered))
    if binding.grants:
        out = Reservations(reservation(task, attempt, row, start_granted(
            uow, binding, task, attempt, effects, grant=True)) for task, attempt, row in made)
    else:
        out = Reservations(reservation(*made_one) for made_one in made)
    out.more = _more(more, left, len(made), count)
    out.drained = drained
    out.wake_at_ms = wake
    return out


def reserve_in(uow: UnitOfWork, binding: WorkerBinding, count: int,
               budget: int = MAX_PAYLOAD_BYTES_PER_FRAME, limits: LimitTable | None = None,
               fair: FairTable | None = None) -> tuple[list[Reserved], bool, int, int | None]:
    """Reserve up to ``count`` tasks in ``uow``: (task, RESERVED attempt, task row) each,
    whether more were ready than ``budget`` bytes of payload let in (a frame's whole
    budget always takes at least one: MAX_PAYLOAD_BYTES_PER_FRAME), and the payload
    bytes taken, and when a task a rate held may start (``Reservations.wake_at_ms``). A fair
    claim that came short with values left says ``more`` too: the queue may hold more."""
    made, more, size, _drained, wake, left = _reserve(uow, binding, count, budget, False,
                                                       limits, fair)
    return made, _more(more, left, len(made), count), size, wake


def _more(more: bool, left: bool, made: int, count: int) -> bool:
    """Whether the queue may hold more for this worker: the budget left some out, or a fair
    claim came short of its count with values left (claim again at once)."""
    return more or (left and made < count)


def _reserve(uow: UnitOfWork, binding: WorkerBinding, count: int, budget: int,
             probe: bool, limits: LimitTable | None, fair: FairTable | None = None
             ) -> tuple[list[Reserved], bool, int, bool, int | None, bool]:
    """``reserve_in``, with ``probe`` whether no claimable task was left over, and whether
    a fair claim read less than may be left (a short count then says nothing)."""
    now = uow.now_ms
    if not binding.capabilities:  # every one paused (services.pause_board)
        return [], False, 0, True, None, False
    queue_limits = limits.limits(uow.conn, binding.queue_id, now) if limits else {}
    # Rows this transaction changed are not written yet, so the query still sees them
    # PENDING (and our own locks never skip them): ask for enough to make up for those.
    taken = uow.moved_from_pending()
    want = count + len(taken) + (1 if probe else 0)
    fair_key = fair.key_name(uow.conn, binding.queue_id, now) if fair else None
    rows, more_values = _candidates(uow, binding, now, want, fair, fair_key)
    wake = None
    if queue_limits:
        admitted, held, wake = flow.admit_rows(uow.conn, binding.queue_id, rows,
                                               count + (1 if probe else 0), queue_limits, now)
        if held and (len(rows) >= want - len(taken) or more_values):
            # Tasks a limit holds must not block those behind them: read again with a
            # window more (only then: a claim that holds nothing reads what it wants).
            rows, more_values = _candidates(uow, binding, now, want + flow.HELD_WINDOW,
                                            fair, fair_key)
            admitted, held, wake = flow.admit_rows(uow.conn, binding.queue_id, rows,
                                                   count + (1 if probe else 0), queue_limits,
                                                   now)
        rows = admitted
    drained = probe and len(rows) <= count and not more_values
    rows = rows[:count]
    more = False
    size = 0
    for i, row in enumerate(rows):
        row_bytes = reserved_bytes(row)
        if size + row_bytes > budget and (i or budget < MAX_PAYLOAD_BYTES_PER_FRAME):
            rows, more = rows[:i], True
            break
        size += row_bytes
    out: list[Reserved] = []
    actor = binding.actor
    for row in rows:
        task = uow.adopt_task_row(row)
        attempt = domain.reserve(task, new_id(now), binding.instance_id, now)
        uow.add_attempt(attempt)
        uow.audit(task.id, attempt.id, actor, "attempt_reserved",
                  TaskState.PENDING.value, task.state.value, None)
        out.append((task, attempt, row))
    if fair_key is not None and out:
        fair_dispatch.served(uow.conn, binding.queue_id, [row for _t, _a, row in out])
    if queue_limits and out:
        flow.record_holds(uow.conn, binding.queue_id,
                          [(row, attempt.id) for _t, attempt, row in out], queue_limits, now)
    return out, more, size, drained and not more, wake, more_values


def _candidates(uow: UnitOfWork, binding: WorkerBinding, now: int, want: int,
                fair: FairTable | None, fair_key: str | None) -> tuple[list[dict[str, Any]], bool]:
    """Up to ``want`` claimable rows in dispatch order (in fair order for a fair queue,
    ``fair_key``), without those this transaction already took, and whether a range read
    may have left rows unread."""
    more = False
    if fair_key is not None:
        rows, more = fair_dispatch.fair_rows(uow.conn, binding, now, want, fair_key)
    else:
        rows = (claims.labelled_rows(uow.conn, binding.queue_id, binding.capabilities,
                                     binding.labels, now, want)
                if binding.labels else
                claims.claimable_rows(uow.conn, binding.queue_id, binding.capabilities, now,
                                      want))
        if fair is not None:
            left = fair_dispatch.unnumbered_rows(uow.conn, binding, now, want, fair)
            if left:  # back in plain order; more may be left
                rows = sorted(rows + left, key=claims.in_dispatch_order)
                more = True
    skip = set(uow.moved_from_pending())
    return [row for row in rows if row["id"] not in skip], more


def reserved_bytes(row: Mapping[Any, Any]) -> int:
    """What a reservation of ``row`` adds to a frame's payload budget: its payload and its
    checkpoint (up to 64 KiB each retry), so a frame of retries stays under its bound."""
    checkpoint = row["checkpoint"]
    parents = row.get("parents_json")  # a workflow node's parents' results (up to 1 MiB)
    return (utf8_len(row["payload"]) + (0 if checkpoint is None else utf8_len(checkpoint))
            + (0 if parents is None else utf8_len(parents)))


def credential_holds(credentials: CredentialTable, conn: Any, binding: WorkerBinding,
                     now: int) -> bool:
    """Whether the secret the session's hello presented still opens its credential (not
    revoked, expired or rotated out): nothing is granted to a session that lost it. The row
    comes from memory (``CredentialTable``: a revocation here drops it at once)."""
    row = credentials.row(conn, binding.credential_id, now)
    return secret_opens(row, binding.secret_hash, now)[0]


def start_granted(uow: UnitOfWork, binding: WorkerBinding, task: domain.TaskRec,
                  attempt: domain.AttemptRec, effects: Effects, *, grant: bool) -> int:
    """Start an attempt this transaction reserved for ``binding``: a grant with the dispatch
    (``grant``: unconfirmed until the worker speaks of it) or a request's claim (answered in
    the request's response). Audits and counts the start and reports its lease's expiry;
    returns lease_ms."""
    now = uow.now_ms
    if grant:
        granted = domain.grant(task, attempt, binding.instance_id, binding.connected_at_ms, now)
        effects.counted().grants.append(task.queue_id)
    else:
        granted = domain.start(task, attempt, attempt.epoch, binding.instance_id, None, now)
    audit_started(uow, binding.instance_id, task, attempt, AttemptState.RESERVED, None, granted)
    count_start(effects, task, attempt, now)
    effects.due(attempt.lease_expires_at_ms)
    return granted


def audit_started(uow: UnitOfWork, instance_id: str, task: domain.TaskRec,
                  attempt: domain.AttemptRec, before: AttemptState, child_pid: int | None,
                  granted: int) -> None:
    uow.audit(task.id, attempt.id, worker_actor(instance_id), "attempt_started",
              task.state.value, task.state.value,
              {"attempt_state": [before.value, attempt.state.value], "child_pid": child_pid,
               "lease_ms": granted})


def count_start(effects: Effects, task: domain.TaskRec, attempt: domain.AttemptRec,
                now: int) -> None:
    """A start for the metrics: how long the task waited since it became available (its
    submit or requested start, or the end of a retry's backoff)."""
    effects.counted().started.append((task.queue_id, attempt.attempt_number == 1,
                                      max(0, now - task.available_at_ms)))


def reservation(task: domain.TaskRec, attempt: domain.AttemptRec, row: Mapping[str, Any],
                lease_ms: int | None = None) -> Reservation:
    """The reservation frame entry of a task reserved in this transaction."""
    return reservation_of(row, task.id, attempt.id, attempt.epoch, attempt.attempt_number,
                          lease_ms)


def reservation_of(row: Mapping[Any, Any], task_id: str, attempt_id: str, epoch: int,
                   attempt_number: int, lease_ms: int | None) -> Reservation:
    """A reservation from a row holding the task's capability, payload, policy and
    checkpoint (tasks.checkpoint: the last details of an earlier attempt that did not
    succeed; a first attempt has none)."""
    checkpoint = row["checkpoint"] if attempt_number > 1 else None
    parents = row.get("parents_json")  # copied onto a workflow node when it was released
    return Reservation(
        attempt_id=attempt_id, task_id=task_id, epoch=epoch,
        attempt_number=attempt_number,
        capability=Capability(row["handler"], row["handler_version"], row["payload_version"]),
        payload=Raw(row["payload"]),
        idempotency=IDEMPOTENCY_OF[row["idempotency"]],
        lease_ttl_ms=row["lease_ttl_ms"],
        attempt_timeout_ms=row["attempt_timeout_ms"],
        deadline_at_ms=row["deadline_at_ms"],
        cancel_grace_ms=row["cancel_grace_ms"],
        lease_ms=lease_ms,
        checkpoint=None if checkpoint is None else Raw(checkpoint),
        progress_timeout_ms=row["progress_timeout_ms"],
        parents=None if parents is None else Raw(parents),
    )
