"""Helpers that drive the pure Session by hand (fake clock: ``now`` is just a float)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orbit_supervisor.actions import Action, Emit, EndRun, Execute, Kill, SendFrame
from orbit_supervisor.session import Session, SessionConfig
from orbit_wire.frames import (
    Credit,
    OpResult,
    Report,
    Request,
    Reservation,
    Reserve,
    Response,
    Welcome,
)
from orbit_wire.ids import new_id
from orbit_wire.model import Capability, Disposition, Idempotency, Outcome, TaskState

CAP = Capability("text.upper", "v1", "v1")


def make_session(capacity: int = 2, *, shutdown_timeout: float = 30.0,
                 rng: float = 0.5, report_margin: float = 0.0,
                 cpus: int | None = None, prefetch: int = 0) -> Session:
    cfg = SessionConfig(
        credential_id=new_id(1), credential_secret="cred-secret", instance_id=new_id(2),
        instance_secret="inst-secret", queue_id=new_id(3), capabilities=(CAP,),
        capacity=capacity, shutdown_timeout=shutdown_timeout, report_margin=report_margin,
        cpus=cpus, prefetch=prefetch,
    )
    return Session(cfg, lambda: rng)


def welcome(heartbeat_ms: int = 1000, ttl_ms: int = 3000, max_batch_ops: int = 256) -> Welcome:
    return Welcome(new_id(4), ttl_ms, heartbeat_ms, 500, 0, max_batch_ops)


def reservation(lease_ttl_ms: int = 3000, attempt_timeout_ms: int = 60000,
                capability: Capability = CAP, cancel_grace_ms: int = 0) -> Reservation:
    return Reservation(
        attempt_id=new_id(5), task_id=new_id(6), epoch=1, attempt_number=1,
        capability=capability, payload={"text": "x"}, idempotency=Idempotency.NON_IDEMPOTENT,
        lease_ttl_ms=lease_ttl_ms, attempt_timeout_ms=attempt_timeout_ms, deadline_at_ms=0,
        cancel_grace_ms=cancel_grace_ms,
    )


def frames(actions: list[Action]) -> list[Any]:
    return [a.frame for a in actions if isinstance(a, SendFrame)]


def requests(actions: list[Action]) -> list[Request]:
    return [f for f in frames(actions) if isinstance(f, Request)]


def credits(actions: list[Action]) -> int:
    return sum(f.credits for f in frames(actions) if isinstance(f, Credit))


def kinds(request: Request) -> list[str]:
    return [op.op for op in request.ops]


def executes(actions: list[Action]) -> list[str]:
    return [a.reservation.attempt_id for a in actions if isinstance(a, Execute)]


def kills(actions: list[Action]) -> list[Kill]:
    return [a for a in actions if isinstance(a, Kill)]


def run_ends(actions: list[Action]) -> list[EndRun]:
    return [a for a in actions if isinstance(a, EndRun)]


def events(actions: list[Action]) -> list[tuple[str, str | None]]:
    return [(a.event.type, a.event.classification) for a in actions if isinstance(a, Emit)]


def ok_for(request: Request, lease_ms: int = 3000) -> Response:
    """Answer every op of ``request`` with success (a claim finds no work)."""
    results = []
    for op in request.ops:
        if op.op in ("start", "renew"):
            results.append(OpResult(op.msg_id, True, lease_ms=lease_ms))
        elif op.op == "finish":
            results.append(OpResult(op.msg_id, True, disposition=Disposition.ACCEPTED,
                                    task_state=TaskState.SUCCEEDED))
        elif op.op == "resume":
            results.append(OpResult(op.msg_id, True, attempts=()))
        elif op.op == "claim":  # no work found: every slot asked for becomes credit
            results.append(OpResult(op.msg_id, True, claimed=(), credited=op.count))
        else:
            results.append(OpResult(op.msg_id, True))
    return Response(request.id, tuple(results))


@dataclass(frozen=True)
class FakeOutcome:
    outcome: Outcome = Outcome.SUCCEEDED
    code: str | None = None
    retryable: bool = False
    result_json: str | None = '{"text":"X"}'
    details_json: str | None = None
    report: Report = field(default_factory=lambda: Report(child_pid=4242, exit_code=0))


def ready(capacity: int = 2, **kw: Any) -> tuple[Session, list[Action]]:
    """A session that has been welcomed (no known attempts, so no resume) at t=0."""
    s = make_session(capacity, **kw)
    s.start(0.0)
    s.connected(0.0)
    return s, s.frame_received(welcome(), 0.0)


def run_one(s: Session, now: float, lease_ms: int = 3000, **res_kw: Any) -> Reservation:
    """Reserve one attempt and confirm its start at ``now``; returns the reservation."""
    res = reservation(**res_kw)
    acts = s.frame_received(Reserve((res,)), now)
    (req,) = requests(acts)
    acts = s.frame_received(ok_for(req, lease_ms), now)
    assert executes(acts) == [res.attempt_id]
    return res
