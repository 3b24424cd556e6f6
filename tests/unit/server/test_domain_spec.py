"""TaskSpec parsing: defaults, ranges, typed errors (docs/http-api.md)."""

from __future__ import annotations

import pytest

from orbit_server import domain
from orbit_wire.errors import ErrorCode, OrbitError
from orbit_wire.model import Capability, Idempotency

BASE = {"handler": "text.normalize", "handler_version": "v1", "payload_version": "v1",
        "payload": {"text": "hello"}}


def test_defaults() -> None:
    spec = domain.parse_task_spec(BASE)
    assert spec.capability == Capability("text.normalize", "v1", "v1")
    assert spec.payload_json == '{"text":"hello"}'
    assert spec.operation_key is None
    assert spec.policy == domain.Policy(
        idempotency=Idempotency.NON_IDEMPOTENT, max_attempts=3,
        backoff=domain.Backoff(1000, 60000, 2.0, 0.2), attempt_timeout_ms=300_000,
        deadline_ms=86_400_000, lease_ttl_ms=30_000,
    )


def test_all_fields() -> None:
    spec = domain.parse_task_spec({
        **BASE, "idempotency": "IDEMPOTENT", "max_attempts": 100,
        "backoff": {"initial_ms": 0, "max_ms": 0, "multiplier": 10, "jitter": 1},
        "attempt_timeout_ms": 100, "deadline_ms": 31 * 86_400_000, "lease_ttl_ms": 600_000,
        "operation_key": "order-42-normalize",
    })
    assert spec.policy.idempotency is Idempotency.IDEMPOTENT
    assert spec.policy.backoff == domain.Backoff(0, 0, 10.0, 1.0)
    assert spec.operation_key == "order-42-normalize"


def test_an_integral_float_is_an_integer_as_in_json_schema() -> None:
    spec = domain.parse_task_spec({**BASE, "max_attempts": 2.0, "backoff": {"max_ms": 5e3}})
    assert spec.policy.max_attempts == 2 and isinstance(spec.policy.max_attempts, int)
    assert spec.policy.backoff.max_ms == 5000 and isinstance(spec.policy.backoff.max_ms, int)


def test_max_ms_below_initial_caps_every_delay() -> None:
    spec = domain.parse_task_spec({**BASE, "backoff": {"initial_ms": 5, "max_ms": 4,
                                                       "jitter": 0}})
    assert [spec.policy.backoff.delay_ms(n, 0.5) for n in (1, 2, 9)] == [4, 4, 4]
    zero = domain.Backoff(initial_ms=5, max_ms=0, multiplier=2.0, jitter=0.0)
    assert zero.delay_ms(3, 0.5) == 0


def test_max_ms_defaults_to_at_least_initial() -> None:
    spec = domain.parse_task_spec({**BASE, "backoff": {"initial_ms": 120_000}})
    assert spec.policy.backoff.max_ms == 120_000


@pytest.mark.parametrize(("patch", "needle"), [
    ({"max_attempts": 0}, "max_attempts"),
    ({"max_attempts": True}, "max_attempts"),
    ({"max_attempts": 2.5}, "max_attempts"),
    ({"lease_ttl_ms": 600_001}, "lease_ttl_ms"),
    ({"attempt_timeout_ms": 99}, "attempt_timeout_ms"),
    ({"attempt_timeout_ms": 86_400_001}, "attempt_timeout_ms"),
    ({"deadline_ms": 99}, "deadline_ms"),
    ({"backoff": {"initial_ms": 86_400_001}}, "initial_ms"),
    ({"backoff": {"multiplier": 10.5}}, "multiplier"),
    ({"backoff": {"multiplier": float("nan")}}, "multiplier"),
    ({"backoff": {"jitter": -0.1}}, "jitter"),
    ({"backoff": {"extra": 1}}, "unknown"),
    ({"backoff": []}, "backoff"),
    ({"idempotency": "idempotent"}, "idempotency"),
    ({"handler": ""}, "handler"),
    ({"handler": "x" * 129}, "handler"),
    ({"payload_version": 1}, "payload_version"),
    ({"operation_key": "has space"}, "operation_key"),
    ({"operation_key": "k" * 256}, "operation_key"),
    ({"operation_key": 7}, "operation_key"),
    ({"unknown": 1}, "unknown"),
    ({"cancel_grace_ms": -1}, "cancel_grace_ms"),
    ({"cancel_grace_ms": 60_001}, "cancel_grace_ms"),
    ({"cancel_grace_ms": 1.5}, "cancel_grace_ms"),
    ({"cancel_grace_ms": False}, "cancel_grace_ms"),
    # null is not a second spelling of "absent" (the OpenAPI document says these are not
    # nullable); schedule_to_start_ms is, null meaning no bound.
    ({"handler": None}, "handler"),
    ({"operation_key": None}, "operation_key"),
    ({"max_attempts": None}, "max_attempts"),
    ({"backoff": None}, "backoff"),
    ({"backoff": {"jitter": None}}, "jitter"),
])
def test_rejections_name_the_field(patch: dict[str, object], needle: str) -> None:
    with pytest.raises(OrbitError) as exc:
        domain.parse_task_spec({**BASE, **patch}, where="tasks[3]")
    assert exc.value.code is ErrorCode.BAD_REQUEST
    assert needle in exc.value.message and exc.value.message.startswith("tasks[3]")


