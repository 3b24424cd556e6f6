"""Facts for the producer (SQLite and MariaDB): a handler error's exception type name in the
attempt and in the task's failure, and an operation key reused with another spec refused
with CONFLICT naming the existing task."""

from __future__ import annotations

import pytest
from store_support import World, as_json

from orbit_wire.errors import ErrorCode, OrbitError
from orbit_wire.model import Outcome

KEY_ERROR = '{"exception_type":"builtins.KeyError"}'


def test_handler_error_type_reaches_the_task_failure(world: World) -> None:
    task = world.submit()  # NON_IDEMPOTENT: an unknown outcome goes to review
    b = world.hello()
    attempt_id, epoch = world.run_once(b)
    world.finish(b, attempt_id, epoch, Outcome.UNKNOWN, code="HANDLER_ERROR",
                 details_json=KEY_ERROR)
    view = as_json(world.task(task["id"]))
    assert view["state"] == "NEEDS_REVIEW"
    assert view["failure"] == {"code": "HANDLER_ERROR",
                               "details": {"exception_type": "builtins.KeyError"}}
    (attempt,) = world.attempts(task["id"])
    assert attempt["code"] == "HANDLER_ERROR"
    assert attempt["details"] == {"exception_type": "builtins.KeyError"}
    retried, _ = world.service.tasks.review(world.producer, task["id"], "retry", None, None)
    assert retried["state"] == "PENDING" and retried["failure"] is None
    attempt_id, epoch = world.run_once(b)
    world.finish(b, attempt_id, epoch, Outcome.SUCCEEDED, result=1)
    done = as_json(world.task(task["id"]))
    assert done["state"] == "SUCCEEDED" and done["failure"] is None and done["result"] == 1


def test_idempotent_task_carries_the_type_once_its_budget_is_spent(world: World) -> None:
    task = world.submit(idempotency="IDEMPOTENT", max_attempts=2,
                        backoff={"initial_ms": 0, "max_ms": 0})
    b = world.hello()
    for expected in ("PENDING", "NEEDS_REVIEW"):
        attempt_id, epoch = world.run_once(b)
        world.finish(b, attempt_id, epoch, Outcome.UNKNOWN, code="HANDLER_ERROR",
                     details_json=KEY_ERROR)
        view = as_json(world.task(task["id"]))
        assert view["state"] == expected
    assert view["failure"]["details"] == {"exception_type": "builtins.KeyError"}
    assert [a["decision"] for a in world.attempts(task["id"])] == ["RETRY", "NEEDS_REVIEW"]


def test_operation_key_with_another_spec_is_a_conflict(world: World) -> None:
    first = world.submit(operation_key="order-42", payload={"a": 1, "b": 2})
    again, _ = world.service.tasks.submit(world.producer, world.queue_id, [
        world.spec(operation_key="order-42", payload={"b": 2, "a": 1})])  # same, keys reordered
    assert again == [(again[0][0], False)] and again[0][0]["id"] == first["id"]
    for changed in ({"payload": {"a": 1}}, {"max_attempts": 5},
                    {"idempotency": "IDEMPOTENT"}, {"handler_version": "v2"}):
        spec = {**world.spec(operation_key="order-42", payload={"a": 1, "b": 2}), **changed}
        with pytest.raises(OrbitError) as exc:
            world.service.tasks.submit(world.producer, world.queue_id, [spec])
        assert exc.value.code is ErrorCode.CONFLICT, changed
        assert first["id"] in exc.value.message
    # Within one batch too: the second spec names the first one's new task.
    with pytest.raises(OrbitError) as exc:
        world.service.tasks.submit(world.producer, world.queue_id, [
            world.spec(operation_key="k2", payload=1), world.spec(operation_key="k2", payload=2)])
    assert exc.value.code is ErrorCode.CONFLICT
    with world.engine.connect() as conn:
        from orbit_server.store.tables import tasks
        keys = [r[0] for r in conn.execute(tasks.select().with_only_columns(
            tasks.c.operation_key))]
    assert keys.count("k2") == 0  # the whole batch was refused
