"""Task specs and their frozen safety policy: ``parse_task_spec`` validates a submission
(docs/http-api.md "TaskSpec", the ``bodies.TaskSpec`` Struct) and fills every default;
``Backoff.delay_ms`` is the retry delay; ``TaskSpec.start_at`` is when a (possibly delayed)
task may first run. Pure: no I/O, the clock's reading and the jitter's random draw are
arguments."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping

import orjson
from msgspec import UNSET, Struct

from orbit_wire.errors import ErrorCode, OrbitError, ValueRejected
from orbit_wire.jsonvalue import encode_value
from orbit_wire.labels import requires_text
from orbit_wire.limits import DEFAULT_CANCEL_GRACE_MS, DEFAULT_PRIORITY, MAX_DELAY_MS
from orbit_wire.model import Capability, Idempotency
from orbit_wire.policy import (
    DEFAULT_ATTEMPT_TIMEOUT_MS,
    DEFAULT_BACKOFF_INITIAL_MS,
    DEFAULT_BACKOFF_JITTER,
    DEFAULT_BACKOFF_MAX_MS,
    DEFAULT_BACKOFF_MULTIPLIER,
    DEFAULT_DEADLINE_MS,
    DEFAULT_LEASE_TTL_MS,
    DEFAULT_MAX_ATTEMPTS,
    POLICY_FIELDS,
    PolicySource,
)

from .bodies import TASK_SPEC


class Backoff(Struct, frozen=True):
    initial_ms: int = DEFAULT_BACKOFF_INITIAL_MS
    max_ms: int = DEFAULT_BACKOFF_MAX_MS
    multiplier: float = DEFAULT_BACKOFF_MULTIPLIER
    jitter: float = DEFAULT_BACKOFF_JITTER

    def delay_ms(self, retry_number: int, draw: float) -> int:
        """Delay before retry ``retry_number`` (1 = first retry); ``draw`` uniform in [0, 1).

        The base grows ``initial * multiplier**(n-1)`` up to ``max_ms``; jitter spreads it
        by ±``jitter`` of itself, and the result never exceeds ``max_ms``.
        """
        exponent = max(0, retry_number - 1)
        # Compare in log space so a large exponent cannot overflow a float.
        if self.initial_ms == 0:
            base = 0.0
        elif self.max_ms <= self.initial_ms:
            base = float(self.max_ms)  # max_ms caps every delay, the first one too
        elif self.multiplier > 1.0 and exponent * math.log(self.multiplier) > math.log(
            self.max_ms / self.initial_ms
        ):
            base = float(self.max_ms)
        else:
            base = min(float(self.max_ms), self.initial_ms * self.multiplier**exponent)
        spread = 1.0 + self.jitter * (2.0 * draw - 1.0)
        return max(0, min(self.max_ms, int(base * spread)))


class Policy(Struct, frozen=True):
    """The safety policy, frozen at submit."""

    idempotency: Idempotency = Idempotency.NON_IDEMPOTENT
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    backoff: Backoff = Backoff()
    attempt_timeout_ms: int = DEFAULT_ATTEMPT_TIMEOUT_MS
    deadline_ms: int = DEFAULT_DEADLINE_MS
    lease_ttl_ms: int = DEFAULT_LEASE_TTL_MS
    # None: no bound. Else a task no attempt started within this long of its submit ends
    # FAILED/NOT_STARTED_IN_TIME (a typo'd capability fails fast instead of at the deadline).
    schedule_to_start_ms: int | None = None
    # A cancel of a running attempt first asks its handler to stop; its child is SIGKILLed
    # after this long (0: at once), and never later than its local lease expiry.
    cancel_grace_ms: int = DEFAULT_CANCEL_GRACE_MS
    # None: no bound. Else the worker kills an attempt that reports no progress for this
    # long (PROGRESS_TIMEOUT).
    progress_timeout_ms: int | None = None
    # The label pairs a worker must have, canonical ("k=v,k=v", orbit_wire/labels.py);
    # None: any worker of the queue.
    requires: str | None = None


class TaskSpec(Struct, frozen=True):
    """A validated submission. ``payload_json`` is the payload's canonical JSON text."""

    capability: Capability
    payload_json: str
    policy: Policy
    operation_key: str | None
    priority: int = DEFAULT_PRIORITY
    delay_ms: int | None = None
    not_before_at_ms: int | None = None
    # SHA-256 hex of the capability, the payload (keys sorted) and the whole policy as
    # requested (registered values not counted): two submissions of one operation key must
    # agree on it ("" without an operation key).
    digest: str = ""
    # The policy fields (POLICY_FIELDS) the submit set; the others may come from the policy
    # registered for the capability (policies.resolve_policy), else the defaults above.
    given: frozenset[str] = frozenset()
    policy_source: PolicySource = PolicySource.DEFAULT
    # Flow-control keys (docs/flow-control.md), deduplicated in order.
    limit_keys: tuple[str, ...] = ()

    def start_at(self, now_ms: int) -> int:
        """When the first attempt may start: now, ``now + delay_ms``, or ``not_before_at_ms``
        (an instant already past means now). BAD_REQUEST for an instant more than
        MAX_DELAY_MS ahead. The total deadline counts from this instant."""
        if self.delay_ms is not None:
            return now_ms + self.delay_ms
        if self.not_before_at_ms is None:
            return now_ms
        if self.not_before_at_ms - now_ms > MAX_DELAY_MS:
            raise OrbitError(ErrorCode.BAD_REQUEST,
                             f"not_before_at_ms is more than {MAX_DELAY_MS} ms ahead")
        return max(now_ms, self.not_before_at_ms)


