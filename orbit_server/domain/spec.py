"""Task specs and their frozen safety policy: ``parse_task_spec`` validates a submission
(docs/http-api.md "TaskSpec") and fills every default; ``Backoff.delay_ms`` is the retry
delay; ``TaskSpec.start_at`` is when a (possibly delayed) task may first run. Pure: no I/O,
the clock's reading and the jitter's random draw are arguments."""

from __future__ import annotations

import hashlib
import math
import re
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
from orbit_wire.model import Capability, Idempotency
from orbit_wire.names import is_name

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

_OPERATION_KEY_RE = re.compile(rf"[\x21-\x7e]{{1,{MAX_OPERATION_KEY_LEN}}}")
_SPEC_KEYS = frozenset(
    {
        "handler", "handler_version", "payload_version", "payload", "idempotency",
        "max_attempts", "backoff", "attempt_timeout_ms", "deadline_ms", "lease_ttl_ms",
        "operation_key", "priority", "delay_ms", "not_before_at_ms", "schedule_to_start_ms",
        "cancel_grace_ms",
    }
)
_BACKOFF_KEYS = frozenset({"initial_ms", "max_ms", "multiplier", "jitter"})


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
    # submissions of one operation key must agree on it.
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
    if not isinstance(obj, Mapping):
        raise _bad(where, "must be a JSON object")
    unknown = sorted(str(k) for k in obj if k not in _SPEC_KEYS)
    if unknown:
        raise _bad(where, f"has unknown field(s): {', '.join(unknown)}")
    capability = Capability(
        _name(obj, "handler", where),
        _name(obj, "handler_version", where),
        _name(obj, "payload_version", where),
    )
    if "payload" not in obj:
        raise _bad(where, "payload is required")
    try:
        payload_json = encode_value(obj["payload"], what=f"{where}.payload").decode()
    except ValueRejected as exc:
        raise ValueRejected(exc.code, exc.message) from None

    idempotency_raw = obj.get("idempotency", Idempotency.NON_IDEMPOTENT.value)
    if idempotency_raw not in (Idempotency.IDEMPOTENT.value, Idempotency.NON_IDEMPOTENT.value):
        raise _bad(where, "idempotency must be IDEMPOTENT or NON_IDEMPOTENT")
    backoff_raw = obj.get("backoff", {})
    if backoff_raw is None:
        backoff_raw = {}
    if not isinstance(backoff_raw, Mapping):
        raise _bad(where, "backoff must be an object")
    unknown = sorted(str(k) for k in backoff_raw if k not in _BACKOFF_KEYS)
    if unknown:
        raise _bad(where, f"backoff has unknown field(s): {', '.join(unknown)}")
    initial = _int(backoff_raw, "initial_ms", DEFAULT_BACKOFF_INITIAL_MS, 0, DAY_MS,
                   f"{where}.backoff")
    maximum = _int(backoff_raw, "max_ms", max(DEFAULT_BACKOFF_MAX_MS, initial), initial,
                   2**53, f"{where}.backoff")
    backoff = Backoff(
        initial_ms=initial,
        max_ms=maximum,
        multiplier=_float(backoff_raw, "multiplier", DEFAULT_BACKOFF_MULTIPLIER, 1.0, 10.0,
                          f"{where}.backoff"),
        jitter=_float(backoff_raw, "jitter", DEFAULT_BACKOFF_JITTER, 0.0, 1.0, f"{where}.backoff"),
    )
    policy = Policy(
        idempotency=Idempotency(idempotency_raw),
        max_attempts=_int(obj, "max_attempts", DEFAULT_MAX_ATTEMPTS, 1, 100, where),
        backoff=backoff,
        attempt_timeout_ms=_int(obj, "attempt_timeout_ms", DEFAULT_ATTEMPT_TIMEOUT_MS, 100,
                                DAY_MS, where),
        deadline_ms=_int(obj, "deadline_ms", DEFAULT_DEADLINE_MS, 100, 31 * DAY_MS, where),
        lease_ttl_ms=_int(obj, "lease_ttl_ms", DEFAULT_LEASE_TTL_MS, 100, 600_000, where),
        schedule_to_start_ms=(None if obj.get("schedule_to_start_ms") is None else
                              _int(obj, "schedule_to_start_ms", 0, 100, 31 * DAY_MS, where)),
        cancel_grace_ms=_int(obj, "cancel_grace_ms", DEFAULT_CANCEL_GRACE_MS,
                             MIN_CANCEL_GRACE_MS, MAX_CANCEL_GRACE_MS, where),
    )
    key = obj.get("operation_key")
    if key is not None and (not isinstance(key, str) or not _OPERATION_KEY_RE.fullmatch(key)):
        raise _bad(
            where,
            f"operation_key must be 1-{MAX_OPERATION_KEY_LEN} printable ASCII characters "
            "without spaces",
        )
    if obj.get("delay_ms") is not None and obj.get("not_before_at_ms") is not None:
        raise _bad(where, "give delay_ms or not_before_at_ms, not both")
    delay = obj.get("delay_ms")
    not_before = obj.get("not_before_at_ms")
    priority = _int(obj, "priority", DEFAULT_PRIORITY, MIN_PRIORITY, MAX_PRIORITY, where)
    delay_ms = None if delay is None else _int(obj, "delay_ms", 0, 0, MAX_DELAY_MS, where)
    not_before_at_ms = (None if not_before is None
                        else _int(obj, "not_before_at_ms", 0, 0, 2**53, where))
    digested_policy: dict[str, object] = {
        "idempotency": policy.idempotency.value, "max_attempts": policy.max_attempts,
        "backoff": [backoff.initial_ms, backoff.max_ms, backoff.multiplier, backoff.jitter],
        "attempt_timeout_ms": policy.attempt_timeout_ms, "deadline_ms": policy.deadline_ms,
        "lease_ttl_ms": policy.lease_ttl_ms, "schedule_to_start_ms": policy.schedule_to_start_ms,
    }
    if policy.cancel_grace_ms != DEFAULT_CANCEL_GRACE_MS:
        # Only when set otherwise: digests stored before the field existed stay valid.
        digested_policy["cancel_grace_ms"] = policy.cancel_grace_ms
    digest = hashlib.sha256(orjson.dumps({
        "capability": capability.to_dict(), "payload": obj["payload"], "policy": digested_policy,
        "priority": priority, "delay_ms": delay_ms, "not_before_at_ms": not_before_at_ms,
    }, option=orjson.OPT_SORT_KEYS)).hexdigest()
    return TaskSpec(capability, payload_json, policy, key, priority=priority, delay_ms=delay_ms,
                    not_before_at_ms=not_before_at_ms, digest=digest)


def _bad(where: str, message: str) -> OrbitError:
    return OrbitError(ErrorCode.BAD_REQUEST, f"{where}: {message}")


def _name(obj: Mapping[object, object], key: str, where: str) -> str:
    value = obj.get(key)
    if not is_name(value):
        raise _bad(where, f"{key} is required: 1-{MAX_NAME_LEN} of [A-Za-z0-9._:/-]")
    return value


def _int(obj: Mapping[object, object], key: str, default: int, lo: int, hi: int,
         where: str) -> int:
    value = obj.get(key, default)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise _bad(where, f"{key} must be an integer in [{lo}, {hi}]")
    return value


def _float(obj: Mapping[object, object], key: str, default: float, lo: float, hi: float,
           where: str) -> float:
    value = obj.get(key, default)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _bad(where, f"{key} must be a number in [{lo}, {hi}]")
    number = float(value)
    if not (math.isfinite(number) and lo <= number <= hi):
        raise _bad(where, f"{key} must be a number in [{lo}, {hi}]")
    return number
