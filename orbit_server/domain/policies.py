"""Declared policies (docs/handlers.md, "Declared policies"): what a worker's hello
registers for its queue, and the policy a task gets from the registered one.

``registration`` decides what a hello writes: every capability it serves is registered once
per queue; the first policy declared for a capability stands, the same one again is fine,
and a different one is refused (POLICY_CONFLICT) since tasks already submitted were given the
registered values; a new handler or payload version may declare another. A worker that
declares nothing (an older worker, a TaskType without policy fields) changes nothing.

``resolve_policy`` fills the fields a submit left out from the registered policy; the fields
neither sets keep the server defaults ``parse_task_spec`` filled. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from msgspec.structs import replace

from orbit_wire.errors import ErrorCode, OrbitError
from orbit_wire.labels import requires_text
from orbit_wire.model import Capability, Idempotency
from orbit_wire.policy import DeclaredPolicy, PolicySource

from .spec import Backoff, Policy, TaskSpec

__all__ = ["Registration", "registration", "resolve_policy"]


@dataclass(frozen=True, slots=True)
class Registration:
    """What a hello writes: capabilities first registered (with their declared policy,
    possibly empty), and registered ones that declare a policy for the first time."""

    new: tuple[tuple[Capability, DeclaredPolicy], ...] = ()
    declared: tuple[tuple[Capability, DeclaredPolicy], ...] = ()

    @property
    def changes(self) -> bool:
        return bool(self.new or self.declared)


def registration(registered: Mapping[Capability, DeclaredPolicy],
                 capabilities: Iterable[Capability],
                 declared: Mapping[Capability, DeclaredPolicy]) -> Registration:
    """What a hello serving ``capabilities`` and declaring ``declared`` writes, given the
    queue's ``registered`` policies. OrbitError POLICY_CONFLICT naming every capability whose
    declaration differs from the registered one, field by field."""
    new: list[tuple[Capability, DeclaredPolicy]] = []
    first: list[tuple[Capability, DeclaredPolicy]] = []
    conflicts: list[str] = []
    for cap in capabilities:
        mine = declared.get(cap, DeclaredPolicy())
        known = registered.get(cap)
        if known is None:
            new.append((cap, mine))
        elif mine.empty or mine.same_as(known):
            continue
        elif known.empty:
            first.append((cap, mine))
        else:
            conflicts.append(f"{cap} ({_difference(known, mine)})")
    if conflicts:
        raise OrbitError(ErrorCode.POLICY_CONFLICT, (
            "the policy declared for " + "; ".join(conflicts) + " differs from the one "
            "registered for this queue; declare the new policy under a new handler_version"))
    return Registration(tuple(new), tuple(first))


def _difference(registered: DeclaredPolicy, declared: DeclaredPolicy) -> str:
    old, mine = registered.declared(), declared.declared()
    return ", ".join(f"{name}: registered {old.get(name)!r}, declared {mine.get(name)!r}"
                     for name in sorted(set(old) | set(mine)) if old.get(name) != mine.get(name))


def resolve_policy(spec: TaskSpec, registered: DeclaredPolicy | None) -> TaskSpec:
    """``spec`` with every policy field it did not set taken from ``registered`` (the
    capability's registered policy; None: none is registered), and where its policy came
    from: ``registered`` when that set at least one field, else as parsed (``submit`` when
    the submit set a field, ``default`` when it set none)."""
    if registered is None or registered.empty:
        return spec
    fields = {k: v for k, v in registered.declared().items() if k not in spec.given}
    if not fields:
        return spec
    policy, priority = spec.policy, spec.priority
    backoff = registered.backoff
    policy = Policy(
        idempotency=(Idempotency(fields["idempotency"]) if "idempotency" in fields
                     else policy.idempotency),
        max_attempts=fields.get("max_attempts", policy.max_attempts),
        backoff=(Backoff(backoff.initial_ms, backoff.resolved_max_ms(), float(backoff.multiplier),
                         float(backoff.jitter))
                 if backoff is not None and "backoff" in fields else policy.backoff),
        attempt_timeout_ms=fields.get("attempt_timeout_ms", policy.attempt_timeout_ms),
        deadline_ms=fields.get("deadline_ms", policy.deadline_ms),
        lease_ttl_ms=fields.get("lease_ttl_ms", policy.lease_ttl_ms),
        schedule_to_start_ms=fields.get("schedule_to_start_ms", policy.schedule_to_start_ms),
        cancel_grace_ms=fields.get("cancel_grace_ms", policy.cancel_grace_ms),
        progress_timeout_ms=fields.get("progress_timeout_ms", policy.progress_timeout_ms),
        requires=(requires_text(fields["requires"]) if "requires" in fields
                  else policy.requires),
    )
    limit_keys = (tuple(dict.fromkeys(fields["limits"])) if "limits" in fields
                  else spec.limit_keys)
    return replace(spec, policy=policy, priority=fields.get("priority", priority),
                   policy_source=PolicySource.REGISTERED, limit_keys=limit_keys)
