"""Declared policies as the hot paths read them: a cache of each queue's registered
capability policies, so a submit (HTTP, the producer channel, a schedule's firing) resolves
the fields it left out without a statement of its own in steady state (docs/handlers.md,
"Declared policies").

A hello registers its capabilities in its own transaction (``register``) and this replica's
cache learns them once that succeeded; the other replicas on a shared database hear of a
first declaration through a ``POLICIES`` push and forget their entries. A submit that misses
reads the one row it needs; a capability no worker has registered is remembered as such for
``UNREGISTERED_MS``, and every entry is read again after ``MAX_AGE_MS`` (a missed push is
bounded too). Store thread only, like the use cases.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec
from sqlalchemy import Connection
from sqlalchemy.exc import IntegrityError

from orbit_wire.errors import ErrorCode, OrbitError
from orbit_wire.frames import Hello
from orbit_wire.model import Capability
from orbit_wire.policy import DeclaredPolicy

from .. import domain
from ..store import policies as stored
from .context import TxContext
from .pushes import PushKind, record_push

__all__ = ["MAX_AGE_MS", "UNREGISTERED_MS", "PolicyCache", "policy_view"]

# How long a registered entry answers before it is read again.
MAX_AGE_MS = 60_000
# How long "no worker registered this capability" answers.
UNREGISTERED_MS = 1_000
# Entries remembered at most (a bound on memory, not a working-set size).
MAX_ENTRIES = 65_536

_DECODE = msgspec.json.Decoder(DeclaredPolicy)
_ENCODE = msgspec.json.Encoder()


def decode_policy(text: str | bytes) -> DeclaredPolicy:
    return _DECODE.decode(text)


def encode_policy(policy: DeclaredPolicy) -> str:
    return _ENCODE.encode(policy).decode()


class PolicyCache:
    def __init__(self, tx: TxContext) -> None:
        self._tx = tx
        # (queue, capability) -> (its registered policy or None, good until ms)
        self._entries: dict[tuple[str, Capability], tuple[DeclaredPolicy | None, int]] = {}
        # An entry read or learnt in a group commit that rolled back may never have been.
        tx.on_group_rollback(self.forget)

    def registered(self, conn: Connection, queue_id: str, cap: Capability,
                   now: int) -> DeclaredPolicy | None:
        """The policy registered for ``cap`` in the queue (None: none, or nothing declared)."""
        key = (queue_id, cap)
        hit = self._entries.get(key)
        if hit is not None and now < hit[1]:
            return hit[0]
        row = stored.policy_row(conn, queue_id, cap)
        policy = None if row is None else decode_policy(row["policy"])
        self._remember(key, policy, now + (UNREGISTERED_MS if row is None else MAX_AGE_MS))
        return policy

    def register(self, conn: Connection, hello: Hello, now: int) -> domain.Registration:
        """Register the hello's capabilities and the policies it declares, in the hello's
        transaction: OrbitError POLICY_CONFLICT when a declaration differs from the one
        registered (nothing written). Call ``learn`` once that transaction committed."""
        rows = stored.policies_of_queue(conn, hello.queue_id)
        registered = {Capability(r["handler"], r["handler_version"], r["payload_version"]):
                      decode_policy(r["policy"]) for r in rows}
        declared = {p.capability: p.policy for p in hello.policies or ()}
        made = domain.registration(registered, dict.fromkeys(hello.capabilities), declared)
        try:
            stored.insert_policies(conn, [{
                "queue_id": hello.queue_id, **cap.to_dict(), "policy": encode_policy(policy),
                "registered_at_ms": now, "declared_at_ms": None if policy.empty else now,
                "instance_id": hello.instance_id} for cap, policy in made.new])
        except IntegrityError:
            raise _raced() from None
        if not stored.declare_policies(conn, hello.queue_id, [
                (cap, encode_policy(policy)) for cap, policy in made.declared],
                hello.instance_id, now):
            raise _raced()
        if any(not policy.empty for _, policy in made.new) or made.declared:
            record_push(conn, now, PushKind.POLICIES)  # other replicas forget theirs
        return made

    def learn(self, queue_id: str, registered: domain.Registration, now: int) -> None:
        """What a committed hello registered."""
        for cap, policy in (*registered.new, *registered.declared):
            self._remember((queue_id, cap), None if policy.empty else policy, now + MAX_AGE_MS)

    def forget(self) -> None:
        """Read every entry afresh (a push told of a declaration made elsewhere)."""
        self._entries.clear()

    def _remember(self, key: tuple[str, Capability], policy: DeclaredPolicy | None,
                  until: int) -> None:
        if len(self._entries) >= MAX_ENTRIES:
            self._entries.clear()
        self._entries[key] = (None if policy is not None and policy.empty else policy, until)


def _raced() -> OrbitError:
    # Another hello registered the same capability first: this one runs again and compares.
    return OrbitError(ErrorCode.UNAVAILABLE, "capability registration raced; retry",
                      retryable=True)


def policy_view(row: Mapping[Any, Any]) -> dict[str, Any]:
    """A registered capability as GET /v1/queues/{queue_id}/capabilities shows it."""
    return {
        "capability": {"handler": row["handler"], "handler_version": row["handler_version"],
                       "payload_version": row["payload_version"]},
        "policy": decode_policy(row["policy"]).declared(),
        "registered_at_ms": row["registered_at_ms"],
        "declared_at_ms": row["declared_at_ms"],
    }
