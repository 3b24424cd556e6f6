"""Credential rows kept in memory (services/credential_table.py) and receipts read only for a
resend, at the service level on both stores.

A revocation made by this server fences its worker sessions at once. One made by another
replica reaches this one through its push (``AdminService.forget``, what the push poll
calls), or at the latest when the kept row is older than ``auth_cache_ms``; until then the
row is not read again for every request. A resent op is answered from its receipt although
the first run of its request applied it as new.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from store_support import World

from orbit_wire.errors import AuthError, ErrorCode
from orbit_wire.frames import DrainOp, FinishOp, RenewOp, Report, StartOp
from orbit_wire.model import Outcome


@contextmanager
def sqlite_statements(world: World) -> Iterator[list[str] | None]:
    """Every statement the SQLite driver runs in the block (None on other stores: their
    statements go through the same code, and the behaviour tests below cover them)."""
    if world.engine.dialect.name != "sqlite":
        yield None
        return
    with world.driver_statements() as seen:
        yield seen


def _credential_reads(statements: list[str]) -> list[str]:
    return [s for s in statements if "FROM credentials" in s]


def _receipt_reads(statements: list[str]) -> list[str]:
    return [s for s in statements if "FROM receipts" in s]


def test_worker_requests_read_no_credential_row_and_a_local_revocation_fences_at_once(
        world: World) -> None:
    world.submit()
    world.submit()
    b = world.hello()
    with sqlite_statements(world) as statements:
        aid, ep = world.run_once(b)
        assert world.renew(b, aid, ep).ok
        if statements is not None:
            assert _credential_reads(statements) == [], statements
            assert _receipt_reads(statements) == [], statements
    world.service.admin.revoke_credential(world.admin, world.worker_cred["credential_id"])
    with pytest.raises(AuthError) as fenced:
        world.renew(b, aid, ep)
    assert fenced.value.code is ErrorCode.UNAUTHENTICATED
    assert not world.service.workers.reserve(b, 1)


def test_another_replicas_revocation_applies_at_its_push_or_when_the_row_ages(
        world: World) -> None:
    for _ in range(3):
        world.submit()
    b = world.hello()
    aid, ep = world.run_once(b)
    credential_id = world.worker_cred["credential_id"]
    with world.other_service(seed=11) as replica:
        replica.admin.revoke_credential(world.admin, credential_id)
    # Not read again per request: this server still holds the row it read at the hello.
    assert world.renew(b, aid, ep).ok
    # The push: what the push poll does when it reads the revocation's row.
    world.service.admin.forget(credential_id)
    with pytest.raises(AuthError):
        world.renew(b, aid, ep)

    # A second worker credential, revoked elsewhere with no push read here: the row kept in
    # memory is read again once it is older than auth_cache_ms.
    other = world.service.admin.create_credential(world.admin, "worker", [world.queue_id],
                                                  "w2")
    token = f"{other['credential_id']}.{other['secret']}"
    assert world.service.admin.authenticate(token).credential_id == other["credential_id"]
    with world.other_service(seed=12) as replica:
        replica.admin.revoke_credential(world.admin, other["credential_id"])
    world.clock.advance(world.service.tx.config.auth_cache_ms + 1)
    with pytest.raises(AuthError):
        world.service.admin.authenticate(token)


def test_authentication_reads_the_row_once_and_a_revocation_here_refuses_at_once(
        world: World) -> None:
    made = world.service.admin.create_credential(world.admin, "producer", [world.queue_id],
                                                 None)
    token = f"{made['credential_id']}.{made['secret']}"
    wrong = f"{made['credential_id']}.{'0' * 64}"
    with sqlite_statements(world) as statements:
        world.service.admin.authenticate(token)
        with pytest.raises(AuthError):  # another secret: not a cached token, the row kept
            world.service.admin.authenticate(wrong)
        if statements is not None:
            assert len(_credential_reads(statements)) == 1, statements
    world.service.admin.revoke_credential(world.admin, made["credential_id"])
    with pytest.raises(AuthError):
        world.service.admin.authenticate(token)


def test_a_resent_op_is_answered_from_its_receipt_beside_a_new_one(world: World) -> None:
    world.submit()
    b = world.hello()
    (res,) = world.service.workers.reserve(b, 1)
    started = world.start(b, res.attempt_id, res.epoch, msg="s1")
    assert started.ok
    report = Report(exit_code=0, cpu_ms=5)
    finish = FinishOp("f1", res.attempt_id, res.epoch, Outcome.SUCCEEDED, None, False,
                      '{"n": 1}', None, report)
    with sqlite_statements(world) as statements:
        (done,), _ = world.service.workers.apply_ops(b, [finish])
        if statements is not None:
            assert _receipt_reads(statements) == [], statements
    assert done.ok
    # The start and the finish resent with a new op: each answered as the first time, once.
    (start_again, finish_again, drain), _ = world.service.workers.apply_ops(b, [
        StartOp("s1", res.attempt_id, res.epoch, 4242), finish, DrainOp("d1")])
    assert start_again.ok and start_again.lease_ms is not None
    assert finish_again == done and drain.ok
    assert [a["state"] for a in world.attempts(res.task_id)] == ["FINISHED"]
    kinds = [e["kind"] for e in world.audit(res.task_id)]
    assert kinds.count("attempt_started") == 1 and kinds.count("attempt_finished") == 1, kinds
    # A message ID reused for another kind is still refused.
    (reused,), _ = world.service.workers.apply_ops(b, [RenewOp("f1", res.attempt_id,
                                                               res.epoch)])
    assert reused.error_code is ErrorCode.MESSAGE_ID_REUSED
