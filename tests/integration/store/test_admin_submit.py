"""Auth, queues, credentials, submit (single, batch, operation keys) on a real SQLite file."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import text
from store_support import CAP, World, as_json

from orbit_wire.errors import AuthError, ErrorCode, OrbitError, ValueRejected
from orbit_wire.model import Role


def test_bootstrap_admin_authenticates_and_bad_tokens_do_not(world: World) -> None:
    made = world.service.admin.bootstrap_admin(None)
    p = world.service.admin.authenticate(f"{made['credential_id']}.{made['secret']}")
    assert p.role is Role.ADMIN and made["role"] == "admin"
    for bad in ("", "nodot", f"{made['credential_id']}.wrong", "x" * 32 + ".s",
                f"{made['credential_id']}."):
        with pytest.raises(AuthError) as exc:
            world.service.admin.authenticate(bad)
        assert exc.value.code is ErrorCode.UNAUTHENTICATED


def test_revoked_credential_is_refused_at_once(world: World) -> None:
    made = world.service.admin.create_credential(world.admin, "producer", [world.queue_id], None)
    token = f"{made['credential_id']}.{made['secret']}"
    world.service.admin.authenticate(token)  # now cached
    answer, effects = world.service.admin.revoke_credential(world.admin, made["credential_id"])
    assert answer == {"credential_id": made["credential_id"], "revoked": True}
    assert effects.revoked_credentials == [made["credential_id"]]
    with pytest.raises(AuthError):
        world.service.admin.authenticate(token)
    # Revoking twice is fine; an unknown ID is NOT_FOUND.
    world.service.admin.revoke_credential(world.admin, made["credential_id"])
    with pytest.raises(OrbitError) as exc:
        world.service.admin.revoke_credential(world.admin, "0" * 32)
    assert exc.value.code is ErrorCode.NOT_FOUND


def test_secrets_are_stored_hashed(world: World) -> None:
    made = world.service.admin.create_credential(world.admin, "worker", [world.queue_id], "w2")
    with world.engine.connect() as conn:
        stored = conn.execute(
            text("SELECT secret_hash FROM credentials WHERE id = :id"),
            {"id": made["credential_id"]},
        ).scalar_one()
    assert made["secret"] not in stored and len(stored) == 64


def test_roles_and_scopes(world: World) -> None:
    with pytest.raises(AuthError) as denied:
        world.service.admin.create_queue(world.producer, "nope")
    assert denied.value.code is ErrorCode.PERMISSION_DENIED
    other = world.service.admin.create_queue(world.admin, "other")
    with pytest.raises(OrbitError) as hidden:
        world.service.tasks.submit(world.producer, other["id"], [{}])
    assert hidden.value.code is ErrorCode.NOT_FOUND
    with pytest.raises(OrbitError) as exc:
        world.service.admin.create_credential(world.admin, "root", [world.queue_id], None)
    assert exc.value.code is ErrorCode.BAD_REQUEST
    with pytest.raises(OrbitError) as exc:
        world.service.admin.create_credential(world.admin, "producer", ["f" * 32], None)
    assert exc.value.code is ErrorCode.NOT_FOUND
    with pytest.raises(OrbitError) as exc:
        world.service.admin.create_credential(world.admin, "worker", [], None)
    assert exc.value.code is ErrorCode.BAD_REQUEST
    # A task of another queue is invisible to this producer.
    admin_task, _ = world.service.tasks.submit(world.admin, other["id"], [{
        "handler": "h", "handler_version": "1", "payload_version": "1", "payload": 1}])
    with pytest.raises(OrbitError) as hidden:
        world.service.tasks.get_task(world.producer, admin_task[0][0]["id"])
    assert hidden.value.code is ErrorCode.NOT_FOUND


def test_submit_fills_defaults_and_view_matches_contract(world: World) -> None:
    t = as_json(world.submit(payload={"n": 12345678901234567890.5, "s": "x"}))
    assert t["state"] == "PENDING" and t["attempts"] == 0 and t["epoch"] == 0
    assert t["capability"] == CAP.to_dict()
    assert t["policy"] == {
        "idempotency": "NON_IDEMPOTENT", "max_attempts": 3,
        "backoff": {"initial_ms": 1000, "max_ms": 60000, "multiplier": 2.0, "jitter": 0.2},
        "attempt_timeout_ms": 300000, "lease_ttl_ms": 30000, "schedule_to_start_ms": None,
        "cancel_grace_ms": 2000, "progress_timeout_ms": None, "requires": None,
    }
    assert t["deadline_at_ms"] == t["created_at_ms"] + 86_400_000
    assert t["next_attempt_at_ms"] == t["created_at_ms"]
    assert t["result"] is None and t["failure"] is None and t["cancel_requested"] is False
    assert as_json(world.task(t["id"])) == t


@pytest.mark.parametrize(("spec", "code"), [
    ({"max_attempts": 0}, ErrorCode.BAD_REQUEST),
    ({"max_attempts": 101}, ErrorCode.BAD_REQUEST),
    ({"lease_ttl_ms": 99}, ErrorCode.BAD_REQUEST),
    ({"progress_timeout_ms": 99}, ErrorCode.BAD_REQUEST),
    ({"progress_timeout_ms": 86_400_001}, ErrorCode.BAD_REQUEST),
    ({"deadline_ms": 31 * 86_400_000 + 1}, ErrorCode.BAD_REQUEST),
    ({"backoff": {"max_ms": -1}}, ErrorCode.BAD_REQUEST),  # (below initial_ms it caps)
    ({"backoff": {"multiplier": 0.5}}, ErrorCode.BAD_REQUEST),
    ({"backoff": {"jitter": 1.5}}, ErrorCode.BAD_REQUEST),
    ({"idempotency": "SOMETIMES"}, ErrorCode.BAD_REQUEST),
    ({"surprise": 1}, ErrorCode.BAD_REQUEST),
    ({"payload": None}, ErrorCode.BAD_REQUEST),
    ({"payload": "x" * (256 * 1024)}, ErrorCode.PAYLOAD_TOO_LARGE),
    ({"handler": "bad name"}, ErrorCode.BAD_REQUEST),
    ({"operation_key": ""}, ErrorCode.BAD_REQUEST),
])
def test_bad_specs_are_rejected_with_typed_codes(world: World, spec: dict[str, Any],
                                                code: ErrorCode) -> None:
    with pytest.raises((OrbitError, ValueRejected)) as exc:
        world.submit(**spec)
    assert exc.value.code is code


def test_batch_is_all_or_nothing_and_names_the_index(world: World) -> None:
    good = {"handler": "h", "handler_version": "1", "payload_version": "1", "payload": [1]}
    with pytest.raises(OrbitError) as exc:
        world.service.tasks.submit(world.producer, world.queue_id,
                                   [good, good, {**good, "max_attempts": -1}])
    assert "tasks[2]" in exc.value.message
    stats = world.service.tasks.queue_stats(world.producer, world.queue_id)
    assert stats["counts"]["PENDING"] == 0
    made, effects = world.service.tasks.submit(world.producer, world.queue_id, [good] * 1000)
    assert len(made) == 1000 and all(created for _t, created in made)
    assert len({t["id"] for t, _c in made}) == 1000
    assert effects.ready_queues == {world.queue_id}
    assert world.service.tasks.queue_stats(
        world.producer, world.queue_id)["counts"]["PENDING"] == 1000
    with pytest.raises(OrbitError):
        world.service.tasks.submit(world.producer, world.queue_id, [good] * 1001)


def test_operation_key_returns_the_existing_task(world: World) -> None:
    first = world.submit(operation_key="order-42")
    # The same spec again (another spec is a CONFLICT: test_producer_facts.py).
    again, effects = world.service.tasks.submit(world.producer, world.queue_id, [
        world.spec(operation_key="order-42")])
    assert again[0][1] is False and again[0][0]["id"] == first["id"]
    assert not effects.ready_queues
    # Within one batch, the second use of a key refers to the first.
    spec = {"handler": "h", "handler_version": "1", "payload_version": "1", "payload": 1,
            "operation_key": "k2"}
    made, _ = world.service.tasks.submit(world.producer, world.queue_id, [spec, spec])
    assert [c for _t, c in made] == [True, False]
    assert made[0][0]["id"] == made[1][0]["id"]
    # The same key in another queue is another task.
    other = world.service.admin.create_queue(world.admin, None)
    there, _ = world.service.tasks.submit(world.admin, other["id"], [spec])
    assert there[0][1] is True and there[0][0]["id"] != made[0][0]["id"]


def test_unknown_queue_and_task(world: World) -> None:
    with pytest.raises(OrbitError) as exc:
        world.service.tasks.submit(world.admin, "a" * 32, [{"handler": "h",
                                                            "handler_version": "1",
                                                            "payload_version": "1",
                                                            "payload": 1}])
    assert exc.value.code is ErrorCode.NOT_FOUND
    for bad in ("b" * 32, "not-an-id"):
        with pytest.raises(OrbitError) as exc:
            world.task(bad)
        assert exc.value.code is ErrorCode.NOT_FOUND
