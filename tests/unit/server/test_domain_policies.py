"""What a hello registers and the policy a task gets, pure (orbit_server/domain/policies.py):
the first declaration of a capability stands, the same one is fine, a different one is
refused naming each field; a submit's own fields win, the registered ones fill the rest,
the server's defaults what neither sets."""

from __future__ import annotations

import pytest

from orbit_server.domain import parse_task_spec, registration, resolve_policy
from orbit_wire.errors import ErrorCode, OrbitError
from orbit_wire.model import Capability, Idempotency
from orbit_wire.policy import Backoff, DeclaredPolicy, PolicySource

V1 = Capability("text.normalize", "v1", "v1")
V2 = Capability("text.normalize", "v2", "v1")
SHORT = DeclaredPolicy(attempt_timeout_ms=1_000, max_attempts=5)
LONG = DeclaredPolicy(attempt_timeout_ms=9_000, max_attempts=5)


def test_new_capabilities_are_registered_with_what_they_declare() -> None:
    made = registration({}, [V1, V2], {V1: SHORT})
    assert made.new == ((V1, SHORT), (V2, DeclaredPolicy())) and made.declared == ()


def test_the_same_declaration_or_none_changes_nothing() -> None:
    assert not registration({V1: SHORT}, [V1], {V1: SHORT}).changes
    assert not registration({V1: SHORT}, [V1], {}).changes
    same = DeclaredPolicy(backoff=Backoff(initial_ms=5, max_ms=60_000))
    assert not registration({V1: DeclaredPolicy(backoff=Backoff(initial_ms=5))}, [V1],
                            {V1: same}).changes


def test_a_first_declaration_fills_a_registration_without_one() -> None:
    made = registration({V1: DeclaredPolicy()}, [V1], {V1: SHORT})
    assert made.declared == ((V1, SHORT),) and made.new == ()


def test_a_different_declaration_is_refused_field_by_field() -> None:
    with pytest.raises(OrbitError) as refused:
        registration({V1: SHORT, V2: SHORT}, [V1, V2],
                     {V1: LONG, V2: DeclaredPolicy(max_attempts=5)})
    assert refused.value.code is ErrorCode.POLICY_CONFLICT
    message = refused.value.message
    assert "text.normalize@v1/v1 (attempt_timeout_ms: registered 1000, declared 9000)" in message
    assert "text.normalize@v2/v1 (attempt_timeout_ms: registered 1000, declared None)" in message


def _spec(**fields: object) -> object:
    return {"handler": V1.handler, "handler_version": "v1", "payload_version": "v1",
            "payload": 1, **fields}


def test_the_submit_wins_the_registered_fills_the_defaults_remain() -> None:
    registered = DeclaredPolicy(idempotency=Idempotency.IDEMPOTENT, max_attempts=5,
                                backoff=Backoff(initial_ms=10), priority=8)
    spec = resolve_policy(parse_task_spec(_spec(max_attempts=2)), registered)
    assert spec.policy_source is PolicySource.REGISTERED
    assert spec.policy.max_attempts == 2 and spec.policy.idempotency is Idempotency.IDEMPOTENT
    assert (spec.policy.backoff.initial_ms, spec.policy.backoff.max_ms) == (10, 60_000)
    assert spec.priority == 8 and spec.policy.attempt_timeout_ms == 300_000


@pytest.mark.parametrize(("fields", "registered", "source"), [
    ({}, None, PolicySource.DEFAULT),
    ({"priority": 3}, None, PolicySource.SUBMIT),
    ({}, DeclaredPolicy(), PolicySource.DEFAULT),
    ({"max_attempts": 2}, DeclaredPolicy(max_attempts=5), PolicySource.SUBMIT),
    ({"max_attempts": 2}, DeclaredPolicy(max_attempts=5, priority=1), PolicySource.REGISTERED),
])
def test_where_the_policy_came_from(fields: dict[str, object],
                                    registered: DeclaredPolicy | None,
                                    source: PolicySource) -> None:
    assert resolve_policy(parse_task_spec(_spec(**fields)), registered).policy_source is source


def test_the_digest_is_the_request_not_the_registration() -> None:
    alone = parse_task_spec(_spec(operation_key="k"))
    filled = resolve_policy(alone, SHORT)
    assert filled.digest == alone.digest and filled.policy != alone.policy
