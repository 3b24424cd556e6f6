"""Task specs and their frozen safety policy: ``parse_task_spec`` validates a submission
(docs/http-api.md "TaskSpec") and fills every default; ``Backoff.delay_ms`` is the retry
delay; ``TaskSpec.start_at`` is when a (possibly delayed) task may first run. Pure: no I/O,
the clock's reading and the jitter's random draw are arguments."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

import orjson

from orbit_wire.errors import ErrorCode, OrbitError, ValueRejected
from orbit_wire.jsonvalue import encode_value
from orbit_wire.limits import (
    DEFAULT_CANCEL_GRACE_MS,
    DEFAULT_PRIORITY,
    MAX_CANCEL_GRACE_MS,
    MAX_DELAY_MS,
    MAX_NAME_LEN,
    MAX_PRIORITY,
    MIN_CANCEL_GRACE_MS,
    MIN_PRIORITY,
)
from orbit_wire.model import IDEMPOTENCY_OF, Capability, Idempotency
from orbit_wire.names import NAME_CHARS

from .fields import Enum, Field, Int, Num, Obj, Str, Value

DAY_MS: Final = 86_400_000
DEFAULT_MAX_ATTEMPTS: Final = 3
DEFAULT_BACKOFF_INITIAL_MS: Final = 1_000
DEFAULT_BACKOFF_MAX_MS: Final = 60_000
DEFAULT_BACKOFF_MULTIPLIER: Final = 2.0
DEFAULT_BACKOFF_JITTER: Final = 0.2
DEFAULT_ATTEMPT_TIMEOUT_MS: Final = 300_000
DEFAULT_DEADLINE_MS: Final = DAY_MS
DEFAULT_LEASE_TTL_MS: Final = 30_000
MAX_OPERATION_KEY_LEN: Final = 255

_NAME = Str(MAX_NAME_LEN, pattern=f"{NAME_CHARS}+",
            message=f"is required: 1-{MAX_NAME_LEN} of {NAME_CHARS}")
BACKOFF = Obj({
    "initial_ms": Int(0, DAY_MS, DEFAULT_BACKOFF_INITIAL_MS),
    "max_ms": Int(0, 2**53, description="every delay is at most this; default "
                  f"max({DEFAULT_BACKOFF_MAX_MS}, initial_ms)"),
    "multiplier": Num(1.0, 10.0, DEFAULT_BACKOFF_MULTIPLIER),
    "jitter": Num(0.0, 1.0, DEFAULT_BACKOFF_JITTER),
})
# Every field a submission may have: parse_task_spec checks with it, openapi.py shows it.
TASK_FIELDS: Final[dict[str, Field]] = {
    "handler": _NAME, "handler_version": _NAME, "payload_version": _NAME,
    "payload": Value(description="any non-null JSON value: at most 256 KiB encoded, nested "
                     "at most 32 deep, integers in signed 64-bit"),
    "idempotency": Enum((Idempotency.IDEMPOTENT.value, Idempotency.NON_IDEMPOTENT.value),
                        Idempotency.NON_IDEMPOTENT.value),
    "max_attempts": Int(1, 100, DEFAULT_MAX_ATTEMPTS),
    "backoff": BACKOFF,
    "attempt_timeout_ms": Int(100, DAY_MS, DEFAULT_ATTEMPT_TIMEOUT_MS),
    "deadline_ms": Int(100, 31 * DAY_MS, DEFAULT_DEADLINE_MS),
    "lease_ttl_ms": Int(100, 600_000, DEFAULT_LEASE_TTL_MS),
    "operation_key": Str(MAX_OPERATION_KEY_LEN, pattern=r"[\x21-\x7e]+",
                         message=f"must be 1-{MAX_OPERATION_KEY_LEN} printable ASCII "
                         "characters without spaces"),
    "schedule_to_start_ms": Int(100, 31 * DAY_MS, nullable=True,
                                description="unstarted this long after submit: "
                                "FAILED/NOT_STARTED_IN_TIME; null or absent: no bound"),
    "priority": Int(MIN_PRIORITY, MAX_PRIORITY, DEFAULT_PRIORITY,
                    description="higher is dispatched first within the queue"),
    "delay_ms": Int(0, MAX_DELAY_MS, description="not with not_before_at_ms"),
    "not_before_at_ms": Int(0, 2**53, description="instant (ms since the epoch), at most "
                            f"{MAX_DELAY_MS} ms ahead; not with delay_ms"),
    "cancel_grace_ms": Int(MIN_CANCEL_GRACE_MS, MAX_CANCEL_GRACE_MS, DEFAULT_CANCEL_GRACE_MS,
                           description="a cancel of a running attempt asks its handler to "
                           "stop, then SIGKILLs its child after this long (0: at once)"),
}
_REQUIRED = ("handler", "handler_version", "payload_version", "payload")
_EXCLUSIVE = {"not": {"required": ["delay_ms", "not_before_at_ms"]}}
TASK_SPEC = Obj(TASK_FIELDS, _REQUIRED, extra=_EXCLUSIVE)


def task_spec_body(without: tuple[str, ...] = ()) -> Obj:
    """TASK_SPEC less some fields (a schedule's task sets its own operation key and start)."""
    return Obj({k: v for k, v in TASK_FIELDS.items() if k not in without}, _REQUIRED,
               extra=_EXCLUSIVE)


@dataclass(frozen=True, slots=True)
class Backoff:
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


@dataclass(frozen=True, slots=True)
class Policy:
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


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """A validated submission. ``payload_json`` is the payload's canonical JSON text."""

    capability: Capability
    payload_json: str
    policy: Policy
    operation_key: str | None
    priority: int = DEFAULT_PRIORITY
    delay_ms: int | None = None
    not_before_at_ms: int | None = None
    # SHA-256 hex of the capability, the payload (keys sorted) and the whole policy: two
    # submissions of one operation key must agree on it ("" without an operation key).
    digest: str = ""

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
    fields = TASK_SPEC.parse(obj, where)
    capability = Capability(fields["handler"], fields["handler_version"],
                            fields["payload_version"])
    try:
        payload_json = encode_value(fields["payload"], what=f"{where}.payload").decode()
    except ValueRejected as exc:
        raise ValueRejected(exc.code, exc.message) from None
    if fields.get("delay_ms") is not None and fields.get("not_before_at_ms") is not None:
        raise _bad(where, "give delay_ms or not_before_at_ms, not both")
    backoff_raw = fields.get("backoff", {})
    initial = backoff_raw.get("initial_ms", DEFAULT_BACKOFF_INITIAL_MS)
    backoff = Backoff(
        initial_ms=initial,
        max_ms=backoff_raw.get("max_ms", max(DEFAULT_BACKOFF_MAX_MS, initial)),
        multiplier=float(backoff_raw.get("multiplier", DEFAULT_BACKOFF_MULTIPLIER)),
        jitter=float(backoff_raw.get("jitter", DEFAULT_BACKOFF_JITTER)),
    )
    policy = Policy(
        idempotency=IDEMPOTENCY_OF[fields.get("idempotency", Idempotency.NON_IDEMPOTENT.value)],
        max_attempts=fields.get("max_attempts", DEFAULT_MAX_ATTEMPTS),
        backoff=backoff,
        attempt_timeout_ms=fields.get("attempt_timeout_ms", DEFAULT_ATTEMPT_TIMEOUT_MS),
        deadline_ms=fields.get("deadline_ms", DEFAULT_DEADLINE_MS),
        lease_ttl_ms=fields.get("lease_ttl_ms", DEFAULT_LEASE_TTL_MS),
        schedule_to_start_ms=fields.get("schedule_to_start_ms"),
        cancel_grace_ms=fields.get("cancel_grace_ms", DEFAULT_CANCEL_GRACE_MS),
    )
    key = fields.get("operation_key")
    priority = fields.get("priority", DEFAULT_PRIORITY)
    delay_ms = fields.get("delay_ms")
    not_before_at_ms = fields.get("not_before_at_ms")
    digest = "" if key is None else _digest(capability, fields["payload"], policy, priority,
                                            delay_ms, not_before_at_ms)
    return TaskSpec(capability, payload_json, policy, key, priority=priority, delay_ms=delay_ms,
                    not_before_at_ms=not_before_at_ms, digest=digest)


def _digest(capability: Capability, payload: object, policy: Policy, priority: int,
            delay_ms: int | None, not_before_at_ms: int | None) -> str:
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
    return hashlib.sha256(orjson.dumps({
        "capability": capability.to_dict(), "payload": payload, "policy": digested_policy,
        "priority": priority, "delay_ms": delay_ms, "not_before_at_ms": not_before_at_ms,
    }, option=orjson.OPT_SORT_KEYS)).hexdigest()


def _bad(where: str, message: str) -> OrbitError:
    return OrbitError(ErrorCode.BAD_REQUEST, f"{where}: {message}")
