"""The declared policy, pure: TaskType checks every policy field at construction (a typed
BAD_REQUEST naming the field and its bound), sends what it declares and lets one submit set
another value; hello carries the declared policies and refuses one for a capability it does
not serve."""

from __future__ import annotations

from typing import Any

import pytest

from orbit_child import Handlers
from orbit_child.api import declared_policies
from orbit_wire import Capability, TaskType
from orbit_wire.errors import ErrorCode, OrbitError, ProtocolError
from orbit_wire.frames import Hello, decode_client_frame, encode
from orbit_wire.model import Idempotency
from orbit_wire.policy import Backoff, CapabilityPolicy, DeclaredPolicy, declared_policy

CAP = Capability("text.normalize", "v1", "v1")


def test_every_field_is_declared_once_and_sent() -> None:
    declared = TaskType("text.normalize", "v1", "v1", idempotent=True, priority=7,
                        max_attempts=4, backoff={"initial_ms": 20}, attempt_timeout_ms=900,
                        deadline_ms=60_000, lease_ttl_ms=5_000, schedule_to_start_ms=1_000,
                        cancel_grace_ms=0)
    assert declared.policy == DeclaredPolicy(
        idempotency=Idempotency.IDEMPOTENT, max_attempts=4, backoff=Backoff(initial_ms=20),
        attempt_timeout_ms=900, deadline_ms=60_000, lease_ttl_ms=5_000,
        schedule_to_start_ms=1_000, cancel_grace_ms=0, priority=7)
    assert declared.spec({"text": "x"}) == {
        "handler": "text.normalize", "handler_version": "v1", "payload_version": "v1",
        "payload": {"text": "x"}, "idempotency": "IDEMPOTENT", "max_attempts": 4,
        "backoff": {"initial_ms": 20, "max_ms": 60_000, "multiplier": 2.0, "jitter": 0.2},
        "attempt_timeout_ms": 900, "deadline_ms": 60_000, "lease_ttl_ms": 5_000,
        "schedule_to_start_ms": 1_000, "cancel_grace_ms": 0, "priority": 7}
    # One submit sets another value for a field; the declaration stays.
    spec = declared.spec(1, idempotent=False, attempt_timeout_ms=2_000,
                         backoff=Backoff(jitter=0.0))
    assert (spec["idempotency"], spec["attempt_timeout_ms"], spec["backoff"]["jitter"],
            spec["max_attempts"]) == ("NON_IDEMPOTENT", 2_000, 0.0, 4)


def test_nothing_declared_sends_nothing() -> None:
    bare = TaskType("a", "1", "1")
    assert bare.policy.empty and bare.idempotent is None
    assert bare.spec(1) == {"handler": "a", "handler_version": "1", "payload_version": "1",
                            "payload": 1}


@pytest.mark.parametrize(("fields", "says"), [
    ({"max_attempts": 0}, "max_attempts must be an integer in [1, 100]"),
    ({"max_attempts": 2.5}, "max_attempts"),
    ({"attempt_timeout_ms": 99}, "attempt_timeout_ms must be an integer in [100, 86400000]"),
    ({"attempt_timeout_ms": True}, "attempt_timeout_ms"),
    ({"lease_ttl_ms": 600_001}, "lease_ttl_ms"),
    ({"deadline_ms": "1h"}, "deadline_ms"),
    ({"cancel_grace_ms": -1}, "cancel_grace_ms"),
    ({"schedule_to_start_ms": 10}, "schedule_to_start_ms"),
    ({"backoff": {"jitter": 2}}, "backoff: jitter must be a number in [0.0, 1.0]"),
    ({"backoff": {"initial": 2}}, "backoff: has unknown field(s): initial"),
    ({"backoff": "fast"}, "backoff"),
    ({"idempotent": "yes"}, "idempotent must be a bool"),
    ({"priority": 10}, "priority must be an integer in [0, 9]"),
])
def test_a_bad_field_is_refused_at_construction(fields: dict[str, Any], says: str) -> None:
    with pytest.raises(OrbitError) as refused:
        TaskType("text.normalize", "v1", "v1", **fields)
    assert refused.value.code is ErrorCode.BAD_REQUEST
    assert says in refused.value.message


def test_same_as_reads_a_left_out_backoff_max_as_its_default() -> None:
    assert DeclaredPolicy(backoff=Backoff(initial_ms=10)).same_as(
        DeclaredPolicy(backoff=Backoff(initial_ms=10, max_ms=60_000)))
    assert not DeclaredPolicy(max_attempts=2).same_as(DeclaredPolicy())
    assert declared_policy({"max_attempts": None}).empty


def test_the_worker_declares_what_its_task_types_declare() -> None:
    handlers = Handlers()
    handlers.add(TaskType("a", "1", "1", attempt_timeout_ms=500), lambda e: 1)
    handlers.add(TaskType("b", "1", "1"), lambda e: 1)
    assert declared_policies(handlers) == (
        CapabilityPolicy(Capability("a", "1", "1"), DeclaredPolicy(attempt_timeout_ms=500)),)


def _hello(**extra: Any) -> Hello:
    return Hello(credential_id="a" * 32, credential_secret="s", instance_id="b" * 32,
                 instance_secret="t", queue_id="c" * 32, capabilities=(CAP,), capacity=2,
                 **extra)


def test_hello_carries_the_declared_policies_and_stays_compatible() -> None:
    plain = encode(_hello())
    assert b"policies" not in plain  # a worker that declares nothing sends what it always did
    declared = _hello(policies=(CapabilityPolicy(CAP, DeclaredPolicy(max_attempts=4)),))
    back = decode_client_frame(encode(declared))
    assert isinstance(back, Hello) and back.policies == declared.policies


@pytest.mark.parametrize("policies", [
    (CapabilityPolicy(Capability("other", "v1", "v1"), DeclaredPolicy(max_attempts=4)),),
    (CapabilityPolicy(CAP, DeclaredPolicy()), CapabilityPolicy(CAP, DeclaredPolicy())),
])
def test_hello_refuses_a_policy_for_a_capability_it_does_not_serve(
        policies: tuple[CapabilityPolicy, ...]) -> None:
    with pytest.raises(ProtocolError) as refused:
        decode_client_frame(encode(_hello(policies=policies)))
    assert refused.value.code is ErrorCode.BAD_FRAME and "frame.policies" in refused.value.message


def test_hello_refuses_a_declared_field_out_of_bounds() -> None:
    text = encode(_hello(policies=(CapabilityPolicy(CAP, DeclaredPolicy(max_attempts=4)),)))
    with pytest.raises(ProtocolError) as refused:
        decode_client_frame(text.replace(b'"max_attempts":4', b'"max_attempts":0'))
    assert refused.value.code is ErrorCode.BAD_FRAME
    assert "max_attempts must be an integer in [1, 100]" in refused.value.message