def test_payload_rules() -> None:
    missing = {k: v for k, v in BASE.items() if k != "payload"}
    with pytest.raises(OrbitError) as exc:
        domain.parse_task_spec(missing)
    assert exc.value.code is ErrorCode.BAD_REQUEST
    for payload, code in ((None, ErrorCode.BAD_REQUEST),
                          (2**64, ErrorCode.NUMBER_OUT_OF_RANGE),
                          (float("inf"), ErrorCode.NUMBER_OUT_OF_RANGE),
                          (_deep(40), ErrorCode.NESTING_TOO_DEEP),
                          ("x" * 262_144, ErrorCode.PAYLOAD_TOO_LARGE)):
        with pytest.raises(OrbitError) as exc:
            domain.parse_task_spec({**BASE, "payload": payload})
        assert exc.value.code is code
    assert domain.parse_task_spec({**BASE, "payload": 0}).payload_json == "0"


def test_not_an_object() -> None:
    with pytest.raises(OrbitError) as exc:
        domain.parse_task_spec([BASE])
    assert exc.value.code is ErrorCode.BAD_REQUEST


def _deep(n: int) -> object:
    value: object = 1
    for _ in range(n):
        value = [value]
    return value


def test_priority_and_delays_parse_and_start_at() -> None:
    base = {"handler": "h", "handler_version": "1", "payload_version": "1", "payload": 1}
    plain = domain.parse_task_spec(base)
    assert (plain.priority, plain.delay_ms, plain.not_before_at_ms) == (5, None, None)
    assert plain.start_at(1_000) == 1_000
    delayed = domain.parse_task_spec({**base, "delay_ms": 250, "priority": 9})
    assert delayed.priority == 9
    assert delayed.start_at(1_000) == 1_250
    at = domain.parse_task_spec({**base, "not_before_at_ms": 5_000})
    assert at.start_at(1_000) == 5_000
    assert at.start_at(9_000) == 9_000  # already past: now
    far = domain.parse_task_spec({**base, "not_before_at_ms": 1_000 + 31 * 86_400_000 + 1})
    with pytest.raises(OrbitError, match="not_before_at_ms"):
        far.start_at(1_000)
    for bad in ({"delay_ms": -1}, {"delay_ms": 31 * 86_400_000 + 1}, {"priority": 10},
                {"priority": -1}, {"delay_ms": 1, "not_before_at_ms": 1},
                {"not_before_at_ms": "soon"}):
        with pytest.raises(OrbitError):
            domain.parse_task_spec({**base, **bad})


def test_cancel_grace_default_bounds_and_digest() -> None:
    assert domain.parse_task_spec(BASE).policy.cancel_grace_ms == 2000
    with pytest.raises(OrbitError, match="cancel_grace_ms"):  # null is not "absent"
        domain.parse_task_spec({**BASE, "cancel_grace_ms": None})
    for grace in (0, 60_000):
        assert domain.parse_task_spec({**BASE, "cancel_grace_ms": grace}
                                      ).policy.cancel_grace_ms == grace
    # Saying the default changes nothing (digests stored before the field stay valid);
    # another grace is another spec for an operation key.
    keyed = {**BASE, "operation_key": "k1"}
    plain = domain.parse_task_spec(keyed).digest
    assert plain
    assert domain.parse_task_spec({**keyed, "cancel_grace_ms": 2000}).digest == plain
    assert domain.parse_task_spec({**keyed, "cancel_grace_ms": 0}).digest != plain
    # Without an operation key nothing is compared, so nothing is digested.
    assert domain.parse_task_spec(BASE).digest == ""
