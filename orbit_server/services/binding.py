"""What the adapters hold about a worker connection: its verified identity (``WorkerBinding``,
the answer to ``hello``) and what a claim for it may take (``ClaimRoom``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from orbit_wire.model import Capability


@dataclass(frozen=True)
class WorkerBinding:
    """A worker connection's verified identity (the answer to ``hello``)."""

    instance_id: str
    credential_id: str
    queue_id: str
    capabilities: tuple[Capability, ...]
    # The hash of the credential secret the hello presented: every later request is fenced
    # on it still opening the credential (not revoked, expired or rotated out).
    secret_hash: str = ""
    valid_until_ms: int | None = None  # expiry or grace end; the session closes there
    connected_at_ms: int = 0  # the hello's instant: names this connection in its row
    replica: str = ""  # the server replica holding the connection (its row says so too)
    # The hello asked for leases granted with the dispatch (protocol feature "grant").
    grants: bool = False
    # Its hello's labels: a task that requires labels is reserved only for a worker whose
    # labels include them (store.claims.labelled_rows).
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def actor(self) -> str:
        return worker_actor(self.instance_id)


def worker_actor(instance_id: str) -> str:
    """How audit rows name a worker instance."""
    return f"worker:{instance_id}"


@dataclass(frozen=True, slots=True)
class ClaimRoom:
    """What a claim for a connection may take now (the dispatcher decides): reservations
    spending its credit (a dispatch pass, a submit), or a request's ``claim`` ops."""

    allowed: bool  # False while the session drains or closes: a claim answers nothing
    credit_room: int  # connection credit may still grow by this much (2 x capacity bound)
    count: int = 0  # reservations its credit pays for, at most one reserve frame's
    # With grants: the worker frames the connection had read when the room was taken, before
    # the claim's transaction began (the ``reserve`` frame's ``basis``).
    basis: int = 0


NO_CLAIMS = ClaimRoom(False, 0)


@dataclass(frozen=True, slots=True)
class Presence:
    """What a replica records of one live connection in each presence write."""

    instance_id: str
    connected_at_ms: int
    credit: int
    last_frame_at_ms: int