def parse_task_spec(obj: object, where: str = "task") -> TaskSpec:
    """Validate one TaskSpec (docs/http-api.md) and fill the defaults.

    Raises OrbitError BAD_REQUEST naming the field (prefixed by ``where``), or the value
    rule's own code (PAYLOAD_TOO_LARGE, NESTING_TOO_DEEP, ...) for the payload.
    """
    if isinstance(obj, Mapping) and "payload" in obj and obj["payload"] is None:
        # The value rules' own code for a null payload, as for a null result.
        encode_value(None, what=f"{where}.payload")
    body = TASK_SPEC.load(obj, where)
    capability = Capability(body.handler, body.handler_version, body.payload_version)
    try:
        payload_json = encode_value(body.payload, what=f"{where}.payload").decode()
    except ValueRejected as exc:
        raise ValueRejected(exc.code, exc.message) from None
    if body.delay_ms is not UNSET and body.not_before_at_ms is not UNSET:
        raise _bad(where, "give delay_ms or not_before_at_ms, not both")
    given = body.backoff
    backoff = Backoff(
        initial_ms=given.initial_ms,
        max_ms=(max(DEFAULT_BACKOFF_MAX_MS, given.initial_ms) if given.max_ms is UNSET
                else given.max_ms),
        multiplier=float(given.multiplier),
        jitter=float(given.jitter),
    )
    policy = Policy(
        idempotency=body.idempotency, max_attempts=body.max_attempts, backoff=backoff,
        attempt_timeout_ms=body.attempt_timeout_ms, deadline_ms=body.deadline_ms,
        lease_ttl_ms=body.lease_ttl_ms, schedule_to_start_ms=body.schedule_to_start_ms,
        cancel_grace_ms=body.cancel_grace_ms, progress_timeout_ms=body.progress_timeout_ms,
        requires=requires_text(body.requires),
    )
    key = None if body.operation_key is UNSET else body.operation_key
    delay_ms = None if body.delay_ms is UNSET else body.delay_ms
    not_before_at_ms = None if body.not_before_at_ms is UNSET else body.not_before_at_ms
    limit_keys = tuple(dict.fromkeys(body.limits))
    digest = "" if key is None else _digest(capability, body.payload, policy, body.priority,
                                            delay_ms, not_before_at_ms, limit_keys)
    assert isinstance(obj, Mapping)  # a Struct loads from an object only
    fields_set = frozenset(k for k in POLICY_FIELDS if k in obj)
    return TaskSpec(capability, payload_json, policy, key, priority=body.priority,
                    delay_ms=delay_ms, not_before_at_ms=not_before_at_ms, digest=digest,
                    given=fields_set, limit_keys=limit_keys,
                    policy_source=PolicySource.SUBMIT if fields_set else PolicySource.DEFAULT)


def _digest(capability: Capability, payload: object, policy: Policy, priority: int,
            delay_ms: int | None, not_before_at_ms: int | None,
            limit_keys: tuple[str, ...] = ()) -> str:
    """What two submissions of one operation key must agree on (kept only with a key)."""
    backoff = policy.backoff
    digested_policy: dict[str, object] = {
        "idempotency": policy.idempotency.value, "max_attempts": policy.max_attempts,
        "backoff": [backoff.initial_ms, backoff.max_ms, backoff.multiplier, backoff.jitter],
        "attempt_timeout_ms": policy.attempt_timeout_ms, "deadline_ms": policy.deadline_ms,
        "lease_ttl_ms": policy.lease_ttl_ms, "schedule_to_start_ms": policy.schedule_to_start_ms,
    }
    if policy.cancel_grace_ms != DEFAULT_CANCEL_GRACE_MS:
        # Only when set otherwise: digests stored before the field existed stay valid.
        digested_policy["cancel_grace_ms"] = policy.cancel_grace_ms
    if policy.progress_timeout_ms is not None:
        digested_policy["progress_timeout_ms"] = policy.progress_timeout_ms
    if policy.requires is not None:
        digested_policy["requires"] = policy.requires
    if limit_keys:
        digested_policy["limits"] = list(limit_keys)  # only when given, as above
    return hashlib.sha256(orjson.dumps({
        "capability": capability.to_dict(), "payload": payload, "policy": digested_policy,
        "priority": priority, "delay_ms": delay_ms, "not_before_at_ms": not_before_at_ms,
    }, option=orjson.OPT_SORT_KEYS)).hexdigest()


def _bad(where: str, message: str) -> OrbitError:
    return OrbitError(ErrorCode.BAD_REQUEST, f"{where}: {message}")
